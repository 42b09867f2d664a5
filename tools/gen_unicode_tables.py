#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generate include/edgellm/detail/unicode_tables.hpp from Python's unicodedata.

The tables serve the tokenizer (include/edgellm/model/tokenizer.hpp):

  * character classes for the hand-written pre-tokenizer regexes and added-token
    matching: \\p{L} (general category L*), \\p{N} (N*), \\s (White_Space) and \\w
    (Unicode word characters as Rust's regex and Python's `regex` define them:
    Alphabetic | M* | Nd | Pc | Join_Control);
  * canonical combining classes, canonical decompositions, primary compositions and
    the NFC quick-check set, for the NFC / NFD normalizers.

All data comes from the stdlib `unicodedata` (Unicode 14.0 on Python 3.11), except
Other_Alphabetic (part of Alphabetic, which unicodedata does not expose): that one set is
read from the `regex` module (python3-regex) and restricted to code points that
unicodedata knows, so every table describes the same Unicode version. The script
then checks, for every code point assigned in that version, that \\p{L}, \\p{N}, \\s
and \\w agree with the `regex` module, which tools/tokenizer_ref.py (the test oracle)
uses; it refuses to write the header if they do not.

Usage: /usr/bin/python3 tools/gen_unicode_tables.py [--out PATH] [--check]
  --check  exit 1 if PATH differs from what would be generated (for CI).
"""

from __future__ import annotations

import argparse
import sys
import unicodedata as ud
from pathlib import Path

import regex

MAX_CP = 0x110000

# White_Space (PropList.txt); unchanged since Unicode 6.3 removed U+180E.
WHITE_SPACE = (
    set(range(0x09, 0x0E)) | {0x20, 0x85, 0xA0, 0x1680} | set(range(0x2000, 0x200B))
    | {0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
)
JOIN_CONTROL = {0x200C, 0x200D}

# Class bits; must match the constants in unicode_tables.hpp.
LETTER, NUMBER, WORD, SPACE = 1, 2, 4, 8


def assigned(cp: int) -> bool:
    return ud.category(chr(cp)) != "Cn"


def class_bits() -> list[int]:
    other_alpha = regex.compile(r"\p{Other_Alphabetic}")
    bits = [0] * MAX_CP
    for cp in range(MAX_CP):
        ch = chr(cp)
        cat = ud.category(ch)
        b = 0
        if cat[0] == "L":
            b |= LETTER
        if cat[0] == "N":
            b |= NUMBER
        if cp in WHITE_SPACE:
            b |= SPACE
        alphabetic = cat[0] == "L" or cat == "Nl" or (assigned(cp) and other_alpha.match(ch))
        if alphabetic or cat[0] == "M" or cat in ("Nd", "Pc") or cp in JOIN_CONTROL:
            b |= WORD
        bits[cp] = b
    return bits


def check_against_regex(bits: list[int]) -> None:
    """The oracle's regex engine must classify every assigned code point the same way."""
    probes = [
        (LETTER, regex.compile(r"\p{L}")),
        (NUMBER, regex.compile(r"\p{N}")),
        (SPACE, regex.compile(r"\s")),
        (WORD, regex.compile(r"\w")),
    ]
    bad = []
    for cp in range(MAX_CP):
        if not assigned(cp) and cp not in WHITE_SPACE:
            continue
        ch = chr(cp)
        for bit, rx in probes:
            if bool(bits[cp] & bit) != bool(rx.match(ch)):
                bad.append((cp, bit))
    if bad:
        sys.exit(f"class mismatch with the regex module at {len(bad)} points, e.g. "
                 + ", ".join(f"U+{cp:04X} bit {bit}" for cp, bit in bad[:10]))


def canonical_decompositions() -> list[tuple[int, int, int]]:
    out = []
    for cp in range(MAX_CP):
        d = ud.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue  # none, or a compatibility mapping
        parts = [int(x, 16) for x in d.split()]
        assert 1 <= len(parts) <= 2, (cp, parts)
        out.append((cp, parts[0], parts[1] if len(parts) == 2 else 0))
    return out


def primary_compositions(decomps) -> list[tuple[int, int, int]]:
    # A two-code-point canonical decomposition is a primary composite unless the character
    # is in Full_Composition_Exclusion, i.e. unless NFC does not reproduce it.
    comps = [(a, b, cp) for cp, a, b in decomps
             if b != 0 and ud.normalize("NFC", chr(cp)) == chr(cp)]
    comps.sort()
    return comps


def ccc_ranges() -> list[tuple[int, int, int]]:
    out: list[list[int]] = []
    for cp in range(MAX_CP):
        c = ud.combining(chr(cp))
        if c == 0:
            continue
        if out and out[-1][1] == cp - 1 and out[-1][2] == c:
            out[-1][1] = cp
        else:
            out.append([cp, cp, c])
    return [tuple(r) for r in out]


def nfc_unsafe_ranges(comps) -> list[tuple[int, int]]:
    """Code points after which NFC might change the text: ccc != 0 or NFC_Quick_Check != Yes.

    NFC_QC=No: the character never survives NFC (NFC of it alone differs). NFC_QC=Maybe: it
    is the second half of a primary composition (including Hangul V and T jamo).
    """
    unsafe = set()
    for cp in range(MAX_CP):
        ch = chr(cp)
        if ud.combining(ch) != 0 or ud.normalize("NFC", ch) != ch:
            unsafe.add(cp)
    unsafe |= {b for _, b, _ in comps}
    unsafe |= set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    out: list[list[int]] = []
    for cp in sorted(unsafe):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return [tuple(r) for r in out]


def class_boundaries(bits: list[int]) -> list[tuple[int, int]]:
    out = []
    prev = -1
    for cp in range(MAX_CP):
        if bits[cp] != prev:
            out.append((cp, bits[cp]))
            prev = bits[cp]
    return out


def wrap(items: list[str], indent: str = "    ", width: int = 100) -> str:
    lines, line = [], indent
    for it in items:
        piece = it + ","
        if len(line) + len(piece) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += piece + " "
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)


def render() -> str:
    bits = class_bits()
    check_against_regex(bits)
    bounds = class_boundaries(bits)
    decomps = canonical_decompositions()
    comps = primary_compositions(decomps)
    cccs = ccc_ranges()
    unsafe = nfc_unsafe_ranges(comps)
    ascii_bits = bits[:128]

    out = []
    out.append(f"""// SPDX-License-Identifier: Apache-2.0
// Unicode {ud.unidata_version} data for the tokenizer: character classes, combining classes,
// canonical decompositions and compositions. Generated by tools/gen_unicode_tables.py; do not edit.
#pragma once

#include <cstdint>

namespace edgellm::detail::unicode {{

// Generated tables, laid out by the generator:
// clang-format off

/// The Unicode version of every table below (Python's unicodedata.unidata_version).
inline constexpr const char* kTablesVersion = "{ud.unidata_version}";

/// Class bits of kClassRuns / kAsciiClass.
inline constexpr std::uint8_t kLetter = {LETTER};  ///< \\p{{L}}: general category Lu Ll Lt Lm Lo
inline constexpr std::uint8_t kNumber = {NUMBER};  ///< \\p{{N}}: Nd Nl No
inline constexpr std::uint8_t kWord = {WORD};    ///< \\w: Alphabetic, M*, Nd, Pc, Join_Control
inline constexpr std::uint8_t kSpace = {SPACE};   ///< \\s: the White_Space property

/// Classes of U+0000..U+007F (the common case, no search).
inline constexpr std::uint8_t kAsciiClass[128] = {{
{wrap([str(b) for b in ascii_bits])}
}};

/// Runs of equal class bits over all code points: entry i is (first_code_point << 4) | bits
/// and holds until the next entry's first code point. Sorted; entry 0 starts at U+0000.
inline constexpr std::uint32_t kClassRuns[{len(bounds)}] = {{
{wrap([f"0x{(cp << 4) | b:X}" for cp, b in bounds])}
}};

/// Canonical combining class ranges [first, last] with ccc != 0. Sorted, disjoint.
struct CccRange {{
  std::uint32_t first;
  std::uint32_t last;
  std::uint8_t ccc;
}};
inline constexpr CccRange kCccRanges[{len(cccs)}] = {{
{wrap([f"{{0x{a:X}, 0x{b:X}, {c}}}" for a, b, c in cccs])}
}};

/// Canonical decompositions (one level; apply recursively): code point -> first [, second].
/// `second` is 0 for singleton decompositions. Hangul syllables are algorithmic and absent.
/// Sorted by code point.
struct Decomposition {{
  std::uint32_t cp;
  std::uint32_t first;
  std::uint32_t second;
}};
inline constexpr Decomposition kDecompositions[{len(decomps)}] = {{
{wrap([f"{{0x{cp:X}, 0x{a:X}, 0x{b:X}}}" for cp, a, b in decomps])}
}};

/// Primary compositions (first, second) -> composed: the two-code-point canonical
/// decompositions minus Full_Composition_Exclusion. Hangul is algorithmic and absent.
/// Sorted by (first, second).
struct Composition {{
  std::uint32_t first;
  std::uint32_t second;
  std::uint32_t composed;
}};
inline constexpr Composition kCompositions[{len(comps)}] = {{
{wrap([f"{{0x{a:X}, 0x{b:X}, 0x{c:X}}}" for a, b, c in comps])}
}};

/// Ranges [first, last] of code points with ccc != 0 or NFC_Quick_Check != Yes. Text with
/// none of them is already in NFC (and in NFD if it also has no decomposable character).
struct CodePointRange {{
  std::uint32_t first;
  std::uint32_t last;
}};
inline constexpr CodePointRange kNfcUnsafeRanges[{len(unsafe)}] = {{
{wrap([f"{{0x{a:X}, 0x{b:X}}}" for a, b in unsafe])}
}};

// clang-format on

}}  // namespace edgellm::detail::unicode
""")
    return "".join(out)


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=root / "include/edgellm/detail/unicode_tables.hpp")
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date; rerun {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(text)} bytes, Unicode {ud.unidata_version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

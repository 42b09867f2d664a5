#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reference tokenizer.json BPE encoder/decoder: the oracle for edgellm's model/tokenizer.hpp.

An independent Python implementation of Hugging Face `tokenizers` semantics for the
components edgellm supports (docs/formats.md section 4), written from the Rust sources
(added_vocabulary.rs, normalizer.rs, pre_tokenizers/*.rs, models/bpe/{model,word}.rs,
decoders/*.rs, processors/template.rs). It shares no code with the C++ side and is built
differently where it can be:

  * pre-tokenizer regexes run through the `regex` module on the pattern text from the
    file (C++ uses a hand-written matcher);
  * BPE is the classic "merge the lowest-ranked adjacent pair, leftmost first" loop over
    token strings (C++ uses a priority queue over ids);
  * added tokens are found by trying every pattern at every position (C++ uses a trie);
  * NFC/NFD come from unicodedata (C++ uses generated tables).

Usage:
  tokenizer_ref.py --tokenizer FILE --corpus CORPUS.json --out EXPECTED.json [--random-decodes N]
CORPUS.json is a JSON list of strings. EXPECTED.json holds, per string ("cases"):
  ids            encode(text) with add_special=True, parse_special=True (HF defaults)
  ids_plain      encode(text) with add_special=False, parse_special=False
  decoded        decode(ids)
  decoded_skip   decode(ids, skip_special=True)
and, with --random-decodes N, N random id sequences ("random_decodes": ids, decoded,
decoded_skip) mixing byte tokens, special tokens and unknown ids, so that decoding of
arbitrary model output (invalid UTF-8, stray special tokens) is checked too.
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from pathlib import Path

import regex

WORD_RE = regex.compile(r"\w")
SPACE_RE = regex.compile(r"\s")
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = QWEN2_PATTERN.replace(r"\p{N}|", r"\p{N}{1,3}|", 1)
# The Split regexes the C++ side recognises; the oracle runs them with the regex module.
KNOWN_PATTERNS = {GPT2_PATTERN, QWEN2_PATTERN, LLAMA3_PATTERN}


class Unsupported(Exception):
    pass


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


# --- pipeline pieces -------------------------------------------------------------------

def flatten(node, list_key):
    if node is None:
        return []
    if node.get("type") == "Sequence":
        out = []
        for child in node[list_key]:
            out += flatten(child, list_key)
        return out
    return [node]


def split_with_behavior(text: str, matches: list[tuple[int, int]], behavior: str,
                        invert: bool) -> list[tuple[int, int]]:
    """NormalizedString::split over character offsets: the (start, end) of the pieces."""
    parts = []  # (start, end, is_match)
    prev = 0
    for s, e in matches:
        if prev < s:
            parts.append([prev, s, invert])
        parts.append([s, e, not invert])
        prev = e
    if prev < len(text):
        parts.append([prev, len(text), invert])
    out: list[list[int]] = []
    if behavior == "Removed":
        out = [[s, e] for s, e, m in parts if not m]
    elif behavior == "Isolated":
        out = [[s, e] for s, e, _ in parts]
    elif behavior == "MergedWithPrevious":
        prev_match = False
        for s, e, m in parts:
            if m and not prev_match and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            prev_match = m
    elif behavior == "MergedWithNext":
        prev_match = False
        for s, e, m in reversed(parts):
            if m and not prev_match and out:
                out[-1][0] = s
            else:
                out.append([s, e])
            prev_match = m
        out.reverse()
    elif behavior == "Contiguous":
        prev_match = False
        for s, e, m in parts:
            if m == prev_match and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            prev_match = m
    else:
        raise Unsupported(f"behavior {behavior}")
    return [(s, e) for s, e in out if e > s]


def literal_matches(text: str, lit: str) -> list[tuple[int, int]]:
    out = []
    if not lit:
        return out
    pos = 0
    while True:
        k = text.find(lit, pos)
        if k < 0:
            return out
        out.append((k, k + len(lit)))
        pos = k + len(lit)


class RefTokenizer:
    def __init__(self, path: str):
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        model = cfg["model"]
        if model.get("type", "BPE") != "BPE":
            raise Unsupported(f"model type {model.get('type')}")
        self.vocab: dict[str, int] = dict(model["vocab"])
        self.id_to_tok = {i: t for t, i in self.vocab.items()}
        self.unk = model.get("unk_token")
        self.fuse_unk = bool(model.get("fuse_unk") or False)
        self.byte_fallback = bool(model.get("byte_fallback") or False)
        self.ignore_merges = bool(model.get("ignore_merges") or False)
        self.prefix = model.get("continuing_subword_prefix") or ""
        self.suffix = model.get("end_of_word_suffix") or ""
        self.ranks: dict[tuple[str, str], int] = {}
        for rank, m in enumerate(model["merges"]):
            if isinstance(m, str):
                if m.startswith("#version"):
                    continue
                parts = m.split(" ")
                assert len(parts) == 2, m
                a, b = parts
            else:
                a, b = m
            merged = a + (b[len(self.prefix):] if self.prefix and b.startswith(self.prefix) else b)
            assert a in self.vocab and b in self.vocab and merged in self.vocab, m
            self.ranks[(a, b)] = rank

        self.normalizers = flatten(cfg.get("normalizer"), "normalizers")
        for n in self.normalizers:
            if n["type"] not in ("NFC", "NFD", "Prepend", "Replace", "Strip"):
                raise Unsupported(n["type"])
        self.pre_tokenizers = flatten(cfg.get("pre_tokenizer"), "pretokenizers")
        for p in self.pre_tokenizers:
            regex_pattern = p.get("pattern", {}).get("Regex") if p["type"] == "Split" else None
            if regex_pattern is not None and regex_pattern not in KNOWN_PATTERNS:
                raise Unsupported("pattern")
        self.decoders = flatten(cfg.get("decoder"), "decoders")
        self.has_decoder = cfg.get("decoder") is not None

        self.added = []
        for t in cfg.get("added_tokens") or []:
            t = dict(t)
            t.setdefault("special", False)
            t.setdefault("normalized", not t["special"])
            for k in ("single_word", "lstrip", "rstrip"):
                t.setdefault(k, False)
            if t["content"]:
                self.added.append(t)
        self.added_by_id = {t["id"]: t for t in self.added}
        # Pattern order: special tokens first, then the others (refresh_added_tokens).
        ordered = ([t for t in self.added if t["special"]]
                   + [t for t in self.added if not t["special"]])
        self.raw_patterns = [(t["content"], t) for t in ordered if not t["normalized"]]
        self.norm_patterns = [(self.normalize(t["content"]), t) for t in ordered if t["normalized"]]
        self.norm_patterns = [(p, t) for p, t in self.norm_patterns if p]
        self.special_contents = {t["content"] for t in self.added if t["special"]}

        self.before: list[int] = []
        self.after: list[int] = []
        for proc in flatten(cfg.get("post_processor"), "processors"):
            if proc["type"] == "ByteLevel":
                continue
            if proc["type"] != "TemplateProcessing":
                raise Unsupported(proc["type"])
            before, after, seen = [], [], False
            for piece in proc["single"]:
                if "Sequence" in piece:
                    seen = True
                else:
                    ids = proc["special_tokens"][piece["SpecialToken"]["id"]]["ids"]
                    (after if seen else before).extend(ids)
            self.before = before + self.before
            self.after = self.after + after

    # --- encode ------------------------------------------------------------------------

    def normalize(self, s: str) -> str:
        for n in self.normalizers:
            t = n["type"]
            if t == "NFC":
                s = unicodedata.normalize("NFC", s)
            elif t == "NFD":
                s = unicodedata.normalize("NFD", s)
            elif t == "Prepend":
                if s:
                    s = n["prepend"] + s
            elif t == "Replace":
                pat = n["pattern"]["String"]
                if pat:
                    s = s.replace(pat, n["content"])
            elif t == "Strip":
                if n["strip_left"]:
                    s = regex.sub(r"^\s+", "", s)
                if n["strip_right"]:
                    s = regex.sub(r"\s+$", "", s)
        return s

    def find_added(self, text: str, patterns, parse_special: bool):
        """AddedVocabulary::find_matches: [(is_token, id_or_text)]."""
        out = []
        start_offset = 0
        pos = 0
        while True:
            best = None  # (start, end, token): leftmost, then longest, then first pattern
            for p, t in patterns:
                k = text.find(p, pos)
                if k < 0:
                    continue
                cand = (k, k + len(p), t)
                if best is None or k < best[0] or (k == best[0] and k + len(p) > best[1]):
                    best = cand
            if best is None:
                break
            start, stop, t = best
            pos = stop
            if t["special"] and not parse_special:
                continue
            if t["single_word"]:
                if start > 0 and WORD_RE.match(text[start - 1]):
                    continue
                if stop < len(text) and WORD_RE.match(text[stop]):
                    continue
            if t["lstrip"]:
                k = start
                while k > 0 and SPACE_RE.match(text[k - 1]):
                    k -= 1
                start = max(k, start_offset)
            if t["rstrip"]:
                while stop < len(text) and SPACE_RE.match(text[stop]):
                    stop += 1
            if start_offset < start:
                out.append((False, text[start_offset:start], start_offset))
            out.append((True, t["id"], start))
            start_offset = stop
        if start_offset < len(text):
            out.append((False, text[start_offset:], start_offset))
        return out

    def pre_tokenize(self, text: str, at_origin: bool) -> list[str]:
        pieces = [(text, at_origin)]
        for p in self.pre_tokenizers:
            nxt = []
            for s, origin in pieces:
                t = p["type"]
                if t == "Split":
                    pat = p["pattern"]
                    if "Regex" in pat:
                        matches = [m.span() for m in regex.finditer(pat["Regex"], s)]
                    else:
                        matches = literal_matches(s, pat["String"])
                    spans = split_with_behavior(s, matches, p["behavior"],
                                                bool(p.get("invert", False)))
                    subs = [(s[a:b], a) for a, b in spans]
                elif t == "ByteLevel":
                    if p.get("add_prefix_space", True) and not s.startswith(" "):
                        s = " " + s
                    if p.get("use_regex", True):
                        subs = [(m.group(), m.start()) for m in regex.finditer(GPT2_PATTERN, s)]
                    else:
                        subs = [(s, 0)]
                    subs = [("".join(BYTE_TO_CHAR[b] for b in x.encode("utf-8")), a)
                            for x, a in subs]
                elif t == "Metaspace":
                    rep = p.get("replacement", "\u2581")
                    scheme = p.get("prepend_scheme")
                    if scheme is None:
                        scheme = "always" if p.get("add_prefix_space", True) else "never"
                    s = s.replace(" ", rep)
                    prepend = scheme == "always" or (scheme == "first" and origin)
                    if prepend and not s.startswith(rep):
                        s = rep + s
                    if p.get("split", True):
                        spans = split_with_behavior(s, literal_matches(s, rep),
                                                    "MergedWithNext", False)
                        subs = [(s[a:b], a) for a, b in spans]
                    else:
                        subs = [(s, 0)]
                else:
                    raise Unsupported(t)
                # A piece that starts where its parent started keeps the "starts the text"
                # flag that Metaspace's prepend_scheme "first" looks at.
                nxt += [(x, origin and a == 0) for x, a in subs]
            pieces = [(x, o) for x, o in nxt if x]
        return [x for x, _ in pieces]

    def bpe(self, word: str) -> list[int]:
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        symbols: list[str] = []
        unk_pending = False  # with fuse_unk, consecutive unknowns become one <unk>
        chars = list(word)
        for i, ch in enumerate(chars):
            s = ch
            if i > 0:
                s = self.prefix + s
            if i == len(chars) - 1:
                s = s + self.suffix
            if s in self.vocab:
                if unk_pending:
                    symbols.append(self.unk)
                    unk_pending = False
                symbols.append(s)
                continue
            if self.byte_fallback:
                toks = [f"<0x{b:02X}>" for b in s.encode("utf-8")]
                if all(t in self.vocab for t in toks):
                    symbols += toks  # HF does not flush a pending unk here
                    continue
            if self.unk is not None:
                if self.unk not in self.vocab:
                    raise KeyError("unk_token not in vocab")
                if unk_pending and self.fuse_unk:
                    continue
                if unk_pending:
                    symbols.append(self.unk)
                unk_pending = True
        if unk_pending:
            symbols.append(self.unk)
        # Classic BPE: merge the lowest-ranked adjacent pair, leftmost among equals.
        while len(symbols) > 1:
            best_rank, best_i = None, -1
            for i in range(len(symbols) - 1):
                r = self.ranks.get((symbols[i], symbols[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best_rank, best_i = r, i
            if best_i < 0:
                break
            a, b = symbols[best_i], symbols[best_i + 1]
            merged = a + (b[len(self.prefix):] if self.prefix and b.startswith(self.prefix) else b)
            symbols[best_i:best_i + 2] = [merged]
        return [self.vocab[s] for s in symbols]

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        ids: list[int] = list(self.before) if add_special else []
        for is_tok, val, start in self.find_added(text, self.raw_patterns, parse_special):
            if is_tok:
                ids.append(val)
                continue
            norm = self.normalize(val)
            if not norm:
                continue
            for is_tok2, val2, start2 in self.find_added(norm, self.norm_patterns, parse_special):
                if is_tok2:
                    ids.append(val2)
                    continue
                for word in self.pre_tokenize(val2, start == 0 and start2 == 0):
                    ids += self.bpe(word)
        if add_special:
            ids += self.after
        return ids

    # --- decode ------------------------------------------------------------------------

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        tokens = []
        for i in ids:
            t = self.added_by_id[i]["content"] if i in self.added_by_id else self.id_to_tok.get(i)
            if t is None:
                continue
            if skip_special and t in self.special_contents:
                continue
            tokens.append(t)
        if not self.has_decoder:
            return " ".join(tokens)
        for d in self.decoders:
            t = d["type"]
            if t == "ByteLevel":
                data = bytearray()
                for tok in tokens:
                    if all(c in CHAR_TO_BYTE for c in tok):
                        data += bytes(CHAR_TO_BYTE[c] for c in tok)
                    else:
                        data += tok.encode("utf-8")
                tokens = [data.decode("utf-8", errors="replace")]
            elif t == "ByteFallback":
                out, run = [], bytearray()

                def flush():
                    if run:
                        try:
                            out.append(run.decode("utf-8"))
                        except UnicodeDecodeError:
                            out.extend(["\ufffd"] * len(run))
                        run.clear()

                for tok in tokens:
                    m = regex.fullmatch(r"<0x([0-9A-Fa-f]{2})>", tok)
                    if m:
                        run.append(int(m.group(1), 16))
                    else:
                        flush()
                        out.append(tok)
                flush()
                tokens = out
            elif t == "Fuse":
                tokens = ["".join(tokens)]
            elif t == "Strip":
                c, start, stop = d["content"], d["start"], d["stop"]
                out = []
                for tok in tokens:
                    b = 0
                    while b < start and b < len(tok) and tok[b] == c:
                        b += 1
                    e = len(tok)
                    k = 0
                    while k < stop and e > b and tok[e - 1] == c:
                        e -= 1
                        k += 1
                    out.append(tok[b:e])
                tokens = out
            elif t == "Replace":
                pat = d["pattern"]["String"]
                tokens = [tok.replace(pat, d["content"]) if pat else tok for tok in tokens]
            elif t == "Metaspace":
                rep = d.get("replacement", "\u2581")
                scheme = d.get("prepend_scheme")
                if scheme is None:
                    scheme = "always" if d.get("add_prefix_space", True) else "never"
                tokens = [tok.replace(rep, "" if (i == 0 and scheme != "never") else " ")
                          for i, tok in enumerate(tokens)]
            else:
                raise Unsupported(t)
        return "".join(tokens)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--corpus", required=True, help="JSON list of strings")
    ap.add_argument("--out", required=True)
    ap.add_argument("--random-decodes", type=int, default=0, metavar="N")
    args = ap.parse_args()
    tok = RefTokenizer(args.tokenizer)
    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)
    write_expected(tok, Path(args.tokenizer).name, corpus, Path(args.out), args.random_decodes)
    return 0


def random_decodes(tok: RefTokenizer, n: int, seed: int = 7) -> list[dict]:
    import random
    rng = random.Random(seed)
    max_id = max(list(tok.id_to_tok) + list(tok.added_by_id))
    interesting = [i for i, t in tok.id_to_tok.items()
                   if len(t) <= 2 or t.startswith("<0x") or "\u2581" in t or t.startswith("\u0120")]
    interesting += list(tok.added_by_id)
    interesting.sort()
    out = []
    for _ in range(n):
        ids = []
        for _ in range(rng.randint(0, 16)):
            r = rng.random()
            ids.append(rng.randint(-2, max_id + 3) if r < 0.2 else rng.choice(interesting))
        out.append({"ids": ids, "decoded": tok.decode(ids),
                    "decoded_skip": tok.decode(ids, skip_special=True)})
    return out


def expected_cases(tok: RefTokenizer, corpus: list[str]) -> list[dict]:
    cases = []
    for text in corpus:
        ids = tok.encode(text)
        cases.append({
            "text": text,
            "ids": ids,
            "ids_plain": tok.encode(text, add_special=False, parse_special=False),
            "decoded": tok.decode(ids),
            "decoded_skip": tok.decode(ids, skip_special=True),
        })
    return cases


def write_expected(tok: RefTokenizer, name: str, corpus: list[str], out: Path,
                   n_random: int = 0) -> None:
    # One case per line keeps diffs readable.
    cases = [json.dumps(c, ensure_ascii=False) for c in expected_cases(tok, corpus)]
    text = ('{"tokenizer": ' + json.dumps(name) + ', "generator": "tools/tokenizer_ref.py"'
            + ', "cases": [\n' + ",\n".join(cases) + "\n]")
    if n_random:
        randoms = [json.dumps(c, ensure_ascii=False) for c in random_decodes(tok, n_random)]
        text += ', "random_decodes": [\n' + ",\n".join(randoms) + "\n]"
    out.write_text(text + "}\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())

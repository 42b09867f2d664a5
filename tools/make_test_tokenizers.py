#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Build the tokenizer.json files, corpus and expected ids of tests/data/tokenizer/.

Five tokenizers, each trained here with a few hundred BPE merges on train.txt (the KJV text of
Genesis 1-2 from Debian's bible-kjv package, public domain, plus a few lines of numbers, code,
CJK and emoji so that merges also join multi-byte sequences):

  qwen2_bytelevel.json         Qwen2 layout (formats.md 4.1): NFC, Split(Qwen2 regex) +
                               ByteLevel(use_regex=false), legacy "a b" merges, ChatML special
                               tokens, plus a normalized non-special added token "café".
  llama3_bytelevel_pairs.json  Llama-3 layout: Split(\\p{N}{1,3} regex), merges as pairs,
                               ignore_merges, TemplateProcessing BOS <|begin_of_text|>, plus a
                               "<mask>" added token with single_word/lstrip/rstrip.
  gpt2_bytelevel.json          GPT-2 layout with the ByteLevel pre-tokenizer's own regex and
                               add_prefix_space=true; merges start with a "#version" line.
  llama2_sentencepiece.json    Llama-2 legacy layout (formats.md 4.2): Prepend/Replace
                               normalizer, no pre-tokenizer, <0x00>..<0xFF> byte fallback,
                               <unk>/<s>/</s>, template "<s> $A", decoder
                               Replace/ByteFallback/Fuse/Strip.
  metaspace_pairs.json         SentencePiece-style coverage file: NFD + Strip normalizer,
                               Split(String "-", MergedWithPrevious) + Metaspace(first), pair
                               merges, only two byte tokens so that other unknown characters
                               become fused <unk>, decoder ByteFallback/Metaspace/Fuse/
                               Replace/Strip(stop=1).

corpus.json holds the tricky strings; expected_<tokenizer>.json holds what
tools/tokenizer_ref.py (the oracle) computes for each of them. regex_splits.json holds what
Python's `regex` module finds for the Qwen2, Llama-3 and GPT-2 patterns in each corpus string
(the C++ side matches them by hand), and unicode_cases.json holds random strings of
combining marks, composable letters, Hangul jamo and singletons with their NFC and NFD from
unicodedata. The C++ tests read these files and need no Python.

Usage: /usr/bin/python3 tools/make_test_tokenizers.py [--refresh-train-text]
  --refresh-train-text  rewrite train.txt from `bible -f` (needs the bible-kjv package).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

import regex

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tokenizer_ref  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/tokenizer"

QWEN2_RE = tokenizer_ref.QWEN2_PATTERN
LLAMA3_RE = tokenizer_ref.LLAMA3_PATTERN
GPT2_RE = tokenizer_ref.GPT2_PATTERN
SPIECE = "\u2581"

EXTRA_TRAINING_LINES = [
    "In 2024 the price was 1234 dollars, and 56.78 euros; call 555-0100 now!",
    "It's what they've said: we'll see, I'd say, you're right, I'm sure.",
    "def main(argv):\n    return sum(x * 2 for x in range(10))  # done",
    "价格是12元。日本語のテキスト。中文混合文本。",
    "Emoji: 😀 😀 👍 👍 🎉 — naïve café résumé",
]


def refresh_train_text() -> None:
    text = []
    for ref in ("Gen1:1-31", "Gen2:1-25"):
        out = subprocess.run(["bible", "-f", ref], check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            # "Ge1:1 In the beginning ..." -> "In the beginning ..."
            if line.strip():
                text.append(line.split(" ", 1)[1] if " " in line else line)
    text += EXTRA_TRAINING_LINES
    (OUT / "train.txt").write_text("\n".join(text) + "\n", encoding="utf-8")


def train_merges(words: collections.Counter, n_merges: int) -> list[tuple[str, str]]:
    """Plain BPE training: merge the most frequent adjacent pair (ties: the smallest pair)."""
    seqs = {w: list(w) for w in words}
    merges = []
    for _ in range(n_merges):
        counts: collections.Counter = collections.Counter()
        for w, f in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                counts[(a, b)] += f
        if not counts:
            break
        best = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if counts[best] < 2:
            break
        merges.append(best)
        for w, s in seqs.items():
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def byte_level_words(text: str, pattern: str) -> collections.Counter:
    words: collections.Counter = collections.Counter()
    for m in regex.finditer(pattern, text):
        words["".join(tokenizer_ref.BYTE_TO_CHAR[b] for b in m.group().encode("utf-8"))] += 1
    return words


def byte_level_model(text: str, pattern: str, n_merges: int, pairs: bool) -> dict:
    merges = train_merges(byte_level_words(text, pattern), n_merges)
    vocab = {}
    for b in tokenizer_ref.BYTE_TO_CHAR:  # GPT-2 order: printable bytes first
        vocab[tokenizer_ref.BYTE_TO_CHAR[b]] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return {
        "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
        "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
        "vocab": vocab,
        "merges": [[a, b] for a, b in merges] if pairs else [f"{a} {b}" for a, b in merges],
    }


def added(id_: int, content: str, special: bool = True, normalized: bool = False, **flags) -> dict:
    return {"id": id_, "content": content, "single_word": flags.get("single_word", False),
            "lstrip": flags.get("lstrip", False), "rstrip": flags.get("rstrip", False),
            "normalized": normalized, "special": special}


def doc(model, added_tokens, normalizer, pre_tokenizer, post_processor, decoder) -> dict:
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
            "post_processor": post_processor, "decoder": decoder, "model": model}


def byte_level(add_prefix_space: bool, trim_offsets: bool, use_regex: bool) -> dict:
    """A ByteLevel component (pre-tokenizer, post-processor and decoder share the layout)."""
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space,
            "trim_offsets": trim_offsets, "use_regex": use_regex}


def split(pattern: dict, behavior: str) -> dict:
    return {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": False}


def sequence(kind: str, items: list) -> dict:
    return {"type": "Sequence", kind: items}


def template(before: list[tuple[str, int]], after: list[tuple[str, int]]) -> dict:
    """TemplateProcessing with single = before $A after; `pair` is not used by edgellm."""
    def special(name):
        return {"SpecialToken": {"id": name, "type_id": 0}}
    single = [special(n) for n, _ in before] + [{"Sequence": {"id": "A", "type_id": 0}}]
    single += [special(n) for n, _ in after]
    tokens = {n: {"id": n, "ids": [i], "tokens": [n]} for n, i in before + after}
    return {"type": "TemplateProcessing", "single": single, "pair": [], "special_tokens": tokens}


def qwen2(text: str) -> dict:
    model = byte_level_model(text, QWEN2_RE, 400, pairs=False)
    n = len(model["vocab"])
    toks = [added(n, "<|endoftext|>"), added(n + 1, "<|im_start|>"), added(n + 2, "<|im_end|>"),
            added(n + 3, "café", special=False, normalized=True)]
    pre = sequence("pretokenizers", [split({"Regex": QWEN2_RE}, "Isolated"),
                                     byte_level(False, False, False)])
    return doc(model, toks, {"type": "NFC"}, pre, byte_level(False, False, False),
               byte_level(False, False, False))


def llama3(text: str) -> dict:
    model = byte_level_model(text, LLAMA3_RE, 300, pairs=True)
    model["ignore_merges"] = True
    # A vocabulary entry that no merge path reaches: with ignore_merges it is still used whole.
    model["vocab"]["Ġbeginningless"] = len(model["vocab"])
    n = len(model["vocab"])
    toks = [added(n, "<|begin_of_text|>"), added(n + 1, "<|end_of_text|>"),
            added(n + 2, "<|eot_id|>"),
            added(n + 3, "<mask>", special=False, single_word=True, lstrip=True, rstrip=True)]
    pre = sequence("pretokenizers", [split({"Regex": LLAMA3_RE}, "Isolated"),
                                     byte_level(False, True, False)])
    post = sequence("processors", [byte_level(True, False, True),
                                   template([("<|begin_of_text|>", n)], [])])
    return doc(model, toks, None, pre, post, byte_level(True, True, True))


def gpt2(text: str) -> dict:
    model = byte_level_model(" " + text.replace("\n", "\n "), GPT2_RE, 250, pairs=False)
    model["merges"].insert(0, "#version: 0.2")
    n = len(model["vocab"])
    return doc(model, [added(n, "<|endoftext|>")], None, byte_level(True, True, True), None,
               byte_level(True, True, True))


def spiece_words(text: str) -> collections.Counter:
    words: collections.Counter = collections.Counter()
    for line in text.splitlines():
        s = SPIECE + line.replace(" ", SPIECE)
        for w in regex.findall(SPIECE + "[^" + SPIECE + "]*", s):
            words[w] += 1
    return words


def spiece_model(text: str, n_merges: int, byte_tokens: list[int], pairs: bool) -> dict:
    words = spiece_words(text)
    merges = train_merges(words, n_merges)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in byte_tokens:
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for ch in sorted({c for w in words for c in w}):
        vocab.setdefault(ch, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return {
        "type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
        "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
        "vocab": vocab,
        "merges": [[a, b] for a, b in merges] if pairs else [f"{a} {b}" for a, b in merges],
    }


def llama2(text: str) -> dict:
    model = spiece_model(text, 300, list(range(256)), pairs=False)
    specials = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")]
    norm = sequence("normalizers", [
        {"type": "Prepend", "prepend": SPIECE},
        {"type": "Replace", "pattern": {"String": " "}, "content": SPIECE}])
    dec = sequence("decoders", [
        {"type": "Replace", "pattern": {"String": SPIECE}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}])
    return doc(model, specials, norm, None, template([("<s>", 1)], []), dec)


def metaspace(text: str) -> dict:
    model = spiece_model(text, 200, [0x09, 0x0A], pairs=True)
    specials = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")]
    meta = {"type": "Metaspace", "replacement": SPIECE, "prepend_scheme": "first", "split": True}
    norm = sequence("normalizers", [
        {"type": "NFD"}, {"type": "Strip", "strip_left": True, "strip_right": False}])
    pre = sequence("pretokenizers", [split({"String": "-"}, "MergedWithPrevious"), meta])
    dec = sequence("decoders", [
        {"type": "ByteFallback"}, meta, {"type": "Fuse"},
        {"type": "Replace", "pattern": {"String": "the"}, "content": "THE"},
        {"type": "Strip", "content": " ", "start": 0, "stop": 1}])
    return doc(model, specials, norm, pre, template([("<s>", 1)], [("</s>", 2)]), dec)


CORPUS = [
    "",
    " ",
    "\n",
    "x",
    "Hello world",
    "I'M don't 2024!!",
    "a   b",
    "x\n\n  y",
    "Hello,world",
    "  foo  \n",
    "价格是12元。",
    "end.\n",
    "In the beginning God created the heaven and the earth.",
    "And God said, Let there be light: and there was light.",
    "Let's test 'S 'T 'RE 'Ve 'LL 'D 'ſ 'x contractions, isn't it?",
    "line1\r\nline2\r\n\r\nline3\r",
    "\ttabbed\t\tline\n\tnext\t",
    "trailing spaces   ",
    "   leading spaces",
    "whitespace\u00a0nbsp\u2003em\u3000ideographic\u2028sep\x0bvt\x0cff\x85nel",
    "zero\u200bwidth\u200bspace and joiner\u200d!",
    "1234567890 3.14159 1,000,000 \u0661\u0662\u0663 \u00b2\u00b3 \u216b \u00bd",
    "日本語のテキストと中文混合 한국어 텍스트 𠀀𠀁",
    "emoji 😀 👍🏽 👨\u200d👩\u200d👧\u200d👦 🇯🇵 ❤\ufe0f 🎉🎉",
    "mixed😀emoji日本text123abc",
    "naïve café résumé Åström",
    "nai\u0308ve cafe\u0301 re\u0301sume\u0301 A\u030astro\u0308m",
    "e\u0301\u0323 d\u0307\u0323 q\u0307\u0323 a\u0301\u0301\u0301 \u0300leading mark",
    "\u1112\u1161\u11ab\u1100\u1173\u11af Hangul jamo",
    "\u212b \u2126 \u212a singletons",
    "ﬁ ligature ① ㎏ ½ compatibility",
    "ΑΒΓ αβγ Ωμέγα Привет мир שלום مرحبا",
    ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
     "<|im_start|>assistant\n"),
    "text with <|endoftext|> in the middle<|endoftext|>",
    "almost special <|im_start|<|im_end|> <|im_end|>|> <|im_",
    "<s>hello</s> <unk> and <s> again</s>",
    "<|begin_of_text|><|eot_id|>x<|end_of_text|>",
    "<mask> My name <mask> A<mask> <mask>ony <mask>",
    "Hi <mask> there\t<mask>\t<mask>\u2000 end",
    "a café, cafe\u0301 and caféine",
    "the beginningless end of the beginning",
    "well-known self-evident -leading trailing- --double",
    "def f(x):\n    return x**2  # comment\n\n\n",
    "C:\\path\\to\\file.txt && echo \"quoted\" 'single' `tick` {json: [1, 2]}",
    "nul\u0000byte\u0001\u007f\u0080 controls",
    "private \ue000 use",
    "\u2581 lower one eighth block \u2581\u2581",
    "supercalifragilisticexpialidocious" * 20,
    "a" * 1000,
    " the" * 100,
    "\U0001F600" * 64,
]


def write_lines(path: Path, head: str, rows: list[str], tail: str) -> None:
    """A JSON document with one row per line, so that diffs stay readable."""
    path.write_text(head + "\n" + ",\n".join(rows) + "\n" + tail + "\n", encoding="utf-8")


def unicode_cases(n: int = 250) -> list[dict]:
    """Random short strings over code points that exercise every step of NFC and NFD."""
    pool = (
        [0x41, 0x61, 0x45, 0x65, 0x4F, 0x6F, 0x55, 0x75, 0x43, 0x63, 0x53, 0x73, 0x20]  # bases
        + list(range(0x300, 0x316))  # combining marks of several classes
        + [0x323, 0x327, 0x328, 0x331, 0x338, 0x345, 0x35C, 0x35D]
        + [0x340, 0x341, 0x343, 0x344, 0x374, 0x37E, 0x387]  # singletons, multi-char decompositions
        + [0xC0, 0xC5, 0xE9, 0x1E0B, 0x1E63, 0x1EA0, 0x1F00, 0x1F80, 0x212B, 0x2126, 0x212A]
        + [0x391, 0x3B1, 0x3B9, 0x399, 0x1FBE, 0x3D2, 0x3D3]  # Greek
        + [0x915, 0x93C, 0x958, 0x9C7, 0x9BE, 0x9D7, 0xB47, 0xB3E, 0xB56]  # Indic
        + [0xF71, 0xF72, 0xF73, 0xF80]  # Tibetan
        + [0x1100, 0x1112, 0x1161, 0x1175, 0x11A8, 0x11AB, 0x11C2, 0xAC00, 0xD7A3, 0xAC01]  # Hangul
        + [0x5D0, 0x5B7, 0x5B8, 0x5BC, 0xFB2C, 0xFB2E, 0x30AB, 0x3099, 0x309A, 0x304B]
        + [0x1D15E, 0x1D165, 0x1D16E, 0x1D160, 0x2ADC, 0x2260, 0x3D, 0x226E, 0x3C]
    )
    rng = random.Random(20240611)
    cases = []
    for _ in range(n):
        s = "".join(chr(rng.choice(pool)) for _ in range(rng.randint(1, 8)))
        cases.append({"text": s, "nfc": unicodedata.normalize("NFC", s),
                      "nfd": unicodedata.normalize("NFD", s)})
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--refresh-train-text", action="store_true")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.refresh_train_text or not (OUT / "train.txt").exists():
        refresh_train_text()
    text = (OUT / "train.txt").read_text(encoding="utf-8")

    write_lines(OUT / "corpus.json", "[", [json.dumps(s, ensure_ascii=True) for s in CORPUS], "]")
    patterns = (("qwen2", QWEN2_RE), ("llama3", LLAMA3_RE), ("gpt2", GPT2_RE))
    blocks = []
    for name, pattern in patterns:
        rows = [json.dumps([m.group() for m in regex.finditer(pattern, t)], ensure_ascii=True)
                for t in CORPUS]
        blocks.append(f"{json.dumps(name)}: [\n" + ",\n".join(rows) + "\n]")
    write_lines(OUT / "regex_splits.json", "{", blocks, "}")
    write_lines(OUT / "unicode_cases.json",
                '{"unicode_version": ' + json.dumps(unicodedata.unidata_version) + ', "cases": [',
                [json.dumps(c, ensure_ascii=True) for c in unicode_cases()], "]}")
    builders = {
        "qwen2_bytelevel.json": qwen2,
        "llama3_bytelevel_pairs.json": llama3,
        "gpt2_bytelevel.json": gpt2,
        "llama2_sentencepiece.json": llama2,
        "metaspace_pairs.json": metaspace,
    }
    for name, build in builders.items():
        path = OUT / name
        path.write_text(json.dumps(build(text), ensure_ascii=False, indent=1) + "\n",
                        encoding="utf-8")
        ref = tokenizer_ref.RefTokenizer(str(path))
        tokenizer_ref.write_expected(ref, name, CORPUS, OUT / ("expected_" + name), n_random=60)
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes) and its expected ids")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write the test expectations for the bundled models (models/, from tools/train_tiny.py).

  tests/data/bundled/expected_kjv_tokenizer.json
      tools/tokenizer_ref.py's ids and decodes of the tricky-string corpus
      (tests/data/tokenizer/corpus.json) with the bundled tokenizer, plus random decodes.
  tests/data/bundled/heldout_ids.json
      the oracle's ids of the whole held-out text (models/kjv-heldout.txt).
  tests/data/bundled/greedy_fp16.json
      the PyTorch reference (tools/reference_forward.py, fp32) greedy continuation of 32 tokens
      for fixed prompts with models/kjv-target-fp16, and the first prompt's last-position logits.

Usage: /usr/bin/python3 tools/make_bundled_fixtures.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_forward as rf  # noqa: E402
import tokenizer_ref  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
OUT = ROOT / "tests/data/bundled"
PROMPTS = ["And God said", "In the beginning", "Blessed are the", "The LORD is my shepherd;"]


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    tok_path = MODELS / "kjv-target-fp16/tokenizer.json"
    tok = tokenizer_ref.RefTokenizer(str(tok_path))
    corpus = json.loads((ROOT / "tests/data/tokenizer/corpus.json").read_text(encoding="utf-8"))
    tokenizer_ref.write_expected(tok, "models/kjv-target-fp16/tokenizer.json", corpus,
                                 OUT / "expected_kjv_tokenizer.json", 100)
    held = (MODELS / "kjv-heldout.txt").read_text(encoding="utf-8")
    ids = tok.encode(held, add_special=False, parse_special=False)
    assert tok.decode(ids) == held, "the oracle does not round-trip the held-out text"
    (OUT / "heldout_ids.json").write_text(json.dumps({"text_file": "models/kjv-heldout.txt",
                                                      "ids": ids}) + "\n")
    m = rf.Model(str(MODELS / "kjv-target-fp16"), "fp32")
    cases = []
    for p in PROMPTS:
        pids = tok.encode(p, add_special=False, parse_special=False)
        logits = rf.forward(m, pids)[-1]
        case = {"prompt": p, "ids": pids, "greedy": rf.greedy(m, pids, 32)}
        if not cases:  # one logits row is enough to check the numerics
            case["last_logits"] = [float(x) for x in logits.double().tolist()]
        cases.append(case)
        print(f"{p!r}: {tok.decode(cases[-1]['greedy'])!r}")
    (OUT / "greedy_fp16.json").write_text(json.dumps({
        "model": "models/kjv-target-fp16", "generator": "tools/reference_forward.py (fp32)",
        "cases": cases}) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

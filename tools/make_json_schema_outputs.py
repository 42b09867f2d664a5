#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Generates, with the bundled KJV model (which has never seen JSON), one output per schema and
seed under each JSON Schema of tests/data/json_schemas (but those whose grammar is a known
approximation, with a NAME.approx.jsonl): NAME.generated.jsonl, one JSON string per line (the
output as edgellm-generate printed it). tools/check_json_schema_fixtures.js then judges
every output with ajv, independently of edgellm.

  /usr/bin/python3 tools/make_json_schema_outputs.py [--bin build/release/bin] [--seeds 1,2,3]
      [--max-tokens 96] [--force]

An existing NAME.generated.jsonl is replaced only with --force; each file is written under a
temporary name of this program's own and renamed into place.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "bin"),
                    help="folder of edgellm-generate")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-target-awq"))
    ap.add_argument("--dir", default=os.path.join(ROOT, "tests", "data", "json_schemas"))
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated sampling seeds")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--force", action="store_true", help="replace existing .generated.jsonl files")
    a = ap.parse_args()
    generate = os.path.join(a.bin, "edgellm-generate")
    if not os.access(generate, os.X_OK):
        print(f"make_json_schema_outputs: {generate}: not found (build it, or pass --bin)",
              file=sys.stderr)
        return 1
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
    except ValueError:
        print(f"make_json_schema_outputs: --seeds: {a.seeds!r} is not a list of integers",
              file=sys.stderr)
        return 2
    # A schema with NAME.approx.jsonl has a grammar known to accept some invalid instances
    # (json_schema.hpp lists its approximations): left out, so every output must validate.
    names = sorted(f[:-5] for f in os.listdir(a.dir)
                   if f.endswith(".json")
                   and not os.path.exists(os.path.join(a.dir, f[:-5] + ".approx.jsonl")))
    written = 0
    for name in names:
        out_path = os.path.join(a.dir, name + ".generated.jsonl")
        if os.path.exists(out_path) and not a.force:
            print(f"make_json_schema_outputs: {out_path} exists (--force replaces it)",
                  file=sys.stderr)
            return 1
        lines = []
        for seed in seeds:
            cmd = [generate, "-m", a.model, "--json-schema", os.path.join(a.dir, name + ".json"),
                   "-p", a.prompt, "-n", str(a.max_tokens), "-s", str(seed), "--temp", "1",
                   "--quiet", "--no-display-prompt"]
            r = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if r.returncode != 0:
                print(f"make_json_schema_outputs: {name} seed {seed}: {r.stderr.strip()}",
                      file=sys.stderr)
                return 1
            if "not a whole document" in r.stderr:
                print(f"make_json_schema_outputs: {name} seed {seed}: {r.stderr.strip()}",
                      file=sys.stderr)
            text = r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout  # the closing newline
            lines.append(json.dumps(text, ensure_ascii=False))
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.generated.", suffix=".tmp", dir=a.dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            os.replace(tmp, out_path)
        except BaseException:
            os.unlink(tmp)
            raise
        written += 1
    print(f"{written} schemas x {len(seeds)} seeds written under {a.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

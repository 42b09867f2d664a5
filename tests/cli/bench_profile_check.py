#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs `edgellm-bench --profile -o json` and checks its rows (bench/bench.cpp, --profile):

    bench_profile_check.py BENCH [ARGS...]

Per model and thread count: one row per op kind, an `untimed` and a `total` row; the per-op
times and shares are >= 0, the op shares sum to at most 100 %, the matmul kinds have calls,
and the total row has fork-joins per token > 0 (ARGS must give a thread count above 1) and a
token rate. Prints FAIL and exits 1 on the first violation.
"""
import json
import subprocess
import sys

OPS = ["embed", "rms_norm", "qkv", "rope", "attention", "o_proj", "gate_up", "silu_mul", "down",
       "add", "lm_head", "other"]


def fail(why, out=""):
    print(f"FAIL {why}")
    if out:
        print(out[:2000])
    sys.exit(1)


def main():
    cmd = sys.argv[1:] + ["--profile", "-o", "json"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        fail(f"exit {run.returncode}: {' '.join(cmd)}", run.stderr)
    try:
        rows = json.loads(run.stdout)
    except json.JSONDecodeError as e:
        fail(f"stdout is not JSON: {e}", run.stdout)
    if not isinstance(rows, list) or not rows:
        fail("not a non-empty array", run.stdout)
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["threads"]), {})[r["op"]] = r
    for (model, threads), ops in groups.items():
        where = f"{model} t={threads}"
        missing = [op for op in OPS + ["untimed", "total"] if op not in ops]
        if missing:
            fail(f"{where}: no rows for {missing}")
        share = 0.0
        for op in OPS:
            r = ops[op]
            for col in ("ms_per_token", "pct_token", "calls_per_token", "forkjoins_per_token"):
                if not isinstance(r[col], (int, float)) or r[col] < 0:
                    fail(f"{where} {op}: {col} = {r[col]!r}")
            if r["tokens_per_s"] is not None:
                fail(f"{where} {op}: tokens_per_s must be null on an op row")
            share += r["pct_token"]
        if share > 100.5:
            fail(f"{where}: the op shares sum to {share:.1f} % > 100 %")
        for op in ("qkv", "attention", "o_proj", "gate_up", "down", "lm_head"):
            if ops[op]["calls_per_token"] <= 0 or ops[op]["ms_per_token"] <= 0:
                fail(f"{where} {op}: no calls or no time: {ops[op]}")
        if ops["untimed"]["calls_per_token"] is not None:
            fail(f"{where} untimed: calls_per_token must be null")
        total = ops["total"]
        if not total["tokens_per_s"] or total["tokens_per_s"] <= 0:
            fail(f"{where} total: tokens_per_s = {total['tokens_per_s']!r}")
        if threads > 1 and not total["forkjoins_per_token"] > 0:
            fail(f"{where} total: forkjoins_per_token = {total['forkjoins_per_token']!r}, "
                 "expected > 0 on a pool of more than one thread")
        print(f"{where}: {total['ms_per_token']:.3f} ms/token, "
              f"{total['forkjoins_per_token']:.1f} fork-joins/token")
    if not any(t > 1 for (_, t) in groups):
        fail("no row with more than one thread: the fork-join count is not checked")
    print("PASS")


if __name__ == "__main__":
    main()

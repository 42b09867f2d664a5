#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs a bench with -o FORMAT and checks its stdout (bench/output.hpp):

    bench_output_check.py FORMAT BENCH [ARGS...]

tsv: `# key=value` lines, a header, rows of as many tab-separated cells; json: ONE array of
objects; jsonl: one object a line; csv (the csv module): a header and rows of as many cells;
md: a table with `|` rows. json, jsonl and csv carry the build and CPU fields in every row.
Rows of the end-to-end bench (a `test` column) must say "not applicable" with null (empty in
tsv/csv, "-" in md), never with 0: membw_gbps and pct_roofline on pp rows, tokens_per_s_* on
the start and prefix rows, prefix_speedup anywhere but the prefix row; kv_bytes_per_token and
pct_roofline_kv on all but tg rows, int8_macs_per_s and pct_compute on all but pp rows. Every
row has its depth (-d); tg rows the KV bytes a step reads, more at a greater depth; start and
prefix rows come at depth 0 only. Prints FAIL and exits 1 on the first violation.
"""
import csv
import io
import json
import subprocess
import sys

METADATA = ["edgellm", "git_sha", "compiler", "build_type", "flags", "simd", "microkernel", "cpu",
            "hardware_threads", "date"]


def fail(why, out=""):
    print(f"FAIL {why}")
    if out:
        print(out[:2000])
    sys.exit(1)


def rows_of(fmt, out):
    """Rows as dicts; a null cell is None."""
    if fmt == "json":
        data = json.loads(out)
        if not isinstance(data, list) or not data:
            fail("json: not a non-empty array", out)
        return data
    if fmt == "jsonl":
        lines = [l for l in out.splitlines() if l.strip()]
        return [json.loads(l) for l in lines]
    if fmt == "csv":
        table = list(csv.reader(io.StringIO(out)))
        header = table[0]
        for r in table[1:]:
            if len(r) != len(header):
                fail(f"csv: a row of {len(r)} cells under {len(header)} columns", out)
        return [{k: (v if v != "" else None) for k, v in zip(header, r)} for r in table[1:]]
    if fmt == "tsv":
        lines = out.splitlines()
        meta = [l for l in lines if l.startswith("# ")]
        body = [l for l in lines if not l.startswith("#")]
        if len(meta) < len(METADATA):
            fail(f"tsv: {len(meta)} metadata lines", out)
        header = body[0].split("\t")
        rows = []
        for l in body[1:]:
            cells = l.split("\t")
            if len(cells) != len(header):
                fail(f"tsv: a row of {len(cells)} cells under {len(header)} columns", out)
            rows.append({k: (v if v != "" else None) for k, v in zip(header, cells)})
        return rows
    if fmt == "md":
        table = [l for l in out.splitlines() if l.startswith("|")]
        split = [[c.strip() for c in l.strip("|").split("|")] for l in table]
        header, rule, body = split[0], split[1], split[2:]
        if set(rule) != {"---"}:
            fail("md: no rule line under the header", out)
        for r in body:
            if len(r) != len(header):
                fail(f"md: a row of {len(r)} cells under {len(header)} columns", out)
        return [{k: (v if v != "-" else None) for k, v in zip(header, r)} for r in body]
    fail(f"unknown format {fmt}")


def main():
    fmt, cmd = sys.argv[1], sys.argv[2:]
    proc = subprocess.run(cmd + ["-o", fmt], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} -o {fmt} exited {proc.returncode}", proc.stderr)
    out = proc.stdout
    rows = rows_of(fmt, out)
    if not rows:
        fail("no rows", out)
    keys = list(rows[0].keys())
    for r in rows:
        if list(r.keys()) != keys:
            fail("rows with different fields", out)
    if fmt in ("json", "jsonl", "csv"):
        missing = [k for k in METADATA if k not in keys]
        if missing:
            fail(f"{fmt}: rows lack the build/CPU fields {missing}", out)
        if fmt != "csv" and not isinstance(rows[0]["hardware_threads"], int):
            fail("hardware_threads is not a number", out)
    if "test" in keys:  # the end-to-end bench
        def null(r, k):
            if r[k] is not None:
                fail(f"{r['test']}: {k} = {r[k]!r}, expected null", out)

        def number(r, k):
            if r[k] is None or float(r[k]) <= 0:
                fail(f"{r['test']}: {k} = {r[k]!r}, expected a number > 0", out)

        seen = set()
        kv_by_depth = {}  # threads -> [(depth, kv_bytes_per_token)] of the tg rows
        for r in rows:
            t = r["test"]
            kind = t.rstrip("0123456789+")
            seen.add(kind)
            if kind == "pp":
                null(r, "membw_gbps")
                null(r, "pct_roofline")
                number(r, "tokens_per_s_median")
                number(r, "tokens_per_s_mean")
            if kind == "tg":
                number(r, "tokens_per_s_median")
                number(r, "membw_gbps")
            if kind in ("start", "prefix"):
                for k in ("tokens_per_s_median", "tokens_per_s_mean", "tokens_per_s_stddev",
                          "membw_gbps", "pct_roofline"):
                    null(r, k)
            if kind == "prefix":
                number(r, "prefix_speedup")
            else:
                null(r, "prefix_speedup")
            number(r, "ttft_ms_median")
            for k in ("pct_roofline", "pct_roofline_kv", "pct_compute", "int8_macs_per_s",
                      "int8_peak_macs_per_s"):
                if r[k] is not None and float(r[k]) <= 0:
                    fail(f"{t}: {k} {r[k]!r}, expected null or a number > 0", out)
            if r["depth"] is None or int(r["depth"]) < 0:
                fail(f"{t}: depth {r['depth']!r}", out)
            depth = int(r["depth"])
            if kind == "tg":
                number(r, "kv_bytes_per_token")
                kv_by_depth.setdefault(int(r["threads"]), []).append(
                    (depth, float(r["kv_bytes_per_token"])))
            else:
                null(r, "kv_bytes_per_token")
                null(r, "pct_roofline_kv")
            if kind != "pp":
                for k in ("int8_macs_per_s", "int8_peak_macs_per_s", "pct_compute"):
                    null(r, k)
            elif (r["pct_compute"] is None) != (r["int8_macs_per_s"] is None):
                fail(f"{t}: pct_compute without int8_macs_per_s or the reverse", out)
            if kind in ("start", "prefix") and depth != 0:
                fail(f"{t}: a {kind} row at depth {depth}", out)
        if seen != {"pp", "tg", "start", "prefix"}:
            fail(f"e2e rows: {sorted(seen)}", out)
        for threads, kv in kv_by_depth.items():
            kv.sort()
            for (d0, b0), (d1, b1) in zip(kv, kv[1:]):
                if d1 > d0 and not b1 > b0:
                    fail(f"t={threads}: {b1} KV bytes per token at depth {d1}, "
                         f"not more than {b0} at depth {d0}", out)
    print(f"ok {fmt}: {len(rows)} rows, {len(keys)} fields")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Throughput of edgellm-server under concurrent clients, for each --parallel, in one run.

  /usr/bin/python3 tools/server_load.py --server build/release/bin/edgellm-server \
      --model models/kjv-target-awq --parallel 1,2 --threads 2 [--format json]

For each slot count it starts a server (same --threads in all), sends one warm-up request, then
--clients clients each send --requests chat completions of --max-tokens tokens (a fixed seed,
so every configuration generates the same text), and reports generated tokens per second of wall
time; the last row is each configuration's throughput over the first one's. Rows on stdout
(JSON lines with --format json, else a table), chatter on stderr. Loopback only.
"""
import argparse
import http.client
import json
import re
import subprocess
import sys
import threading
import time


def start(server, model, parallel, threads, clients, context):
    proc = subprocess.Popen([server, "-m", model, "--port", "0", "--parallel", str(parallel),
                             "-t", str(threads), "--queue", str(clients), "-q", "-c", str(context)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"listening on http://[0-9.]+:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, int(m.group(1))
    raise SystemExit(f"server_load.py: {server} did not start")


def chat(port, k, max_tokens):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"messages": [{"role": "user", "content": f"Tell of the kings of Israel, part {k}."}],
            "max_tokens": max_tokens, "seed": k, "temperature": 0.7}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body))
    r = conn.getresponse()
    reply = json.loads(r.read())
    conn.close()
    if r.status != 200:
        raise SystemExit(f"server_load.py: HTTP {r.status}: {reply}")
    return reply["usage"]["completion_tokens"]


def measure(args, parallel):
    proc, port = start(args.server, args.model, parallel, args.threads, args.clients, args.context)
    try:
        chat(port, 0, 8)  # warm-up
        totals = [0] * args.clients

        def client(c):
            for i in range(args.requests):
                totals[c] += chat(port, 1 + c * args.requests + i, args.max_tokens)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(60)
    tokens = sum(totals)
    return {"parallel": parallel, "threads": args.threads, "clients": args.clients,
            "requests": args.clients * args.requests, "tokens": tokens,
            "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--parallel", default="1,2", help="slot counts, comma list")
    ap.add_argument("--threads", type=int, default=2, help="--threads of every server")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=6, help="per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--quick", action="store_true", help="2 requests per client, 32 tokens")
    ap.add_argument("--format", choices=["json", "table"], default="table")
    args = ap.parse_args()
    if args.quick:
        args.requests, args.max_tokens = 2, 32
    rows = []
    for p in [int(x) for x in args.parallel.split(",")]:
        print(f"server_load.py: --parallel {p} ...", file=sys.stderr)
        rows.append(measure(args, p))
    base = rows[0]["tokens_per_s"]
    for r in rows:
        r["speedup_vs_first"] = round(r["tokens_per_s"] / base, 3) if base else None
    for r in rows:
        if args.format == "json":
            print(json.dumps(r))
        else:
            print(f"parallel {r['parallel']}: {r['tokens']} tokens in {r['seconds']} s = "
                  f"{r['tokens_per_s']} tok/s ({r['speedup_vs_first']}x)")


if __name__ == "__main__":
    main()

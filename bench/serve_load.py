"""Load test of `hybridrl serve`: C concurrent clients x R requests each against one server.

    .venv/bin/python bench/serve_load.py                       # starts tiny-arith on 127.0.0.1 (auto engine)
    .venv/bin/python bench/serve_load.py --engine hf -c 8 -r 50 --output bench/results/serve_hf.json
    .venv/bin/python bench/serve_load.py --url http://127.0.0.1:8000 --model my-model --api-key KEY

Every request is a chat completion ("What is a+b?" with random a, b; temperature 1, its own seed,
--max-tokens), every other one streamed (with `stream_options.include_usage`, so both kinds report
their generated tokens). Reported: errors (any non-200, malformed body, or stream without [DONE]),
latency p50/p90/p99 of whole requests, time to first token of the streamed ones, requests/s and
generated tokens/s over the timed phase, and, for a server this script started, the CPU-seconds it
(and its child processes, e.g. vLLM's engine) used in that phase. A few warm-up requests run first.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running server's base URL (default: start one for --model)")
    p.add_argument("--model", default="tiny-arith", help="model PATH to serve, or the served name with --url")
    p.add_argument("--engine", default="auto", choices=("auto", "hf", "vllm"), help="engine of a started server")
    p.add_argument("--max-num-seqs", type=int, default=32, help="batch size of a started server")
    p.add_argument("--threads", type=int, help="--threads of a started server (default: torch's choice)")
    p.add_argument("--api-key", help="API key (a started server gets a random one)")
    p.add_argument("-c", "--concurrency", type=int, default=8, help="concurrent clients (default: %(default)s)")
    p.add_argument("-r", "--requests", type=int, default=50, help="requests per client (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=16, help="max_tokens per request (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=4, help="untimed requests first (default: %(default)s)")
    p.add_argument("--output", help="write the results as JSON here")
    return p.parse_args(argv)


def start_server(args) -> tuple[subprocess.Popen, str, str]:
    """A `hybridrl serve` subprocess on a free port; (process, base URL, engine it chose)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "hybridrl", "serve", args.model, "--port", str(port), "--engine", args.engine,
           "--max-num-seqs", str(args.max_num_seqs), "--api-key", args.api_key, "--log-level", "warning",
           *(["--threads", str(args.threads)] if args.threads else [])]
    log = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty server never blocks on a full pipe
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            sys.exit(f"the server exited with {proc.returncode}: {log.read()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                log.seek(0)
                engine = re.search(r"\((\w+) engine", log.read())
                return proc, url, engine.group(1) if engine else args.engine
        except httpx.TransportError:
            time.sleep(0.5)
    proc.kill()
    sys.exit("the server did not answer /health within 600 s")


def cpu_seconds(pid: int) -> float:
    """user + system CPU-seconds of a process and all its descendants alive now."""
    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def one_request(client: httpx.Client, model: str, max_tokens: int, rng: random.Random, stream: bool) -> dict:
    """{ok, latency_s, ttft_s (streams), tokens}; never raises (a failure is a result)."""
    body = {"model": model, "messages": [{"role": "user", "content": f"What is {rng.randint(0, 99)}+"
                                                                     f"{rng.randint(0, 99)}?"}],
            "max_tokens": max_tokens, "temperature": 1.0, "seed": rng.getrandbits(32)}
    start = time.perf_counter()
    try:
        if stream:
            return _streamed(client, {**body, "stream": True, "stream_options": {"include_usage": True}}, start)
        r = client.post("/v1/chat/completions", json=body)
        tokens = r.json()["usage"]["completion_tokens"] if r.status_code == 200 else 0
        return {"ok": r.status_code == 200, "latency_s": time.perf_counter() - start, "ttft_s": None, "tokens": tokens}
    except (httpx.HTTPError, KeyError, ValueError) as e:
        return {"ok": False, "latency_s": time.perf_counter() - start, "ttft_s": None, "tokens": 0, "error": repr(e)}


def _streamed(client: httpx.Client, body: dict, start: float) -> dict:
    ttft, tokens, done = None, 0, False
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            r.read()
            return {"ok": False, "latency_s": time.perf_counter() - start, "ttft_s": None, "tokens": 0}
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            if ttft is None and any(c["delta"].get("content") for c in chunk["choices"]):
                ttft = time.perf_counter() - start
            tokens = (chunk.get("usage") or {}).get("completion_tokens", tokens)
    return {"ok": done, "latency_s": time.perf_counter() - start, "ttft_s": ttft, "tokens": tokens}


def run_clients(url: str, key: str, model: str, concurrency: int, per_client: int, max_tokens: int) -> list[dict]:
    """Each client: its own connection, requests back to back, every other one streamed."""
    def client_loop(c: int) -> list[dict]:
        rng = random.Random(c)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300) as client:
            return [one_request(client, model, max_tokens, rng, stream=(i + c) % 2 == 1) for i in range(per_client)]

    with ThreadPoolExecutor(concurrency) as pool:
        return [r for rs in pool.map(client_loop, range(concurrency)) for r in rs]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def summarize(results: list[dict], wall_s: float) -> dict:
    latencies = [r["latency_s"] for r in results if r["ok"]]
    ttfts = [r["ttft_s"] for r in results if r["ok"] and r["ttft_s"] is not None]
    tokens = sum(r["tokens"] for r in results if r["ok"])
    return {"requests": len(results), "errors": sum(not r["ok"] for r in results), "wall_s": wall_s,
            "latency_p50_s": percentile(latencies, 50), "latency_p90_s": percentile(latencies, 90),
            "latency_p99_s": percentile(latencies, 99), "ttft_p50_s": percentile(ttfts, 50),
            "requests_per_s": len(results) / wall_s, "generated_tokens": tokens, "tokens_per_s": tokens / wall_s}


def markdown(s: dict) -> str:
    rows = [("requests", f"{s['requests']} ({s['concurrency']} clients x {s['per_client']})"),
            ("errors", str(s["errors"])), ("engine", s["engine"]),
            ("latency p50 / p90 / p99", f"{s['latency_p50_s']:.3f} / {s['latency_p90_s']:.3f} / "
                                        f"{s['latency_p99_s']:.3f} s"),
            ("time to first token p50 (streamed)", f"{s['ttft_p50_s']:.3f} s"),
            ("requests/s", f"{s['requests_per_s']:.2f}"),
            ("generated tokens/s", f"{s['tokens_per_s']:.1f} ({s['generated_tokens']} tokens)"),
            ("wall time", f"{s['wall_s']:.1f} s"),
            ("server CPU-seconds", "n/a" if s["server_cpu_s"] is None else f"{s['server_cpu_s']:.1f}"),
            ("client CPU-seconds", f"{s['client_cpu_s']:.1f}")]
    return "\n".join(["| metric | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def main(argv=None) -> int:
    args = parse_args(argv)
    proc, engine = None, "external"
    if args.url is None:
        args.api_key = args.api_key or f"bench-{random.getrandbits(64):x}"
        proc, url, engine = start_server(args)
    else:
        url = args.url.rstrip("/")
    model = os.path.basename(os.path.normpath(args.model)) if proc else args.model
    try:
        run_clients(url, args.api_key or "", model, min(args.warmup, args.concurrency), 1, args.max_tokens)
        server_cpu0, client_cpu0 = (cpu_seconds(proc.pid) if proc else None), time.process_time()
        start = time.perf_counter()
        results = run_clients(url, args.api_key or "", model, args.concurrency, args.requests, args.max_tokens)
        wall = time.perf_counter() - start
        summary = {**summarize(results, wall), "concurrency": args.concurrency, "per_client": args.requests,
                   "max_tokens": args.max_tokens, "engine": engine, "threads": args.threads, "url": url,
                   "server_cpu_s": cpu_seconds(proc.pid) - server_cpu0 if proc else None,
                   "client_cpu_s": time.process_time() - client_cpu0, "cores": len(os.sched_getaffinity(0))}
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=120)
    print(markdown(summary))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0 if summary["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

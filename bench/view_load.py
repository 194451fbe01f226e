"""How fast `hybridrl view` opens a big run: 10,000 steps of metrics and 1,000,000 dumped generations.

Writes a synthetic run folder (outside the repository by default: ~250 MB), then times, in one process
through the app's ASGI interface (FastAPI's TestClient, so no network in the figure):
  open   = build the app over the folder + the page's first calls: /api/runs, /api/metrics (every step; the
           series of the sections the page opens first, every metric's name),
           /api/steps, the last step's first page of prompts, and one prompt's responses;
  page   = the next page of prompts, another step's first page, a filtered search in it, the steps that sampled
           a prompt (a byte search through every dump), a closed section's series, a live poll.
Only the steps asked for are read (their lines through the index): the 1M rows are never all loaded.

    PYTHONPATH=. python bench/view_load.py [--folder /tmp/view-bench] [--steps 10000] [--dump-steps 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time


def write_run(folder: str, steps: int, dump_steps: int, rows_per_step: int, n: int) -> None:
    if os.path.isfile(os.path.join(folder, "metrics.jsonl")):
        return  # written by an earlier call: reuse it
    rng = random.Random(0)
    os.makedirs(os.path.join(folder, "rollouts"), exist_ok=True)
    with open(os.path.join(folder, "config.yaml"), "w") as f:
        f.write("trainer:\n  experiment_name: big\n  rollout_data_dir: rollouts\n")
    keys = [f"{g}/{k}" for g in ("actor", "critic", "timing_s", "perf", "response_length")
            for k in ("a", "b", "c", "d", "e", "f", "g", "h")]
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        for s in range(1, steps + 1):
            f.write(json.dumps({"step": s, **{k: rng.random() for k in keys}}) + "\n")
    for s in range(1, dump_steps + 1):
        with open(os.path.join(folder, "rollouts", f"{s}.jsonl"), "w") as f:
            for p in range(rows_per_step // n):
                a, b = rng.randrange(100), rng.randrange(100)
                prompt = f"<|im_start|>user\nWhat is {a}+{b}?<|im_end|>\n<|im_start|>assistant\n"
                for _ in range(n):
                    out = str(a + b + rng.choice((0, 0, 1, -1)))
                    f.write(json.dumps({"step": s, "input": prompt, "output": out, "gts": str(a + b),
                                        "score": float(out == str(a + b)), "reward": 0.0, "data_source": "arithmetic",
                                        "index": p, "response_length": len(out) + 1, "advantage": 0.0}) + "\n")


def timed(label: str, fn, times: dict):
    start = time.perf_counter()
    out = fn()
    times[label] = time.perf_counter() - start
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default="/tmp/view-bench")
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--dump-steps", type=int, default=1_000)
    ap.add_argument("--rows-per-step", type=int, default=1_000)
    ap.add_argument("--n", type=int, default=8)
    args = ap.parse_args()
    t0 = time.perf_counter()
    write_run(args.folder, args.steps, args.dump_steps, args.rows_per_step, args.n)
    print(f"run folder {args.folder}: {args.steps} metric steps, {args.dump_steps * args.rows_per_step:,} generations "
          f"(written or reused in {time.perf_counter() - t0:.1f}s)")

    from fastapi.testclient import TestClient

    from hybridrl.view.app import build_app
    from hybridrl.view.runs import load_folders

    times: dict[str, float] = {}
    start, cpu = time.perf_counter(), time.process_time()
    c = timed("build app", lambda: TestClient(build_app(load_folders([args.folder]))), times)

    def get(path, **params):
        r = c.get(path, params=params)
        assert r.status_code == 200, r.text
        return r.json()

    timed("/api/runs", lambda: get("/api/runs"), times)
    first = "critic,val-core,actor,response_length"  # app.js OPEN_SECTIONS
    m = timed("/api/metrics (open sections)", lambda: get("/api/metrics", run=0, sections=first, keys="timing_s/step"),
              times)
    steps = timed("/api/steps", lambda: get("/api/steps", run=0, kind="rollout")["steps"], times)
    last = steps[-1]
    timed("/api/prompts (last step, page 1)", lambda: get("/api/prompts", run=0, kind="rollout", step=last), times)
    timed("/api/prompt", lambda: get("/api/prompt", run=0, kind="rollout", step=last, i=0), times)
    opened, opened_cpu = time.perf_counter() - start, time.process_time() - cpu
    timed("next page", lambda: get("/api/prompts", run=0, kind="rollout", step=last, offset=50), times)
    timed("another step", lambda: get("/api/prompts", run=0, kind="rollout", step=steps[len(steps) // 2]), times)
    timed("search in it", lambda: get("/api/prompts", run=0, kind="rollout", step=steps[len(steps) // 2], q="+4",
                                      min_score=1), times)
    timed("steps that sampled a prompt", lambda: get("/api/prompt_steps", run=0, kind="rollout", step=last, i=0), times)
    timed("open a closed section", lambda: get("/api/metrics", run=0, upto=m["rows"], sections="perf"), times)
    live = timed("live poll (nothing new)", lambda: get("/api/metrics", run=0, since=m["rows"], gen=m["generation"],
                                                        sections=first), times)
    assert live["steps"] == [] and len(m["steps"]) == args.steps
    for label, t in times.items():
        print(f"  {label:<36} {t * 1000:8.1f} ms")
    # CPU time beside wall time: on cores shared with other jobs the wall time also measures their load
    print(f"open (app + first responses): {opened:.2f} s ({opened_cpu:.2f} s CPU)")


if __name__ == "__main__":
    main()

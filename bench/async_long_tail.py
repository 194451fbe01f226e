"""Asynchronous training on a long-tail workload: synchronous Ray (1 trainer worker), staleness 1 without and
with partial rollouts (1 trainer + 1 rollout worker), back to back on the same machine.

The tail: tiny-arith answers in about 4 tokens at temperature 1; at temperature 4 the median response is ~14
tokens and a few run on to data.max_response_length, so a batch's generation lasts as long as its longest one.

    PYTHONPATH=$PWD python bench/async_long_tail.py [--steps 12] [--temperature 4.0] [--max-response 96]

writes bench/results/async_long_tail.{json,md}. Wall times on a shared machine are noisy; CPU-seconds (this
process and its reaped children: a lower bound, Ray's workers are mostly not counted) are reported beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

KINDS = {
    "sync (ray, 1 worker)": ["ray_kwargs.ray_init.num_cpus=1"],
    "staleness 1": ["rollout.n_gpus_per_node=1", "rollout.nnodes=1", "ray_kwargs.ray_init.num_cpus=2",
                    "async_training.staleness_threshold=1"],
    "staleness 1 + partial": ["rollout.n_gpus_per_node=1", "rollout.nnodes=1", "ray_kwargs.ray_init.num_cpus=2",
                              "async_training.staleness_threshold=1", "async_training.partial_rollout=true"],
}


def cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def pct(values: list[int], q: float) -> float:
    s = sorted(values)
    return float(s[min(len(s) - 1, int(q * len(s)))])


def run_one(name: str, extra: list[str], args, folder: str) -> dict:
    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig
    from hybridrl.plan.resolve import resolve
    from hybridrl.trainer.build import build_run
    from hybridrl.trainer.rl import RLTrainer

    out = os.path.join(folder, name.split()[0] + str(len(extra)))
    overrides = ["trainer.backend=ray", f"trainer.total_training_steps={args.steps}", "trainer.test_freq=0",
                 "trainer.val_before_train=false", "trainer.save_freq=0", "trainer.logger=[file]",
                 f"trainer.default_local_dir={out}", f"trainer.rollout_data_dir={out}/gen",
                 f"actor_rollout_ref.rollout.temperature={args.temperature}",
                 f"data.max_response_length={args.max_response}", "data.train_batch_size=8",
                 "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8", *extra]
    cfg = load_config(RLConfig, None, overrides)
    start_cpu, start = cpu_seconds(), time.perf_counter()
    run = build_run(resolve(cfg), log=lambda *_: None)
    RLTrainer(run, log=lambda *_: None).fit()
    wall, cpu = time.perf_counter() - start, cpu_seconds() - start_cpu
    rows = [json.loads(x) for x in open(run.tracker.path)]
    steps = [r for r in rows if "timing_s/step" in r]
    lengths = [json.loads(x)["response_length"] for f in sorted(os.listdir(f"{out}/gen"))
               for x in open(f"{out}/gen/{f}")]
    mean = lambda key: statistics.mean(r[key] for r in steps[1:]) if key in steps[0] else None  # noqa: E731
    return {"kind": name, "steps": len(steps), "median_s_per_step": statistics.median(r["timing_s/step"]
                                                                                     for r in steps[1:]),
            "wall_s": wall, "cpu_s": cpu, "response_len_p50": pct(lengths, 0.5), "response_len_p99": pct(lengths, 0.99),
            "response_len_max": max(lengths),
            "at_max_frac": sum(x >= args.max_response for x in lengths) / len(lengths),
            "wait_s_mean": mean("async/wait_s"), "staleness_token_mean": mean("async/staleness_token_mean"),
            "interrupted_frac_mean": mean("async/interrupted_frac"), "reward_last": steps[-1].get("critic/score/mean")}


def table(results: list[dict], machine: dict, args) -> str:
    f = lambda v, d=2: "—" if v is None else f"{v:.{d}f}"  # noqa: E731
    lines = [f"# Async training on a long tail ({args.steps} steps, tiny-arith, T={args.temperature}, "
             f"max_response_length={args.max_response}, 8 prompts x 4)", "",
             f"{machine['cpu_model']}, {machine['cpu_count']} cores shared with other jobs: wall times are noisy, "
             "each measured once; the first step (start-up) is left out of the median. CPU s: this process and its "
             "reaped children only, a lower bound (Ray's worker processes are mostly not counted).", "",
             "| run | median s/step | wall s | CPU s | resp. len p50 / p99 / max | at max | trainer wait s | "
             "token staleness | interrupted |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['kind']} | {f(r['median_s_per_step'])} | {f(r['wall_s'], 1)} | {f(r['cpu_s'], 1)} | "
                     f"{r['response_len_p50']:.0f} / {r['response_len_p99']:.0f} / {r['response_len_max']} | "
                     f"{f(r['at_max_frac'])} | {f(r['wait_s_mean'])} | {f(r['staleness_token_mean'])} | "
                     f"{f(r['interrupted_frac_mean'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--temperature", type=float, default=4.0)
    parser.add_argument("--max-response", type=int, default=96)
    parser.add_argument("--only", default=None, help="run only the kinds whose name contains this")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(__file__))
    from levers import machine_info

    machine = machine_info(0)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for name, extra in KINDS.items():
            if args.only is None or args.only in name:
                results.append(run_one(name, extra, args, folder))
                print(json.dumps(results[-1]), flush=True)
    os.makedirs("bench/results", exist_ok=True)
    json.dump({"machine": machine, "args": vars(args), "results": results},
              open("bench/results/async_long_tail.json", "w"), indent=1)
    open("bench/results/async_long_tail.md", "w").write(table(results, machine, args))
    print(table(results, machine, args))


if __name__ == "__main__":
    main()

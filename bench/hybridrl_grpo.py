"""hybridrl's GRPO on the benchmark workload (bench/workload.py), one step at a time.

    .venv/bin/python bench/hybridrl_grpo.py --model DIR --steps 6 --out hybridrl.jsonl [override ...]

Writes one JSON line per step, with the same fields as bench/trl_grpo.py: wall and process-CPU
seconds, generation (`timing_s/gen`), rollout (generation + reward) and training (the rest:
log-prob passes, advantages, update) shares, generated and trained token counts, peak RSS.
Extra arguments are config overrides (the levers bench/speed.py turns on one by one).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time

# each row names its dtype: `auto` precision (plan/precision_auto.py) is fp32 here unless a row sets bf16
os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import workload  # noqa: E402


BF16 = ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16", "actor_rollout_ref.rollout.dtype=bfloat16",
        "algorithm.rollout_correction.rollout_is=token"]  # bf16 compute over fp32 masters, bf16 rollout, token TIS


def write_prompts(path: str, count: int, kind: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"data_source": "bench", "prompt": [{"role": "user", "content": q}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": a}, "extra_info": {"index": i}}
            for i, (q, a) in enumerate(workload.workload_prompts(kind, count))]
    pq.write_table(pa.Table.from_pylist(rows), path)


def overrides(model: str, data: str, run_dir: str, steps: int, kind: str) -> list[str]:
    """The workload in hybridrl's (verl's) keys: GRPO, token-mean, no KL, one optimizer step per step."""
    n = workload.PROMPTS_PER_STEP * workload.SAMPLES_PER_PROMPT
    score = "compute_arith_score" if kind == "learning" else "compute_score"
    return [
        f"actor_rollout_ref.model.path={model}", f"data.train_files=[{data}]", "data.val_files=[]",
        f"data.train_batch_size={workload.PROMPTS_PER_STEP}", f"actor_rollout_ref.rollout.n={workload.SAMPLES_PER_PROMPT}",
        f"data.max_response_length={workload.NEW_TOKENS}", f"actor_rollout_ref.rollout.ignore_eos={kind == 'fixed'}",
        "data.shuffle=false", "data.max_prompt_length=64",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={workload.PROMPTS_PER_STEP}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={n}", "actor_rollout_ref.actor.ppo_epochs=1",
        f"actor_rollout_ref.actor.optim.lr={workload.LR}", "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean", "actor_rollout_ref.actor.entropy_coeff=0",
        "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=false",
        f"custom_reward_function.path={os.path.join(HERE, 'workload.py')}", f"custom_reward_function.name={score}",
        f"trainer.total_training_steps={steps}", "trainer.test_freq=-1", "trainer.val_before_train=false",
        "trainer.save_freq=0", "trainer.resume_mode=disable", f"trainer.default_local_dir={run_dir}",
        "trainer.logger=[]", f"trainer.seed={workload.SEED}",
    ]


CATEGORIES = [  # (category, op-name fragments), first match wins: where a profiled step's op time goes
    ("matmul", ("mm", "linear", "matmul", "mkldnn", "onednn")),
    ("attention", ("scaled_dot_product", "softmax", "flash")),
    ("optimizer", ("adam",)),
    ("copies and indexing", ("copy", "cat", "index", "gather", "scatter", "select", "slice", "to", "contiguous",
                             "clone", "stack", "pad", "where", "masked")),
]


def phases(metrics: dict[str, float]) -> dict[str, float]:
    """A step's `timing_s/*` metrics by phase name."""
    return {k[len("timing_s/"):]: v for k, v in metrics.items() if k.startswith("timing_s/")}


def category(op: str) -> str:
    name = op.split("::")[-1]
    return next((c for c, parts in CATEGORIES if any(p in name for p in parts)), "other elementwise ops")


def token_counts(m: dict[str, float]) -> dict[str, int]:
    """A step's generated and trained (prompt + response, non-padding) tokens, from its metrics."""
    return {"gen_tokens": int(m["response_length/mean"] * workload.PROMPTS_PER_STEP * workload.SAMPLES_PER_PROMPT),
            "train_tokens": int(m["perf/total_num_tokens"])}


def linear_flops(shapes: list) -> int:
    """FLOPs of oneDNN's prepacked linear (rollout.pack_weights), which the profiler does not count, from its
    input shapes: (x [..., K], W [N, K], bias, attr, scalars, algorithm), or for the fused add (the `binary`
    overload, five inputs) (x, other, W, bias, attr)."""
    x, w = (shapes[0], shapes[2]) if len(shapes) == 5 else (shapes[0], shapes[1])
    rows = 1
    for size in x[:-1]:
        rows *= size
    return 2 * rows * w[0] * w[1] if len(w) == 2 else 0


def op_totals(prof) -> list[tuple[str, float, int, int]]:
    """(op, self seconds, calls, FLOPs) of every aten and oneDNN (mkldnn::) op of a profile."""
    totals: dict[str, list] = {}
    for e in prof.key_averages(group_by_input_shape=True):
        if not e.key.startswith(("aten::", "mkldnn::")):
            continue
        flops = e.flops or 0
        if e.key.startswith("mkldnn::_linear_pointwise"):
            flops = e.count * linear_flops(e.input_shapes)
        t = totals.setdefault(e.key, [0.0, 0, 0])
        t[0], t[1], t[2] = t[0] + e.self_cpu_time_total / 1e6, t[1] + e.count, t[2] + flops
    return [(k, sec, n, fl) for k, (sec, n, fl) in totals.items()]


def profile_step(trainer, step: int, path: str) -> None:
    """One more step under torch.profiler: self time of the ops by category and the top ops, and the
    share of the step's wall time spent outside any op (Python, the framework's own work)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    wall = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True) as prof:
        m = trainer.train_step(step)
    wall = time.perf_counter() - wall
    ops = op_totals(prof)
    by_cat: dict[str, float] = {}
    for key, seconds, _, _ in ops:
        kind = category(key)
        by_cat[kind] = by_cat.get(kind, 0.0) + seconds
    in_ops = sum(o[1] for o in ops)
    top = sorted(ops, key=lambda o: -o[1])[:12]
    with open(path, "w") as f:
        json.dump({"wall_s": wall, "in_ops_s": in_ops, "categories": by_cat, "skipped_frac": m.get("actor/skipped_frac", 0.0),
                   "phases": phases(m),
                   # what the matmul kernels computed and how long they took: their achieved rate at these shapes
                   "matmul_flops": sum(o[3] for o in ops if category(o[0]) == "matmul"),
                   "matmul_s": by_cat.get("matmul", 0.0),
                   **token_counts(m),
                   "top_ops": [{"op": k, "self_s": sec, "calls": n} for k, sec, n, _ in top],
                   "threads": torch.get_num_threads()}, f, indent=1)


def main() -> None:
    a = workload.runner_args(__doc__.splitlines()[0], overrides=True, profile=True)

    import torch

    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig
    from hybridrl.plan.resolve import resolve
    from hybridrl.trainer.build import build_run
    from hybridrl.trainer.rl import RLTrainer

    if a.threads:
        torch.set_num_threads(a.threads)
    tmp = tempfile.mkdtemp()
    data = os.path.join(tmp, "prompts.parquet")
    write_prompts(data, workload.PROMPTS_PER_STEP * (a.steps + 1), a.workload)  # one more step's for --profile
    total = a.steps + (1 if a.profile else 0)
    cfg = load_config(RLConfig, None, overrides(a.model, data, os.path.join(tmp, "run"), total, a.workload)
                      + (BF16 if a.bf16 else []) + a.overrides)
    run = build_run(resolve(cfg), log=lambda *_: None)
    trainer = RLTrainer(run, log=lambda *_: None)
    with open(a.out, "w") as out:
        try:
            for step in range(1, a.steps + 1):
                wall, cpu = time.perf_counter(), time.process_time()
                m = trainer.train_step(step)
                step_s = time.perf_counter() - wall
                rollout_s = m["timing_s/gen"] + m.get("timing_s/reward", 0.0)
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                out.write(json.dumps({
                    "step_s": step_s, "cpu_s": time.process_time() - cpu, "gen_s": m["timing_s/gen"],
                    "rollout_s": rollout_s, "train_s": step_s - rollout_s,
                    **token_counts(m), "peak_rss_gb": rss / 2**30,
                    "zero_std_share": m["critic/frac_zero_std_groups"], "skipped_frac": m.get("actor/skipped_frac", 0.0),
                    "score": m["critic/score/mean"], "is_weight_mean": m.get("rollout_corr/is_weight_mean"),
                    "timing": phases(m),
                }) + "\n")
                out.flush()
            if a.profile:  # after the timed steps: the profiler's overhead never reaches their records
                profile_step(trainer, a.steps + 1, a.profile)
        finally:
            run.reward.close()
            run.policy.close()


if __name__ == "__main__":
    main()

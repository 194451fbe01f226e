"""rollout.name=hf vs vllm, back to back in one invocation: rollout tokens/s and seconds per GRPO step.

    .venv/bin/python bench/rollout.py --steps 8

Runs `hybridrl train` (default GRPO step: 32 prompts x 8 samples on the arithmetic task, no
validation or checkpoints) alternately with each engine on two models:
- tiny: the bundled tiny-arith (3.5M parameters, responses of at most 8 tokens as `make train`);
- small: a random-init Qwen2 (hidden 512, 8 layers, 8 heads, intermediate 1376: 25.6M parameters)
  with the project tokenizer, responses of up to 64 tokens (random weights rarely stop early, so the
  work per step is nearly fixed).
Per run: the medians over steps after 2 warm-up steps of the step time, its generation part, the
weight-sync part (vllm) and generated tokens per second of generation; plus the whole command's
wall time (vLLM's engine start-up included). Needs `make vllm`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# each row names its dtype: `auto` precision (plan/precision_auto.py) is fp32 here unless a row sets bf16
os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workload  # noqa: E402

MODELS = {"tiny": ("tiny-arith", ["data.max_response_length=8"]),
          "small": (None, ["data.max_response_length=64", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"])}


def small_model(folder: str) -> str:
    from hybridrl.models.tiny import build_model, build_tokenizer

    tok = build_tokenizer()
    model = build_model(tok, seed=0, **workload.MODELS["small"])  # the same "small" as make bench
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def run(model_path: str, extra: list[str], engine: str, steps: int, folder: str) -> dict:
    args = [sys.executable, "-m", "hybridrl", "train", f"actor_rollout_ref.model.path={model_path}",
            f"actor_rollout_ref.rollout.name={engine}", f"trainer.total_training_steps={steps}", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "data.val_files=[]", "trainer.save_freq=0", "trainer.resume_mode=disable",
            f"trainer.default_local_dir={folder}", *extra]
    start = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True)
    wall = time.perf_counter() - start
    records = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))][2:]  # warm-up dropped
    med = lambda f: statistics.median(f(r) for r in records)  # noqa: E731
    tokens = lambda r: r["response_length/mean"] * 256  # noqa: E731  (32 prompts x 8 samples)
    return {"step_s": med(lambda r: r["timing_s/step"]), "gen_s": med(lambda r: r["timing_s/gen"]),
            "sync_s": med(lambda r: r.get("timing_s/update_weights", 0.0)),
            "gen_tok_s": med(lambda r: tokens(r) / r["timing_s/gen"]), "resp_len": med(lambda r: r["response_length/mean"]),
            "command_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--models", default="tiny,small")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            path, extra = MODELS[name]
            path = path or small_model(os.path.join(tmp, name))
            for engine in ("hf", "vllm"):
                r = run(path, extra, engine, a.steps, os.path.join(tmp, f"{name}-{engine}"))
                rows.append((name, engine, r))
                print(name, engine, r, file=sys.stderr, flush=True)
    print("| model | engine | s/step (median) | generation s | weight sync s | generated tok/s | response length "
          "| whole command s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, engine, r in rows:
        print(f"| {name} | {engine} | {r['step_s']:.2f} | {r['gen_s']:.2f} | {r['sync_s']:.3f} | {r['gen_tok_s']:.0f} | "
              f"{r['resp_len']:.1f} | {r['command_s']:.0f} |")


if __name__ == "__main__":
    main()

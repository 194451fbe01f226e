"""LoRA vs full fine-tuning on the GRPO benchmark workload (bench/workload.py), back to back.

    .venv/bin/python bench/lora.py [--model small] [--steps 4] [--rounds 2] [--rank 16] [--threads 2]

Each round runs full fine-tuning and LoRA (actor_rollout_ref.model.lora_rank, all-linear) in turn,
each in a fresh process (bench/hybridrl_grpo.py), so the two see the same machine load and each
peak RSS is its own. Prints a Markdown table: trainable parameters, AdamW state (two fp32 moments
per trainable parameter), peak RSS, and median step / generation / training seconds (step 1,
warm-up, left out).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile

# each row names its dtype: `auto` precision (plan/precision_auto.py) is fp32 here unless a row sets bf16
os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import speed  # noqa: E402
import workload  # noqa: E402


def trainable_params(path: str, rank: int) -> tuple[int, int]:
    """(all parameters, those trained with LoRA of `rank` on every linear layer)."""
    from hybridrl.models.loading import load_causal_lm
    from hybridrl.models.lora import LoraSettings, apply_lora

    module = load_causal_lm(path)
    total = sum(p.numel() for p in module.parameters())
    lora = apply_lora(module, LoraSettings(rank, 2.0 * rank, "all-linear"))
    return total, sum(p.numel() for p in lora.parameters() if p.requires_grad)


def median(records: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in records[1:] or records)


def table(results: dict[str, list[list[dict]]], trained: dict[str, int], command: str) -> str:
    lines = [f"`{command}`", "",
             "| run | trained params | AdamW state | peak RSS | step s | gen s | train s |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, rounds in results.items():
        records = [r for one in rounds for r in one[1:]]  # step 1 of each process is warm-up
        lines.append(f"| {name} | {trained[name] / 1e6:.2f}M | {8 * trained[name] / 2**20:.1f} MiB | "
                     f"{max(r['peak_rss_gb'] for one in rounds for r in one):.2f} GiB | "
                     f"{statistics.median(r['step_s'] for r in records):.2f} | "
                     f"{statistics.median(r['gen_s'] for r in records):.2f} | "
                     f"{statistics.median(r['train_s'] for r in records):.2f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="small", choices=sorted(workload.MODELS))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    tmp = tempfile.mkdtemp()
    path = speed.build_models([a.model], tmp)[a.model]["path"]
    total, lora_trained = trainable_params(path, a.rank)
    configs = {"full": [], f"lora r={a.rank}": [f"actor_rollout_ref.model.lora_rank={a.rank}",
                                                f"actor_rollout_ref.model.lora_alpha={2 * a.rank}"]}
    results: dict[str, list[list[dict]]] = {name: [] for name in configs}
    for i in range(a.rounds):  # alternating: a load change on the machine hits both alike
        for name, overrides in configs.items():
            cfg = speed.Config(name=name, label=name, runner="hybridrl", overrides=overrides)
            out, log = os.path.join(tmp, f"{i}-{len(results[name])}-{name[:4]}.jsonl"), os.path.join(tmp, "run.log")
            results[name].append(speed.run(cfg, path, a.steps, a.threads, out, log))
            print(f"round {i + 1}/{a.rounds} {name}: step {median(results[name][-1], 'step_s'):.2f}s", file=sys.stderr)
    command = "python bench/lora.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    print(table(results, {"full": total, f"lora r={a.rank}": lora_trained}, command.strip()))


if __name__ == "__main__":
    main()

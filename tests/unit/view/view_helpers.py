"""Synthetic run folders for the viewer's unit tests: metrics.jsonl, config.yaml and dumps as a run writes them."""

from __future__ import annotations

import json
import os


def write_run(folder, steps: int = 3, name: str = "exp", prompts: int = 2, n: int = 2, dump_steps=(1, 2)) -> str:
    """A run folder: `steps` metric lines (critic/score/mean = step/10, timing_s/step = 2.0, a val line at
    step 0), rollouts/<step>.jsonl with `prompts` x `n` rows, and a config.yaml naming it and its dumps."""
    folder = str(folder)
    os.makedirs(os.path.join(folder, "rollouts"), exist_ok=True)
    with open(os.path.join(folder, "config.yaml"), "w") as f:
        f.write(f"trainer:\n  experiment_name: {name}\n  rollout_data_dir: rollouts\n")
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": 0, "val-core/arith/reward/mean@1": 0.25}) + "\n")
        for s in range(1, steps + 1):
            f.write(json.dumps({"step": s, "critic/score/mean": s / 10, "actor/entropy": 1.0 / s,
                                "timing_s/step": 2.0}) + "\n")
    for s in dump_steps:
        write_dump(os.path.join(folder, "rollouts", f"{s}.jsonl"), s, prompts, n)
    return folder


def dump_row(step: int, p: int, j: int) -> dict:
    return {"step": step, "input": f"What is {p}+{p}?", "output": f"answer {p + j}", "gts": str(2 * p),
            "score": float(j == 0), "reward": float(j == 0), "data_source": "arith" if p % 2 == 0 else "gsm8k",
            "index": p, "response_length": 3 + j, "advantage": 0.5 - j}


def write_dump(path: str, step: int, prompts: int, n: int) -> None:
    with open(path, "w") as f:
        for p in range(prompts):
            for j in range(n):
                f.write(json.dumps(dump_row(step, p, j)) + "\n")

"""A sweep folder written by hand with the writers a sweep uses: sweep.yaml as the driver dumps its file,
trial.json by sweep/trial.write_trial_file, metrics.jsonl by the trainer's FileLogger."""

from __future__ import annotations

import os

import yaml

from hybridrl.sweep.trial import write_trial_file
from hybridrl.trainer.tracking import FileLogger

M = "val-core/arithmetic/reward/mean@1"
LR, ADV, CLIP = "actor_rollout_ref.actor.optim.lr", "algorithm.adv_estimator", "actor_rollout_ref.actor.clip_ratio"
SPACE = {LR: {"loguniform": [1.0e-5, 1.0e-3]}, ADV: {"choice": ["grpo", "rloo"]}, CLIP: {"uniform": [0.1, 0.3]}}

# trial: (sampled values, status, the metric at steps 0, 1, ... or None: no metrics.jsonl)
TRIALS = {
    "t_00000": ({LR: 1e-4, ADV: "grpo", CLIP: 0.2}, "finished", [0.3, 0.6, 0.5]),  # best 0.6
    "t_00001": ({LR: 1e-5, ADV: "rloo", CLIP: 0.1}, "finished", [0.3, 0.4, 0.7]),  # best 0.7: the best trial
    "t_00002": ({LR: 1e-3, ADV: "grpo", CLIP: 0.3}, "running", [0.3, 0.1]),  # cut at step 1: "stopped", best 0.3
    "t_00003": ({LR: 5e-4, ADV: "rloo", CLIP: 0.25}, "error", None),  # refused config: no metric
}


def write_sweep(folder, trials=None) -> str:
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    spec = {"space": SPACE, "metric": M, "mode": "max", "num_samples": 4, "output": folder}
    with open(os.path.join(folder, "sweep.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump(spec, f, sort_keys=False)
    for name, (sampled, status, values) in (trials or TRIALS).items():
        run_dir = os.path.join(folder, name)
        write_trial_file(run_dir, sampled, status, "actor_rollout_ref.actor.optim.lr: ..." if status == "error"
                         else None)
        if values is not None:
            logger = FileLogger(run_dir, None)
            for step, v in enumerate(values):
                logger.log({M: v, "critic/score/mean": v / 2}, step)
            logger.close()
    return folder

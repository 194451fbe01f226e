"""Small, fast GRPO runs on the arithmetic fixture data, shared by the resume and LoRA tests."""

from __future__ import annotations

import json
import os

from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import resolve
from hybridrl.trainer.build import build_run
from hybridrl.trainer.rl import RLTrainer

UNTIMED = ("timing_s/", "timing_per_token_ms/", "perf/")  # wall-clock and memory metrics differ between runs; everything else must not


def overrides(arith_data, run_dir, steps: int, *extra: str) -> list[str]:
    return [f"data.train_files={arith_data['train']}", f"data.val_files={arith_data['val']}", "data.val_max_samples=16",
            # a constant lr: the resume tests cut a run by giving it fewer steps, which changes a decaying schedule
            # (the default cosine is computed over trainer.total_training_steps), so a cut-and-resumed run could
            # not equal the uninterrupted one whatever the checkpoint holds
            "actor_rollout_ref.actor.optim.warmup_style=constant",
            "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "actor_rollout_ref.rollout.n=4",
            f"trainer.total_training_steps={steps}", "trainer.test_freq=3", "trainer.logger=[file]",
            f"trainer.default_local_dir={run_dir}", *extra]


def train(args: list[str], log=lambda *_: None, before_fit=lambda run: None):
    """(run, summary) of a whole run; `before_fit(run)` sees the built run first."""
    cfg = load_config(RLConfig, None, args)
    run = build_run(resolve(cfg), log=log)
    before_fit(run)
    return run, RLTrainer(run, log=log).fit()


def metrics(run_dir) -> list[dict]:
    """Every logged row of a run, without its timing metrics."""
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return [{k: v for k, v in r.items() if not k.startswith(UNTIMED)} for r in rows]


def cut_back(whole, cut, last: int, keep: int) -> None:
    """`cut`: a copy of the uninterrupted run's folder `whole` as a crash after step `keep`'s checkpoint leaves it
    (the checkpoint of step `last` gone, `latest` naming step `keep`): the same files a second run to that point
    would write, without the second run."""
    import shutil

    from hybridrl.trainer import checkpoint

    shutil.copytree(whole, cut)
    shutil.rmtree(os.path.join(cut, f"global_step_{last}"))
    with open(os.path.join(cut, checkpoint.LATEST), "w") as f:
        f.write(str(keep))


def resume_equals_uninterrupted(args, tmp_path) -> None:
    """`args(run_dir)`: a 4-step run saving at step 2. Run it whole in a/, copy it to b/ and there lose everything
    after step 2 (as a crash would), and run the same command again: it resumes from step 2 and logs exactly a/'s
    metrics. (A copy, not a second whole run: the same files, one run fewer.)"""
    train(args(tmp_path / "a"))
    cut_back(tmp_path / "a", tmp_path / "b", last=4, keep=2)
    lines = []
    _, summary = train(args(tmp_path / "b"), log=lines.append)
    assert summary.steps == 2 and any("resumed from step 2" in x for x in lines)
    assert metrics(tmp_path / "b") == metrics(tmp_path / "a")



class Hold:
    """Stops a run at a known point, so a test can kill or interrupt it there whatever the machine's load: a custom
    reward function (the built-in scorers, unchanged) that, while `armed` exists, waits in its first call after a
    file matching `watch` (a glob) reaches `at_least`, and writes `held` as it starts waiting. The file is a
    checkpoint's latest_checkpointed_iteration.txt (its step) or a metrics.jsonl (its lines). `release()` lets the
    run go on; an un-armed hold scores exactly as the built-in scorers do, so the uninterrupted run a test compares
    with uses the same file. (Polling for the file and signalling then raced the run: a step here takes 0.1 s, and
    on loaded cores a run had finished before the signal.)"""

    def __init__(self, folder, watch: str, at_least: int):
        folder.mkdir(parents=True, exist_ok=True)
        self.path, self.armed, self.held = folder / "hold_reward.py", folder / "armed", folder / "held"
        self.path.write_text(HOLD_REWARD.format(armed=str(self.armed), held=str(self.held), watch=str(watch),
                                                at_least=at_least))

    def overrides(self) -> dict:
        return {"custom_reward_function.path": str(self.path), "custom_reward_function.name": "compute_score"}

    def args(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.overrides().items()]

    def wait(self, proc, timeout: float = 240) -> None:
        """Until the run is held; fails with its output if it ends first."""
        import time

        deadline = time.monotonic() + timeout
        while not self.held.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)

    def arm(self) -> None:
        self.armed.touch()

    def release(self) -> None:
        self.armed.unlink(missing_ok=True)


HOLD_REWARD = '''import glob, os, time

from hybridrl.rewards.scorers import SCORERS


def _reached(path):
    try:
        with open(path) as f:
            return len(f.readlines()) if path.endswith(".jsonl") else int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if os.path.exists({armed!r}) and any(_reached(p) >= {at_least} for p in glob.glob({watch!r})):
        open({held!r}, "w").close()
        while os.path.exists({armed!r}):
            time.sleep(0.05)
    return SCORERS.get(data_source)(data_source, solution_str, ground_truth, extra_info)
'''

"""What the resume check compares, shared by its synchronous part (resume.py) and its asynchronous part
(resume_async.py): the kill simulated on a finished run's folder, the resumed run's steps, metrics, weights and
epoch boundary."""

from __future__ import annotations

import json
import math
import os
import shutil

import torch

from hybridrl.check.result import Result, failed, not_applicable, passed
from hybridrl.check.twin_run import UNTIMED, TwinRun, step_dir
from hybridrl.trainer.rl import RunSummary

FIX = ("resume does not reproduce this config's run: report it with the command line (a hybridrl bug); until "
       "fixed, a stopped run is safer restarted (trainer.resume_mode=disable) than resumed")
REL_TOL = 1e-6  # metrics: the same process, data and seeds give the same numbers; this only absorbs float printing


def as_killed(straight_dir: str, run_dir: str, steps: int) -> None:
    """`run_dir`: the uninterrupted run's folder as a kill in step `steps` leaves it, after the step's metrics line
    and during its checkpoint's save: that checkpoint only a temporary folder without its manifest, `latest`
    naming the step before, nothing of the later steps (their checkpoints and metrics lines). The
    run is deterministic (same config, seeds, data), so the steps before are what a second run would have
    written; copying them saves their training."""
    from hybridrl.trainer import checkpoint
    from hybridrl.trainer.manifest import MANIFEST

    shutil.copytree(straight_dir, run_dir, ignore=shutil.ignore_patterns("*.lock", "logs"))
    for name in os.listdir(run_dir):
        if name.startswith("global_step_") and int(name[len("global_step_"):]) > steps:
            shutil.rmtree(os.path.join(run_dir, name))
    metrics = os.path.join(run_dir, "metrics.jsonl")
    with open(metrics) as f:
        kept = [line for line in f if json.loads(line)["step"] <= steps]
    checkpoint.replace_text(metrics, "".join(kept))
    partial = os.path.join(run_dir, f".tmp_global_step_{steps}_{os.getpid()}")
    os.rename(os.path.join(run_dir, f"global_step_{steps}"), partial)
    os.remove(os.path.join(partial, MANIFEST))
    checkpoint.replace_text(os.path.join(run_dir, checkpoint.LATEST), str(steps - 1))


def resumed_the_rest(run, summary: RunSummary, run_dir: str, last_ckpt: int, steps: int) -> Result:
    """The resumed run started from the last checkpoint and trained every step after it, to a whole checkpoint."""
    point, left = run.resume, steps - last_ckpt
    if point is None:
        return failed("the resumed run started over: it found no checkpoint to resume from",
                      f"{run_dir} holds global_step_{last_ckpt}", fix=FIX)
    wrong = []
    if summary.steps != left or step_dir(run_dir, steps) is None:
        wrong.append(f"the resumed run trained {summary.steps} step(s) and exited where {left} remained (to step "
                     f"{steps}; global_step_{steps} {'missing' if step_dir(run_dir, steps) is None else 'written'})")
    if point.step != last_ckpt:
        wrong.append(f"it took up at step {point.step + 1}, not step {last_ckpt + 1}: its resume point says step "
                     f"{point.step}, the last checkpoint is step {last_ckpt}")
    if wrong:
        return failed("; ".join(wrong), f"resume point {point.path} (step {point.step}, epoch {point.epoch}, sample "
                                        f"{point.sample})", fix=FIX)
    trained = f"step {steps}" if left == 1 else f"steps {last_ckpt + 1}-{steps}"
    return passed(f"resumed from step {point.step} (epoch {point.epoch}, sample {point.sample}) and trained {trained}")


def metric_rows(run_dir: str) -> dict[int, dict]:
    """{step: its metrics without the timing ones} of a run's metrics.jsonl; a step logged twice is a ValueError."""
    rows: dict[int, dict] = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row["step"] in rows:
                raise ValueError(f"{run_dir}/metrics.jsonl logs step {row['step']} twice")
            rows[row["step"]] = {k: v for k, v in row.items() if not k.startswith(UNTIMED)}
    return rows


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)
    return a == b


READING_ORDER = ("prompt_length/", "response_length/", "critic/score/", "critic/rewards/", "critic/advantages/")


def reading_order(key: str) -> tuple[int, str]:
    """The data's metrics before the update's: the first difference named is the nearest to its cause."""
    return next((i for i, p in enumerate(READING_ORDER) if key.startswith(p)), len(READING_ORDER)), key


def same_metrics(straight_dir: str, resumed_dir: str, steps: int) -> Result:
    """Steps 1..steps log the same metrics (timings aside) in both folders; else the first step and key that differ."""
    a = metric_rows(straight_dir)
    try:
        b = metric_rows(resumed_dir)
    except ValueError as e:  # the resumed run kept the killed step's line and logged the step again
        return failed(f"after the resume {e}: the line written before the kill was not dropped", fix=FIX)
    wanted = list(range(1, steps + 1))
    if sorted(b) != wanted:
        return failed(f"the resumed run's metrics.jsonl has steps {sorted(b)}, the uninterrupted run's {sorted(a)}",
                      fix=FIX)
    for step in wanted:
        keys = sorted(set(a[step]) | set(b[step]), key=reading_order)
        bad = [k for k in keys if not _same(a[step].get(k), b[step].get(k))]
        if bad:
            k = bad[0]
            return failed(f"step {step} differs after the resume: {k} = {a[step].get(k)} uninterrupted, "
                          f"{b[step].get(k)} resumed", f"{len(bad)} of {len(keys)} metrics of step {step} differ: "
                          f"{', '.join(bad[:6])}{' ...' if len(bad) > 6 else ''}", fix=FIX)
    return passed(f"the same {sum(len(a[s]) for s in wanted)} metric values in steps 1-{steps} (timings aside)")


def _tensors(folder: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, name)))
    return out


def weight_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[float, str, float]:
    """(max |a - b|, the tensor where it is, that difference in units of the tensor's dtype resolution at its
    largest weight: eps x max|a|), over the tensors both hold."""
    worst = (0.0, "", 0.0)
    for name in sorted(set(a) & set(b)):
        x, y = a[name].float(), b[name].float()
        gap = float((x - y).abs().max()) if x.numel() else 0.0
        if gap > worst[0]:
            eps = torch.finfo(a[name].dtype).eps if a[name].is_floating_point() else 1.0
            scale = eps * max(float(x.abs().max()), 1e-12)
            worst = (gap, name, gap / scale)
    return worst


def same_weights(straight: TwinRun, resumed_dir: str) -> Result:
    """The last checkpoint's weights (actor, and critic where there is one) are the same in both folders, to
    within one step of their dtype's resolution."""
    ours, theirs = step_dir(straight.run_dir, straight.steps), step_dir(resumed_dir, straight.steps)
    if theirs is None:
        return failed(f"no whole global_step_{straight.steps} in the resumed run's folder: its final weights "
                      "cannot be compared", fix=FIX)
    details = []
    for role in ("actor", "critic"):
        if not os.path.isdir(os.path.join(ours, role)):
            continue
        a, b = _tensors(os.path.join(ours, role)), _tensors(os.path.join(theirs, role))
        if set(a) != set(b):
            return failed(f"the resumed run's {role} holds other tensors: {sorted(set(a) ^ set(b))[:3]}", fix=FIX)
        gap, name, steps_of_eps = weight_gap(a, b)
        if steps_of_eps > 1.0:
            return failed(f"the final {role} weights differ after the resume: max |difference| {gap:.3g} in {name} "
                          f"({steps_of_eps:.0f}x its dtype's resolution)", fix=FIX)
        details.append(f"{role}: {len(a)} tensors, max |difference| {gap:.3g}")
    return passed(f"the same final weights ({'; '.join(details)})")


def epoch_boundary(run_dir: str, last_ckpt: int) -> Result:
    """Whether the resume point is an epoch boundary (the sampler's epoch changes in the next step), for the report."""
    def epoch(step: int):
        with open(os.path.join(run_dir, f"global_step_{step}", "trainer_state.json")) as f:
            return json.load(f)["sampler"]["epoch"]

    before, after = epoch(last_ckpt), epoch(last_ckpt + 1)
    if after != before:
        return passed(f"step {last_ckpt + 1}, the first resumed step, starts epoch {after}: an epoch boundary")
    return not_applicable(f"no epoch boundary at the resume point (step {last_ckpt + 1} stays in epoch {before}: the "
                          "data has more prompts than the twin's 2 steps take)")

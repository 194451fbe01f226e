"""The resume check's async part: with a rollout pool configured, the twin trains on the real async dataflow
(trainer.backend=ray, one trainer worker and one rollout worker, the user's async_training keys) and the README's
in-flight buffer policy ("Asynchronous training", Resume) is proved on it:

- the batches in flight at the kill are dropped: the first resumed batch is regenerated from the checkpoint's
  weights, pushed as version = its step (lag 0), and every later one is generated as the bound allows from
  there (version max(checkpoint, the uninterrupted run's version): "from then on, as usual");
- the resumed steps' prompts are the uninterrupted run's (the dumped rollouts' inputs, trainer.rollout_data_dir),
  and where a batch has the same version in both runs, the same responses (so the same draw keys);
- where every resumed batch has the uninterrupted run's version (staleness 0 with a push each step), the run
  equals the uninterrupted one: the same metrics and final weights.

The uninterrupted run trains ASYNC_STEPS steps (one more than the synchronous part, so that a step follows the
first resumed one); the killed run is its folder as a kill in step KILL_STEP leaves it (resume.as_killed), run
again with the same config. Both share one local Ray instance (or the caller's, when one is running), and
generate with the hf engine (HF_ONLY).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from hybridrl.check.resume_proofs import (FIX, as_killed, epoch_boundary, metric_rows, resumed_the_rest,
                                          same_metrics, same_weights)
from hybridrl.check.result import Result, failed, not_applicable, passed
from hybridrl.check.twin_run import TwinRun, fresh_dir, run_changes, train
from hybridrl.errors import HybridRLError

LABEL = "async rollouts"
# a vLLM engine starts in ~25 s on a CPU, and these runs would start four (the rollout worker's and the trainer's
# validation engine, twice): over two minutes for what the queue alone decides
HF_ONLY = ("async rollouts: these runs generate with the hf engine (the in-flight policy is the trainer's queue, "
           "trainer/async_rollout.py, the same for every engine; the sampling check covers your engine's log-probs)")
ASYNC_STEPS, KILL_STEP = 4, 3  # resumed from step 2's checkpoint: step 3 starts epoch 1, step 4 follows "as usual"
POOL = {"trainer__backend": "ray", "trainer__n_gpus_per_node": 1, "trainer__nnodes": 1, "rollout__n_gpus_per_node": 1,
        "rollout__nnodes": 1, "ray_kwargs__ray_init__address": "null"}


def async_part(ctx) -> list[Result]:
    """The async part's results (each a detail of the resume check), or one n/a where Ray cannot start."""
    try:
        import ray  # noqa: F401
    except ImportError as e:
        return [not_applicable(f"{LABEL}: the in-flight buffer policy needs Ray, which does not import here ({e}): "
                               "install it (pip install 'ray[default]') to check it")]
    start = time.perf_counter()
    straight_dir, killed_dir = fresh_dir(ctx.work_dir, f"async-straight-{ASYNC_STEPS}"), fresh_dir(ctx.work_dir,
                                                                                                   "async-killed")
    gen = fresh_dir(ctx.work_dir, "async-rollouts")  # one folder: a resume refuses another rollout_data_dir
    run_plan = ctx.run_config(straight_dir, ASYNC_STEPS, **pool_changes(ctx, gen))
    try:
        return trained(ctx, run_plan, straight_dir, killed_dir, gen, start)
    except RayUnavailable as e:
        return [not_applicable(f"{LABEL}: the in-flight buffer policy needs a local Ray instance, which did not start "
                               f"here ({e})")]


def trained(ctx, run_plan, straight_dir: str, killed_dir: str, gen: str, start: float) -> list[Result]:
    """The uninterrupted async run, then its folder as killed in KILL_STEP resumed, on one Ray instance; verdicts."""
    cfg = run_plan.config
    with ray_cluster(workers(cfg)):
        run, summary = train(run_plan, [])
        straight = TwinRun(straight_dir, ASYNC_STEPS, run, summary, ctx.twin(), time.perf_counter() - start)
        uninterrupted = dumps(gen)
        as_killed(straight_dir, killed_dir, KILL_STEP)
        for step in range(KILL_STEP + 1, ASYNC_STEPS + 1):  # the kill came before these steps' rollouts
            os.remove(os.path.join(gen, f"{step}.jsonl"))
        try:
            run, summary = train(ctx.run_config(killed_dir, ASYNC_STEPS, **pool_changes(ctx, gen)), [])
        except HybridRLError as e:  # e.g. the rollout queue's prompts drifted from the trainer's sampler
            return [failed(f"async rollouts: the resumed run stopped: {str(e).splitlines()[0]}", fix=FIX)]
    parts = labelled(verdicts(straight, killed_dir, run, summary, cfg.async_training.partial_rollout, uninterrupted,
                              dumps(gen)))
    parts[-1].details.append(f"async rollouts: {time.perf_counter() - start:.0f} s on Ray (1 trainer + 1 rollout "
                             f"worker, {ASYNC_STEPS} steps, then steps {KILL_STEP}-{ASYNC_STEPS} again)")
    if ctx.cfg.actor_rollout_ref.rollout.name != "hf":
        parts[-1].details.append(HF_ONLY)
    return parts


def labelled(parts: list[Result]) -> list[Result]:
    """Each summary says it is of the async run (the check's synchronous part reports the same kinds of lines)."""
    for p in parts:
        if not p.summary.startswith(LABEL):
            p.summary = f"{LABEL}: {p.summary}"
    return parts


def pool_changes(ctx, gen: str) -> dict[str, object]:
    """The async twin run's key changes: the stand-in reward, the user's async_training keys kept, a rollout pool
    of one worker beside one trainer worker (a local Ray), each step's rollouts dumped to `gen`; the hf engine."""
    return {**run_changes(ctx, pool=True), **POOL, "trainer__rollout_data_dir": gen,
            "actor_rollout_ref__rollout__name": "hf"}


def workers(cfg) -> int:
    from hybridrl.plan.placement import pool_sizes

    return sum(pool_sizes(cfg).values())


class RayUnavailable(Exception):
    """ray.init failed: the async part is not applicable here (the message says why)."""


@contextmanager
def ray_cluster(cpus: int) -> Iterator[None]:
    """A local Ray instance of `cpus` CPUs (one per worker, one torch thread each: both runs compute alike) for both
    runs, started as RayRoles starts one and shut down after; a running instance (the caller's) is used as it is."""
    import ray

    from hybridrl.distributed.cluster import init_ray
    from hybridrl.library_logs import adopt_logger

    if ray.is_initialized():
        yield
        return
    adopt_logger("ray")  # Ray's notes (token auth, ...) not between the report's lines, as `train` routes them
    try:
        init_ray(None, num_cpus=cpus, log_to_driver=False)
    except Exception as e:  # noqa: BLE001  whatever stops Ray here stops the async part, not the check
        raise RayUnavailable(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    try:
        yield
    finally:
        ray.shutdown()


def verdicts(straight: TwinRun, killed_dir: str, run, summary, partial: bool, ga: dict[int, list[dict]],
             gb: dict[int, list[dict]]) -> list[Result]:
    """Each part of the policy as one result: the steps trained, the versions, the prompts and draws, and either
    the same metrics and weights (every resumed batch of the uninterrupted run's version) or a note why not."""
    ckpt = KILL_STEP - 1
    a = metric_rows(straight.run_dir)
    try:
        b = metric_rows(killed_dir)
    except ValueError as e:  # a step logged twice: same_metrics' message
        return [failed(f"after the resume {e}: the line written before the kill was not dropped", fix=FIX)]
    parts = [resumed_the_rest(run, summary, killed_dir, ckpt, ASYNC_STEPS),
             in_flight_policy(a, b, ckpt, ASYNC_STEPS, partial)]
    if parts[1].status == "fail":  # the versions are wrong: what follows would only repeat it
        return parts
    parts.append(same_prompts(ga, gb, a, b, ckpt, ASYNC_STEPS, partial))
    if versions_equal(a, ckpt, ASYNC_STEPS) and not partial:
        parts += [same_metrics(straight.run_dir, killed_dir, ASYNC_STEPS), same_weights(straight, killed_dir)]
    else:
        fresher = [f"step {k} (version {expected_version(a[k], ckpt)}, uninterrupted {batch_version(a[k])})"
                   for k in range(ckpt + 1, ASYNC_STEPS + 1) if expected_version(a[k], ckpt) != batch_version(a[k])]
        why = f"it trains {', '.join(fresher)} on fresher batches" if fresher else "partial rollouts: timing decides"
        parts.append(passed(f"metrics and weights are not compared: the resumed run differs from the uninterrupted "
                            f"one by design ({why})"))
    parts.append(epoch_boundary(straight.run_dir, ckpt))
    return parts


def batch_version(row: dict) -> int:
    """The version (optimizer step of the weights) of a step's batch: step - 1 - its lag (async/staleness_max: with
    partial rollouts, its oldest token's)."""
    return row["step"] - 1 - int(row["async/staleness_max"])


def expected_version(straight_row: dict, ckpt: int) -> int:
    """The policy's version of a resumed batch: the pushes of the uninterrupted run before the checkpoint are
    replaced by one of the checkpoint's weights (version ckpt), so a batch the uninterrupted run generated from an
    older push is generated from that one; a later push's batch is as it was."""
    return max(ckpt, batch_version(straight_row))


def versions_equal(a: dict[int, dict], ckpt: int, steps: int) -> bool:
    """Every resumed batch has the uninterrupted run's version (staleness 0, trigger 1, say): the runs must equal."""
    return all(expected_version(a[k], ckpt) == batch_version(a[k]) for k in range(ckpt + 1, steps + 1))


def in_flight_policy(a: dict[int, dict], b: dict[int, dict], ckpt: int, steps: int, partial: bool) -> Result:
    """The README's versions on resume, from the metrics of the uninterrupted (`a`) and resumed (`b`) runs: the
    resumed run pushes version ckpt (async/version at step ckpt + 1), its first batch has lag 0 (the batch in
    flight at the checkpoint dropped), and each later one the version expected_version gives (with partial
    rollouts a push may reach a generation in flight, so that version or newer)."""
    first = ckpt + 1
    missing = [k for k in range(first, steps + 1) if k not in b or "async/staleness_max" not in b[k]]
    if missing:
        return failed(f"async rollouts: the resumed run logged no async/staleness_max for step(s) {missing}: it did "
                      "not train them on the rollout pool", fix=FIX)
    pushed = int(b[first]["async/version"])
    if pushed != ckpt:
        return failed(f"async rollouts, step {first}: the resumed run pushed version {pushed} at its start, not the "
                      f"checkpoint's step {ckpt} (README: it pushes the checkpoint's weights, version = its step)",
                      fix=FIX)
    lag = int(b[first]["async/staleness_max"])
    if lag != 0:
        return failed(f"async rollouts, step {first}: the first resumed batch has lag {lag} (version "
                      f"{batch_version(b[first])}), not 0: the batch in flight at the kill was not dropped and "
                      f"regenerated from the checkpoint's weights (version {ckpt})", fix=FIX)
    for k in range(first + 1, steps + 1):
        want, got = expected_version(a[k], ckpt), batch_version(b[k])
        if got != want and not (partial and got > want):
            return failed(f"async rollouts, step {k}: after the first resumed batch, the batch has version {got} (lag "
                          f"{k - 1 - got}), where the staleness bound from the checkpoint's push gives version {want} "
                          f"(lag {k - 1 - want}; the uninterrupted run's: lag {k - 1 - batch_version(a[k])})", fix=FIX)
    was = batch_version(a[first])
    dropped = (f"the batch of step {first} in flight at step {ckpt}'s checkpoint (version {was}) was dropped and "
               f"regenerated from the checkpoint's weights" if was != ckpt else
               f"step {first}'s batch was regenerated from the checkpoint's weights (version {ckpt}, as in the "
               f"uninterrupted run)")
    later = ", ".join(f"step {k} lag {int(b[k]['async/staleness_max'])} (uninterrupted "
                      f"{int(a[k]['async/staleness_max'])})" for k in range(first + 1, steps + 1))
    return passed(f"async rollouts: the resumed run pushed version {ckpt} (the checkpoint's step); {dropped}: lag 0",
                  *([f"from then on as usual: {later}"] if later else []))


def dumps(folder: str) -> dict[int, list[dict]]:
    """{step: its dumped rollouts (trainer.rollout_data_dir `folder`), in row order}."""
    out = {}
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            out[int(name.split(".")[0])] = [json.loads(line) for line in f]
    return out


def same_prompts(ga: dict[int, list[dict]], gb: dict[int, list[dict]], a: dict[int, dict], b: dict[int, dict],
                 ckpt: int, steps: int, partial: bool) -> Result:
    """Each resumed step's rollouts are of the uninterrupted run's prompts (dataset row and text, row by row); where
    its batch has the same version in both runs, they are the same responses: the same draw keys."""
    same_draws = []
    for k in range(ckpt + 1, steps + 1):
        rows_a, rows_b = ga.get(k, []), gb.get(k, [])
        if not rows_a or not rows_b:
            which = "the resumed" if rows_a else "the uninterrupted"
            return failed(f"async rollouts, step {k}: no dumped rollouts in {which} run to compare prompts with",
                          fix=FIX)
        prompt = first_difference(rows_a, rows_b, ("index", "input"))
        if prompt is not None:
            return failed(f"async rollouts, step {k}: the resumed run generated for other prompts than the "
                          f"uninterrupted run ({prompt}): prompts must depend only on the sampler and the step",
                          fix=FIX)
        if batch_version(a[k]) == batch_version(b[k]) and not partial:
            response = first_difference(rows_a, rows_b, ("output",))
            if response is not None:
                return failed(f"async rollouts, step {k}: the same prompts and weights (version {batch_version(a[k])})"
                              f" gave other responses ({response}): the draw keys are not the uninterrupted run's",
                              fix=FIX)
            same_draws.append(k)
    steps_text = f"steps {ckpt + 1}-{steps}" if steps > ckpt + 1 else f"step {steps}"
    draws = (f"; the same responses in step(s) {', '.join(map(str, same_draws))} (same weights' version): the same "
             "draw keys" if same_draws else "")
    return passed(f"async rollouts: {steps_text} generated for the uninterrupted run's prompts, row for row{draws}")


def first_difference(rows_a: list[dict], rows_b: list[dict], keys: tuple[str, ...]) -> Optional[str]:
    """'row i: key a vs b' of the first row where two dumps differ in `keys`, else None."""
    if len(rows_a) != len(rows_b):
        return f"{len(rows_b)} rows, uninterrupted {len(rows_a)}"
    for i, (x, y) in enumerate(zip(rows_a, rows_b)):
        for key in keys:
            if x.get(key) != y.get(key):
                return f"row {i}: {key} {y.get(key)!r:.60} resumed, {x.get(key)!r:.60} uninterrupted"
    return None

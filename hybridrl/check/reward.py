"""The `reward` check: the run's own reward manager (hybridrl/trainer/build.py `reward_manager`: the same scorers, pool,
timeout and on_error) scores real training rows. A row's reference solution (extra_info.answer, as verl's GSM8K
preprocessing keeps it) is the answer a perfect policy writes, so it must out-score an empty response; scores
must be finite and the same twice; a call must fit reward_model.timeout_s; and a reward function returning NaN,
None or a string must be refused (an error, or on_error=zero's counted 0), never trained on. And the real
model's own answers to a few rows must score above an empty response on some (reward_answers.py): else the run
has nothing to learn from.

A reward model is scored by the shrunk twin of its folder: its random head gives arbitrary scores, so only
the finite and deterministic parts apply to it.
"""

from __future__ import annotations

import copy
import math
import os
import time
from typing import Any, Callable, Optional

import torch

from hybridrl.check.context import CheckContext
from hybridrl.check.data import reference_solution, run_rows, spread
from hybridrl.check.registry import check
from hybridrl.check.rollouts import rollout_of
from hybridrl.check.result import FAIL, PASS, Result, combine, failed, not_applicable, passed
from hybridrl.errors import HybridRLError

SAMPLE_ROWS = 16  # training rows scored (an even sample): each with its reference solution and an empty response
TIME_MARGIN = 2.0  # a call within 2x of its limit on the data's own solutions times out on longer responses
# texts the seeded wrapper answers with a bad return instead of calling the user's function
SEEDED = {"seeded return: nan": float("nan"), "seeded return: none": None, "seeded return: string": "1.0"}
EXAMPLE_CHARS = 60


def _span(values: list[float]) -> str:
    """'1' or '0..1': the range of some scores."""
    return f"{min(values):g}" if min(values) == max(values) else f"{min(values):g}..{max(values):g}"


# ---- what is scored -------------------------------------------------------------------------------------
class Sample:
    """The scored rows and their responses: each row's reference solution (where it has one), then one empty
    response per row (the model ending at once)."""

    def __init__(self, rows: list[tuple[int, dict]]):
        self.rows = rows
        self.refs = [(k, ref) for k, (_, row) in enumerate(rows) if (ref := reference_solution(row))]
        self.texts = [ref for _, ref in self.refs] + ["" for _ in rows]
        self.row_of = [k for k, _ in self.refs] + list(range(len(rows)))  # response -> its row in `rows`

    def split(self, scores: list[float]) -> tuple[list[float], list[float]]:
        """(the reference solutions' scores, the empty responses' scores [one per row])."""
        return scores[:len(self.refs)], scores[len(self.refs):]


def scoring_config(ctx: CheckContext, **changes: Any):
    """The user's config for scoring here: a reward model swapped for its shrunk twin, on this machine's CPU.
    `changes`: section -> {key: value} set on top (e.g. a seeded custom_reward_function)."""
    cfg = copy.deepcopy(ctx.cfg)
    rm = cfg.reward_model
    if rm.enable and rm.model.path:
        rm.model.path = ctx.twin(rm.model.path, "sequence_score")
        cfg.trainer.device = "cpu"
    for section, values in changes.items():
        for key, value in values.items():
            setattr(getattr(cfg, section), key, value)
    return cfg


def reward_manager(cfg, tokenizer):
    """The reward manager the run builds from `cfg` (trainer/build.py), so that what is proved here is what
    the run does: its pool, worker count, timeout and on_error."""
    from hybridrl.trainer.build import reward_manager

    return reward_manager(cfg, tokenizer)


# ---- the reference solution scores the maximum, an empty response the minimum ----------------------------
def _reference(sample: Sample, scores: list[float], random_rm: bool, ctx: CheckContext) -> Result:
    if random_rm:
        return not_applicable("reference vs empty: a reward model alone scores, and its twin's random head gives "
                              "arbitrary scores")
    ref_scores, empty = sample.split(scores)
    if not sample.refs:
        return not_applicable("reference vs empty: no row carries a reference solution (extra_info.answer); an "
                              f"empty response scores {_span(empty)}")
    low = [(k, s) for (k, _), s in zip(sample.refs, ref_scores) if s <= empty[k]]
    facts = f"reference solutions score {_span(ref_scores)}, an empty response {_span(empty)} ({len(sample.refs)} rows)"
    if not low:
        below = sum(s < max(ref_scores) for s in ref_scores)
        note = [f"{below} reference solutions score below the best ({max(ref_scores):g})"] if below else []
        return passed("every reference solution scores above an empty response", facts, *note)
    k, s = low[0]
    index, row = sample.rows[k]
    ref = reference_solution(row) or ""
    truth = (row.get("reward_model") or {}).get("ground_truth")
    crf = ctx.cfg.custom_reward_function
    scorer = f"custom_reward_function {crf.path}:{crf.name}" if crf.path else \
        f"the {row[ctx.cfg.data.reward_fn_key]!r} scorer"
    return failed(f"the reference solution of {len(low)}/{len(sample.refs)} rows scores no more than an empty "
                  f"response ({s:g} vs {empty[k]:g}): {scorer} does not reward a correct answer written as the data "
                  "writes it", facts,
                  f"first: data.train_files row {index}, ground truth {truth!r}, reference ending "
                  f"{ref[-EXAMPLE_CHARS:]!r}",
                  fix="make the reward function read the answer format the prompts ask for (and the reference "
                      "solutions use), or change the prompts' instruction to the format it reads")


# ---- finite and deterministic ---------------------------------------------------------------------------
def _score_twice(manager, rollout) -> tuple[Optional[list], Optional[Result]]:
    """The manager's two scorings of the same rollout, or the ✗ of a scorer that fails on real rows."""
    try:
        return [manager.score(rollout), manager.score(rollout)], None
    except HybridRLError as e:  # reward_model.on_error=raise: the run would stop at this step
        return None, failed(f"scoring real rows fails: {str(e).splitlines()[0][:400]}",
                            fix="fix the reward function (it must return a finite float for any response)")


def _finite_deterministic(outs: list, sample: Sample) -> Result:
    first, second = outs
    bad = [i for i in range(len(sample.texts)) if bool(first.errors[i]) or not torch.isfinite(first.scores[i])]
    if bad:
        i = bad[0]
        why = first.details[i].get("error", f"score {first.scores[i].item()}")
        return failed(f"the scorer failed on {len(bad)} of {len(sample.texts)} responses to real rows (the run scores "
                      f"them 0 under reward_model.on_error=zero)",
                      f"first: response {sample.texts[i][:EXAMPLE_CHARS]!r}: {why}",
                      fix="fix the reward function (it must return a finite float for any response)")
    differ = [i for i in range(len(sample.texts)) if first.scores[i].item() != second.scores[i].item()]
    if differ:
        i = differ[0]
        return failed(f"{len(differ)} of {len(sample.texts)} responses scored differently twice",
                      f"first: response {sample.texts[i][:EXAMPLE_CHARS]!r}: {first.scores[i].item():g} then "
                      f"{second.scores[i].item():g}",
                      fix="make the reward function deterministic (no random draws, clocks or state kept between "
                          "calls)")
    return passed(f"{len(sample.texts)} scores are finite and the same twice")


# ---- a call fits reward_model.timeout_s -----------------------------------------------------------------------
def _call_seconds(manager, rollout, texts: list[str]) -> tuple[list[float], bool]:
    """Wall seconds of each call of the run's scoring function on `texts` in this process (a batched function:
    one call for all), and whether one ran past reward_model.timeout_s (then it was stopped there)."""
    from hybridrl.rewards.pool import ScorerTimeout, alarm, score_batch, score_one

    p, ref, limit = rollout.prompts, manager.pool.ref, manager.pool.timeout_s
    fn = ref.resolve()
    calls: list[Callable[[], Any]] = [lambda: score_batch(p.data_source, texts, p.ground_truth, p.extra_info, fn)] \
        if ref.batched else [lambda i=i: score_one(p.data_source[i], texts[i], p.ground_truth[i], p.extra_info[i], fn)
                             for i in range(len(texts))]
    seconds = []
    for call in calls:
        start = time.perf_counter()
        try:
            with alarm(limit):
                call()
        except ScorerTimeout:
            return seconds + [time.perf_counter() - start], True
        seconds.append(time.perf_counter() - start)
    return seconds, False


def _timing(ctx: CheckContext, manager, rollout, sample: Sample) -> Result:
    cfg = ctx.cfg
    limit, batched = manager.pool.timeout_s, manager.pool.ref.batched
    batch = (cfg.data.gen_batch_size or cfg.data.train_batch_size) * cfg.actor_rollout_ref.rollout.n
    seconds, timed_out = _call_seconds(manager, rollout, sample.texts)
    per_response = sum(seconds) / len(sample.texts)
    # what timeout_s bounds: one response's call (naive, dapo), or the one call for the whole batch (batch)
    need = per_response * batch if batched else max(seconds)
    what = f"the batched call for {batch} responses (train_batch_size x rollout.n) takes ~{need:.2f}s" if batched \
        else f"the slowest call takes {need * 1000:.1f} ms"
    workers = max(1, cfg.reward_model.num_workers)
    facts = (f"{per_response * 1000:.2f} ms per response: ~{per_response * batch / (1 if batched else workers):.1f}s "
             f"of scoring per step of {batch} responses")
    if timed_out or need * TIME_MARGIN > limit:
        stopped = " (it was stopped there)" if timed_out else ""
        enough = math.ceil(max(need, limit if timed_out else 0.0) * TIME_MARGIN * 2 * 10) / 10  # 0.1 s steps
        return failed(f"{what}{stopped}, not within half of reward_model.timeout_s={limit:g}", facts,
                      fix=f"set reward_model.timeout_s={enough:g} or make the reward function faster")
    return passed(f"{what}, within reward_model.timeout_s={limit:g}", facts)


# ---- NaN, None and string returns are refused --------------------------------------------------------------------
def seeded_returns(path: Optional[str], name: str, batched: bool) -> Callable[..., Any]:
    """The user's reward function (or the built-in scorers), answering a SEEDED text with its bad value."""
    from hybridrl.rewards.custom import load_function
    from hybridrl.rewards.scorers import SCORERS

    inner = load_function(path, name) if path else None

    def one(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        if solution_str in SEEDED:
            return SEEDED[solution_str]
        return (inner or SCORERS.get(data_source))(data_source, solution_str, ground_truth, extra_info=extra_info,
                                                   **kwargs)

    def batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
        keep = [i for i, t in enumerate(solution_strs) if t not in SEEDED]
        lists = [[values[i] for i in keep] for values in (data_sources, solution_strs, ground_truths, extra_infos)]
        values = list(inner(data_sources=lists[0], solution_strs=lists[1], ground_truths=lists[2],
                            extra_infos=lists[3], **kwargs)) if keep else []
        scored = dict(zip(keep, values))
        return [scored[i] if i in scored else SEEDED[t] for i, t in enumerate(solution_strs)]

    return batch if batched else one


def _seeded_file(ctx: CheckContext) -> str:
    """A reward-function file wrapping the configured one (custom_reward_function, else the built-ins)."""
    crf, batched = ctx.cfg.custom_reward_function, ctx.cfg.reward_model.reward_manager == "batch"
    path = os.path.join(ctx.work_dir, "reward", "seeded_returns.py")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    inner = os.path.abspath(crf.path) if crf.path else None
    with open(path, "w") as f:
        f.write("# written by `hybridrl check`: the run's reward function, with seeded bad returns\n"
                "from hybridrl.check.reward import seeded_returns\n\n"
                f"compute_score = seeded_returns({inner!r}, {crf.name!r}, {batched!r})\n")
    return path


def _refused(manager, rollout, marker: str) -> Optional[str]:
    """None when the manager refuses the seeded return of response 1; else what it did with it."""
    try:
        out = manager.score(rollout)
    except HybridRLError as e:  # on_error=raise: refused when the message names the seeded response
        return None if marker in str(e) else f"it raised about another response: {str(e).splitlines()[0][:200]}"
    score = out.scores[1].item()
    if bool(out.errors[1]) and score == 0.0:
        return None  # on_error=zero: scored 0 and counted in reward/errors
    return f"the run trains on score {score!r}" + ("" if bool(out.errors[1]) else " with no error counted")


def _refusal(ctx: CheckContext, sample: Sample) -> Result:
    from hybridrl.config.validate import needs_ground_truth

    if not needs_ground_truth(ctx.cfg):
        return not_applicable("bad returns: a reward model alone scores (reward_model.rule_weight=0)")
    cfg = scoring_config(ctx, custom_reward_function={"path": _seeded_file(ctx)}, reward_model={"enable": False})
    manager = reward_manager(cfg, ctx.tokenizer)
    row, normal = sample.rows[0][1], sample.texts[0]
    accepted = []
    try:
        for marker, value in SEEDED.items():
            rollout = rollout_of(ctx.tokenizer, [row, row], [normal, marker], ctx.cfg.data.prompt_key,
                                 ctx.cfg.data.reward_fn_key)
            what = _refused(manager, rollout, marker)
            if what:
                accepted.append(f"a {value!r} return: {what}")
    finally:
        manager.close()
    if accepted:
        return failed(f"hybridrl's reward manager accepts {'; '.join(accepted)}",
                      fix="this is a hybridrl bug (hybridrl/rewards/): please report it")
    return passed(f"NaN, None and string returns are refused (reward_model.on_error={ctx.cfg.reward_model.on_error})")


@check("reward")
def reward_check(ctx: CheckContext) -> Result:
    """The run's reward manager, on real training rows: each row's reference solution scores above an empty
    response, scores are finite and the same twice, a call fits reward_model.timeout_s, and a NaN, None or
    string return is refused, never trained on; and the real model's own answers to a few training prompts score
    above an empty response on at least one (when its weights are small enough to sample here).

    With a reward model, its shrunk twin scores (random: only finite and deterministic apply to it)."""
    from hybridrl.check.reward_answers import own_answers

    train = run_rows(ctx, "train")
    if train.error or not train.rows:
        return not_applicable("no training rows to score (see data)")
    with_ref = [r for r in train.rows if reference_solution(r[1])]
    sample = Sample(spread(with_ref or train.rows, SAMPLE_ROWS))
    d = ctx.cfg.data
    try:
        rollout = rollout_of(ctx.tokenizer, [sample.rows[k][1] for k in sample.row_of], sample.texts, d.prompt_key,
                             d.reward_fn_key)
    except Exception as e:  # the chat template fails on these rows: the data check names them
        return failed(f"the rows' prompts do not render with the chat template ({type(e).__name__}); see data",
                      fix="fix the rows' messages or the model's chat template")
    manager = reward_manager(scoring_config(ctx), ctx.tokenizer)
    try:
        outs, failure = _score_twice(manager, rollout)
        if failure:
            return failure
        rule = outs[0].extras.get("rule_score", outs[0].scores) if manager.use_rules else None
        parts = [_reference(sample, rule.tolist() if rule is not None else [], rule is None, ctx),
                 _finite_deterministic(outs, sample)]
        parts.append(_timing(ctx, manager, rollout, sample) if manager.use_rules else
                     not_applicable("timeout: a reward model alone scores (no rule function is called)"))
        answers = own_answers(ctx, manager, train.rows) if parts[1].status != FAIL else \
            not_applicable("the model's own answers: the scorer fails or varies on real rows (above)")
    finally:
        manager.close()
    parts += [_refusal(ctx, sample), answers]
    return combine(parts, "reference solutions out-score empty responses; scores finite, deterministic, in time; "
                          "bad returns refused" + ("; the model's own answers score" if answers.status == PASS else ""))

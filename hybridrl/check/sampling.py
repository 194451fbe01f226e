"""The `sampling` check: the rollout engine's per-token log-probs are of the distribution its engine documents,
agree with the trainer's log-prob pass under the run's own temperature, top-p and top-k, and where they differ
the configured rollout correction accounts for it.

On the twin (sharpened: check/twin_policy.py), the run's engine samples responses to real prompts; the trainer's
log-prob pass (Policy.log_probs, the π_old of the update) scores the same tokens; and an fp32 forward of the same
weights gives the log-probs of each candidate distribution the engine might report, computed here from their
definitions: π at temperature T (what the trainer computes), π at T after top-k/top-p (what is sampled from:
top-k, Fan et al. 2018; nucleus, Holtzman et al. 2020), π at temperature 1. The nearest candidate says which
distribution the engine's log-probs are of.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from hybridrl.check.registry import check
from hybridrl.check.result import Result, failed, not_applicable, passed

ARR = "actor_rollout_ref"
ROWS_PER_FORWARD = 4  # rows of the fp32 reference forward at a time: [rows, T, V] logits stay small

# Mean |Δ log-prob| per response token within which two passes of one distribution agree, by the lower precision
# of the two. fp32: different kernels and batch shapes move a log-prob by ~1e-7 (measured 1e-8 on the sharpened
# twin); bf16 (8 mantissa bits: 2^-9 relative rounding of every matmul output) by ~1e-3 (measured 3e-4 to 6e-4).
# Both well below what the sampling settings move it by on the sharpened twin: top-p 0.9 ~0.05, temperature
# 0.7 ~0.4; a top-p of 0.99 (at most 0.01) is told apart in fp32 only.
MEAN_TOL = {"fp32": 1e-3, "bf16": 0.01}

TEMPERED, SAMPLED, UNTEMPERED = "tempered", "sampled", "untempered"
DESCRIBE = {TEMPERED: "π at the run's temperature, before top-k/top-p (the distribution the trainer computes)",
            SAMPLED: "π at the run's temperature after top-k/top-p (the distribution sampled from)",
            UNTEMPERED: "π at temperature 1 (the temperature ignored)"}
# What each engine documents its log-probs to be of: hybridrl's hf engine returns log softmax(logits / T) before
# the filter (rollout/hf.choose_tokens); vLLM's processed_logprobs are after it (rollout/vllm.py).
DOCUMENTED = {"hf": TEMPERED, "vllm": SAMPLED}


@dataclass
class Measured:
    engine: Tensor  # [N, T] the engine's log-probs of its sampled tokens
    trainer: Tensor  # [N, T] the trainer's log-prob pass (π_old)
    candidates: dict[str, Tensor]  # name -> [N, T] fp32 log-probs of the same tokens under that distribution
    mask: Tensor  # [N, T] bool, the response tokens

    def gap(self, a: Tensor, b: Tensor) -> tuple[float, float]:
        """(mean, max) |a - b| over the response tokens."""
        d = (a - b).abs()[self.mask]
        return (float(d.mean()), float(d.max())) if d.numel() else (0.0, 0.0)


@check("sampling")
def sampling(ctx) -> Result:
    """The rollout engine's log-probs (hf or vllm, as configured) agree with the trainer's log-prob pass under the
    run's own temperature, top-p and top-k, and are of the distribution the engine documents; where the engine's
    distribution or precision differs from the trainer's, the configured rollout correction (rollout_is /
    rollout_rs) accounts for it."""
    from hybridrl.check.context import vllm_installed
    from hybridrl.check.twin_policy import build_twin_policy, real_prompts, sharpen, twin_cfg, twin_rollout

    cfg, plan = twin_cfg(ctx, "sampling")
    policy, tokenizer = build_twin_policy(cfg, plan)
    try:
        prompts = real_prompts(cfg, tokenizer)
        notes = [sharpen(policy, prompts)]
        if ctx.cfg.actor_rollout_ref.rollout.name == "vllm" and not vllm_installed():
            notes.append("rollout.name=vllm but vllm is not installed here: measured with the hf engine (the twin run "
                         "falls back to it); run check where vllm is installed to measure vllm's log-probs")
        rollout = twin_rollout(policy, prompts, cfg)
        m = measure(policy, rollout, cfg)
    finally:
        policy.close()
    if not m.mask.any():
        return not_applicable("the engine produced no response tokens to compare", *notes)
    return verdict(m, cfg, notes)


def measure(policy, rollout, cfg) -> Measured:
    """The engine's, the trainer's and each candidate distribution's log-probs of the rollout's tokens."""
    seqs = rollout.sequences()
    r = cfg.actor_rollout_ref.rollout
    trainer = policy.log_probs(seqs)
    candidates = candidate_log_probs(policy.module, seqs, r.temperature, r.top_k, r.top_p, r.do_sample)
    # response_mask: the sampled tokens only (a multi-turn response's tool tokens are 0 there)
    return Measured(rollout.rollout_log_probs.float(), trainer.float(), candidates, rollout.response_mask.bool())


@torch.no_grad()
def candidate_log_probs(module, seqs, temperature: float, top_k: int, top_p: float, do_sample: bool) -> dict[str, Tensor]:
    """name -> [N, T] fp32 log-probs of seqs' response tokens under each distribution the engine might report;
    only the ones these settings make different (no top-k/top-p: sampled = tempered; T = 1: untempered = tempered)."""
    from hybridrl.models.forward import position_ids_of

    T = seqs.response_mask.shape[1]
    temperature = temperature if do_sample and temperature > 0 else 1.0
    names = [TEMPERED] + ([SAMPLED] if do_sample and (0 < top_k or top_p < 1.0) else []) + (
        [UNTEMPERED] if temperature != 1.0 else [])
    out: dict[str, list[Tensor]] = {name: [] for name in names}
    with torch.autocast(seqs.input_ids.device.type, enabled=False):
        for i in range(0, len(seqs.input_ids), ROWS_PER_FORWARD):
            ids, attn = seqs.input_ids[i:i + ROWS_PER_FORWARD], seqs.attention_mask[i:i + ROWS_PER_FORWARD]
            logits = module(input_ids=ids, attention_mask=attn, position_ids=position_ids_of(attn),
                            logits_to_keep=T + 1).logits[:, :-1].float()  # [n, T, V]: position t predicts token t
            tokens = ids[:, -T:, None]
            for name in names:
                scaled = logits if name == UNTEMPERED else logits / temperature
                if name == SAMPLED:
                    scaled = nucleus(top_k_only(scaled, top_k), top_p)
                out[name].append(torch.log_softmax(scaled, -1).gather(-1, tokens)[..., 0])
    return {name: torch.cat(parts) for name, parts in out.items()}


def top_k_only(logits: Tensor, k: int) -> Tensor:
    """logits [..., V] with every token below the k-th largest set to -inf (k <= 0: unchanged)."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, -1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def nucleus(logits: Tensor, p: float) -> Tensor:
    """logits [..., V] outside the nucleus set to -inf: the most probable tokens, in order, until their mass
    reaches p (a token is kept when the mass of the more probable ones is still below p)."""
    if p >= 1.0:
        return logits
    probs = torch.softmax(logits, -1)
    ranked, order = probs.sort(-1, descending=True)
    before = ranked.cumsum(-1) - ranked  # mass of the strictly more probable tokens
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < p)
    return logits.masked_fill(~keep, float("-inf"))


def precisions(cfg) -> tuple[str, str]:
    """(engine, trainer) compute dtype names, 'fp32' | 'bf16'."""
    from hybridrl.plan.levers import actor_dtypes, rollout_compute_dtype

    return rollout_compute_dtype(cfg), actor_dtypes(cfg)[0]


def verdict(m: Measured, cfg, notes: list[str]) -> Result:
    """✓ / ✗ from the measured gaps: which distribution the engine's log-probs are of, whether it is the documented
    one, and whether the gap to the trainer's is within the precision's tolerance or corrected by the config."""
    r, rc = cfg.actor_rollout_ref.rollout, cfg.algorithm.rollout_correction
    engine_dtype, trainer_dtype = precisions(cfg)
    tol = max(MEAN_TOL[engine_dtype], MEAN_TOL[trainer_dtype])
    to_candidate = {name: m.gap(m.engine, ref) for name, ref in m.candidates.items()}
    nearest = min(to_candidate, key=lambda name: to_candidate[name][0])
    expected = DOCUMENTED[r.name] if DOCUMENTED[r.name] in m.candidates else TEMPERED  # no filter: the same
    mean, worst = m.gap(m.engine, m.trainer)
    settings = (f"temperature={r.temperature}, top_p={r.top_p}, top_k={r.top_k}" +
                ("" if r.do_sample else ", do_sample=false"))
    details = notes + [
        f"{int(m.mask.sum())} response tokens sampled by the {r.name} engine ({engine_dtype}) at {settings}; "
        f"trainer's log-prob pass in {trainer_dtype}",
        f"engine vs trainer: mean |Δ log-prob| {mean:.2g}, max {worst:.2g} (tolerance {tol:g} for {engine_dtype} vs "
        f"{trainer_dtype})",
        "engine vs each candidate (mean |Δ|): " + ", ".join(f"{n} {g[0]:.2g}" for n, g in to_candidate.items()),
        f"the engine's log-probs are of {DESCRIBE[nearest]}"]
    if nearest != expected and to_candidate[expected][0] > tol:
        return failed(f"engine log-probs are of a different distribution: {nearest}, not {expected} as the "
                      f"{r.name} engine documents (mean gap {to_candidate[expected][0]:.3g} to {expected}, "
                      f"{to_candidate[nearest][0]:.2g} to {nearest})", *details,
                      fix=_wrong_distribution_fix(nearest, expected, r.name))
    rs = _rejection(m, cfg)
    if rs is not None:
        details.append(rs[1])
        if rs[0] > 0.5:
            return failed(f"algorithm.rollout_correction.rollout_rs={rc.rollout_rs} rejects {rs[0]:.0%} of the "
                          f"response tokens: the engine's log-probs are of {nearest}, the trainer's of {TEMPERED}",
                          *details, fix="widen algorithm.rollout_correction.rollout_rs_threshold(_lower), use "
                          f"rollout_is=token instead, or set {ARR}.rollout.top_p=1.0 and top_k=-1")
    if mean <= tol:
        return passed(f"engine and trainer log-probs agree (mean gap {mean:.2g} <= {tol:g}); the engine's are of "
                      f"the {nearest} distribution", *details)
    why = (f"the engine's log-probs are of the top-k/top-p filtered distribution, the trainer's of the unfiltered"
           if nearest == SAMPLED else f"the engine ({engine_dtype}) and the trainer ({trainer_dtype}) compute π at "
           "different precision")
    if rc.rollout_is is not None:
        return passed(f"engine and trainer log-probs differ (mean gap {mean:.2g} > {tol:g}) and "
                      f"rollout_is={rc.rollout_is} corrects it", *details,
                      f"{why}: truncated importance weights π_old/π_rollout (rollout_is) reweight the engine's samples")
    return failed(f"engine and trainer log-probs differ (mean gap {mean:.2g} > {tol:g}) and no rollout correction "
                  f"is configured: {why}", *details,
                  fix="set algorithm.rollout_correction.rollout_is=token" + (
                      f" (or {ARR}.rollout.top_p=1.0 and top_k=-1)" if nearest == SAMPLED else
                      f" (or {ARR}.rollout.dtype=float32 and the actor's fsdp_config.mixed_precision.param_dtype=fp32)"))


def _rejection(m: Measured, cfg):
    """(rejected share, a line) of the response tokens the configured rollout_rs band leaves out on this batch;
    None when rollout_rs is off."""
    from hybridrl.algos.rollout_correction import rollout_rs_keep
    from hybridrl.trainer.settings import rejection_band

    band = rejection_band(cfg)
    if band is None:
        return None
    mask = m.mask.float()
    keep = rollout_rs_keep(m.trainer, m.engine, mask, band)
    share = float((mask - keep).sum() / mask.sum().clamp(min=1))
    return share, (f"rollout_rs={band.level} band [{band.lower:g}, {band.upper:g}] rejects {share:.0%} of these "
                   "response tokens")


def _wrong_distribution_fix(got: str, documented: str, engine: str) -> str:
    """The remedy for an engine whose log-probs are of another distribution than it documents: a setting under
    which the two coincide, until the engine is fixed."""
    if UNTEMPERED in (got, documented):
        same = f"{ARR}.rollout.temperature=1.0"
    else:
        same = f"{ARR}.rollout.top_p=1.0 and {ARR}.rollout.top_k=-1"
    return (f"this is a bug of the {engine} engine's log-probs (the trainer's π_old and the rollout correction read "
            f"them): report it; until it is fixed, {same} makes the two distributions the same")

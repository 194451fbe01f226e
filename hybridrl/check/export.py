"""The export check: the twin run's last checkpoint exported as `hybridrl export` does (with --merge-lora under
LoRA, the form plain transformers loads) reloads with AutoModelForCausalLM alone, computes the trained policy's
logits, and is not the base model (verl #7285: a "merged" LoRA export byte-identical to its base).

The trained policy is the twin run's own policy object after training (its weights as the run holds them, the
adapter active under LoRA), not a reload of the checkpoint: an export that loses what training did, on the way
into the checkpoint or out of it, shows. "Not the base model" is measured per tensor, in steps of the dtype's
resolution: at verl's lr of 1e-6 a step moves an fp32 weight of ~0.02 by some hundreds of such steps, far
below any logit tolerance, so logits alone cannot tell a dropped adapter from a small update.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from hybridrl.check.registry import check
from hybridrl.check.result import Result, combine, failed, not_applicable, passed
from hybridrl.check.twin_run import TwinRun, fresh_dir, held, step_dir, straight_run
from hybridrl.errors import HybridRLError

FIX = ("`hybridrl export` loses the trained weights under this config: report it with the command line (a hybridrl "
       "bug); meanwhile use the checkpoint's actor/ folder itself (with LoRA: load the adapter on its base with peft)")
LOGIT_TOL = 1e-4  # relative to max(1, |logits|): a merged W + s B A is rounded once (export.MERGE_TOLERANCE)
PROBE = 64  # tokens of the fixed probe input


@check("export")
def export_check(ctx) -> Result:
    """The exported model (`hybridrl export`, --merge-lora under LoRA) reloads in plain transformers with the trained
    policy's logits and differs from the base model: a LoRA adapter is merged, not dropped.

    It exports the last checkpoint of the twin run the resume check trained (3 steps)."""
    straight = straight_run(ctx)
    lora = ctx.cfg.actor_rollout_ref.model.lora_rank > 0
    out, refused = exported(straight, lora, ctx.work_dir)
    model, problem = reload(out)
    if model is None:
        return failed(f"the export does not reload in plain transformers: {problem}",
                      *([f"hybridrl export: {refused}"] if refused else []), fix=FIX)
    exported_w = model.state_dict()
    trained_w = {k: v.detach() for k, v in straight.run.policy.engine_weights().items()}
    base_w = plain_model(straight.base).state_dict()
    parts = [not_the_base(exported_w, trained_w, base_w, lora), same_logits(model, straight.run.policy.module)]
    if refused:  # export's own verification refused its output: a ✗ whatever the comparisons found
        parts.append(failed(f"hybridrl export refused its own output: {refused}", fix=FIX))
    how = "merged with --merge-lora" if lora else "copied"
    result = combine(parts, f"the export ({how}) reloads in plain transformers with the trained policy's logits and "
                            "differs from the base model")
    if result.status == "fail":
        result.details = held(parts) + result.details
    result.details += straight.notes[:1]
    return result


def exported(straight: TwinRun, lora: bool, work_dir: str) -> tuple[str, Optional[str]]:
    """(the export folder, None) of the twin run's last checkpoint, or (the folder, why `export` refused it): a
    refusal after writing still leaves a folder to diagnose."""
    from hybridrl.trainer.export import export

    checkpoint = step_dir(straight.run_dir, straight.steps)
    if checkpoint is None:
        raise HybridRLError(f"the twin run left no whole global_step_{straight.steps} in {straight.run_dir}")
    out = fresh_dir(work_dir, "export")
    try:
        export(checkpoint, out, merge_lora=lora)
    except HybridRLError as e:
        return out, str(e).splitlines()[0][:300]
    return out, None


def plain_model(folder: str):
    """`folder` as AutoModelForCausalLM alone (no hybridrl, no peft), fp32, eval mode."""
    from transformers import AutoModelForCausalLM

    from hybridrl.models.loading import quiet_loading

    with quiet_loading():
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def reload(folder: str):
    """(the model, None), or (None, why plain transformers cannot load `folder`)."""
    if not os.path.isfile(os.path.join(folder, "config.json")):
        found = ", ".join(sorted(os.listdir(folder))[:6]) if os.path.isdir(folder) else "no folder"
        return None, f"{folder} has no config.json ({found})"
    try:
        return plain_model(folder), None
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def probe_ids(vocab_size: int) -> torch.Tensor:
    return (torch.arange(PROBE) * 7 % vocab_size)[None]  # [1, PROBE]: every 7th token id, as export verifies


def logits_of(module, ids: torch.Tensor) -> torch.Tensor:
    """[1, T, V] fp32 logits of `module` (the trained policy: a peft model with its adapter active under LoRA),
    leaving its train/eval mode as it was."""
    was = module.training
    try:
        module.eval()
        with torch.no_grad():
            return module(input_ids=ids.to(next(module.parameters()).device)).logits.float().cpu()
    finally:
        module.train(was)


def same_logits(model, policy_module) -> Result:
    """The reloaded export's logits equal the trained policy's on a fixed probe input."""
    ids = probe_ids(model.config.vocab_size)
    with torch.no_grad():
        got = model(input_ids=ids).logits.float()
    want = logits_of(policy_module, ids)
    gap, tol = float((got - want).abs().max()), LOGIT_TOL * max(1.0, float(want.abs().max()))
    if gap > tol:
        return failed(f"the exported model's logits differ from the trained policy's: max |difference| {gap:.3g} "
                      f"(tolerance {tol:.3g}) on a {PROBE}-token probe", fix=FIX)
    return passed(f"logits equal the trained policy's: max |difference| {gap:.3g} on a {PROBE}-token probe "
                  f"(tolerance {tol:.3g})")


def resolution_steps(moved: torch.Tensor, base: torch.Tensor) -> float:
    """max |moved - base| in units of the dtype's resolution at the tensor's largest weight (eps x max |base|):
    below 1, no weight of the tensor moved by more than one rounding step of its largest."""
    scale = torch.finfo(moved.dtype).eps * max(float(base.abs().max()), torch.finfo(moved.dtype).tiny)
    return float((moved - base).abs().max()) / scale


def not_the_base(exported_w: dict, trained_w: dict, base_w: dict, lora: bool) -> Result:
    """Every tensor that training changed is changed in the export too, and the export is not the base model."""
    names = sorted(set(exported_w) & set(trained_w) & set(base_w))
    moved = [n for n in names if not torch.equal(trained_w[n].to(base_w[n].dtype), base_w[n])]
    if not moved:
        return not_applicable("the twin's policy did not move in its steps (no learning signal), so whether the "
                              "export keeps the training cannot be measured")
    changed = [n for n in names if not torch.equal(exported_w[n].to(base_w[n].dtype), base_w[n])]
    what = "the LoRA adapter was dropped, not merged" if lora else "the trained weights were not written"
    if not changed:
        return failed(f"the export equals the base model: {what} (all {len(names)} tensors bit-identical to the "
                      f"model before training, where training changed {len(moved)})", fix=FIX)
    lost = [n for n in moved if n not in changed]
    if lost:
        return failed(f"the export lost the training of {len(lost)} of {len(moved)} changed tensors, e.g. {lost[0]} "
                      f"equals the base model's", fix=FIX)
    steps = {n: resolution_steps(exported_w[n].float(), base_w[n].float()) for n in moved}
    top = max(steps, key=steps.get)
    gap = float((exported_w[top].float() - base_w[top].float()).abs().max())
    return passed(f"{len(changed)} of {len(names)} tensors differ from the base model (every one training changed); "
                  f"the largest change {gap:.3g} in {top}, {steps[top]:.0f}x fp32's resolution at its largest "
                  f"weight; the least-changed tensor moved {min(steps.values()):.0f}x")

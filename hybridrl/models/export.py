"""`hybridrl export CHECKPOINT OUT`: a clean HuggingFace folder from a checkpoint, verified by
comparing logits of the exported model with the checkpoint's on a fixed input."""

from __future__ import annotations

import os
import shutil

import torch

from hybridrl.errors import HybridRLError
from hybridrl.trainer.checkpoint import LATEST, latest_complete, problem_of


def actor_folder(checkpoint: str) -> str:
    """The actor/ folder of a global_step_<N> folder, of a run folder's newest whole checkpoint, or itself."""
    if os.path.isfile(os.path.join(checkpoint, "config.json")):
        return checkpoint
    if os.path.isfile(os.path.join(checkpoint, LATEST)) or not os.path.isdir(os.path.join(checkpoint, "actor")):
        point = latest_complete(checkpoint)
        if point is None:
            raise HybridRLError(f"{checkpoint}: no whole checkpoint (global_step_<N>/ with checkpoint.json) in it")
        checkpoint = point.path
    problem = problem_of(checkpoint)
    if problem:
        raise HybridRLError(f"{checkpoint} is not a whole checkpoint: {problem}")
    return os.path.join(checkpoint, "actor")


def max_logit_difference(a: str, b: str) -> float:
    """max |logits_a - logits_b| of two HF folders on one fixed input (every 7th token id, 64 long)."""
    from transformers import AutoModelForCausalLM

    ma, mb = (AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval() for p in (a, b))
    ids = (torch.arange(64) * 7 % ma.config.vocab_size)[None]
    with torch.no_grad():
        return float((ma(input_ids=ids).logits - mb(input_ids=ids).logits).abs().max())


def export(checkpoint: str, out: str) -> float:
    """Copy the actor's HF files to `out` (new or empty) and return the verified logit difference."""
    src = actor_folder(checkpoint)
    if os.path.exists(out) and os.listdir(out):
        raise HybridRLError(f"{out} exists and is not empty; give a new folder")
    shutil.copytree(src, out, dirs_exist_ok=True)
    diff = max_logit_difference(src, out)
    if diff != 0.0:
        raise HybridRLError(f"the exported model in {out} differs from {src}: max |logit difference| = {diff:g}")
    return diff

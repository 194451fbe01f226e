"""`hybridrl export CHECKPOINT OUT [--merge-lora]`: a clean HuggingFace folder from a checkpoint (a
LoRA run's: its adapter folder, or with --merge-lora the merged plain model), verified by comparing
logits of the exported model with the checkpoint's on a fixed input."""

from __future__ import annotations

import os
import shutil
from typing import Callable, Optional

import torch

from hybridrl.errors import HybridRLError
from hybridrl.paths import check_output_folder
from hybridrl.trainer.checkpoint import LATEST, complete_checkpoints, latest_complete
from hybridrl.trainer.manifest import MANIFEST, problem_of, unchecked_note


class DamagedCheckpoint(HybridRLError):
    """A checkpoint's files do not match its manifest (sizes or checksums)."""


def actor_folder(checkpoint: str, log: Optional[Callable[[str], None]] = None) -> str:
    """The actor/ folder of a global_step_<N> folder, of a run folder's newest whole checkpoint, or the
    folder itself (a HF or adapter folder). Files a manifest covers are verified against their checksums
    first: a damaged checkpoint is refused in one line, naming the file (`log` hears of one too old to
    have checksums)."""
    if any(os.path.isfile(os.path.join(checkpoint, f)) for f in ("config.json", "adapter_config.json")):
        _verify_model_folder(checkpoint, log)
        return checkpoint
    if os.path.isfile(os.path.join(checkpoint, LATEST)) or not os.path.isdir(os.path.join(checkpoint, "actor")):
        point = latest_complete(checkpoint)
        if point is None:
            raise HybridRLError(f"{checkpoint}: no whole checkpoint (global_step_<N>/ with checkpoint.json) in it")
        checkpoint = point.path
    _verify(checkpoint, "actor/", log)
    return os.path.join(checkpoint, "actor")


def _verify_model_folder(folder: str, log) -> None:
    """A model folder with its own manifest (sft's checkpoints and final folder), or the actor/ or critic/
    folder of a trainer checkpoint: verified; a plain HF folder has nothing to verify."""
    parent, name = os.path.split(os.path.normpath(folder))
    if os.path.isfile(os.path.join(folder, MANIFEST)):
        _verify(folder, "", log)
    elif name in ("actor", "critic") and os.path.isfile(os.path.join(parent, MANIFEST)):
        _verify(parent, f"{name}/", log)


def _verify(checkpoint: str, prefix: str, log) -> None:
    problem = problem_of(checkpoint, verify=prefix)
    if problem:
        root = os.path.dirname(os.path.normpath(checkpoint))
        earlier = [path for step, path in sorted(complete_checkpoints(root).items(), reverse=True)
                   if os.path.normpath(path) != os.path.normpath(checkpoint)]
        hint = f"; use another checkpoint, e.g. {earlier[0]}" if earlier else ""
        raise DamagedCheckpoint(f"{checkpoint} is not a usable checkpoint: {problem}{hint}")
    note = unchecked_note(checkpoint)
    if note and log is not None:
        log(note)


def _load(folder: str):
    """A HF folder as AutoModelForCausalLM, or a LoRA adapter folder on its base model (peft)."""
    from transformers import AutoModelForCausalLM

    from hybridrl.models.loading import quiet_loading, readable
    from hybridrl.models.lora import is_adapter_folder, load_adapter_model

    with readable(folder):
        if is_adapter_folder(folder):
            return load_adapter_model(folder)
        with quiet_loading():
            return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def max_logit_difference(a: str, b: str) -> float:
    """max |logits_a - logits_b| of two HF or adapter folders on one fixed input (every 7th token id, 64 long)."""
    ma, mb = _load(a), _load(b)
    ids = (torch.arange(64) * 7 % ma.config.vocab_size)[None]
    with torch.no_grad():
        return float((ma(input_ids=ids).logits - mb(input_ids=ids).logits).abs().max())


def _write_merged(src: str, out: str) -> None:
    """The plain model a LoRA adapter folder computes (W + s B A), with the tokenizer, into `out`."""
    from transformers import AutoTokenizer

    from hybridrl.models.lora import load_adapter_model

    load_adapter_model(src).merge_and_unload().save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)


MERGE_TOLERANCE = 1e-4  # merged weights round W + s B A once; the adapter's forward adds x W + s (x A) B


def export(checkpoint: str, out: str, merge_lora: bool = False,
           log: Optional[Callable[[str], None]] = None) -> tuple[str, float]:
    """Copy the actor's files to `out` (new or empty); return their folder and the verified logit difference. A LoRA
    run's actor is its adapter folder (loads with peft on its base model); `merge_lora` writes the
    plain merged model instead (loads with AutoModelForCausalLM alone)."""
    from hybridrl.models.lora import is_adapter_folder

    if not os.path.isdir(checkpoint):
        raise HybridRLError(f"CHECKPOINT {checkpoint}: no such folder; give a run folder, a global_step_<N> folder or "
                            "a HuggingFace model folder")
    src = actor_folder(checkpoint, log)
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise HybridRLError(f"{out} exists and is not empty; give a new folder")
    check_output_folder(out, "OUT")  # before any model is loaded
    if merge_lora and not is_adapter_folder(src):
        raise HybridRLError(f"--merge-lora: {src} holds a whole model, not a LoRA adapter (the run had "
                            "actor_rollout_ref.model.lora_rank=0); export it without --merge-lora")
    if merge_lora:
        _write_merged(src, out)
    else:
        shutil.copytree(src, out, dirs_exist_ok=True)
    diff = max_logit_difference(src, out)
    if diff > (MERGE_TOLERANCE if merge_lora else 0.0):
        raise HybridRLError(f"the exported model in {out} differs from {src}: max |logit difference| = {diff:g}")
    return src, diff

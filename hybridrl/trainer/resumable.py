"""Can this run resume from that checkpoint? Checked after the models are built and before anything
is written to the run folder (config.yaml, metrics.jsonl), so that a refused resume leaves the run
as it was.

The shapes come from the safetensors headers (no tensor is read) and from the roles' own
`saved_shapes()` (what their save_pretrained writes: global shapes, also under fsdp2 or on Ray
workers). A changed model (another size, vocabulary, LoRA rank or targets) is a one-line error
naming the first tensor that differs, both shapes, and the fix.
"""

from __future__ import annotations

import glob
import os
from typing import Optional

from hybridrl.errors import ConfigError

FIX = ("resume with the model config that wrote the checkpoint, or start over: trainer.resume_mode=disable or another "
       "trainer.default_local_dir")


def header_shapes(folder: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{tensor name: (file name, shape)} of every *.safetensors file in `folder`, from the headers alone."""
    from safetensors import safe_open

    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                out[name] = (os.path.basename(path), tuple(f.get_slice(name).get_shape()))
    return out


def shape_mismatch(folder: str, expected: dict[str, tuple[int, ...]], model_key: str) -> Optional[str]:
    """Why the weights in `folder` cannot load into a model whose saved tensors have `expected` shapes, or None."""
    saved = header_shapes(folder)
    if not saved:
        return f"{folder} holds no *.safetensors weights"
    for name, (file, shape) in saved.items():
        if name not in expected:
            return (f"{folder}/{file} has tensor {name}, which the model being trained ({model_key}) does not have; "
                    f"the checkpoint was written with another model")
        if tuple(expected[name]) != shape:
            return (f"{folder}/{file}: {name} is {list(shape)} there but {list(expected[name])} in the model being "
                    f"trained ({model_key})")
    return None


def check_resumable(path: str, policy, critic, policy_key: str, critic_key: str) -> None:
    """ConfigError unless the checkpoint at `path` loads into `policy` (and `critic`, when the run has one)."""
    parts = [("actor", policy, policy_key)] + ([("critic", critic, critic_key)] if critic is not None else [])
    for sub, role, key in parts:
        folder = os.path.join(path, sub)
        if not os.path.isdir(folder):
            raise ConfigError(f"{path} has no {sub}/ (pruned by trainer.max_critic_ckpt_to_keep, or written by a run "
                              f"without one), so this run cannot resume from it; {FIX}")
        problem = shape_mismatch(folder, role.saved_shapes(), key)
        if problem:
            raise ConfigError(f"cannot resume: {problem}; {FIX}")

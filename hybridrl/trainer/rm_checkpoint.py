"""Checkpoints of a reward-model run, for exact resume.

`<default_local_dir>/global_step_<N>/` is itself the reward model's HuggingFace folder (so
`reward_model.model.path` takes it as is), plus what resuming needs:
  rm_state.pt          optimizer and LR scheduler
  trainer_state.json   step, sampler position (epoch, sample), python/numpy RNG (the RL layout, so
                       checkpoint.find_resume_point reads it)
  rng_state.pt         torch RNG
  config.yaml          the resolved config: a resume with other values of keys that change results is refused
Written atomically with a manifest by checkpoint.write_step_folder; `latest_checkpointed_iteration.txt` last.
"""

from __future__ import annotations

import json
import os
import pickle

import torch
from omegaconf import OmegaConf

from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.models.loading import load_weights_into, quiet_loading
from hybridrl.trainer.checkpoint import (
    LATEST,
    ResumePoint,
    config_changes,
    replace_text,
    rng_state,
    set_rng_state,
    write_step_folder,
)

STATE = "rm_state.pt"


def save_rm_checkpoint(root: str, step: int, model, tokenizer, optimizer, scheduler, sampler, cfg) -> str:
    """Write <root>/global_step_<step> (see the module doc) and point `latest` at it; its path."""

    def write(tmp: str) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, os.path.join(tmp, STATE))
        plain, tensors = rng_state()
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump({"step": step, "sampler": sampler.state_dict(), "rng": plain}, f)
        torch.save(tensors, os.path.join(tmp, "rng_state.pt"))
        with open(os.path.join(tmp, "config.yaml"), "w") as f:
            f.write(OmegaConf.to_yaml(OmegaConf.structured(cfg)))

    with quiet_loading():
        final = write_step_folder(root, step, write)
    replace_text(os.path.join(root, LATEST), str(step))
    return final


def check_same_config(point: ResumePoint, cfg) -> None:
    """A resume must compute what the interrupted run would have: refuse changed keys, naming them."""
    changes = config_changes(os.path.join(point.path, "config.yaml"), cfg)
    if changes:
        raise ConfigError(f"cannot resume from {point.path}: the config differs in keys that change results "
                          f"({'; '.join(changes[:5])}); resume with the config that wrote it, or set "
                          "trainer.resume_mode=disable (or another trainer.default_local_dir) to start over")


def restore_rm_checkpoint(point: ResumePoint, model, optimizer, scheduler, sampler) -> None:
    """Weights, optimizer, scheduler, sampler position and RNG back as they were after step `point.step`."""
    from safetensors import SafetensorError

    folder = point.path
    try:
        load_weights_into(model, folder)
        state = torch.load(os.path.join(folder, STATE), weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        with open(os.path.join(folder, "trainer_state.json")) as f:
            trainer_state = json.load(f)
        sampler.load_state_dict(trainer_state["sampler"])
        set_rng_state(trainer_state["rng"], torch.load(os.path.join(folder, "rng_state.pt"), weights_only=True))
    except HybridRLError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError, pickle.UnpicklingError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise HybridRLError(f"resuming from {folder} failed ({type(e).__name__}: {first}); it was written by another "
                            "config or is damaged: set trainer.resume_mode=disable to start over") from e

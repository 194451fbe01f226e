"""Checkpoints that are never half-written, and exact resume.

Layout of `<default_local_dir>/global_step_<N>/`:
  actor/               a HuggingFace folder (config, generation config, tokenizer, safetensors); with LoRA
                       peft's adapter folder (adapter_config.json, adapter_model.safetensors, tokenizer)
  actor_state.pt       optimizer, LR scheduler, mini-batch shuffle generator and rollout sampling counter
  critic/, critic_state.pt   the same for the value model, when there is one (with critic LoRA the adapter
                       folder holds the adapters and the value head)
  trainer_state.json   step, sampler position (epoch, sample), KL coefficient, python/numpy RNG
  rng_state.pt         torch CPU (and CUDA) RNG
  config.yaml          the resolved config
  checkpoint.json      manifest: every file and its size; written last, so it marks a whole checkpoint

A checkpoint is written to a temporary folder, every file fsynced, then renamed into place
(atomic on POSIX), and `latest_checkpointed_iteration.txt` (verl's name) is replaced last.
Resume takes the newest folder whose manifest matches its files; a partial or damaged one is skipped,
and when every one is, resume_mode=auto refuses (a fresh start would mix a new run into the old one's
folder). hybridrl never deletes a damaged checkpoint: a save onto its step sets it aside as
global_step_<N>.damaged, and pruning passes it over.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import pickle
import random
import re
import shutil
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from omegaconf import OmegaConf

from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.models.loading import quiet_loading
from hybridrl.trainer.manifest import MANIFEST, drop_from_manifest, problem_of, unchecked_note, write_manifest
from hybridrl.trainer.runlock import not_writable

LATEST = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")
SET_ASIDE = ".damaged"  # suffix of a damaged checkpoint moved out of a new save's way (STEP_DIR no longer matches)
LISTED = 5  # damaged checkpoints named in the refusal; the rest are counted, to keep it one readable line
# Keys that may change on resume without changing what the run computes. The output folders among them (the run's,
# and where generations and validation samples are dumped) change when a run's folder is moved or copied.
RESUME_SAFE_KEYS = (
    "trainer.total_epochs", "trainer.total_training_steps", "trainer.save_freq", "trainer.test_freq", "trainer.logger",
    "trainer.resume_mode", "trainer.resume_from_path", "trainer.resume_allow_config_change",
    "trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep", "trainer.default_local_dir",
    "trainer.rollout_data_dir", "trainer.validation_data_dir",
    "trainer.project_name", "trainer.experiment_name", "trainer.val_before_train", "data.val_files",
    "data.val_max_samples", "reward_model.num_workers", "reward_model.timeout_s", "trainer.profile_timeline",
)


@dataclass(frozen=True)
class ResumePoint:
    path: str  # the global_step_<N> folder
    step: int
    epoch: int  # the sampler's epoch ...
    sample: int  # ... and position in it: the next batch starts here


# ---------------------------------------------------------------- writing


def _fsync_tree(root: str) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(folder)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_manifest(folder: str, step: int) -> None:
    write_manifest(folder, replace_text, step=step)


def replace_text(path: str, text: str) -> None:
    """Write a small file atomically: temp file, fsync, rename."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


def rng_state() -> tuple[dict, dict]:
    """(json-able python/numpy RNG, torch tensors) of this process."""
    version, py_keys, py_gauss = random.getstate()
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    plain = {"python": [version, list(py_keys), py_gauss], "numpy": [kind, keys.tolist(), pos, has_gauss, gauss]}
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors["cuda"] = torch.cuda.get_rng_state_all()
    return plain, tensors


def set_rng_state(plain: dict, tensors: dict) -> None:
    version, keys, gauss = plain["python"]
    random.setstate((version, tuple(keys), gauss))
    kind, keys, pos, has_gauss, cached = plain["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(tensors["cuda"])


def save_checkpoint(run, step: int) -> str:
    """Write global_step_<step> atomically, point `latest` at it; return its path."""

    def write(tmp: str) -> None:
        run.policy.save_pretrained(os.path.join(tmp, "actor"))
        run.tokenizer.save_pretrained(os.path.join(tmp, "actor"))
        torch.save(run.policy.state_dict(), os.path.join(tmp, "actor_state.pt"))
        if run.critic is not None:
            run.critic.save_pretrained(os.path.join(tmp, "critic"))
            run.tokenizer.save_pretrained(os.path.join(tmp, "critic"))
            torch.save(run.critic.state_dict(), os.path.join(tmp, "critic_state.pt"))
        plain, tensors = rng_state()
        state = {"step": step, "sampler": run.sampler.state_dict(),
                 "kl_coef": run.kl_ctrl.value if run.kl_ctrl is not None else None, "rng": plain}
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump(state, f)
        torch.save(tensors, os.path.join(tmp, "rng_state.pt"))
        shutil.copyfile(os.path.join(run.run_dir, "config.yaml"), os.path.join(tmp, "config.yaml"))

    with quiet_loading():  # one "saved ..." line per checkpoint is enough; the setting is restored after
        final = write_step_folder(run.run_dir, step, write)
    replace_text(os.path.join(run.run_dir, LATEST), str(step))
    return final


def write_step_folder(root: str, step: int, write, key: str = "trainer.default_local_dir") -> str:
    """`write(tmp)` fills a temporary folder; then its manifest (sizes, checksums) and an atomic rename
    to <root>/global_step_<step>. A failure leaves the previous checkpoints as they were."""
    final = os.path.join(root, f"global_step_{step}")
    tmp = os.path.join(root, f".tmp_global_step_{step}_{os.getpid()}")
    for stale in glob.glob(os.path.join(root, ".tmp_global_step_*")):  # left by a run killed mid-save
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.makedirs(tmp)
        write(tmp)
        _write_manifest(tmp, step)  # last inside the folder: its presence, sizes and checksums vouch for the rest
        _fsync_tree(tmp)
        if os.path.exists(final):  # a folder of an earlier run that this one restarted over (or skipped as damaged)
            _clear_the_way(final)
        os.rename(tmp, final)
        _fsync_dir(root)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _save_failed(root, step, e, key) from e
    return final


def _clear_the_way(final: str) -> None:
    """Make room for a new global_step_<N>. An intact old one is replaced (the run started over from an
    earlier step); a damaged one is renamed aside, not deleted: the refusal to resume said damaged
    checkpoints are kept, for the user to restore or remove. Hashing it costs a read of the old folder,
    paid only on such a collision."""
    if problem_of(final, verify="") is None:
        shutil.rmtree(final)
        return
    aside, n = final + SET_ASIDE, 1
    while os.path.exists(aside):  # set aside by an earlier start-over too
        n += 1
        aside = f"{final}{SET_ASIDE}-{n}"
    os.rename(final, aside)


def _save_failed(root: str, step: int, e: OSError, key: str) -> HybridRLError:
    """The failure's real cause (full disk, permissions, a folder removed under the run ...) and what is left."""
    prev = latest_complete(root) if os.path.isdir(root) else None
    fixes = {errno.ENOSPC: f"free disk space or choose another {key}", errno.EDQUOT: "free space within your quota",
             errno.EACCES: f"make {root} writable or choose another {key}", errno.EPERM: f"make {root} writable",
             errno.EROFS: f"choose a writable {key}", errno.ENOENT: f"{root} or a file in it was removed while the "
                                                                   "run was writing; keep it"}
    fix = fixes.get(e.errno, "fix the cause above")
    return HybridRLError(f"saving the checkpoint of step {step} in {root} failed ({e}); "
                         + (f"the previous checkpoint {prev.path} is intact" if prev else "no earlier checkpoint exists")
                         + f". To go on: {fix}, then resume")


def prune(root: str, keep_actor: Optional[int], keep_critic: Optional[int]) -> None:
    """Delete all but the newest `keep_actor` checkpoints, and the critic of all but the newest
    `keep_critic` (None: keep all). An older folder without its critic can still be exported,
    but not resumed from in a run that needs a critic.

    Only whole checkpoints (manifest and sizes match) up to the one just saved (`latest`) are counted
    or deleted. One that fails that check (cut short, files missing) is never deleted: the refusal to
    resume promised to keep it. A newer one was left by an earlier run that got further (this run
    started over or resumed before it): counting it would delete this run's own new checkpoints first.
    Checksums are not verified here (hashing the old checkpoints at every save costs as much as writing
    one), so an older same-size damaged one is pruned like any other; such damage is caught where a
    checkpoint is used (resume, export, eval, serve)."""
    newest = _latest_step(root)
    steps = sorted((s for s in complete_checkpoints(root) if newest is None or s <= newest), reverse=True)
    if keep_actor is not None:
        for step in steps[keep_actor:]:
            shutil.rmtree(os.path.join(root, f"global_step_{step}"), ignore_errors=True)
        steps = steps[:keep_actor]
    if keep_critic is not None:
        for step in steps[keep_critic:]:
            folder = os.path.join(root, f"global_step_{step}")
            shutil.rmtree(os.path.join(folder, "critic"), ignore_errors=True)
            if os.path.exists(os.path.join(folder, "critic_state.pt")):
                os.remove(os.path.join(folder, "critic_state.pt"))
            for prefix in ("critic/", "critic_state.pt"):  # the folder stays whole: the manifest lists what is left
                drop_from_manifest(folder, prefix, replace_text)


def _latest_step(root: str) -> Optional[int]:
    """The step `latest_checkpointed_iteration.txt` names (the save just made), None without a readable one."""
    try:
        with open(os.path.join(root, LATEST)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- reading


def step_folders(root: str) -> dict[int, str]:
    """{step: folder} of every global_step_<N> folder in `root`, whole or not."""
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    return {int(m.group(1)): os.path.join(root, name) for name in names if (m := STEP_DIR.match(name))}


def checkpoint_listing(root: str) -> tuple:
    """What a resume decision read from `root`: each global_step_<N> and when its manifest was written.
    Compared before and after taking the run lock, to see whether another run saved or pruned meanwhile."""
    def stamp(folder: str) -> Optional[int]:
        try:
            return os.stat(os.path.join(folder, MANIFEST)).st_mtime_ns
        except OSError:
            return None

    return tuple((step, stamp(folder)) for step, folder in sorted(step_folders(root).items()))


def complete_checkpoints(root: str, log=None) -> dict[int, str]:
    """{step: folder} of the whole checkpoints in `root`; `log` hears of each partial one skipped."""
    found = {}
    for step, folder in step_folders(root).items():
        problem = problem_of(folder)
        if problem is None:
            found[step] = folder
        elif log is not None:
            log(f"WARNING: skipping {folder}: {problem}")
    return found


def latest_complete(root: str, log=None) -> Optional[ResumePoint]:
    found = complete_checkpoints(root, log)
    return read_point(found[max(found)]) if found else None


def read_point(folder: str) -> ResumePoint:
    with open(os.path.join(folder, "trainer_state.json")) as f:
        state = json.load(f)
    return ResumePoint(folder, state["step"], state["sampler"]["epoch"], state["sampler"]["position"])


def find_resume_point(mode: str, root: str, resume_from_path: Optional[str], log=print) -> Optional[ResumePoint]:
    """The checkpoint to resume from under `trainer.resume_mode`, or None to start fresh. Its checksums
    are verified: `auto` passes over a damaged checkpoint to the one before (naming the file), and
    refuses when every checkpoint there is damaged, rather than start over on top of them. Reads only:
    callers decide before they write anything into `root`, so that a refusal leaves it as it was."""
    if mode == "disable":
        return None
    if mode == "resume_path":
        if not resume_from_path:
            raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path=<.../global_step_N>")
        point, problem = _usable(resume_from_path) if os.path.isdir(resume_from_path) else (None, "not a folder")
        if problem:
            raise ConfigError(f"trainer.resume_from_path={resume_from_path!r} is not a whole checkpoint: {problem}")
        _note_unchecked(resume_from_path, log)
        return point
    return _newest_usable(root, log)


def _newest_usable(root: str, log) -> Optional[ResumePoint]:
    """resume_mode=auto: the newest intact checkpoint, warning of each newer one passed over; None when
    `root` has none at all; a ConfigError when it has some and every one is damaged."""
    skipped: list[tuple[str, str]] = []
    for _, folder in sorted(step_folders(root).items(), reverse=True):
        point, problem = _usable(folder)
        if point is not None:
            for passed, why in skipped:  # only now: a refusal is one line, not a warning per checkpoint first
                log(f"WARNING: skipping {passed}: {why}; trying the checkpoint before it")
            _note_unchecked(folder, log)
            return point
        skipped.append((folder, problem))
    if skipped:
        raise every_checkpoint_damaged(root, skipped)
    return None


def _usable(folder: str) -> tuple[Optional[ResumePoint], Optional[str]]:
    """(its resume point, None), or (None, why it cannot be resumed): damaged files, or a trainer
    state that cannot be read (an old checkpoint checked by sizes only)."""
    problem = problem_of(folder, verify="")
    if problem is not None:
        return None, problem
    try:
        return read_point(folder), None
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"unreadable trainer_state.json ({type(e).__name__}: {e})"


def every_checkpoint_damaged(root: str, skipped: list[tuple[str, str]]) -> ConfigError:
    """The refusal of resume_mode=auto when no checkpoint in `root` can be resumed, naming each (newest
    first) and the two ways on."""
    named = "; ".join(f"{os.path.basename(folder)}: {problem}" for folder, problem in skipped[:LISTED])
    more = f"; and {len(skipped) - LISTED} more" if len(skipped) > LISTED else ""
    return ConfigError(
        f"trainer.resume_mode=auto: every checkpoint in {root} is damaged ({named}{more}); nothing was written. Set "
        f"trainer.resume_mode=disable to start over in this folder (the damaged checkpoints are kept: one whose step "
        f"the new run saves is renamed to global_step_<N>{SET_ASIDE}), or point trainer.default_local_dir at "
        "another folder")


def _note_unchecked(folder: str, log) -> None:
    note = unchecked_note(folder)
    if note:
        log(note)


def restore(run, point: ResumePoint) -> None:
    """Put weights, optimizer, scheduler, sampler, KL coefficient and every RNG back as they were.
    A checkpoint that cannot be loaded (another model or optimizer layout, a damaged file of an older
    checkpoint without checksums) is a one-line error naming it."""
    from safetensors import SafetensorError

    try:
        _restore(run, point.path)
    except HybridRLError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError, pickle.UnpicklingError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise HybridRLError(f"resuming from {point.path} failed ({type(e).__name__}: {first}); it was written by "
                            "another config or is damaged: resume with the config that wrote it, or set "
                            "trainer.resume_mode=disable to start over") from e


def _restore(run, folder: str) -> None:
    run.policy.load_pretrained(os.path.join(folder, "actor"))
    run.policy.load_state_dict(torch.load(os.path.join(folder, "actor_state.pt"), weights_only=True))
    if run.critic is not None:
        run.critic.load_pretrained(os.path.join(folder, "critic"))
        run.critic.load_state_dict(torch.load(os.path.join(folder, "critic_state.pt"), weights_only=True))
    with open(os.path.join(folder, "trainer_state.json")) as f:
        state = json.load(f)
    run.sampler.load_state_dict(state["sampler"])
    if run.kl_ctrl is not None and state["kl_coef"] is not None:
        run.kl_ctrl.value = state["kl_coef"]
    set_rng_state(state["rng"], torch.load(os.path.join(folder, "rng_state.pt"), weights_only=True))


def _flat(cfg) -> dict[str, object]:
    container = OmegaConf.to_container(cfg, resolve=True)
    out: dict[str, object] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = value

    walk("", container)
    return out


def config_changes(saved_yaml: str, current) -> list[str]:
    """`key: saved -> now` for every key that differs and could change results. A key the saved
    config lacks (added to hybridrl after that run started) is no change while it keeps its
    default: a new key's default is the behaviour from before it existed."""
    saved, now = _flat(OmegaConf.load(saved_yaml)), _flat(OmegaConf.structured(current))
    defaults = _flat(OmegaConf.structured(type(current)()))
    keys = sorted(set(saved) | set(now))
    return [f"{k}: {saved.get(k, '<absent>')!r} -> {now.get(k, '<absent>')!r}" for k in keys
            if saved.get(k) != now.get(k) and k not in RESUME_SAFE_KEYS
            and not (k not in saved and k in defaults and now[k] == defaults[k])]


def check_output_dir(root: str, need_bytes: int, key: str = "trainer.default_local_dir") -> None:
    """Fail before training, not at the first save: the folder must be writable with room for a checkpoint."""
    probe = os.path.join(root, f".write_test_{os.getpid()}")
    try:
        os.makedirs(root, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"x")
            f.flush()
            os.fsync(f.fileno())
        os.remove(probe)
    except OSError as e:
        raise not_writable(key, root, e) from None
    free = shutil.disk_usage(root).free
    need = int(need_bytes * 1.1)  # the new checkpoint is complete before an old one is pruned
    if free < need:
        raise ConfigError(f"{key}={root!r} has {free / 2**30:.2f} GiB free, but one checkpoint needs ~{need / 2**30:.2f} "
                          "GiB; free space, choose another folder, or set trainer.save_freq=0 to not save")

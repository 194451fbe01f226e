"""Damaged checkpoints and resumes with another model, on real runs (issue #22): a checkpoint whose
safetensors header was zeroed (same size) is passed over at resume with a warning naming the file,
and refused by export/eval/serve in one line; a resume with another model (allowed config change)
is a one-line error before config.yaml or metrics.jsonl is touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from hybridrl.errors import ConfigError

from run_helpers import overrides, train  # tests/integration/run_helpers.py

pytestmark = pytest.mark.slow


def zero_header(path) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.write(b"\0" * 64)
    assert os.path.getsize(path) == size


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hybridrl", *args], capture_output=True, text=True, timeout=600)


def test_a_zeroed_header_is_skipped_at_resume_and_refused_by_export_eval_and_serve(arith_data, tmp_path):
    run = tmp_path / "run"
    train(overrides(arith_data, run, 4, "trainer.save_freq=2"))
    damaged = run / "global_step_4" / "actor" / "model.safetensors"
    zero_header(damaged)
    says = (f"{run}/global_step_4 is not a usable checkpoint: actor/model.safetensors does not match its SHA-256 in "
            f"checkpoint.json: the file changed after it was saved (damaged); use another checkpoint, e.g. "
            f"{run}/global_step_2")
    for command in (["export", str(run), str(tmp_path / "out")], ["eval", "--model", str(run / "global_step_4"),
                                                                  "--data", arith_data["val"], "--n", "1"],
                    ["serve", str(run)]):
        out = cli(*command)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and says in out.stderr, out.stderr
    assert not (tmp_path / "out").exists()

    lines = []
    _, summary = train(overrides(arith_data, run, 6, "trainer.save_freq=2"), log=lines.append)
    assert f"WARNING: skipping {run}/global_step_4: actor/model.safetensors does not match its SHA-256" in "\n".join(lines)
    assert any("resumed from step 2" in line for line in lines) and summary.steps == 4


def test_a_damaged_plain_model_folder_is_one_line(arith_data, tmp_path):
    from hybridrl.models.loading import BUNDLED

    folder = tmp_path / "model"
    shutil.copytree(BUNDLED["tiny-arith"], folder)
    zero_header(folder / "model.safetensors")  # no manifest to check: the load itself must fail in one line
    out = cli("eval", "--model", str(folder), "--data", arith_data["val"], "--n", "1")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"cannot load the model in {folder} (SafetensorError: Error while deserializing header" in out.stderr


def snapshot(run) -> dict[str, bytes]:
    return {name: (run / name).read_bytes() for name in ("config.yaml", "metrics.jsonl", "latest_checkpointed_iteration.txt")}


@pytest.mark.parametrize("first, then, message", [
    ([], ["actor_rollout_ref.model.path={random}"],
     r"cannot resume: .*global_step_2/actor/model\.safetensors: model\.embed_tokens\.weight is \[\d+, \d+\] there but "
     r"\[\d+, 32\] in the model being trained \(actor_rollout_ref\.model\); resume with the model config that wrote the "
     r"checkpoint, or start over: trainer\.resume_mode=disable or another trainer\.default_local_dir$"),
    (["actor_rollout_ref.model.lora_rank=4"], ["actor_rollout_ref.model.lora_rank=8"],
     r"cannot resume: .*global_step_2/actor/adapter_model\.safetensors: .*lora_A\.weight is \[4, \d+\] there but "
     r"\[8, \d+\] in the model being trained"),
    ([], ["algorithm.adv_estimator=gae"], r"global_step_2 has no critic/ .*so this run cannot resume from it"),
], ids=["another_model", "another_lora_rank", "a_critic_now"])
def test_resuming_with_another_model_is_refused_before_anything_is_written(arith_data, random_model_dir, tmp_path,
                                                                          first, then, message):
    run = tmp_path / "run"
    train(overrides(arith_data, run, 2, *first))
    before = snapshot(run)
    changed = [x.format(random=random_model_dir) for x in then]
    with pytest.raises(ConfigError, match=message):
        train(overrides(arith_data, run, 4, *first, *changed, "trainer.resume_allow_config_change=true"))
    assert snapshot(run) == before  # config.yaml, metrics.jsonl and latest untouched
    out = cli("train", *overrides(arith_data, run, 4, *first, *changed, "trainer.resume_allow_config_change=true"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("hybridrl train: error: ")  # one line (after load progress bars)
    assert snapshot(run) == before


def test_a_changed_learning_rate_takes_effect_on_an_allowed_resume(arith_data, tmp_path):
    """torch's load_state_dict restores the saved lr, betas and weight decay: an allowed lr change was
    silently ignored (a sibling of issue #22's resume faults)."""
    from run_helpers import metrics

    run = tmp_path / "run"
    const = "actor_rollout_ref.actor.optim.warmup_style=constant"  # the logged lr is then the configured one
    train(overrides(arith_data, run, 2, "actor_rollout_ref.actor.optim.lr=1e-3", const))
    lines = []
    train(overrides(arith_data, run, 4, "actor_rollout_ref.actor.optim.lr=3e-4", const,
                    "trainer.resume_allow_config_change=true"), log=lines.append)
    assert any(line.startswith(f"note: resuming {run}/global_step_2 with a changed config (trainer.resume_allow_config_"
                               "change=true): actor_rollout_ref.actor.optim.lr: 0.001 -> 0.0003") for line in lines)
    assert [(r["step"], r.get("actor/lr")) for r in metrics(run)] == [(0, None), (1, 1e-3), (2, 1e-3), (3, 3e-4),
                                                                      (4, 3e-4)]


def test_a_damaged_checkpoint_without_checksums_fails_to_resume_in_one_line(arith_data, tmp_path):
    """An older checkpoint (sizes only in its manifest) whose optimizer state was damaged at its size:
    the load fails, and says where, not with torch's traceback."""
    import json

    from hybridrl.errors import HybridRLError

    run = tmp_path / "run"
    train(overrides(arith_data, run, 2))
    folder = run / "global_step_2"
    manifest = json.loads((folder / "checkpoint.json").read_text())
    (folder / "checkpoint.json").write_text(json.dumps({"step": 2, "files": {k: v["size"] for k, v in
                                                                               manifest["files"].items()}}))
    zero_header(folder / "actor_state.pt")
    lines = []
    with pytest.raises(HybridRLError, match=rf"^resuming from {folder} failed \((UnpicklingError|RuntimeError): .*\); it "
                                            r"was written by another config or is damaged: .*trainer\.resume_mode=disable"):
        train(overrides(arith_data, run, 4), log=lines.append)
    assert f"note: {folder} has no checksums (written by an older hybridrl); its files were checked by size only" in lines


def cut_short(folder, *names: str) -> None:
    """Truncate each file to half its size, as a full disk or an interrupted copy leaves it."""
    for name in names:
        with open(folder / name, "r+b") as f:
            f.truncate(os.path.getsize(folder / name) // 2)


def tree(run) -> dict[str, tuple[int, int]]:
    """The folder and everything in it, with sizes and modification times: equal trees, nothing written."""
    return {str(p.relative_to(run)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in [run, *sorted(run.rglob("*"))]}


def test_every_checkpoint_damaged_is_refused_then_disable_starts_over_beside_them(arith_data, tmp_path):
    from hybridrl.trainer import checkpoint

    run = tmp_path / "run"
    train(overrides(arith_data, run, 3, "trainer.save_freq=1"))
    for step in (1, 2, 3):
        cut_short(run / f"global_step_{step}", "actor_state.pt", "trainer_state.json")
    before = tree(run)
    out = cli("train", *overrides(arith_data, run, 3, "trainer.save_freq=1"))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "skipping" not in out.stdout + out.stderr  # the one line names them all
    errors = [line for line in out.stderr.splitlines() if line.startswith("hybridrl train: error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        f"hybridrl train: error: trainer.resume_mode=auto: every checkpoint in {run} is damaged (global_step_3: "
        "actor_state.pt has "), out.stderr
    assert errors[0].endswith("); nothing was written. Set trainer.resume_mode=disable to start over in this folder "
                              "(the damaged checkpoints are kept: one whose step the new run saves is renamed to "
                              "global_step_<N>.damaged), or point trainer.default_local_dir at another folder")
    assert tree(run) == before  # not the lock file, metrics.jsonl, config.yaml or any checkpoint

    damaged = {step: tree(run / f"global_step_{step}") for step in (1, 2, 3)}
    _, summary = train(overrides(arith_data, run, 2, "trainer.save_freq=1", "trainer.resume_mode=disable",
                                 "trainer.max_actor_ckpt_to_keep=1"))
    assert summary.steps == 2
    assert tree(run / "global_step_1.damaged") == damaged[1] and tree(run / "global_step_2.damaged") == damaged[2]
    assert tree(run / "global_step_3") == damaged[3]  # a step the new run did not reach: untouched, and not pruned
    assert not (run / "global_step_1").exists()  # keep 1: the new run's own step 1 was pruned
    lines = []
    assert checkpoint.find_resume_point("auto", str(run), None, lines.append).step == 2  # the new run's, intact
    assert len(lines) == 1 and lines[0].startswith(f"WARNING: skipping {run}/global_step_3: actor_state.pt has "
                                                   f"{damaged[3]['actor_state.pt'][0]} bytes, the manifest says ")

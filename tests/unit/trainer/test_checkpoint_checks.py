"""Checkpoints are checked, not just sized: a same-size damaged file is caught by its checksum at resume
(passed over for the previous checkpoint, named in a warning) and by export/eval/serve (refused in
one line); old manifests without checksums are accepted with a note; a failed save names its cause."""

from __future__ import annotations

import errno
import json
import os

import pytest

from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.models.export import DamagedCheckpoint, actor_folder
from hybridrl.trainer import checkpoint
from hybridrl.trainer.manifest import read_manifest


def make_folder(root, step: int):
    """A checkpoint folder as the trainer writes it: actor/ weights, trainer state, manifest last."""
    folder = root / f"global_step_{step}"

    def write(tmp):
        os.makedirs(os.path.join(tmp, "actor"))
        with open(os.path.join(tmp, "actor", "model.safetensors"), "wb") as f:
            f.write(bytes(range(256)) * 8)
        with open(os.path.join(tmp, "actor", "config.json"), "w") as f:
            f.write("{}")
        os.makedirs(os.path.join(tmp, "critic"))
        with open(os.path.join(tmp, "critic", "model.safetensors"), "wb") as f:
            f.write(b"c" * 64)
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump({"step": step, "sampler": {"epoch": 0, "position": 8 * step}}, f)

    assert checkpoint.write_step_folder(str(root), step, write) == str(folder)
    return folder


def zero_header(path, count: int = 8) -> None:
    """Overwrite the first bytes in place: the size stays, the content does not."""
    with open(path, "r+b") as f:
        f.write(b"\0" * count)


def test_a_same_size_damage_is_caught_by_the_checksum_only(tmp_path):
    folder = make_folder(tmp_path, 2)
    zero_header(folder / "actor" / "model.safetensors")
    assert checkpoint.problem_of(str(folder)) is None  # sizes alone cannot see it
    assert checkpoint.problem_of(str(folder), verify="") == (
        "actor/model.safetensors does not match its SHA-256 in checkpoint.json: the file changed after it was saved "
        "(damaged)")
    assert checkpoint.problem_of(str(folder), verify="critic/") is None  # only the asked-for part is hashed


def test_resume_passes_over_a_damaged_checkpoint_naming_the_file(tmp_path):
    make_folder(tmp_path, 2)
    newest = make_folder(tmp_path, 4)
    zero_header(newest / "actor" / "model.safetensors")
    lines = []
    point = checkpoint.find_resume_point("auto", str(tmp_path), None, lines.append)
    assert point.step == 2
    assert lines == [f"WARNING: skipping {newest}: actor/model.safetensors does not match its SHA-256 in "
                     "checkpoint.json: the file changed after it was saved (damaged); trying the checkpoint before it"]
    with pytest.raises(ConfigError, match=r"resume_from_path=.*global_step_4' is not a whole checkpoint: "
                                          r"actor/model\.safetensors does not match its SHA-256"):
        checkpoint.find_resume_point("resume_path", str(tmp_path), str(newest))


def test_resume_refuses_when_every_checkpoint_is_damaged(tmp_path):
    for step in (2, 4):
        zero_header(make_folder(tmp_path, step) / "trainer_state.json", 1)
    with pytest.raises(HybridRLError, match=r"every checkpoint in .* is damaged \(.*global_step_4: trainer_state\.json "
                                            r"does not match.*global_step_2: .*\); .*trainer\.resume_mode=disable"):
        checkpoint.find_resume_point("auto", str(tmp_path), None, lambda *_: None)


def test_a_checkpoint_without_checksums_is_accepted_with_a_note(tmp_path):
    folder = make_folder(tmp_path, 2)
    manifest = json.loads((folder / "checkpoint.json").read_text())
    old = {"step": 2, "files": {rel: entry["size"] for rel, entry in manifest["files"].items()}}  # format 1
    (folder / "checkpoint.json").write_text(json.dumps(old))
    zero_header(folder / "actor" / "model.safetensors")  # invisible without checksums: the note says so
    lines = []
    assert checkpoint.find_resume_point("auto", str(tmp_path), None, lines.append).step == 2
    assert lines == [f"note: {folder} has no checksums (written by an older hybridrl); its files were checked by size "
                     "only"]


def test_pruning_a_critic_keeps_the_other_checksums(tmp_path):
    make_folder(tmp_path, 2)
    make_folder(tmp_path, 4)
    checkpoint.prune(str(tmp_path), None, keep_critic=1)
    old = tmp_path / "global_step_2"
    assert not (old / "critic").exists()
    assert set(read_manifest(str(old)).files) == {"actor/model.safetensors", "actor/config.json", "trainer_state.json"}
    assert checkpoint.problem_of(str(old), verify="") is None
    zero_header(old / "actor" / "model.safetensors")
    assert "does not match" in checkpoint.problem_of(str(old), verify="")  # the checksum was kept, not recomputed


def test_export_eval_and_serve_refuse_a_damaged_checkpoint_in_one_line(tmp_path):
    make_folder(tmp_path, 2)
    newest = make_folder(tmp_path, 4)
    (tmp_path / checkpoint.LATEST).write_text("4")
    zero_header(newest / "actor" / "model.safetensors")
    for given in (tmp_path, newest, newest / "actor"):  # a run folder, a step folder, its actor/ folder
        with pytest.raises(DamagedCheckpoint) as e:
            actor_folder(str(given))
        assert str(e.value) == (f"{newest} is not a usable checkpoint: actor/model.safetensors does not match its "
                                f"SHA-256 in checkpoint.json: the file changed after it was saved (damaged); use another "
                                f"checkpoint, e.g. {tmp_path / 'global_step_2'}")
    zero_header(newest / "critic" / "model.safetensors")  # not the policy's: export/eval/serve do not read it
    assert actor_folder(str(tmp_path / "global_step_2")) == str(tmp_path / "global_step_2" / "actor")

    from hybridrl.eval.evaluate import model_folder

    with pytest.raises(ConfigError, match=r"^--model .*global_step_4: .*global_step_4 is not a usable checkpoint: "
                                          r"actor/model\.safetensors does not match"):
        model_folder(str(newest), "--model")


@pytest.mark.parametrize("code, says", [
    (errno.ENOSPC, "free disk space or choose another trainer.default_local_dir"),
    (errno.EACCES, "make .* writable or choose another trainer.default_local_dir"),
    (errno.ENOENT, "[^ ]+ or a file in it was removed while the run was writing; keep it"),
    (errno.EIO, "fix the cause above"),
])
def test_a_failed_save_names_its_real_cause(tmp_path, code, says):
    """Issue #22: two runs on one folder failed with "free disk space"; only a full disk says that now."""
    make_folder(tmp_path, 2)

    def fail(tmp):
        raise OSError(code, os.strerror(code))

    with pytest.raises(HybridRLError, match=rf"saving the checkpoint of step 4 in .* failed \(\[Errno {code}\] .*\); the "
                                            rf"previous checkpoint .*global_step_2 is intact\. To go on: {says}, then "
                                            "resume") as e:
        checkpoint.write_step_folder(str(tmp_path), 4, fail)
    if code != errno.ENOSPC:
        assert "disk space" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_2"]  # no temporary folder left


def test_sft_final_model_carries_a_manifest_of_its_own_files(tmp_path, random_model_dir):
    """hybridrl sft writes its final model into the run folder itself: eval/serve/export verify it."""
    from hybridrl.models.loading import load_causal_lm, load_tokenizer
    from hybridrl.trainer.sft import save_final, save_step

    root = tmp_path / "sft"
    root.mkdir()
    (root / "metrics.jsonl").write_text('{"step": 1}\n')
    model, tok = load_causal_lm(random_model_dir), load_tokenizer(random_model_dir)
    step = save_step(model, tok, str(root), 1)
    save_final(model, tok, str(root))
    files = set(read_manifest(str(root)).files)
    assert "model.safetensors" in files and "config.json" in files
    assert not any(f.startswith("global_step_") or f == "metrics.jsonl" for f in files)  # the model's files only
    assert actor_folder(str(root)) == str(root) and actor_folder(step) == step
    assert not [p for p in os.listdir(root) if p.startswith(".tmp")]
    zero_header(root / "model.safetensors")
    with pytest.raises(DamagedCheckpoint, match=r"sft is not a usable checkpoint: model\.safetensors does not match"):
        actor_folder(str(root))

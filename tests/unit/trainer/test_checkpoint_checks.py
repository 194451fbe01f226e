"""Checkpoints are checked, not just sized: a same-size damaged file is caught by its checksum at resume
(passed over for the previous checkpoint, named in a warning) and by export/eval/serve (refused in
one line); old manifests without checksums are accepted with a note; a failed save names its cause."""

from __future__ import annotations

import errno
import json
import os
import re

import pytest

from hybridrl.errors import ConfigError, HybridRLError
from hybridrl.trainer.export import DamagedCheckpoint, actor_folder
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


def truncate(path, size: int = 10) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


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


@pytest.mark.parametrize("damage, problem", [
    (zero_header, "actor/model.safetensors does not match its SHA-256 in checkpoint.json: the file changed after it "
                  "was saved (damaged)"),  # damaged at its old size: only the checksum tells
    (truncate, "actor/model.safetensors has 10 bytes, the manifest says 2048"),  # one damaged: still passed over
])
def test_resume_passes_over_a_damaged_checkpoint_naming_the_file(tmp_path, damage, problem):
    make_folder(tmp_path, 2)
    newest = make_folder(tmp_path, 4)
    damage(newest / "actor" / "model.safetensors")
    lines = []
    point = checkpoint.find_resume_point("auto", str(tmp_path), None, lines.append)
    assert point.step == 2
    assert lines == [f"WARNING: skipping {newest}: {problem}; trying the checkpoint before it"]
    with pytest.raises(ConfigError, match=r"resume_from_path=.*global_step_4' is not a whole checkpoint: "
                                          + re.escape(problem.split(" in ")[0].split(", ")[0])):
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


def tree(root) -> dict[str, tuple[int, int]]:
    """The folder and everything in it, with sizes and modification times: equal trees, nothing written."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in [root, *sorted(root.rglob("*"))]}


def test_every_checkpoint_damaged_is_one_refusal_naming_each_and_writing_nothing(tmp_path):
    state = make_folder(tmp_path, 2) / "trainer_state.json"
    saved_size = state.stat().st_size
    truncate(state)
    zero_header(make_folder(tmp_path, 4) / "actor" / "model.safetensors")  # same size: only the checksum tells
    (tmp_path / ".tmp_global_step_6_1").mkdir()  # a save killed mid-write is not a checkpoint
    before, lines = tree(tmp_path), []
    with pytest.raises(ConfigError) as e:
        checkpoint.find_resume_point("auto", str(tmp_path), None, lines.append)
    assert str(e.value) == (
        f"trainer.resume_mode=auto: every checkpoint in {tmp_path} is damaged (global_step_4: actor/model.safetensors "
        "does not match its SHA-256 in checkpoint.json: the file changed after it was saved (damaged); global_step_2: "
        f"trainer_state.json has 10 bytes, the manifest says {saved_size}); nothing was written. Set "
        "trainer.resume_mode=disable to start over in this folder (the damaged checkpoints are kept: one whose step "
        "the new run saves is renamed to global_step_<N>.damaged), or point trainer.default_local_dir at another "
        "folder")
    assert lines == []  # the one line says it all: no warning per checkpoint before it
    assert tree(tmp_path) == before
    assert checkpoint.find_resume_point("disable", str(tmp_path), None, lines.append) is None


def test_a_refusal_names_five_checkpoints_and_counts_the_rest(tmp_path):
    for step in range(1, 8):
        (make_folder(tmp_path, step) / "checkpoint.json").unlink()
    with pytest.raises(ConfigError, match=r"\(global_step_7: no checkpoint\.json .*global_step_3: no checkpoint\.json "
                                          r"\(the save did not finish\); and 2 more\); nothing was written"):
        checkpoint.find_resume_point("auto", str(tmp_path), None)


def test_no_checkpoint_at_all_is_a_fresh_start(tmp_path):
    assert checkpoint.find_resume_point("auto", str(tmp_path / "new"), None) is None
    (tmp_path / ".tmp_global_step_2_1").mkdir()
    (tmp_path / "metrics.jsonl").write_text("")
    assert checkpoint.find_resume_point("auto", str(tmp_path), None) is None


def test_an_unreadable_trainer_state_of_a_sizes_only_checkpoint_is_damage_not_a_traceback(tmp_path):
    folder = make_folder(tmp_path, 2)
    (folder / "trainer_state.json").write_text("{" + " " * (len((folder / "trainer_state.json").read_text()) - 1))
    manifest = json.loads((folder / "checkpoint.json").read_text())
    old = {"step": 2, "files": {rel: entry["size"] for rel, entry in manifest["files"].items()}}  # format 1
    (folder / "checkpoint.json").write_text(json.dumps(old))
    with pytest.raises(ConfigError, match=r"global_step_2: unreadable trainer_state\.json \(JSONDecodeError: "):
        checkpoint.find_resume_point("auto", str(tmp_path), None)


def test_a_save_onto_a_damaged_step_sets_it_aside_and_onto_an_intact_one_replaces_it(tmp_path):
    truncate(make_folder(tmp_path, 2) / "trainer_state.json")
    damaged = tree(tmp_path / "global_step_2")
    make_folder(tmp_path, 2)
    assert tree(tmp_path / "global_step_2.damaged") == damaged  # moved whole, not rewritten
    assert checkpoint.problem_of(str(tmp_path / "global_step_2"), verify="") is None
    (tmp_path / "global_step_2" / "checkpoint.json").unlink()
    make_folder(tmp_path, 2)  # a second start-over onto a damaged step 2
    assert (tmp_path / "global_step_2.damaged-2" / "trainer_state.json").is_file()
    intact = make_folder(tmp_path, 4)
    make_folder(tmp_path, 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_2", "global_step_2.damaged",
                                                          "global_step_2.damaged-2", "global_step_4"]
    assert checkpoint.problem_of(str(intact), verify="") is None
    assert checkpoint.complete_checkpoints(str(tmp_path)).keys() == {2, 4}  # set-aside folders are no checkpoints


def test_pruning_never_deletes_or_counts_a_damaged_checkpoint_nor_a_newer_one(tmp_path):
    truncate(make_folder(tmp_path, 1) / "trainer_state.json")  # an earlier run's, damaged
    truncate(make_folder(tmp_path, 9) / "trainer_state.json")
    make_folder(tmp_path, 8)  # an earlier run that went further: intact, but not this run's history
    for step in (2, 3, 4):  # this run's saves
        make_folder(tmp_path, step)
        (tmp_path / checkpoint.LATEST).write_text(str(step))
        checkpoint.prune(str(tmp_path), keep_actor=2, keep_critic=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "global_step_1", "global_step_3", "global_step_4", "global_step_8", "global_step_9", checkpoint.LATEST]
    assert checkpoint.problem_of(str(tmp_path / "global_step_1")).startswith("trainer_state.json has 10 bytes")


def test_the_listing_sees_another_runs_save_or_rewrite(tmp_path):
    make_folder(tmp_path, 2)
    seen = checkpoint.checkpoint_listing(str(tmp_path))
    assert checkpoint.checkpoint_listing(str(tmp_path)) == seen
    (tmp_path / "metrics.jsonl").write_text("{}\n")  # what a resume decision does not read
    assert checkpoint.checkpoint_listing(str(tmp_path)) == seen
    make_folder(tmp_path, 4)
    assert checkpoint.checkpoint_listing(str(tmp_path)) != seen
    seen = checkpoint.checkpoint_listing(str(tmp_path))
    os.utime(tmp_path / "global_step_4" / "checkpoint.json", ns=(1, 1))  # rewritten in place
    assert checkpoint.checkpoint_listing(str(tmp_path)) != seen

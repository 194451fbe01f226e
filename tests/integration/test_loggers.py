"""A real short run with every logger on (wandb offline, MLflow in a local SQLite store), and
each backend read back: the values it holds are the ones in metrics.jsonl. Generation dumps too."""

from __future__ import annotations

import glob
import json
import struct

import pytest

from test_train import base_overrides, run_training

pytestmark = pytest.mark.slow

KEYS = ["critic/score/mean", "actor/pg_loss", "actor/entropy", "timing_s/step", "perf/mfu/actor",
        "timing_per_token_ms/gen", "perf/max_memory_allocated_gb", "val-core/arithmetic/reward/mean@2",
        "val-core/arithmetic/reward/pass@2"]


def read_wandb(path: str) -> tuple[list[dict], dict]:
    """History rows and the config of an offline .wandb file. Its layout is the LevelDB log format: a 7-byte
    header (":W&B", magic 0xBEE1, version), then 32 KiB blocks of chunks, each a 7-byte header
    (crc32, little-endian length, type: 1 full, 2 first, 3 middle, 4 last) and its bytes; a block's
    tail shorter than a header is padding. Each record is a protobuf `Record`."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, block, rows, config, pending = 7, 32768, [], {}, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # padding at the end of a block
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:  # zero-filled rest of the last block
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            kind = record.WhichOneof("record_type")
            if kind == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
            elif kind in ("run", "config"):  # the run record carries wandb.init's config
                items = record.run.config.update if kind == "run" else record.config.update
                config.update({item.key: json.loads(item.value_json) for item in items})
    return rows, config


def test_every_logger_holds_the_logged_values(arith_data, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_dir = tmp_path / "run"
    run, _, _, records = run_training(base_overrides(arith_data, run_dir) + [
        "trainer.logger=[console,file,tensorboard,wandb,mlflow]", "trainer.project_name=proj",
        "trainer.experiment_name=exp", "actor_rollout_ref.rollout.val_kwargs.n=2",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "data.val_max_samples=6",
        "trainer.log_val_generations=3", f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
        f"trainer.validation_data_dir={tmp_path / 'val'}", "trainer.save_freq=0"])
    assert [r["step"] for r in records] == [0, 1, 2]
    expected = {(r["step"], k): r[k] for r in records for k in KEYS if k in r}
    assert {k for _, k in expected} == set(KEYS)
    assert 0 < records[1]["perf/mfu/actor"] < 2 and records[1]["perf/max_memory_allocated_gb"] > 0.1

    tb = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    tb.Reload()
    got = {(e.step, k): e.value for k in KEYS for e in tb.Scalars(k)}
    assert got == pytest.approx(expected, rel=1e-6)  # TensorBoard stores float32
    assert "val/generations/text_summary" in tb.Tags()["tensors"]

    (wandb_file,) = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    history, config = read_wandb(wandb_file)
    got = {(row["_step"], k): row[k] for row in history for k in KEYS if k in row}
    assert got == pytest.approx(expected, rel=1e-12)
    tables = [(row["_step"], row["val/generations/path"]) for row in history if "val/generations/path" in row]
    assert [step for step, _ in tables] == [0, 2]  # a wandb.Table at each validation
    table = json.load(open(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "files"))[0] + "/" + tables[0][1]))
    assert table["columns"] == ["input", "output", "gts", "score"] and len(table["data"]) == 3
    assert config["trainer"]["experiment_name"] == "exp" and config["data"]["train_batch_size"] == 8

    client = MlflowClient(f"sqlite:///{run_dir / 'mlflow.db'}")
    (mlrun,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    assert mlrun.info.run_name == "exp"
    got = {(m.step, k): m.value for k in KEYS
           for m in client.get_metric_history(mlrun.info.run_id, k.replace("@", "_at_"))}
    assert got == pytest.approx(expected, rel=1e-12)
    artifacts = {a.path for a in client.list_artifacts(mlrun.info.run_id, "val_generations")}
    assert artifacts == {"val_generations/step_0.jsonl", "val_generations/step_2.jsonl"}

    # generations: the first 3 validation samples in the file logger, every one in the dumps
    logged = [json.loads(line) for line in open(run_dir / "val_generations.jsonl")]
    assert [(g["step"], set(g)) for g in logged] == [(s, {"step", "input", "output", "gts", "score"})
                                                     for s in (0, 0, 0, 2, 2, 2)]
    assert [g["input"] for g in logged[:3]] == [g["input"] for g in logged[3:]]  # the same prompts each time
    for step in (0, 2):
        dumped = [json.loads(line) for line in open(tmp_path / "val" / f"{step}.jsonl")]
        assert len(dumped) == 6 * 2
        mean = sum(d["score"] for d in dumped) / len(dumped)
        assert mean == pytest.approx(records[step]["val-core/arithmetic/reward/mean@2"])
    for step in (1, 2):
        dumped = [json.loads(line) for line in open(tmp_path / "rollouts" / f"{step}.jsonl")]
        assert len(dumped) == 8 * 4 and {"input", "output", "gts", "score", "reward", "advantage", "data_source"} <= set(dumped[0])
        assert sum(d["score"] for d in dumped) / len(dumped) == pytest.approx(records[step]["critic/score/mean"])
        for g in range(0, len(dumped), 4):  # GRPO: a group's advantages sum to 0
            assert sum(d["advantage"] for d in dumped[g:g + 4]) == pytest.approx(0.0, abs=1e-5)
        assert max(d["response_length"] for d in dumped) == records[step]["response_length/max"]

"""The reward-model trainer's pieces: rewards read at each sequence's last real token (whatever the padding),
micro-batches that add up to the whole batch, and the held-out metrics."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from hybridrl.config.loader import load_config
from hybridrl.config.rm import RMConfig
from hybridrl.data.preference import PreferenceColumns, PreferenceDataset
from hybridrl.models.loading import load_tokenizer, reward_model_to_train
from hybridrl.workers.optim import build_optimizer
from hybridrl.trainer.rm import _Parts, evaluate, pair_rewards, score_pairs, train_step


@pytest.fixture(scope="module")
def tok(random_model_dir):
    return load_tokenizer(random_model_dir)


@pytest.fixture(scope="module")
def data(tok, tmp_path_factory):
    path = tmp_path_factory.mktemp("pairs") / "p.jsonl"
    rows = [{"prompt": f"{a}+{a}=?", "chosen": str(2 * a), "rejected": "wrong " * (a % 3 + 1), "margin": a % 2}
            for a in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return PreferenceDataset([str(path)], tok, PreferenceColumns(), 64, "data.train_files")


@pytest.fixture(scope="module")
def model(random_model_dir, tok):
    torch.manual_seed(0)
    rm = reward_model_to_train(random_model_dir, tok)
    with torch.no_grad():  # a head large enough that different sequences score clearly apart
        rm.score.weight.normal_(0, 1.0)
    return rm


def by_hand(model, ids: list[int]) -> float:
    """The score head on the last token of one unpadded sequence."""
    return model.score(model.base_model(input_ids=torch.tensor([ids])).last_hidden_state)[0, -1, 0].item()


@pytest.mark.parametrize("pad", ["pad", "eos"])
def test_rewards_are_the_score_at_each_sequences_last_real_token(model, tok, data, pad):
    # pad = EOS: the position comes from the attention mask, not from comparing ids with the pad id
    pad_id = tok.pad_token_id if pad == "pad" else tok.eos_token_id
    batch = data.collate([0, 1, 2, 3], pad_id)
    assert batch.attention_mask.sum(1).unique().numel() > 1  # rows of different lengths: padding is exercised
    with torch.no_grad():
        r_c, r_r = pair_rewards(model, batch)
        for k, i in enumerate([0, 1, 2, 3]):
            p = data.pairs[i]
            assert math.isclose(r_c[k].item(), by_hand(model, p.prompt_ids + p.chosen_ids), abs_tol=1e-5)
            assert math.isclose(r_r[k].item(), by_hand(model, p.prompt_ids + p.rejected_ids), abs_tol=1e-5)
        # the score of the EOS position, not of the token before it
        p = data.pairs[0]
        assert abs(r_c[0].item() - by_hand(model, p.prompt_ids + p.chosen_ids[:-1])) > 1e-4


def _parts(model, data, tok, micro: int) -> tuple[RMConfig, _Parts]:
    # not validated: the config refuses a micro size that does not divide the batch, but the step's sums must not care
    cfg = load_config(RMConfig, None, ["data.train_batch_size=8", f"data.micro_batch_size_per_gpu={micro}"])
    model = copy.deepcopy(model)
    opt, sched = build_optimizer(model.parameters(), 1e-2, 0.0, [0.9, 0.95], 0, 10, "constant", 0.0)
    return cfg, _Parts(model, tok, data, None, None, opt, sched, None, 10, 1)


def test_micro_batches_add_up_to_the_whole_batch_step(model, data, tok):
    cfg1, whole = _parts(model, data, tok, micro=8)
    cfg2, split = _parts(model, data, tok, micro=3)  # uneven: 3 + 3 + 2 pairs
    m1 = train_step(cfg1, whole, list(range(8)))
    m2 = train_step(cfg2, split, list(range(8)))
    for key in ("train/loss", "train/pair_accuracy", "train/margin_mean", "train/grad_norm"):
        assert math.isclose(m1[key], m2[key], rel_tol=1e-5, abs_tol=1e-6), key
    # the gradients, not the weights: Adam's first step is ~lr * sign(g), which blows up float noise in g ≈ 0
    for (name, a), b in zip(whole.model.named_parameters(), split.model.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-4, msg=name)
    changed = [not torch.equal(a, b) for a, b in zip(whole.model.parameters(), model.parameters())]
    assert all(changed)  # every parameter (backbone and head) took the step


def test_step_metrics_match_the_loss_computed_directly(model, data, tok):
    cfg, parts = _parts(model, data, tok, micro=8)
    with torch.no_grad():
        r_c, r_r = pair_rewards(parts.model, data.collate(list(range(8)), tok.pad_token_id))
    margin = torch.tensor([p.margin for p in data.pairs])
    expected = torch.nn.functional.softplus(-(r_c - r_r - margin)).mean().item()  # -log sigmoid(x) = softplus(-x)
    metrics = train_step(cfg, parts, list(range(8)))
    assert math.isclose(metrics["train/loss"], expected, rel_tol=1e-5)
    assert metrics["train/pair_accuracy"] == (r_c > r_r).float().mean().item()
    assert math.isclose(metrics["train/margin_mean"], (r_c - r_r).mean().item(), rel_tol=1e-5, abs_tol=1e-6)


def test_evaluate_reports_accuracy_and_mean_margin_over_every_pair(model, data, tok):
    r_c, r_r = score_pairs(model, data, micro=3, pad_id=tok.pad_token_id)
    assert r_c.shape == r_r.shape == (len(data),)
    metrics = evaluate(model, data, 3, tok.pad_token_id, 0.0)
    assert metrics["val/pair_accuracy"] == (r_c > r_r).float().mean().item()
    assert math.isclose(metrics["val/margin_mean"], (r_c - r_r).mean().item(), rel_tol=1e-5, abs_tol=1e-6)
    assert 0 < metrics["val/loss"] < 50


def test_a_folder_of_only_damaged_checkpoints_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    import os

    from hybridrl.errors import ConfigError
    from hybridrl.trainer import rm as rm_trainer
    from hybridrl.trainer.checkpoint import write_step_folder

    def write(tmp):
        with open(os.path.join(tmp, "rm_state.pt"), "wb") as f:
            f.write(b"s" * 4096)

    for step in (1, 2):
        with open(write_step_folder(str(tmp_path), step, write) + "/rm_state.pt", "r+b") as f:
            f.truncate(100)
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in [tmp_path, *tmp_path.rglob("*")]}
    monkeypatch.setattr(rm_trainer, "reward_model_to_train", lambda *a: pytest.fail("loaded before the resume check"))
    cfg = load_config(RMConfig, None, [f"trainer.default_local_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"^trainer\.resume_mode=auto: every checkpoint in .* is damaged "
                                          r"\(global_step_2: rm_state\.pt has 100 bytes, the manifest says 4096; "
                                          r"global_step_1: .*\); "
                                          r"nothing was written\. Set trainer\.resume_mode=disable"):
        rm_trainer.run_rm(cfg, log=lambda *_: None)
    assert {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in [tmp_path, *tmp_path.rglob("*")]} == before

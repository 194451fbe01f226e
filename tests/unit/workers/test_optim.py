"""lr_multiplier and warmup_steps_of: hand-computed schedule values."""

from __future__ import annotations

import math

import pytest

from hybridrl.errors import ConfigError
from hybridrl.workers.optim import lr_multiplier, warmup_steps_of


@pytest.mark.parametrize("style", ["constant", "cosine"])
def test_warmup_is_linear_from_one_over_warmup(style):
    # (step + 1) / warmup for step < warmup = 4
    assert [lr_multiplier(s, 4, 100, style) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]


def test_constant_after_warmup():
    assert [lr_multiplier(s, 2, 10, "constant") for s in (2, 3, 9, 10, 50)] == [1.0] * 5


def test_constant_without_warmup_starts_at_one():
    assert lr_multiplier(0, 0, 10, "constant") == 1.0


def test_cosine_starts_at_one_right_after_warmup():
    assert lr_multiplier(2, 2, 12, "cosine") == 1.0


def test_cosine_is_half_at_midpoint_of_decay():
    # warmup 2, total 12: decay spans 10 steps; step 7 -> progress 5/10 -> 0.5 * (1 + cos(pi/2)) = 0.5
    assert lr_multiplier(7, 2, 12, "cosine") == 0.5
    assert lr_multiplier(5, 0, 10, "cosine") == 0.5


def test_cosine_quarter_point():
    # warmup 0, total 8: step 2 -> progress 1/4 -> 0.5 * (1 + cos(pi/4)) = 0.5 + sqrt(2)/4
    assert lr_multiplier(2, 0, 8, "cosine") == pytest.approx(0.5 + math.sqrt(2) / 4, abs=1e-12)


def test_cosine_reaches_min_lr_ratio_at_end_and_stays():
    assert lr_multiplier(10, 0, 10, "cosine", min_lr_ratio=0.1) == pytest.approx(0.1, abs=1e-12)
    assert lr_multiplier(25, 0, 10, "cosine", min_lr_ratio=0.1) == pytest.approx(0.1, abs=1e-12)  # clamped
    assert lr_multiplier(12, 2, 12, "cosine", min_lr_ratio=0.0) == 0.0


def test_cosine_midpoint_with_min_lr_ratio():
    # 0.1 + 0.9 * 0.5 = 0.55
    assert lr_multiplier(5, 0, 10, "cosine", min_lr_ratio=0.1) == pytest.approx(0.55, abs=1e-12)


def test_cosine_is_monotone_non_increasing():
    values = [lr_multiplier(s, 3, 20, "cosine", 0.2) for s in range(3, 25)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert values[0] == 1.0


def test_unknown_style_after_warmup_raises():
    with pytest.raises(ConfigError, match=r"^optim\.warmup_style='linear' is not supported; "
                                          r"valid values: constant, cosine$"):
        lr_multiplier(5, 2, 10, "linear")


@pytest.mark.parametrize("steps, ratio, total, expected", [
    (5, 0.5, 100, 5),     # explicit steps win over the ratio
    (0, 0.5, 100, 0),     # 0 is explicit: no warm-up
    (-1, 0.1, 100, 10),   # -1: ratio x total
    (-1, 0.25, 10, 2),    # int(2.5) truncates
    (-1, 0.0, 100, 0),
])
def test_warmup_steps_of(steps, ratio, total, expected):
    assert warmup_steps_of(steps, ratio, total) == expected


def test_plain_fp32_parameters_get_fused_adamw_with_the_same_update():
    import torch

    from hybridrl.workers.optim import build_optimizer

    torch.manual_seed(0)
    a = torch.nn.Linear(8, 4)
    b = torch.nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    fused, _ = build_optimizer(a.parameters(), 1e-2, 0.01, [0.9, 0.999], 0, 10, "constant", 0.0)
    plain = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.01)
    assert fused.defaults["fused"] is True
    for _ in range(3):
        x = torch.randn(5, 8)
        for model, opt in ((a, fused), (b, plain)):
            opt.zero_grad()
            model(x).square().sum().backward()
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    half, _ = build_optimizer(torch.nn.Linear(2, 2).half().parameters(), 1e-2, 0.0, [0.9, 0.999], 0, 1, "constant", 0)
    assert not half.defaults["fused"]  # not every parameter is plain fp32: torch's default implementation


def test_the_default_run_decays_the_actor_lr_by_a_cosine_to_zero_and_keeps_the_critic_constant():
    """The built-in run (issue #37): 200 steps, one optimizer step each (ppo_mini_batch_size equals
    train_batch_size, one epoch), the actor's lr 2e-4 * (1 + cos(pi * s / 200)) / 2 at optimizer step s;
    the critic keeps verl's constant schedule. Values by hand: cos(pi/4) = sqrt(2)/2, and at the last
    step (1 - cos(pi/200)) / 2 = sin(pi/400)^2."""
    import torch

    from hybridrl.config.loader import load_config
    from hybridrl.config.schema import RLConfig
    from hybridrl.workers.build import _optimizer

    cfg = load_config(RLConfig, None, [])
    actor = cfg.actor_rollout_ref.actor
    assert (cfg.trainer.total_training_steps, actor.ppo_mini_batch_size, actor.ppo_epochs) == (200, 32, 1)
    assert cfg.data.train_batch_size == 32
    optimizer, scheduler = _optimizer(torch.nn.Linear(2, 2), actor.optim, total=200)
    lrs = []
    for _ in range(200):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(2e-4, rel=1e-12)
    assert lrs[50] == pytest.approx(2e-4 * (0.5 + math.sqrt(2) / 4), rel=1e-12)
    assert lrs[100] == pytest.approx(1e-4, rel=1e-12)
    assert lrs[150] == pytest.approx(2e-4 * (0.5 - math.sqrt(2) / 4), rel=1e-12)
    assert lrs[199] == pytest.approx(2e-4 * math.sin(math.pi / 400) ** 2, rel=1e-9)
    _, critic = _optimizer(torch.nn.Linear(2, 2), cfg.critic.optim, total=200)
    for _ in range(150):
        critic.optimizer.step()
        critic.step()
    assert critic.get_last_lr() == [1e-5]

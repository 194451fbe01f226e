"""Hand-derived values for rloo, reinforce++ (with and without baseline), opo, grpo_passk, gpg."""

from __future__ import annotations

import pytest
import torch

from hybridrl.algos.advantages import ADV_ESTIMATORS, AdvantageInputs, AdvantageParams, masked_whiten


def inputs(scores, uid, lengths=None, width=3):
    """Outcome rewards on the last valid token of each response."""
    lengths = lengths or [width] * len(scores)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).float()
    rewards = torch.zeros(len(scores), width)
    rewards[torch.arange(len(scores)), torch.tensor(lengths) - 1] = torch.tensor(scores, dtype=torch.float32)
    return AdvantageInputs(rewards, mask, torch.tensor(uid))


def seq_adv(name, inp, **params):
    out = ADV_ESTIMATORS.get(name)(inp, AdvantageParams(**params))
    assert torch.all(out.advantages[inp.response_mask == 0] == 0)  # never on padding
    return out


def test_rloo_is_score_minus_the_mean_of_the_others():
    # group [1, 0, 0, 1]: for a 1 the others average 1/3, so 1 - 1/3 = 2/3 (= 4/3 * (1 - 0.5)); for a 0: -2/3
    out = seq_adv("rloo", inputs([1, 0, 0, 1, 5], [0, 0, 0, 0, 9]))
    assert out.advantages[:, 0].tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, 5.0])  # group of one keeps 5
    assert out.advantages[0].tolist() == pytest.approx([2 / 3] * 3)  # every token of the response


def test_reinforce_plus_plus_discounts_then_whitens():
    # gamma 0.5; row 0 reward 1 on t=2: returns 0.25, 0.5, 1; row 1 reward 1 on t=1 (t=2 padding): 0.5, 1
    inp = inputs([1, 1], [0, 1], lengths=[3, 2])
    out = seq_adv("reinforce_plus_plus", inp, gamma=0.5)
    assert out.returns.tolist() == [[0.25, 0.5, 1.0], [0.5, 1.0, 0.0]]
    # valid returns 0.25 .5 1 .5 1: mean 0.65, unbiased var 0.45 / 4 = 0.1125, std 0.335410
    assert out.advantages[0, 0].item() == pytest.approx((0.25 - 0.65) / 0.1125 ** 0.5, abs=1e-5)
    valid = out.advantages[inp.response_mask.bool()]
    assert valid.mean().item() == pytest.approx(0.0, abs=1e-6) and valid.std().item() == pytest.approx(1.0, abs=1e-4)


def test_reinforce_plus_plus_baseline():
    # group scores 1, 0 -> 0.5, -0.5 on 3 and 2 tokens: values .5 .5 .5 -.5 -.5, mean 0.1, unbiased var 1.2/4 = 0.3
    out = seq_adv("reinforce_plus_plus_baseline", inputs([1, 0], [0, 0], lengths=[3, 2]))
    std = 0.3 ** 0.5
    assert out.advantages[0].tolist() == pytest.approx([0.4 / std] * 3, abs=1e-5)
    assert out.advantages[1].tolist() == pytest.approx([-0.6 / std, -0.6 / std, 0.0], abs=1e-5)


def test_opo_uses_a_length_weighted_baseline():
    # scores 1 (1 token) and 0 (3 tokens): baseline (1*1 + 3*0) / 4 = 0.25 -> advantages 0.75 and -0.25
    out = seq_adv("opo", inputs([1, 0], [0, 0], lengths=[1, 3]))
    assert out.advantages[0].tolist() == pytest.approx([0.75, 0, 0])
    assert out.advantages[1].tolist() == pytest.approx([-0.25, -0.25, -0.25])


def test_grpo_passk_credits_only_the_best_response():
    # group 0.5 1 0.2 0.9: best is 1, second 0.9 -> 0.1; unbiased std of the group: sqrt(0.41 / 3) = 0.369685
    scores, uid = [0.5, 1.0, 0.2, 0.9, 1.0, 1.0], [0, 0, 0, 0, 1, 1]
    raw = seq_adv("grpo_passk", inputs(scores, uid), norm_adv_by_std_in_grpo=False)
    assert raw.advantages[:, 0].tolist() == pytest.approx([0, 0.1, 0, 0, 0, 0], abs=1e-6)  # tie in group 1 -> 0
    normed = seq_adv("grpo_passk", inputs(scores, uid))
    assert normed.advantages[1, 0].item() == pytest.approx(0.1 / ((0.41 / 3) ** 0.5 + 1e-6), abs=1e-5)


def test_gpg_scales_by_the_share_of_nonzero_rewards():
    # 4 responses, 1 non-zero reward: alpha = 4 / 1; group [1, 0]: mean 0.5 -> 4 * (+-0.5); group [0, 0] -> 0
    out = seq_adv("gpg", inputs([1, 0, 0, 0], [0, 0, 1, 1]))
    assert out.advantages[:, 0].tolist() == pytest.approx([2.0, -2.0, 0.0, 0.0])


def test_masked_whiten_ignores_padding_and_handles_one_token():
    values = torch.tensor([[1.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # valid 1, 3: mean 2, unbiased var 2 -> (1-2)/sqrt(2), (3-2)/sqrt(2), padding 0
    assert masked_whiten(values, mask).tolist()[0] == pytest.approx([-(0.5 ** 0.5), 0.5 ** 0.5, 0.0], abs=1e-6)
    assert masked_whiten(values, torch.tensor([[1.0, 0.0, 0.0]])).tolist() == [[0.0, 0.0, 0.0]]


@pytest.mark.parametrize("name", ["rloo", "reinforce_plus_plus_baseline", "opo", "gpg", "grpo", "grpo_passk"])
def test_group_estimators_ignore_row_order(name):
    g = torch.Generator().manual_seed(1)
    scores = torch.randint(0, 3, (12,), generator=g).float().tolist()
    uid = [i // 4 for i in range(12)]
    base = seq_adv(name, inputs(scores, uid)).advantages
    perm = torch.randperm(12, generator=g)
    shuffled = seq_adv(name, inputs([scores[i] for i in perm], [uid[i] for i in perm])).advantages
    assert torch.allclose(shuffled, base[perm], atol=1e-6)

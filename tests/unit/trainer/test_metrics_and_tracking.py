import json
import sys

import pytest
import torch

from hybridrl.algos.advantages import AdvantageOutput
from hybridrl.batch import PromptBatch, Rollout
from hybridrl.rewards.manager import RewardOutput
from hybridrl.models.flops import matmul_params, measured_peak_flops, shared_prompt_training_flops, training_flops
from hybridrl.trainer.metrics import data_metrics, memory_metrics, throughput_metrics, timing_per_token_metrics
from hybridrl.trainer.tracking import Tracker, format_line, mlflow_key


def rollout() -> Rollout:
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    response_mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    prompts = PromptBatch(torch.ones(2, 3, dtype=torch.long), prompt_mask, ["a", "a"], ["1", "2"], [0, 1])
    return Rollout(prompts, torch.ones(2, 4, dtype=torch.long), response_mask, torch.zeros(2, 4), torch.tensor([0, 0]))


def test_data_metrics_by_hand():
    ro = rollout()
    adv = torch.tensor([[1.0, 1.0, 9.0, 9.0], [-1.0, -1.0, -1.0, -1.0]])  # 9s sit on padding
    reward = RewardOutput(scores=torch.tensor([1.0, 0.0]), rewards=torch.tensor([1.0, -0.5]),
                          overlong_penalty=torch.tensor([0.0, -0.5]), errors=torch.tensor([False, True]))
    token_rewards = torch.tensor([[0.0, 0.9, 0.0, 0.0], [0.0, 0.0, 0.0, -0.7]])  # e.g. after a KL penalty
    m = data_metrics(ro, reward, token_rewards, AdvantageOutput(adv, adv), None, max_response_length=4)
    assert m["critic/score/mean"] == 0.25  # shaped: (1 - 0.5) / 2
    assert m["reward/accuracy"] == 0.5  # the scorers' values
    assert m["reward/errors"] == 1.0  # one response's scorer failed (scored 0 with on_error=zero)
    assert m["critic/frac_zero_std_groups"] == 0.0  # the one group's rewards differ
    assert m["reward/length_corr"] == -1.0  # two points: the longer response got less reward
    assert abs(m["critic/rewards/mean"] - 0.1) < 1e-6  # (0.9 - 0.7) / 2
    assert m["reward/overlong_penalty/mean"] == -0.25 and m["reward/overlong_penalty/frac"] == 0.5
    assert "critic/values/mean" not in m
    # valid advantage tokens: 1, 1, -1, -1, -1, -1 -> mean -1/3, max 1 (padding's 9 is ignored)
    assert abs(m["critic/advantages/mean"] + 1 / 3) < 1e-6 and m["critic/advantages/max"] == 1.0
    assert m["response_length/mean"] == 3.0 and m["response_length/max"] == 4.0
    assert m["response_length/clip_ratio"] == 0.5  # one of two responses hit max_response_length
    assert m["prompt_length/mean"] == 2.5


def test_signal_metrics_count_flat_groups_and_correlate_length():
    from hybridrl.trainer.metrics import signal_metrics

    ro = rollout()
    ro.uid = torch.tensor([0, 1])  # two groups of one response: a single response is not "flat"
    m = signal_metrics(ro, torch.tensor([1.0, 1.0]), torch.tensor([2, 4]))
    assert m == {"critic/frac_zero_std_groups": 0.0, "reward/length_corr": 0.0}  # constant reward: no correlation
    uid = torch.tensor([0, 0, 1, 1, 2, 2])
    ro6 = Rollout(ro.prompts, torch.ones(6, 4), torch.ones(6, 4), torch.zeros(6, 4), uid)
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])  # groups 0 and 2 are flat
    lengths = torch.tensor([1, 2, 3, 4, 5, 6])
    m = signal_metrics(ro6, rewards, lengths)
    assert m["critic/frac_zero_std_groups"] == 2 / 3
    # Pearson r = sum((x - mean x)(y - mean y)) / (norm(x - mean x) * norm(y - mean y)), means 3.5 and 0.5
    x, y = lengths.double() - 3.5, rewards.double() - 0.5
    assert abs(m["reward/length_corr"] - float((x * y).sum() / (x.norm() * y.norm()))) < 1e-12


def test_critic_metrics_use_valid_tokens_only():
    ro = rollout()
    values = torch.tensor([[0.5, 1.0, 7.0, 7.0], [0.0, 0.0, 0.0, 0.0]])  # 7s on padding
    returns = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]])
    reward = RewardOutput(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0]), torch.zeros(2), torch.zeros(2, dtype=torch.bool))
    m = data_metrics(ro, reward, torch.zeros(2, 4), AdvantageOutput(returns, returns), values, max_response_length=4)
    # valid values 0.5, 1, 0, 0, 0, 0 -> mean 0.25, max 1
    assert m["critic/values/mean"] == 0.25 and m["critic/values/max"] == 1.0
    # valid returns R = [1, 1, 0, 0, 0, 2], mean 2/3, unbiased var = (1/9+1/9+4/9*3+16/9)/5 = 30/45 = 2/3
    # R - V = [0.5, 0, 0, 0, 0, 2], mean 5/12; squares sum 4.25 -> var = (4.25 - 6 * (5/12)^2) / 5 = 0.641667
    # explained variance = 1 - 0.641667 / 0.666667 = 0.0375
    assert abs(m["critic/vf_explained_var"] - 0.0375) < 1e-6


def test_throughput_counts_prompt_and_response_tokens():
    m = throughput_metrics(rollout(), step_seconds=2.0, world_size=1)
    assert m["perf/total_num_tokens"] == 11.0  # prompts 2 + 3, responses 2 + 4
    assert m["perf/throughput"] == 5.5


def test_tracker_writes_jsonl_and_a_console_line(tmp_path):
    lines = []
    tracker = Tracker(["console", "file"], str(tmp_path), write=lines.append)
    tracker.log({"critic/score/mean": 0.25, "actor/pg_loss": float("nan"), "val-core/a/reward/mean@1": 0.5}, step=3)
    tracker.close()
    record = json.loads(open(tmp_path / "metrics.jsonl").read())
    assert record == {"step": 3, "critic/score/mean": 0.25, "actor/pg_loss": "nan", "val-core/a/reward/mean@1": 0.5}
    assert lines == ["step 3 | score=0.25 | pg_loss=nan | val-core/a/reward/mean@1=0.5"]
    assert format_line({}, 1) == "step 1"


def test_timing_per_token_divides_generation_by_response_tokens_and_the_rest_by_all():
    # rollout(): response tokens 2 + 4 = 6, prompt tokens 2 + 3 = 5
    m = timing_per_token_metrics({"timing_s/gen": 0.6, "timing_s/update_actor": 1.1, "actor/pg_loss": 3.0}, rollout())
    assert m == pytest.approx({"timing_per_token_ms/gen": 100.0, "timing_per_token_ms/update_actor": 100.0})


def test_training_flops_by_hand():
    # two sequences of 2 and 3 tokens, 10 matmul params, 2 layers of width 4:
    # 6 * 10 * (2 + 3) + 12 * 2 * 4 * (4 + 9) = 300 + 1248
    assert training_flops(torch.tensor([2, 3]), n_matmul=10, n_layers=2, width=4) == 1548.0


def test_shared_prompt_flops_by_hand():
    # group 0: prompt 2 tokens, responses 1 and 3; group 1: prompt 4, response 2. 10 matmul params, 2 layers x 4.
    # matmuls: 6 * 10 * (2 + 4 + 1 + 3 + 2) = 720; attention: 12 * 2 * 4 * (2² + 4² + (3² - 2²) + (5² - 2²) + (6² - 4²))
    # = 96 * (4 + 16 + 5 + 21 + 20) = 6336
    got = shared_prompt_training_flops(torch.tensor([2, 2, 4]), torch.tensor([1, 3, 2]), torch.tensor([0, 0, 1]),
                                       n_matmul=10, n_layers=2, width=4)
    assert got == 720 + 6336
    # no shared prompts: exactly training_flops
    p, r = torch.tensor([2, 5, 3]), torch.tensor([4, 1, 2])
    assert shared_prompt_training_flops(p, r, torch.tensor([7, 3, 5]), 10, 2, 4) == training_flops(p + r, 10, 2, 4)


def test_matmul_params_count_linear_weights_once_per_module_tied_head_included():
    lin = torch.nn.Sequential(torch.nn.Embedding(7, 3), torch.nn.Linear(3, 5), torch.nn.Linear(5, 7, bias=False))
    assert matmul_params(lin) == 3 * 5 + 5 * 7  # embedding lookups and biases are not matmul weights
    assert 1e8 < measured_peak_flops("cpu", torch.float32, 256, 3) < 1e14  # a real, plausible measurement


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_memory_metric_is_the_peak_rss_on_cpu():
    got = memory_metrics()["perf/max_memory_allocated_gb"]
    hwm_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    assert got == pytest.approx(hwm_kib / 2**20, rel=0.01) and got > 0.01  # the kernel's own high-water mark


def test_file_logger_is_always_on_and_keeps_generations(tmp_path):
    lines = []
    tracker = Tracker(["console"], str(tmp_path), write=lines.append)
    tracker.log({"critic/score/mean": 0.5}, step=1)
    tracker.log_generations([{"input": "What is 1+1?", "output": "2", "gts": "2", "score": 1.0}], step=1)
    tracker.close()
    assert json.loads(open(tmp_path / "metrics.jsonl").read()) == {"step": 1, "critic/score/mean": 0.5}
    assert json.loads(open(tmp_path / "val_generations.jsonl").read()) == {
        "step": 1, "input": "What is 1+1?", "output": "2", "gts": "2", "score": 1.0}
    assert lines[1] == "step 1 sample 1/1 score=1: 'What is 1+1?' -> '2'"


def test_mlflow_keys_keep_verl_names_readable():
    assert mlflow_key("val-core/math/reward/pass@4") == "val-core/math/reward/pass_at_4"
    assert mlflow_key("timing_s/update_actor") == "timing_s/update_actor"
    assert mlflow_key("a:b(c)") == "a_b_c_"


def test_actor_mfu_counts_only_the_rows_the_update_computed():
    """With zero-advantage rows left out (actor.skip_zero_advantage), perf/mfu/actor counts the FLOPs of the rows
    computed: 2 of 4 groups here, so half the FLOPs of equal-length rows, with or without prompt sharing."""
    from hybridrl.models.flops import ModelShape
    from hybridrl.trainer.metrics import actor_mfu

    n, P, T = 8, 3, 4
    prompts = PromptBatch(torch.ones(n, P, dtype=torch.long), torch.ones(n, P, dtype=torch.long), ["a"] * n,
                          ["1"] * n, list(range(n)))
    rollout = Rollout(prompts, torch.ones(n, T, dtype=torch.long), torch.ones(n, T, dtype=torch.long),
                      torch.zeros(n, T), torch.arange(4).repeat_interleave(2))
    shape = ModelShape(1000, 2, 8, "cpu", torch.float32)
    computed = torch.tensor([True, True, False, False, True, True, False, False])
    for share in (False, True):
        full = actor_mfu(shape, rollout, 1, 1.0, share_prompts=share)["perf/mfu/actor"]
        half = actor_mfu(shape, rollout, 1, 1.0, share_prompts=share, computed=computed)["perf/mfu/actor"]
        assert half == pytest.approx(full / 2)
    lone = shared_prompt_training_flops(torch.full((4,), P), torch.full((4,), T), torch.tensor([0, 0, 2, 2]), 1000, 2, 8)
    assert actor_mfu(shape, rollout, 1, 1.0, share_prompts=True, computed=computed)["perf/mfu/actor"] == \
        pytest.approx(lone / measured_peak_flops("cpu", torch.float32))

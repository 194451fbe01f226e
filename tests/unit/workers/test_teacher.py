"""The distillation teacher (workers/build.py build_teacher) and the actor's distillation loss on a real tiny
model: a teacher equal to the student's initial weights sees KL 0 and gives no gradient; distillation alone
moves the student's log-probs toward a different teacher's; tokenizers and logits must match."""

from __future__ import annotations

import pytest
import torch

from hybridrl.algos.distill import teacher_metrics
from hybridrl.batch import PromptBatch, TrainBatch
from hybridrl.config.loader import load_config
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import validate_rl_config
from hybridrl.errors import ConfigError
from hybridrl.models.loading import load_causal_lm, load_tokenizer
from hybridrl.models.vocab_match import check_logits_cover, check_same_tokenizer, logits_size
from hybridrl.rollout.base import SamplingParams
from hybridrl.workers.build import build_policy, build_teacher

N_PROMPTS, N = 2, 4  # 8 responses: one mini-batch, one micro-batch


def _roles(student: str, teacher: str, *extra: str):
    cfg = load_config(RLConfig, None, [
        f"actor_rollout_ref.model.path={student}", "distillation.enabled=true",
        f"distillation.teacher_model.model_path={teacher}", f"data.train_batch_size={N_PROMPTS}",
        f"actor_rollout_ref.rollout.n={N}", f"actor_rollout_ref.actor.ppo_mini_batch_size={N_PROMPTS}",
        "data.max_response_length=12", "actor_rollout_ref.actor.optim.lr=5e-5",
        "distillation.distillation_loss.use_task_rewards=false", *extra])
    plan = validate_rl_config(cfg)
    tokenizer = load_tokenizer(student)
    policy = build_policy(cfg, plan, tokenizer, total=10)
    return policy, build_teacher(cfg, tokenizer), tokenizer


def _rollout(policy, tokenizer):
    ids = [tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                   tokenize=False), add_special_tokens=False)["input_ids"]
           for q in ("3+4=", "12-5=")]
    P = max(map(len, ids))
    prompts = PromptBatch(
        input_ids=torch.tensor([[tokenizer.pad_token_id] * (P - len(x)) + x for x in ids]),
        attention_mask=torch.tensor([[0] * (P - len(x)) + [1] * len(x) for x in ids]),
        data_source=["arithmetic"] * 2, ground_truth=["7", "7"], index=[0, 1])
    return policy.generate(prompts, N, SamplingParams(max_new_tokens=12, temperature=1.0))


def _batch(rollout, teacher_lp):
    return TrainBatch(rollout.sequences(), torch.zeros_like(rollout.rollout_log_probs), rollout.rollout_log_probs,
                      None, None, teacher_lp)


def test_a_teacher_equal_to_the_student_sees_kl_zero_and_gives_no_gradient():
    policy, teacher, tokenizer = _roles("tiny-arith", "tiny-arith", "distillation.distillation_loss.loss_mode=k3")
    rollout = _rollout(policy, tokenizer)
    seqs, mask = rollout.sequences(), rollout.response_mask
    teacher_lp = teacher.log_probs(seqs)
    torch.testing.assert_close(teacher_lp, policy.log_probs(seqs), rtol=0, atol=1e-5)
    kl = teacher_metrics(policy.log_probs(seqs), teacher_lp, mask, "k3")
    assert abs(kl["distill/teacher_kl_mean"]) < 1e-6 and abs(kl["distill/teacher_kl_max"]) < 1e-5
    metrics = policy.update(_batch(rollout, teacher_lp))
    assert abs(metrics["actor/distill_loss"]) < 1e-6 and metrics["actor/pg_loss"] == 0.0
    assert metrics["actor/grad_norm"] < 1e-4  # k3's gradient 1 - π_t/π_s vanishes where the two agree
    # (AdamW still moves the weights: it normalises even a ~0 gradient, so the gradient is what is checked)


@pytest.fixture(scope="module")
def perturbed_student(perturbed_tiny_arith) -> str:
    """tiny-arith with noise on every weight: the same tokenizer, other log-probs."""
    return perturbed_tiny_arith(3)


@pytest.mark.slow  # trains the student several steps per estimator (9-17 s each)
@pytest.mark.parametrize("estimator, policy_gradient", [("k3", False), ("k3+", False), ("k1", True)])
def test_distillation_alone_moves_the_students_log_probs_toward_the_teacher(perturbed_student, estimator,
                                                                            policy_gradient):
    policy, teacher, tokenizer = _roles(perturbed_student, "tiny-arith",
                                        f"distillation.distillation_loss.loss_mode={estimator}",
                                        f"distillation.distillation_loss.use_policy_gradient={policy_gradient}")
    rollout = _rollout(policy, tokenizer)
    seqs, mask = rollout.sequences(), rollout.response_mask
    teacher_lp = teacher.log_probs(seqs)
    gaps = []
    for _ in range(5):  # the same samples each time: the gap on them must shrink
        gaps.append(teacher_metrics(policy.log_probs(seqs), teacher_lp, mask, estimator)["distill/teacher_kl_mean"])
        policy.update(_batch(rollout, teacher_lp))
    gaps.append(teacher_metrics(policy.log_probs(seqs), teacher_lp, mask, estimator)["distill/teacher_kl_mean"])
    assert gaps[0] > 0.05, gaps  # the perturbed student really differs
    assert max(gaps[1:]) < gaps[0], gaps  # every update leaves the student closer than it started (AdamW's
    # steps are not monotone on so few samples)
    assert gaps[-1] < 0.5 * gaps[0], gaps


def test_another_tokenizer_is_one_line_naming_both_folders(tmp_path):
    student = load_tokenizer("tiny-arith")
    other = load_tokenizer("tiny-arith")
    other.add_tokens(["<extra>"])
    with pytest.raises(ConfigError) as e:
        check_same_tokenizer(student, other, "tiny-arith", "/models/teacher")
    msg = str(e.value)
    assert "\n" not in msg and "/models/teacher" in msg and "actor_rollout_ref.model.path=tiny-arith" in msg
    assert "vocabularies differ (309 vs 310 tokens; first difference: '<extra>')" in msg
    special = load_tokenizer("tiny-arith")  # the same vocabulary, another end-of-sequence token
    special.eos_token = special.convert_ids_to_tokens(5)
    with pytest.raises(ConfigError, match=r"special tokens differ \(eos: 2 vs 5\)"):
        check_same_tokenizer(student, special, "tiny-arith", "/models/teacher")
    check_same_tokenizer(student, load_tokenizer("tiny-arith"), "a", "b")  # equal: no error


def test_the_teachers_logits_must_cover_the_tokenizer():
    assert logits_size("tiny-arith") == load_causal_lm("tiny-arith").get_output_embeddings().weight.shape[0]
    check_logits_cover(320, 320, 309, "s", "t")
    check_logits_cover(320, 384, 309, "s", "t")  # padding rows beyond the tokenizer differ: fine
    with pytest.raises(ConfigError, match="computes 300 logits per token and actor_rollout_ref.model.path=s 320"):
        check_logits_cover(320, 300, 309, "s", "t")

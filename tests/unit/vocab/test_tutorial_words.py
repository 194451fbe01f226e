"""Every key-like word of tutorial-style configs and commands (verl tutorials and tuning guides, TRL and OpenRLHF
flags, as people bring them) gets an answer from `hybridrl train`'s config loading: it is a valid key, or a table
answers it (verl's, TRL's, tutorials'), or "did you mean" names keys that do not cross roles; never silence and
never "no similar key"."""

from __future__ import annotations

import pytest

from hybridrl.config.loader import valid_keys
from hybridrl.config.schema import RLConfig
from hybridrl.vocab.suggest import SECTION_ROLES, _section, typed_role
from hybridrl.plan.resolve import load_rl_config_checked
from hybridrl.vocab.verl_keys import judge

KEYS = set(valid_keys(RLConfig))
# (word=value), as a tutorial writes them; the words first
ITEMS = """
actor_lr=1e-6
critic_lr=1e-5
clip_range=0.2
rollout_batch_size=64
actor_device_mesh=[8]
critic_device_mesh=[8]
model.path=Qwen/Qwen2.5-0.5B-Instruct
model.dtype=bfloat16
dtype=bf16
torch_dtype=bfloat16
kl_coef=0.001
train_batch_size=256
kl_controller.type=adaptive
kl_controller.target_kl=0.05
kl_controller.kl_coef=0.5
kl_controller.kl_coef_max=1.0
kl_controller.horizon=10000
algorithm.kl_penalty=0.01
kl_penalty=0.01
ppo_epochs=2
mini_batch_size=64
micro_batch_size=4
ppo_micro_batch_size_per_gpu=4
max_prompt_length=512
max_response_length=1024
n_samples=8
num_samples=8
entropy_coeff=0.001
gamma=1.0
lam=0.95
kl_target=0.1
beta=0.04
learning_rate=1e-6
num_generations=8
per_device_train_batch_size=4
max_completion_length=1024
gradient_accumulation_steps=4
num_iterations=2
epsilon=0.2
epsilon_high=0.28
loss_type=dr_grpo
scale_rewards=false
use_kl_loss=true
kl_loss_coef=0.001
kl_loss_type=low_var_kl
clip_ratio=0.2
clip_ratio_high=0.28
loss_agg_mode=token-mean
total_training_steps=100
save_freq=10
test_freq=5
n_gpus_per_node=8
nnodes=1
tensor_model_parallel_size=2
gpu_memory_utilization=0.6
temperature=1.0
use_dynamic_bsz=true
enable_gradient_checkpointing=true
param_offload=true
lora_rank=32
reward_fn=reward.py
ref_model_path=/models/ref
actor.lr=1e-6
critic.lr=1e-5
rollout.n=8
ref.log_prob_micro_batch_size_per_gpu=16
actor.ppo_mini_batch_size=64
critic.ppo_micro_batch_size_per_gpu=4
ref.model.path=/models/ref
reward_model.path=/models/rm
vf_coef=0.1
value_clip=0.2
gae_lambda=0.95
init_kl_coef=0.2
kl_estimator=k3
lr_scheduler_type=cosine
warmup_ratio=0.1
max_grad_norm=1.0
grad_clip=1.0
seed=42
use_vllm=true
adv_estimator=grpo
algorithm.adv_estimator=grpo
data.train_batch_size=256
actor_rollout_ref.actor.optim.lr=1e-6
actor_rollout_ref.rollout.n=8
actor_rollout_ref.actor.ppo_micro_batch_size=16
algorithm.kl_ctrl.kl_coef=0.001
algorithm.use_kl_in_reward=true
""".split()


def _roles(key: str) -> frozenset[str]:
    return SECTION_ROLES.get(_section(key), frozenset())


def test_the_list_is_long_enough():
    assert len(ITEMS) >= 40 and len(set(ITEMS)) == len(ITEMS)


@pytest.mark.parametrize("item", ITEMS)
def test_a_tutorial_word_is_answered(item):
    word, _, value = item.partition("=")
    _, errors, _ = load_rl_config_checked(None, [item])
    if not errors:  # accepted: only a key of ours, or a verl key accepted as a no-op with this value
        verdict = judge(word, value)
        assert word in KEYS or (verdict is not None and verdict.accepted), f"{item} accepted silently"
        return
    assert len(errors) == 1 and "\n" not in errors[0], errors
    message = errors[0]
    assert "no similar key exists" not in message, message
    if "did you mean" in message:
        named = message.split("did you mean", 1)[1].split("?")[0].split("'")[1::2]
        role = typed_role(word)
        assert named and all(k in KEYS for k in named), message
        assert role is None or all(not _roles(k) or role in _roles(k) for k in named), message
    else:
        assert word in message, message  # a table's answer or a value error, naming what was typed

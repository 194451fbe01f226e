"""The words of RL tutorials and tuning guides that are not keys here, each answered with the key to use.

People arrive with the vocabulary of blog posts, OpenRLHF's flags and verl tutorials: `actor_lr`, a top-level
`model.path`, `rollout_batch_size`, a `kl_controller:` block with a `kl_coef_max`. None is a key of verl's (or
hybridrl's), and spelling likeness answers them badly: `model.path` looks like three roles' model paths,
`actor_lr` like nothing, `kl_coef_max` is a bound verl's adaptive controller does not have. So the loader asks
this table (after verl's and TRL's tables, before "did you mean") and answers in one line: what the word means,
and the key that does it here with the value filled in, a unit where it differs (verl's batch keys count
prompts), or that nothing here does it. Words are matched as typed (dotted), mostly at the top level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hybridrl.vocab.trl_keys import fill

ARR = "actor_rollout_ref"
_IN_REWARD = "algorithm.kl_ctrl.kl_coef={value} with algorithm.use_kl_in_reward=true (the KL subtracted from the reward)"
_IN_LOSS = f"{ARR}.actor.kl_loss_coef={{value}} with {ARR}.actor.use_kl_loss=true (the KL term in the loss, GRPO's)"
_KL_COEF = f"set {_IN_REWARD}, or {_IN_LOSS}"
_ADAPTIVE = "with algorithm.kl_ctrl.type=adaptive and algorithm.use_kl_in_reward=true"
_NO_BOUND = ("there is no equivalent: verl's adaptive controller has no {which} (each update multiplies the "
             "coefficient by at most 1 +- 0.2 * responses / algorithm.kl_ctrl.horizon); remove the key, and raise "
             "algorithm.kl_ctrl.horizon to let it move more slowly")
_PROMPTS = (f"prompts, each sampled {ARR}.rollout.n times: a count of responses is divided by "
            f"{ARR}.rollout.n")
_WORKERS = "trainer.n_gpus_per_node * trainer.nnodes"
_MESH = ("there is no device-mesh key: every role trains data-parallel over its workers ({workers}), with no tensor "
         "or sequence parallelism in training; set {strategy}=fsdp2 to shard its weights over them (ddp: a copy "
         "each)")
_ESTIMATORS = {name: f"set algorithm.kl_penalty={name} (the estimator of the KL in the reward; {ARR}.actor."
                     f"kl_loss_type={name} for the KL loss)" for name in ("kl", "abs", "mse", "low_var_kl", "k1",
                                                                        "k2", "k3")}


@dataclass(frozen=True)
class Word:
    meaning: str  # what the word means where it comes from
    instead: str  # what to set here ({value}: the value given); "set ..." reads "to do what it means, set ..."
    by_value: dict[str, str] = field(default_factory=dict)  # normalised value -> its own `instead`


def _same(names: tuple[str, ...], word: Word) -> dict[str, Word]:
    return dict.fromkeys(names, word)


def _kl_controller() -> dict[str, Word]:
    """A tutorial's `kl_controller:` block (top level or under algorithm), and bounds under verl's kl_ctrl."""
    leaves = {
        "type": Word("the KL-in-reward controller: fixed or adaptive",
                     "set algorithm.kl_ctrl.type={value} with algorithm.use_kl_in_reward=true"),
        "kl_coef": Word("the KL-in-reward coefficient, an adaptive controller's starting value", f"set {_IN_REWARD}"),
        "init_kl_coef": Word("the adaptive controller's starting coefficient", f"set {_IN_REWARD}"),
        "target_kl": Word("the KL per token an adaptive controller steers towards",
                          f"set algorithm.kl_ctrl.target_kl={{value}} {_ADAPTIVE}"),
        "target": Word("the KL per token an adaptive controller steers towards",
                       f"set algorithm.kl_ctrl.target_kl={{value}} {_ADAPTIVE}"),
        "horizon": Word("how slowly an adaptive coefficient moves",
                        f"set algorithm.kl_ctrl.horizon={{value}} (responses over which it may change by +-20%) "
                        f"{_ADAPTIVE}"),
    }
    bounds = {"kl_coef_max": "cap", "max_kl_coef": "cap", "kl_coef_min": "floor", "min_kl_coef": "floor"}
    leaves.update({b: Word(f"a {which} on the adaptive KL coefficient", _NO_BOUND.format(which=which))
                   for b, which in bounds.items()})
    out = {f"{group}.{leaf}": word for group in ("kl_controller", "algorithm.kl_controller")
           for leaf, word in leaves.items()}
    out.update({f"algorithm.kl_ctrl.{leaf}": leaves[leaf] for leaf in (*bounds, "init_kl_coef", "target")})
    return out


TABLE: dict[str, Word] = {
    # the models of the roles
    **_same(("model.path", "model_path", "model_name_or_path", "model.name_or_path", "model_name", "pretrain"),
            Word("the policy's model, which the rollout and the reference start from",
                 f"set {ARR}.model.path={{value}} (the critic's model is critic.model.path, a reward model's "
                 "reward_model.model.path)")),
    **_same(("model.dtype", "model.torch_dtype", "dtype", "torch_dtype"),
            Word("the dtype the policy computes in",
                 f"set {ARR}.actor.fsdp_config.mixed_precision.param_dtype={{value}} (fp32 or bf16: bf16 compute over "
                 f"fp32 master weights; generation follows it while {ARR}.rollout.dtype=auto)",
                 dict.fromkeys(("float16", "fp16", "half"),
                               f"hybridrl trains in fp32 or bf16 (fp16 needs loss scaling): set {ARR}.actor.fsdp_config."
                               f"mixed_precision.param_dtype=bf16; vLLM may generate in fp16 with {ARR}.rollout."
                               "dtype=float16"))),
    **_same(("critic_model_path", "critic_pretrain", "value_model_path"),
            Word("the value model's starting weights", "set critic.model.path={value}")),
    **_same(("reward_model_path", "reward_pretrain", "rm_path"),
            Word("a reward model", "set reward_model.model.path={value} with reward_model.enable=true")),
    **_same(("ref_model_path", "reference_model_path", "ref.model.path", f"{ARR}.ref.model.path"),
            Word("the reference model of the KL term",
                 f"there is no equivalent: as in verl, the reference is the starting policy ({ARR}.model.path); "
                 "remove the key")),
    # learning rates
    **_same(("actor_lr", "actor_learning_rate"),
            Word("the actor's learning rate", f"set {ARR}.actor.optim.lr={{value}}")),
    **_same(("critic_lr", "critic_learning_rate", "value_lr"),
            Word("the critic's learning rate",
                 "set critic.optim.lr={value} (read with algorithm.adv_estimator=gae, the estimator with a critic)")),
    # batch sizes (verl's count prompts per step and per optimizer step, responses per micro-batch)
    **_same(("train_batch_size", "rollout_batch_size", "batch_size"),
            Word("prompts per training step", f"set data.train_batch_size={{value}} ({_PROMPTS})")),
    **_same(("ppo_mini_batch_size", "mini_batch_size"),
            Word("prompts per optimizer step",
                 f"set {ARR}.actor.ppo_mini_batch_size={{value}} ({_PROMPTS}; critic.ppo_mini_batch_size follows it "
                 "when null)")),
    **_same(("micro_batch_size", "micro_batch_size_per_gpu", "ppo_micro_batch_size_per_gpu", "micro_train_batch_size"),
            Word("responses per forward/backward on one worker",
                 f"set {ARR}.actor.ppo_micro_batch_size_per_gpu={{value}} (responses per worker; gradient "
                 "accumulation follows from it)")),
    "ppo_micro_batch_size": Word("verl's deprecated global micro-batch: responses summed over all workers",
                                 f"set {ARR}.actor.ppo_micro_batch_size_per_gpu to {{value}} / ({_WORKERS})"),
    "ppo_epochs": Word("passes over each generated batch",
                       f"set {ARR}.actor.ppo_epochs={{value}} (critic.ppo_epochs follows it when null)"),
    **_same(("epochs", "num_epochs", "num_episodes"),
            Word("passes over the training prompts", "set trainer.total_epochs={value}")),
    **_same(("total_steps", "max_steps", "num_steps", "total_training_steps"),
            Word("training steps", "set trainer.total_training_steps={value} (a step: one batch of "
                                   "data.train_batch_size prompts, generated and trained on)")),
    # lengths and sampling
    **_same(("max_response_length", "max_new_tokens", "generate_max_len", "max_tokens"),
            Word("tokens generated per response, at most", "set data.max_response_length={value}")),
    **_same(("prompt_max_len", "max_prompt_len"),
            Word("prompt tokens, at most", "set data.max_prompt_length={value} (data.truncation says what happens "
                                           "to a longer prompt)")),
    **_same(("max_length", "max_seq_len", "max_seq_length"),
            Word("prompt and response tokens together, at most",
                 "set data.max_prompt_length and data.max_response_length (their sum is the sequence)")),
    **_same(("n_samples", "num_samples", "n_samples_per_prompt", "samples_per_prompt", "group_size", "rollout_n",
             "num_responses"), Word("responses sampled per prompt, the group size", f"set {ARR}.rollout.n={{value}}")),
    # the policy loss
    **_same(("clip_range", "clip_ratio", "clip_eps", "eps_clip", "clip_param", "ppo_clip"),
            Word("the PPO clip range epsilon of the policy ratio",
                 f"set {ARR}.actor.clip_ratio={{value}} (both sides; {ARR}.actor.clip_ratio_low and clip_ratio_high "
                 "set one side)")),
    **_same(("clip_range_vf", "value_clip", "vf_clip"),
            Word("the value clip range", "set critic.cliprange_value={value}")),
    **_same(("vf_coef", "value_loss_coef", "vf_loss_coef"),
            Word("the value loss's weight in a loss shared by actor and critic",
                 "there is no equivalent: verl's critic is a model of its own with its own optimizer, so its loss "
                 "needs no weight; critic.optim.lr sets how fast it learns")),
    **_same(("entropy_coeff", "entropy_coef", "ent_coef", "entropy_loss_coef"),
            Word("the entropy bonus coefficient", f"set {ARR}.actor.entropy_coeff={{value}}")),
    **_same(("lr_scheduler_type", "lr_scheduler", "lr_schedule"),
            Word("the learning-rate schedule", f"set {ARR}.actor.optim.warmup_style={{value}} (constant or cosine, "
                                              "after the warm-up; critic.optim.warmup_style for the critic)",
                 {"linear": f"there is no linear decay here: set {ARR}.actor.optim.warmup_style=constant or cosine "
                            "(after the warm-up)",
                  "constant_with_warmup": f"set {ARR}.actor.optim.warmup_style=constant with "
                                          f"{ARR}.actor.optim.lr_warmup_steps"})),
    # advantages
    **_same(("gamma", "discount"), Word("the discount of token rewards",
                                        "set algorithm.gamma={value} (read by gae and reinforce_plus_plus)")),
    **_same(("lam", "gae_lambda", "lambd", "lambda_"), Word("GAE's lambda", "set algorithm.lam={value} (read by gae)")),
    **_same(("adv_estimator", "advantage_estimator"),
            Word("the advantage estimator", "set algorithm.adv_estimator={value} (`hybridrl algos` lists them)")),
    **_same(("normalize_advantages", "norm_adv_by_std"),
            Word("dividing GRPO's advantages by the group's std",
                 "set algorithm.norm_adv_by_std_in_grpo={value} (false: Dr.GRPO)")),
    # KL
    "init_kl_coef": Word("the KL coefficient, an adaptive controller's starting value", _KL_COEF),
    **_same(("kl_penalty", "kl_penalty_coef", "kl_weight"),
            Word("a tutorial's \"KL penalty\": its coefficient, or by a name its estimator", _KL_COEF,
                 _ESTIMATORS)),
    **_same(("kl_target", "target_kl"), Word("the KL per token an adaptive controller steers towards",
                                             f"set algorithm.kl_ctrl.target_kl={{value}} {_ADAPTIVE}")),
    "kl_horizon": Word("how slowly an adaptive KL coefficient moves",
                       f"set algorithm.kl_ctrl.horizon={{value}} (responses) {_ADAPTIVE}"),
    "kl_estimator": Word("the KL estimator, OpenRLHF's k1, k2 or k3",
                         f"set {ARR}.actor.kl_loss_type={{value}} (the KL loss) or algorithm.kl_penalty={{value}} (the "
                         "KL in the reward); verl also names k1 kl, k2 mse, k3 low_var_kl"),
    **_kl_controller(),
    # placement and engines
    "actor_device_mesh": Word("the actor's device mesh", _MESH.format(
        workers=_WORKERS, strategy=f"{ARR}.actor.strategy")),
    "critic_device_mesh": Word("the critic's device mesh", _MESH.format(
        workers=f"{_WORKERS}, or critic.n_gpus_per_node x critic.nnodes of its own with critic.enable_resource_pool=true",
        strategy="critic.strategy")),
    **_same(("rollout_device_mesh", "tensor_parallel_size", "tp_size", "rollout_tp_size", "vllm_tensor_parallel_size"),
            Word("the rollout engine's tensor parallelism",
                 f"set {ARR}.rollout.tensor_model_parallel_size={{value}} (vLLM with trainer.backend=ray: workers "
                 "one engine spans; training has no tensor parallelism)")),
    **_same(("num_gpus", "n_gpus", "n_gpus_per_node", "gpus_per_node"),
            Word("GPUs per node, one worker each", "set trainer.n_gpus_per_node={value} (every role shares them unless it "
                                            "has a pool of its own)")),
    **_same(("nnodes", "num_nodes"), Word("nodes", "set trainer.nnodes={value}")),
    **_same(("use_vllm", "rollout_engine", "inference_engine"),
            Word("the engine that generates the rollouts", f"set {ARR}.rollout.name=vllm (or hf)",
                 {"true": f"set {ARR}.rollout.name=vllm", "false": f"set {ARR}.rollout.name=hf",
                  "vllm": f"set {ARR}.rollout.name=vllm", "hf": f"set {ARR}.rollout.name=hf"})),
    # rewards, data, runs
    **_same(("reward_fn", "reward_function", "reward_func", "reward_funcs", "compute_score"),
            Word("the reward function",
                 "set custom_reward_function.path=<file.py> and custom_reward_function.name=<function> (verl's "
                 "compute_score(data_source, solution_str, ground_truth, extra_info))")),
    **_same(("train_data", "train_file", "dataset", "data_path"),
            Word("the training prompts", "set data.train_files={value} (parquet or jsonl, verl's row schema)")),
    **_same(("val_data", "val_file", "test_files", "eval_data"),
            Word("the validation prompts", "set data.val_files={value}")),
    **_same(("save_steps", "save_interval", "save_freq"),
            Word("steps between checkpoints", "set trainer.save_freq={value}")),
    **_same(("eval_steps", "eval_interval", "test_freq", "val_freq"),
            Word("steps between validations", "set trainer.test_freq={value}")),
    **_same(("output_dir", "save_path", "ckpt_path", "checkpoint_dir"),
            Word("the run folder", "set trainer.default_local_dir={value}")),
    **_same(("report_to", "log_with"), Word("where metrics go", "set trainer.logger=[console,{value}]")),
    **_same(("project", "wandb_project"), Word("the project name", "set trainer.project_name={value}")),
    **_same(("run_name", "exp_name", "experiment_name"),
            Word("the run's name", "set trainer.experiment_name={value}")),
}


def answer(dotted: str, value: Any) -> Optional[str]:
    """`word=value: verl has no `word` (<meaning>); to do what it means, set <key>=value`; None for a word the
    table does not hold."""
    entry = TABLE.get(dotted)
    if entry is None:
        return None
    shown, instead = fill(entry, value)  # type: ignore[arg-type]  # a Word has TrlKey's fields
    lead = "to do what it means, " if instead.startswith("set ") else ""
    return f"{dotted}={shown}: verl has no `{dotted}` ({entry.meaning}); {lead}{instead}"

"""The table of vocab/verl_keys.py: verl's keys without a schema field here, first match wins.

Each entry: glob patterns over dotted keys (`*` spans dots), what the key does in verl, why it is
not here, what to use instead, and the values accepted because they train exactly as hybridrl does
(`ANY`: every value; `()`: none). In the texts, {key}, {parent}, {grandparent} and {value} are
filled in from the refused key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class _Any(tuple):
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()  # every value accepted: the key changes nothing hybridrl computes


@dataclass(frozen=True)
class VerlKey:
    patterns: tuple[str, ...]  # fnmatch patterns over dotted keys
    verl: str  # what the key does in verl
    here: str  # why hybridrl does not have it
    instead: str  # what to use instead
    accepted: tuple = ()  # values that train here exactly as in verl (ANY: all of them)


def _k(patterns: str | tuple[str, ...], verl: str, here: str, instead: str, accepted: tuple = ()) -> VerlKey:
    return VerlKey((patterns,) if isinstance(patterns, str) else tuple(patterns), verl, here, instead, accepted)


ARR = "actor_rollout_ref"
TRAINED = (f"{ARR}.actor", "critic")  # the roles with an optimizer
MODELS = (f"{ARR}.model", "critic.model", "reward_model.model")
FSDP = (f"{ARR}.actor.fsdp_config", f"{ARR}.ref.fsdp_config", "critic.model.fsdp_config",
        "reward_model.model.fsdp_config")
ROLES = (f"{ARR}.actor", f"{ARR}.ref", "critic", "reward_model")


def _each(sections: tuple[str, ...], leaf: str) -> tuple[str, ...]:
    return tuple(f"{s}.{leaf}" for s in sections)


_WORLD = "(trainer.n_gpus_per_node * trainer.nnodes)"
_NO_SP = ("hybridrl has no sequence parallelism: each worker holds whole sequences",
          "remove the key, and bound activation memory with actor_rollout_ref.model.enable_gradient_checkpointing"
          "=true or use_dynamic_bsz=true with a smaller ppo_max_token_len_per_gpu")
_PER_PROCESS = "hybridrl runs one rollout engine per process, on one device"
_COMPILE = ("hybridrl does not torch.compile its log-prob and entropy code",
            "remove the key (the same numbers, without the compile speed-up)")
_NO_SHM = ("hybridrl reads the folder where it is",
           "copy the folder to /dev/shm yourself and point the path there")
_NO_REMOTE_CODE = ("hybridrl loads only architectures that transformers ships and never runs code from a model "
                   "folder", "use a model whose architecture transformers knows")

_LEGACY = [
    # verl's global micro-batch keys (deprecated since v0.2), counted across all workers
    _k(_each((f"{ARR}.actor", "critic"), "ppo_micro_batch_size") + _each((f"{ARR}.rollout", f"{ARR}.ref"),
       "log_prob_micro_batch_size") + ("critic.forward_micro_batch_size", "reward_model.micro_batch_size"),
       "the deprecated global micro-batch: responses per forward summed over all workers, which verl divides by "
       "the number of workers", "hybridrl has only the per-worker key",
       f"set {{key}}_per_gpu to {{value}} / {_WORLD} instead", (None,)),
    _k("data.val_batch_size", "prompts per validation batch, deprecated since v0.3 and ignored (validation "
       "prompts go to the engine as one batch)", "hybridrl generates validation responses 256 at a time and "
       "has no key for it", "remove the key", (None,)),
    _k("*fsdp_config.grad_offload", "kept gradients in host memory; removed in v0.3 (gradients follow "
       "param_offload)", "hybridrl has no separate gradient offload", "use {parent}.param_offload", (False,)),
    _k("trainer.val_generations_to_log_to_wandb", "the old name of trainer.log_val_generations",
       "hybridrl has the new name only", "set trainer.log_val_generations={value}"),
    _k("trainer.remove_previous_ckpt_in_save", "deleted the previous checkpoint at every save (replaced by "
       "max_actor_ckpt_to_keep)", "hybridrl has the new keys only",
       "set trainer.max_actor_ckpt_to_keep=1 and trainer.max_critic_ckpt_to_keep=1", (False,)),
]

_GROUPS = [
    _k(("_target_", "*._target_"), "the class Hydra builds a config section with",
       "hybridrl's sections are its own dataclasses", "nothing to set", ANY),
    _k(("*profiler.enable", "*profiler.all_ranks", "global_profiler.profile_continuous_steps"),
       "switches of the profiler hooks (nsys, npu, torch)", "hybridrl has no profiler hooks; every step "
       "logs timing_s/<phase>", "profile the whole `hybridrl train` process (py-spy, nsys, torch.profiler)",
       (False,)),
    _k(("*profiler.tool", "global_profiler.steps", "*profiler.ranks"), "what the profiler hooks capture",
       "hybridrl has no profiler hooks; every step logs timing_s/<phase>",
       "profile the whole `hybridrl train` process (py-spy, nsys, torch.profiler)", (None, [])),
    _k(("*profiler.*", "global_profiler*", "*.profiler", "trainer.profile_steps"),
       "settings of the profiler hooks (nsys, npu, torch, torch_memory)",
       "hybridrl has no profiler hooks; every step logs timing_s/<phase>",
       "remove the key and profile the whole `hybridrl train` process (py-spy, nsys, torch.profiler)", ANY),
    _k(("*.megatron.*", "*.megatron"), "a setting of the Megatron-LM backend (tensor, pipeline, expert and "
       "context parallelism, distributed checkpoints)", "hybridrl trains with DDP or FSDP2 only",
       "remove the key; for sharded weights set actor_rollout_ref.actor.strategy=fsdp2 (critic.strategy=fsdp2)"),
    _k(("*.optim.override_optimizer_config*",), "extra optimizer options (Megatron's CPU-offloaded optimizer, "
       "torchao's bf16 stochastic rounding)", "hybridrl's optimizer is torch's AdamW with fp32 state",
       "remove the key; fsdp_config.optimizer_offload keeps the AdamW state in host memory", (None,)),
    _k(("*.router_replay.*", f"{ARR}.rollout.enable_rollout_routing_replay"), "records and replays MoE routing "
       "decisions between rollout and training", "hybridrl does not replay MoE routing",
       "remove the key (the mismatch shows in training/rollout_probs_diff_*)", ("disabled", None, False)),
    _k(("*.mtp.enable", "*.mtp.enable_train", "*.mtp.enable_rollout", "*.mtp"), "multi-token prediction heads "
       "for training and speculative decoding", "hybridrl trains and samples the next token only",
       "remove the key", (False, None)),
    _k("*.mtp.*", "a setting of multi-token prediction", "unused without mtp.enable", "remove the key", ANY),
    _k(("data.image_key", "data.video_key", "data.image_patch_size", "data.return_multi_modal_inputs",
        f"{ARR}.actor.freeze_vision_tower", "*rollout.limit_images"),
       "a setting for vision-language models (image and video columns, the vision tower)",
       "hybridrl trains text-only causal LMs", "remove the key and give text prompts"),
]

_OPTIM = [
    _k(_each(TRAINED, "optim.clip_grad"), "the max gradient norm read by the new engine workers (the legacy "
       "workers read grad_clip)", "hybridrl has the one key", "set {grandparent}.grad_clip={value}"),
    _k(_each(TRAINED, "optim.lr_scheduler_type") + _each(TRAINED, "optim.lr_decay_style"), "the learning-rate "
       "schedule after warm-up (newer verl's name; lr_decay_style is Megatron's)", "hybridrl keeps verl's "
       "older name", "set {parent}.warmup_style={value} (constant or cosine)"),
    _k(_each(TRAINED, "optim.num_cycles"), "cosine cycles over training; 0.5 decays once from lr to "
       "min_lr_ratio * lr", "hybridrl's cosine schedule is that half cycle", "remove the key", (0.5,)),
    _k(_each(TRAINED, "optim.optimizer"), "the optimizer class", "hybridrl trains with AdamW",
       "remove the key", ("AdamW",)),
    _k(_each(TRAINED, "optim.optimizer_impl"), "the module the optimizer class comes from",
       "hybridrl uses torch.optim's AdamW", "remove the key", ("torch.optim",)),
    _k(_each(TRAINED, "optim.total_training_steps"), "filled in at start from the data and epochs",
       "hybridrl derives the schedule's length the same way", "set trainer.total_training_steps", (-1,)),
]

_FSDP = [
    _k(_each(FSDP, "dtype"), "the newer name of mixed_precision.param_dtype (the compute dtype)",
       "hybridrl has the older key", "set {parent}.mixed_precision.param_dtype={value}"),
    _k(_each(FSDP, "wrap_policy.*"), "which modules FSDP wraps (min_num_params: 0 wraps each decoder layer)",
       "hybridrl's fsdp2 shards each decoder layer (the model's _no_split_modules), then the root",
       "remove the key", (0, None)),
    _k(_each(FSDP, "fsdp_size"), "GPUs per FSDP shard group (-1: all; less gives hybrid sharding)",
       "hybridrl's fsdp2 shards over all of a role's workers", "remove the key", (-1,)),
    _k(_each(FSDP, "reshard_after_forward"), "whether FSDP frees gathered parameters after each forward",
       "hybridrl always reshards after forward", "remove the key", (True,)),
    _k(_each(FSDP, "offload_policy"), "FSDP2's CPUOffloadPolicy during training",
       "in hybridrl that is what {parent}.param_offload does", "set {parent}.param_offload={value}", (False,)),
    _k(_each(FSDP, "forward_prefetch") + _each(FSDP, "use_orig_params"), "an FSDP1 option (ignored by fsdp2)",
       "hybridrl shards with FSDP2 (or DDP) only", "remove the key", (False,)),
    _k(_each(FSDP, "seed"), "the seed of the engine's model initialisation and dropout",
       "hybridrl seeds every role from trainer.seed", "set trainer.seed", (42,)),
    _k(_each(FSDP, "full_determinism"), "torch's deterministic algorithms, for debugging",
       "hybridrl does not switch them on", "remove the key", (False,)),
    _k(_each(FSDP, "ulysses_sequence_parallel_size") + _each(ROLES, "ulysses_sequence_parallel_size"),
       "Ulysses sequence parallelism: every sequence is split across this many GPUs, attention heads "
       "exchanged all-to-all, to train long contexts", *_NO_SP, (1,)),
    _k(_each(FSDP, "use_torch_compile") + _each((f"{ARR}.actor", f"{ARR}.ref"), "use_torch_compile"),
       "torch.compile of the log-prob and entropy functions (speed only)", *_COMPILE, (False,)),
    _k(_each(FSDP, "entropy_from_logits_with_chunking") + _each(FSDP, "entropy_checkpointing")
       + _each((f"{ARR}.actor", f"{ARR}.ref"), "entropy_from_logits_with_chunking")
       + _each((f"{ARR}.actor", f"{ARR}.ref"), "entropy_checkpointing"),
       "lower the memory peak of the entropy computation (in chunks, or recomputed in backward)",
       "hybridrl computes the entropy from each micro-batch's logits at once",
       "remove the key; a smaller micro-batch lowers the peak", (False,)),
    _k(_each(FSDP, "forward_only"), "set per role (true for the reference)",
       "hybridrl knows which roles train", "remove the key", ANY),
    _k((f"{ARR}.actor.fsdp_config.strategy", "critic.model.fsdp_config.strategy"), "the new engine workers' "
       "copy of the role's strategy (fsdp or fsdp2)", "hybridrl has one strategy key per trained role",
       "set actor_rollout_ref.actor.strategy={value} (critic.strategy for the critic)"),
    _k((f"{ARR}.ref.strategy", f"{ARR}.ref.fsdp_config.strategy"), "the reference's sharding (by default the "
       "actor's)", "hybridrl's reference is sharded like the policy", "set actor_rollout_ref.actor.strategy"),
    _k(("reward_model.strategy", "reward_model.model.fsdp_config.strategy"), "the reward model's sharding",
       "hybridrl's reward model is a plain forward in one process (the driver, or each worker of its own pool)",
       "remove the key"),
    _k(f"{ARR}.ref.fsdp_config.optimizer_offload", "offloads the optimizer state (unused for the reference, "
       "which has none)", "hybridrl's reference has no optimizer either", "remove the key", (False,)),
    _k("reward_model.model.fsdp_config.param_offload", "keeps the reward model's weights in host memory "
       "between scoring passes", "hybridrl keeps the reward model resident where it scores",
       "remove the key; reward_model.enable_resource_pool=true gives it its own workers", (False,)),
]

_MODEL = [
    _k(_each(MODELS, "trust_remote_code") + ("data.trust_remote_code",), "lets transformers run Python files "
       "shipped in the model folder", *_NO_REMOTE_CODE, (False,)),
    _k(_each(MODELS, "use_shm") + ("data.use_shm",), "copies the model (or data) to /dev/shm before loading it",
       *_NO_SHM, (False,)),
    _k(_each(MODELS, "external_lib"), "a Python module imported first to register a custom model class",
       *_NO_REMOTE_CODE, (None,)),
    _k(_each(MODELS, "override_config") + _each(MODELS, "override_config.*"), "overrides fields of the "
       "model's HF config (config.json) at load time", "hybridrl loads config.json as it is",
       "copy the model folder and edit its config.json", (None,)),
    _k((f"{ARR}.model.hf_config_path", f"{ARR}.model.tokenizer_path", "critic.model.tokenizer_path",
        "data.tokenizer"), "reads the HF config or the tokenizer from another folder than the model's",
       "hybridrl reads both from the model folder (the critic reads the policy's token ids)",
       "put config.json and the tokenizer files in the model folder", (None,)),
    _k(f"{ARR}.model.torch_dtype", "set by some verl example scripts (e.g. the CISPO GSM8K one); verl's FSDP "
       "workers do not read it: the actor's weights take actor.fsdp_config.model_dtype",
       "no key here is read for it either", "remove the key; the weights' dtype is "
       "actor_rollout_ref.actor.fsdp_config.model_dtype, the compute dtype fsdp_config.mixed_precision.param_dtype",
       ANY),
    _k(f"{ARR}.model.custom_chat_template", "replaces the tokenizer's chat template",
       "hybridrl applies the template in the tokenizer files",
       "set chat_template in the model folder's tokenizer_config.json", (None,)),
    _k(_each(MODELS, "enable_activation_offload"), "moves saved activations to host memory during the forward",
       "hybridrl keeps activations on the device", "use actor_rollout_ref.model.enable_gradient_checkpointing"
       "=true (critic.model.enable_gradient_checkpointing) to save activation memory", (False,)),
    _k(f"{ARR}.model.use_liger", "Liger's fused Triton kernels for the model's layers",
       "hybridrl runs the transformers modules as they are", "remove the key", (False,)),
    _k((f"{ARR}.model.use_fused_kernels", f"{ARR}.actor.use_fused_kernels", "reward_model.model.use_fused_kernels"),
       "fused linear + log-prob kernels that never hold the [tokens, vocab] logits",
       "hybridrl computes each micro-batch's full logits", "remove the key; a smaller micro-batch (or "
       "use_dynamic_bsz with a smaller token budget) lowers the logits' memory", (False,)),
    _k(f"{ARR}.model.fused_kernel_options.*", "the implementation of the fused kernels (torch or triton)",
       "unused without model.use_fused_kernels, which hybridrl does not have", "remove the key", ANY),
    _k(_each(MODELS, "tiled_mlp.enabled"), "runs each MLP in tiles to lower its activation peak",
       "hybridrl runs the MLP whole", "remove the key; gradient checkpointing lowers activation memory",
       (False,)),
    _k(_each(MODELS, "tiled_mlp.num_shards"), "tiles of the tiled MLP", "unused without tiled_mlp.enabled",
       "remove the key", ANY),
    _k((f"{ARR}.model.lora.*",), "LoRA of the Megatron-LM backend", "hybridrl's LoRA (peft) has its own keys",
       "use actor_rollout_ref.model.lora_rank and lora_alpha (critic.model.lora_rank for the critic)"),
    _k(f"{ARR}.actor.use_remove_padding", "a copy of actor_rollout_ref.model.use_remove_padding",
       "hybridrl reads the model key", "set actor_rollout_ref.model.use_remove_padding={value}"),
]

_ROLE = [
    _k(_each(ROLES, "rollout_n"), "filled in from actor_rollout_ref.rollout.n",
       "hybridrl reads rollout.n", "set actor_rollout_ref.rollout.n"),
    _k(_each(TRAINED, "data_loader_seed"), "the seed of the mini-batch shuffle (actor.shuffle)",
       "hybridrl seeds the shuffle from trainer.seed", "set trainer.seed", (42,)),
    _k(f"{ARR}.actor.calculate_entropy", "computes the entropy even when entropy_coeff is 0 (for its metric)",
       "hybridrl always computes it (actor/entropy)", "remove the key", (True,)),
    _k(f"{ARR}.actor.use_prefix_grouper", "runs each prompt's forward once for its n responses (PrefixGrouper)",
       "hybridrl has this as actor_rollout_ref.model.share_prompt_prefix (on by default)",
       "set actor_rollout_ref.model.share_prompt_prefix={value}"),
    _k(_each((f"{ARR}.actor",), "calculate_sum_pi_squared") + _each((f"{ARR}.actor",), "sum_pi_squared_checkpointing"),
       "computes sum(pi^2) per token for the optimal-token-baseline gradient-norm proxy",
       "hybridrl does not compute it", "remove the key", (False,)),
    _k(_each((f"{ARR}.actor.policy_loss",), "clip_cov_*") + _each((f"{ARR}.actor.policy_loss",), "kl_cov_ratio")
       + (f"{ARR}.actor.policy_loss.ppo_kl_coef",), "a parameter of the clip-cov and kl-cov policy losses",
       "hybridrl does not have those losses (`hybridrl algos` lists the ones it has)",
       "remove the key, or pick another actor_rollout_ref.actor.policy_loss.loss_mode"),
    _k(_each(TRAINED, "checkpoint.save_contents") + _each(TRAINED, "checkpoint.load_contents"),
       "what a checkpoint holds (model, optimizer, extra, hf_model)", "every hybridrl checkpoint holds the HF "
       "model folder, the optimizer and scheduler, and the RNG and sampler state", "remove the key",
       (["model", "optimizer", "extra"], ["model", "optimizer", "extra", "hf_model"])),
    _k(_each(TRAINED, "checkpoint.async_save"), "saves Megatron checkpoints in the background",
       "hybridrl saves in the training process (to a temporary folder, then renamed)", "remove the key",
       (False,)),
    _k("critic.enable", "builds the critic even when the advantage estimator needs none (null: only for gae)",
       "hybridrl builds the critic exactly when algorithm.adv_estimator uses values", "remove the key", (None,)),
    _k((f"{ARR}.hybrid_engine",), "colocates actor, rollout and reference in one worker (verl asserts true)",
       "hybridrl always colocates them", "remove the key", (True,)),
    _k((f"{ARR}.nccl_timeout", "trainer.ray_wait_register_center_timeout"), "seconds a collective (or a Ray "
       "worker's registration) may take before the run fails", "hybridrl has one deadline for every remote "
       "call (collectives time out at twice it)", "set trainer.worker_timeout_s={value}"),
]

R = f"{ARR}.rollout"
_VLLM_KWARGS = "actor_rollout_ref.rollout.engine_kwargs.vllm"
_ROLLOUT = [
    _k(f"{R}.mode", "how verl drives its engine: sync (vLLM's LLM) or async (an AsyncLLM server its agent loop "
       "sends requests to); both train one on-policy batch per step", "hybridrl calls its engine in-process "
       "for each batch, so both values train the same here", "remove the key", ANY),
    _k((f"{R}.prompt_length", f"{R}.response_length"), "filled in from data.max_prompt_length and "
       "data.max_response_length", "hybridrl reads the data keys", "set data.max_prompt_length / "
       "data.max_response_length"),
    _k(f"{R}.max_model_len", "the engine's longest sequence", "hybridrl sets it to data.max_prompt_length + "
       "data.max_response_length", "remove the key", (None,)),
    _k((f"{R}.data_parallel_size", f"{R}.expert_parallel_size", f"{R}.pipeline_model_parallel_size"),
       "spreads one rollout engine over several GPUs (data, expert or pipeline parallel)", _PER_PROCESS,
       "remove the key", (1,)),
    _k(f"{R}.enable_chunked_prefill", "vLLM's chunked prefill (long prompts prefilled in pieces between decode "
       "steps), passed to vllm.LLM", "hybridrl passes vLLM options through engine_kwargs.vllm; on the CPU it "
       "sizes the step budget so no prefill is split, and the hf engine prefills each prompt whole",
       f"set {_VLLM_KWARGS}.enable_chunked_prefill={{value}} with rollout.name=vllm, else remove the key"),
    _k(f"{R}.max_num_batched_tokens", "vLLM's token budget per scheduler step, passed to vllm.LLM",
       "hybridrl passes vLLM options through engine_kwargs.vllm (on the CPU it defaults to max_num_seqs * "
       "(prompt + response length), so no prefill is split)",
       f"set {_VLLM_KWARGS}.max_num_batched_tokens={{value}} with rollout.name=vllm, else remove the key"),
    _k(f"{R}.cudagraph_capture_sizes", "the batch sizes vLLM captures CUDA graphs for",
       "hybridrl passes vLLM options through engine_kwargs.vllm (and runs eager by default)",
       f"set actor_rollout_ref.rollout.enforce_eager=false and {_VLLM_KWARGS}.compilation_config", (None,)),
    _k(f"{R}.enable_prefix_caching", "lets vLLM reuse the KV cache of a shared prompt prefix",
       "hybridrl turns it off (the n responses of a prompt are separate seeded requests); the hf engine and "
       "the trainer share prompt prefixes with actor_rollout_ref.model.share_prompt_prefix", "remove the key",
       (False,)),
    _k(f"{R}.logprobs_mode", "which log-probs vLLM returns", "hybridrl takes processed_logprobs (of the "
       "distribution sampled from), verl's default", "remove the key", ("processed_logprobs",)),
    _k(f"{R}.scheduling_policy", "vLLM's request scheduling", "hybridrl schedules first come first served",
       "remove the key", ("fcfs",)),
    _k(f"{R}.load_format", "how the engine loads its first weights (dummy: random, then synced from the actor)",
       "hybridrl's engine starts from the policy's weights whatever the value", "remove the key", ANY),
    _k((f"{R}.disable_log_stats", f"{R}.calculate_log_probs", "data.return_raw_chat", "data.return_raw_input_ids",
        "data.return_full_prompt"), "what verl keeps or logs beside the token ids (engine statistics, rollout "
       "log-probs, the raw chat)", "hybridrl always keeps the rollout log-probs and each row's chat messages, "
       "which trains the same with either value", "remove the key", ANY),
    _k((f"{R}.skip_tokenizer_init",), "token ids in and out of the engine, with no tokenizer in it",
       "hybridrl's rollout is always token-in/token-out", "remove the key", (True,)),
    _k(f"{R}.over_sample_rate", "stops a rollout once this share of the requests is left, dropping them",
       "hybridrl generates every response", "remove the key", (0,)),
    _k(f"{R}.multi_stage_wake_up", "wakes SGLang's weights and KV cache in stages", "hybridrl has no SGLang "
       "engine", "remove the key", (False,)),
    _k(f"{R}.layered_summon", "gathers FSDP weights layer by layer to sync them to the engine (LoRA)",
       "hybridrl gathers the whole state dict once per sync: the same weights reach the engine either way, only "
       "a sync's peak memory differs", "remove the key", ANY),
    _k((f"{R}.quantization", f"{R}.quantization_config_file"), "quantized rollout (fp8, torchao)",
       "hybridrl generates in rollout.dtype", "remove the key; actor_rollout_ref.rollout.dtype=bfloat16 is "
       "the smallest here", (None,)),
    _k(f"{R}.skip_rollout", "replays rollouts cached on disk instead of generating", "hybridrl always "
       "generates", "remove the key; trainer.rollout_data_dir writes each step's rollouts", (False,)),
    _k(f"{R}.skip_dump_dir", "the folder of skip_rollout's cache", "unused without skip_rollout",
       "remove the key", ANY),
    _k((f"{R}.engine_kwargs.sglang*", f"{R}.engine_kwargs.trtllm*"), "options of the SGLang or TensorRT-LLM "
       "engine", "hybridrl's engines are hf and vllm", f"vLLM's options go in {_VLLM_KWARGS}", (None,)),
    _k(f"{R}.agent.num_workers", "processes that run the agent loop", "hybridrl runs no agent loop",
       "remove the key", ANY),
    # verl's own agent keys; actor_rollout_ref.rollout.agent.{path,name,timeout_s,...} are hybridrl's (schema), so a
    # typo in those gets "did you mean"
    _k((f"{R}.agent._target_", f"{R}.agent.default_agent_loop", f"{R}.agent.agent_loop_config_path",
        f"{R}.agent.custom_async_server.*"), "the agent loop (rollouts as per-sample agent programs on an async server)",
       "hybridrl runs your own agent function through an OpenAI-compatible proxy, or its built-in tool loop",
       "remove the key; see actor_rollout_ref.rollout.agent.path (docs/agents.md) or "
       "actor_rollout_ref.rollout.multi_turn.*", ("single_turn_agent", None)),
    _k(f"{R}.checkpoint_engine.backend", "the transport that moves actor weights into the engine (naive, "
       "nccl, nixl)", "hybridrl's hf engine shares the policy's weights and vllm reloads them from shared "
       "memory", "remove the key", ("naive",)),
    _k(f"{R}.checkpoint_engine.*", "options of the weight transport (the bucket size is SGLang's)",
       "unused by hybridrl's weight sync", "remove the key", ANY),
    _k(f"{R}.trace.*", "traces rollouts to mlflow or weave", "hybridrl writes rollouts to files",
       "use trainer.rollout_data_dir (every generation) or trainer.log_val_generations", (None, False)),
    _k(f"{R}.prometheus.enable", "exports the engine server's metrics to Prometheus", "hybridrl's engine is not "
       "a server", "remove the key", (False,)),
    _k(f"{R}.prometheus.*", "a setting of the Prometheus export", "unused without prometheus.enable",
       "remove the key", ANY),
    _k(f"{R}.multi_turn.format", "the tool-call format", "hybridrl parses Hermes <tool_call> JSON",
       "remove the key", ("hermes",)),
    _k(f"{R}.multi_turn.max_parallel_calls", "tool calls run per model turn", "hybridrl runs the first call of "
       "a turn (the turn is cut after it)", "remove the key", (1,)),
    _k(f"{R}.multi_turn.tool_response_truncate_side", "which part of a long tool answer is dropped",
       "hybridrl keeps the start (max_tool_response_length characters)", "remove the key", ("right",)),
    _k((f"{R}.multi_turn.max_user_turns", f"{R}.multi_turn.interaction_config_path",
        f"{R}.multi_turn.num_repeat_rollouts"), "simulated user turns (interactions) in multi-turn rollouts",
       "hybridrl's multi-turn rollouts alternate model and tool turns only", "remove the key", (None,)),
    _k(f"{R}.multi_turn.use_inference_chat_template", "true trains on the conversation re-rendered with the "
       "chat template instead of the token ids the model produced", "hybridrl trains on the produced token "
       "ids (token-in/token-out), verl's false", "remove the key", (False,)),
    _k(f"{R}.multi_turn.tokenization_sanity_check_mode", "checks turn-by-turn tokenization against tokenizing "
       "the whole conversation", "hybridrl never re-tokenizes a conversation (tool turns are appended as "
       "template tokens), so there is nothing to check", "remove the key", ANY),
]

_DATA = [
    _k("data.tool_config_path", "a copy of actor_rollout_ref.rollout.multi_turn.tool_config_path",
       "hybridrl reads the rollout key", "set actor_rollout_ref.rollout.multi_turn.tool_config_path", (None,)),
    _k(("data.dataloader_num_workers", "data.filter_overlong_prompts_workers"), "worker processes that load or "
       "filter the prompts", "hybridrl reads and tokenizes the files once at start, in the driver",
       "remove the key", ANY),
    _k("data.validation_shuffle", "shuffles the validation prompts", "hybridrl validates in file order (the "
       "same prompts each time)", "remove the key", (False,)),
    _k(("data.custom_cls.*", "data.sampler.*", "data.datagen.*"), "a user class that loads, orders or "
       "generates the training data", "hybridrl reads verl-schema parquet/jsonl rows in a seeded resumable "
       "order (data.shuffle, data.seed)", "convert the data to verl's row schema with a script", (None,)),
    _k(("data.apply_chat_template_kwargs", "data.apply_chat_template_kwargs.*"), "extra arguments of "
       "tokenizer.apply_chat_template (e.g. enable_thinking, reasoning_effort)", "hybridrl applies the chat "
       "template with its defaults", "set the default in the template (the model folder's "
       "tokenizer_config.json)", (None,)),
]

_REWARD = [
    _k("reward_model.reward_kwargs.overlong_buffer_cfg.log", "logs the overlong penalty",
       "hybridrl logs reward/overlong_penalty/mean whenever it is not 0", "remove the key", ANY),
    _k("reward_model.reward_kwargs.overlong_buffer_cfg.*", "DAPO's overlong buffer (reward manager kwargs)",
       "hybridrl has it as reward_model.overlong_buffer", "set reward_model.overlong_buffer.{leaf}={value}"),
    _k("reward_model.reward_kwargs.max_resp_len", "the response length of DAPO's overlong buffer",
       "hybridrl takes data.max_response_length", "remove the key (or set data.max_response_length)"),
    _k(("reward_model.reward_kwargs", "reward_model.reward_kwargs.*"), "keyword arguments of the reward "
       "manager class", "hybridrl's reward managers take none", "put the logic in custom_reward_function.path",
       (None,)),
    _k("reward_model.model.input_tokenizer", "the policy's tokenizer to decode responses with before the reward "
       "model's chat template is applied (null when the templates match)", "hybridrl decides by itself: shared "
       "vocabulary scores the token ids, otherwise it decodes and re-templates", "remove the key", ANY),
    _k("reward_model.model.use_remove_padding", "padding-free forwards of the reward model",
       "hybridrl's reward model forward is padded", "remove the key", (False,)),
    _k("reward_model.max_length", "truncates the reward model's input", "hybridrl scores whole sequences",
       "remove the key", (None,)),
    _k("reward_model.use_dynamic_bsz", "token-budget micro-batches for the reward model",
       "hybridrl's reward model takes reward_model.micro_batch_size_per_gpu responses at a time",
       "remove the key", (False,)),
    _k("reward_model.forward_max_token_len_per_gpu", "the reward model's token budget with use_dynamic_bsz",
       "unused without use_dynamic_bsz", "remove the key", ANY),
    _k(("reward_model.reward_loop_source", "reward_model.reward_loop_module_path",
        "reward_model.reward_loop_class_name", "reward_manager.source", "reward_manager.module.*"),
       "loads a user reward-manager class", "hybridrl's reward managers are naive, batch and dapo",
       "use reward_model.reward_manager and custom_reward_function.path",
       ("register", None, "custom_reward_manager")),
    _k("reward_manager.name", "the newer name of reward_model.reward_manager", "hybridrl has the older key",
       "set reward_model.reward_manager={value}"),
    _k("reward_model.use_reward_loop", "the reward loop (rewards computed while the batch generates) or the "
       "older separate reward step: the same scores", "hybridrl has one reward path, so both values train "
       "the same", "remove the key", ANY),
    _k("reward_model.launch_reward_fn_async", "runs the reward function in the background during the log-prob "
       "pass", "hybridrl scores in its reward process pool before the log-prob pass", "remove the key", (False,)),
    _k("reward_model.sandbox_fusion.url", "scores code with a SandboxFusion server", "hybridrl has no "
       "sandbox scorer", "call your sandbox from a custom_reward_function.path function", (None,)),
    _k("reward_model.sandbox_fusion.*", "limits of SandboxFusion requests", "unused without "
       "reward_model.sandbox_fusion.url", "remove the key", ANY),
    _k("reward_model.rollout.*", "serves the reward model with an inference engine (vLLM, SGLang)", "hybridrl "
       "scores with the reward model's own forward (reward_model.micro_batch_size_per_gpu at a time)",
       "remove the key; reward_model.enable_resource_pool=true gives it its own workers"),
]

_ALGORITHM = [
    _k("algorithm.rollout_correction.bypass_mode", "takes the rollout log-probs as pi_old and skips the "
       "old-log-prob pass", "hybridrl skips that pass only when it is provably on-policy (one mini-batch, one "
       "epoch), and computes pi_old otherwise", "remove the key", (False,)),
    _k("algorithm.rollout_correction.loss_type", "the policy loss of bypass_mode", "unused without bypass_mode",
       "remove the key", ANY),
    _k("algorithm.rollout_correction.rollout_is_batch_normalize", "rescales the importance weights to mean 1 "
       "over the batch", "hybridrl truncates the weights and does not rescale them", "remove the key", (False,)),
    _k("algorithm.use_pf_ppo", "policy-filtration PPO: resamples the batch by reward before the update",
       "hybridrl does not resample batches", "remove the key", (False,)),
    _k("algorithm.pf_ppo.*", "parameters of policy-filtration PPO", "unused without algorithm.use_pf_ppo",
       "remove the key", ANY),
]

_TRAINER = [
    _k("trainer.balance_batch", "reorders each batch so every data-parallel rank gets a similar token count "
       "(speed)", "hybridrl gives each worker consecutive rows, and balances them by tokens across workers with "
       "actor_rollout_ref.actor.use_dynamic_bsz=true", "remove the key, or set that", (False,)),
    _k("trainer.esi_redundant_time", "saves a checkpoint ahead of an elastic instance's shutdown",
       "hybridrl saves every trainer.save_freq steps", "remove the key", (0,)),
    _k("trainer.val_only", "runs validation once and exits", "hybridrl's trainer always trains",
       "run `hybridrl eval --model <folder> --data <val files>` (the same metrics)", (False,)),
    _k("trainer.default_hdfs_dir", "copies checkpoints to HDFS", "hybridrl writes to a folder",
       "point trainer.default_local_dir at a mounted shared folder", (None,)),
    _k("trainer.del_local_ckpt_after_load", "deletes the local checkpoint once resumed from",
       "hybridrl keeps checkpoints (trainer.max_actor_ckpt_to_keep bounds them)", "remove the key", (False,)),
    _k("transfer_queue.*", "the TransferQueue data plane between controller and workers",
       "hybridrl's driver passes batches to the workers directly", "remove the key", (False,)),
    _k("ray_kwargs.timeline_json_file", "writes Ray's task timeline", "hybridrl does not", "run `ray timeline` "
       "while training", (None,)),
]

_D, _DL = "distillation", "distillation.distillation_loss"
_ONE_TEACHER = "hybridrl distils from one teacher, a HuggingFace forward in its workers (docs/algorithms.md)"
_DISTILL = [
    _k(f"{_DL}.policy_loss_mode", "the policy loss of use_policy_gradient=true", "hybridrl uses the actor's",
       "set actor_rollout_ref.actor.policy_loss.loss_mode", ("vanilla",)),
    _k((f"{_DL}.clip_ratio", f"{_DL}.clip_ratio_low", f"{_DL}.clip_ratio_high"), "the clip range of "
       "use_policy_gradient=true", "hybridrl uses the actor's", "set actor_rollout_ref.actor.clip_ratio (_low, _high)",
       (0.2,)),
    _k((f"{_DL}.topk", f"{_DL}.kd_temperature"), "settings of the top-k and full-vocabulary losses (forward_kl_topk, "
       "jsd_topk)", "hybridrl's distillation losses are the sampled-token KL estimators", "remove the key", ANY),
    _k(f"{_DL}.loss_max_clamp", "clamps the per-token distillation loss from above (default 10)", "hybridrl clamps k3 "
       "to [-10, 10], as for the KL loss, and the other estimators not at all", "remove the key", (10.0,)),
    _k(f"{_DL}.log_prob_min_clamp", "clamps both log-probs from below before the estimator (default -10)",
       "hybridrl does not clamp the log-probs", "remove the key (k3 itself is clamped to [-10, 10])", (None,)),
    _k(f"{_D}.teacher_model.num_replicas", "inference replicas of the teacher in its pool", "hybridrl runs one "
       "teacher per worker of its pool", f"size the pool with {_D}.n_gpus_per_node and {_D}.nnodes", (0, None)),
    _k(f"{_D}.teacher_model.inference.*", "the teacher's inference engine (vLLM or SGLang)", _ONE_TEACHER,
       "remove the key; the teacher's forwards use actor_rollout_ref.ref.* (micro-batches, dtype, offload)", ANY),
    _k((f"{_D}.teacher_models.*", f"{_D}.teacher_key", f"{_D}.teacher_model.key"), "several teachers, each scoring the "
       "rows of its data_source", _ONE_TEACHER, f"set {_D}.teacher_model.model_path", ("data_source", None)),
]

_ASYNC = [
    _k(("rollout.total_rollout_steps", "rollout.test_freq"), "the fully-async rollouter's own sample budget and "
       "validation frequency", "hybridrl's rollout pool generates exactly the trainer's batches, and the trainer "
       "validates with its own policy", "remove the key; trainer.total_training_steps and trainer.test_freq decide",
       (None,)),
]  # any other async_training key is unknown here: the loader's "did you mean" names the nearest field

TABLE: tuple[VerlKey, ...] = tuple(_LEGACY + _GROUPS + _OPTIM + _FSDP + _MODEL + _ROLE + _ROLLOUT + _DATA + _REWARD
                                   + _ALGORITHM + _TRAINER + _DISTILL + _ASYNC)

"""verl command lines run here: every key of verl's GSM8K examples is accepted with verl's meaning,
or refused naming that key and saying why (vocab/verl_keys.py); Hydra's + and ++ forms work; a
did-you-mean never points into another section."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex

import pytest

from hybridrl.plan.levers import resolve_backend
from hybridrl.config.loader import load_config, valid_keys
from hybridrl.config.schema import RLConfig
from hybridrl.plan.resolve import validate_rl_config
from hybridrl.vocab.verl_keys import ANY, TABLE, entry_for, judge, normalise
from hybridrl.errors import ConfigError

HERE = os.path.dirname(__file__)
SCHEMA_KEYS = set(valid_keys(RLConfig))
# verl's keys: its generated trainer config, its example scripts, and older copied versions (see the file's header)
VERL_KEYS = [line.strip() for line in open(os.path.join(HERE, "verl_known_keys.txt")) if not line.startswith("#")]

# The commands of issue #21 and verl's examples (verl commit b178a3c), model and data paths made local.
DATA = ["data.train_files=/data/gsm8k/train.parquet", "data.val_files=/data/gsm8k/test.parquet"]
GRPO_GSM8K = DATA + [
    "algorithm.adv_estimator=grpo", "data.train_batch_size=1024", "data.max_prompt_length=512",
    "data.max_response_length=1024", "data.filter_overlong_prompts=True", "data.truncation=error",
    "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256", "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001", "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0", "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False", "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True", "algorithm.use_kl_in_reward=False",
    "trainer.critic_warmup=0", 'trainer.logger=["console","wandb"]', "trainer.n_gpus_per_node=8", "trainer.nnodes=1",
    "trainer.save_freq=20", "trainer.test_freq=5", "trainer.total_epochs=15"]


def _micro(n: int) -> list[str]:
    return [f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={n}",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={n}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={n}"]


REFERENCE = GRPO_GSM8K + _micro(32) + ["actor_rollout_ref.model.path=/models/Qwen3-8B",
                                       "trainer.project_name=verl_grpo_qwen3",
                                       "trainer.experiment_name=qwen3_8b_gsm8k_grpo"]
QWEN3_8B = GRPO_GSM8K + _micro(32) + ["actor_rollout_ref.model.path=/models/Qwen3-8B",
                                      "trainer.project_name=verl_grpo_example_gsm8k",
                                      "trainer.experiment_name=qwen3_8b_function_rm"]
QWEN2_7B = GRPO_GSM8K + _micro(40) + ["actor_rollout_ref.model.path=/models/Qwen2-7B-Instruct",
                                      "trainer.project_name='verl_grpo_example_gsm8k'",
                                      "trainer.experiment_name='qwen2_7b_function_rm'"]
DEEPSEEK7B_PPO = DATA + [
    "algorithm.adv_estimator=gae", "data.train_batch_size=1024", "data.max_prompt_length=512",
    "data.max_response_length=512", "data.filter_overlong_prompts=True", "data.truncation='error'",
    "actor_rollout_ref.model.path=/models/deepseek-llm-7b-chat", "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.model.use_remove_padding=True", "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False", "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=4", "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.4", "critic.optim.lr=1e-5", "critic.model.use_remove_padding=True",
    "critic.model.path=/models/deepseek-llm-7b-chat", "critic.model.enable_gradient_checkpointing=True",
    "critic.ppo_micro_batch_size_per_gpu=32", "critic.model.fsdp_config.param_offload=False",
    "critic.model.fsdp_config.optimizer_offload=False", "algorithm.use_kl_in_reward=False", "trainer.critic_warmup=0",
    "trainer.logger=['console','wandb']", "trainer.project_name='verl_example_gsm8k'",
    "trainer.experiment_name='deepseek_llm_7b_function_rm'", "trainer.n_gpus_per_node=8", "trainer.nnodes=1",
    "trainer.save_freq=20", "trainer.test_freq=1", "trainer.use_legacy_worker_impl=auto", "trainer.total_epochs=15"]
COMMANDS = {"reference": REFERENCE, "run_qwen3-8b": QWEN3_8B, "run_qwen2-7b": QWEN2_7B, "run_deepseek7b_llm": DEEPSEEK7B_PPO}


def replaced(command: list[str], *items: str) -> list[str]:
    """The command with each `key=value` of items set (replacing the command's own value of that key)."""
    keys = {i.partition("=")[0] for i in items}
    return [c for c in command if c.partition("=")[0] not in keys] + list(items)


# --- the four commands -------------------------------------------------------------------


@pytest.mark.parametrize("name", COMMANDS)
def test_every_key_of_the_command_is_accepted_with_verls_value(name):
    cfg = load_config(RLConfig, None, COMMANDS[name])
    arr = cfg.actor_rollout_ref
    assert arr.model.use_remove_padding and arr.model.enable_gradient_checkpointing
    assert arr.actor.optim.lr == 1e-6 and arr.rollout.name == "vllm" and cfg.trainer.logger == ["console", "wandb"]
    assert cfg.data.max_prompt_length == 512 and cfg.trainer.total_epochs == 15


@pytest.mark.parametrize("name", COMMANDS)
def test_eight_gpus_and_no_backend_pick_ray(name):
    cfg = load_config(RLConfig, None, COMMANDS[name])
    assert cfg.trainer.backend == "auto"
    resolve_backend(cfg)
    assert cfg.trainer.backend == "ray"


@pytest.mark.parametrize("name,tp", [("reference", 2), ("run_qwen3-8b", 2), ("run_qwen2-7b", 2),
                                     ("run_deepseek7b_llm", 4)])
def test_the_command_validates_as_it_is_vllm_in_ray_workers_and_rollout_tp_included(name, tp, vllm_installed):
    """vLLM in each of the 8 Ray workers, one engine over `tp` of them (8 / tp engines: rollout/tp_layout.py)."""
    cfg = load_config(RLConfig, None, COMMANDS[name])
    plan = validate_rl_config(cfg)
    assert cfg.trainer.backend == "ray" and plan.world_size == 8
    assert cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == tp


@pytest.mark.parametrize("name", COMMANDS)
def test_with_hf_rollout_and_no_tensor_parallel_the_command_validates(name):
    command = replaced(COMMANDS[name], "actor_rollout_ref.rollout.name=hf",
                       "actor_rollout_ref.rollout.tensor_model_parallel_size=1")
    cfg = load_config(RLConfig, None, command)
    plan = validate_rl_config(cfg)
    assert cfg.trainer.backend == "ray" and plan.world_size == 8


def test_scaled_reference_command_validates_in_one_process(vllm_installed):
    command = replaced(REFERENCE, "trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                       "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4", *_micro(4))
    cfg = load_config(RLConfig, None, command)
    plan = validate_rl_config(cfg)
    assert cfg.trainer.backend == "local" and plan.world_size == 1
    assert plan.mini_batch_responses_per_worker == 4 * 5  # ppo_mini_batch_size prompts x rollout.n


# --- verl keys that older scripts set ------------------------------------------------------------------

LEGACY = [  # keys of run_qwen2-7b.sh before verl v0.3 (verl commits cd52d8b, f2a76ac, 9db5232)
    ("data.val_batch_size=1312", "data.val_batch_size=1312: in verl, prompts per validation batch, deprecated"),
    ("actor_rollout_ref.actor.ppo_micro_batch_size=128", "set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu "
                                                         "to 128 / (trainer.n_gpus_per_node * trainer.nnodes)"),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size=256", "set actor_rollout_ref.rollout.log_prob_micro_batch_"
                                                                "size_per_gpu to 256 / (trainer.n_gpus_per_node"),
    ("actor_rollout_ref.ref.log_prob_micro_batch_size=256", "set actor_rollout_ref.ref.log_prob_micro_batch_size_per_"
                                                            "gpu to 256 / ("),
    ("critic.ppo_micro_batch_size=64", "set critic.ppo_micro_batch_size_per_gpu to 64 / ("),
    ("actor_rollout_ref.actor.fsdp_config.grad_offload=True", "use actor_rollout_ref.actor.fsdp_config.param_offload"),
    ("trainer.val_generations_to_log_to_wandb=10", "set trainer.log_val_generations=10"),
]


@pytest.mark.parametrize("item,message", LEGACY, ids=[i for i, _ in LEGACY])
def test_legacy_key_is_refused_with_its_replacement(item, message):
    with pytest.raises(ConfigError, match="^command line: " + re.escape(item.partition("=")[0])) as e:
        load_config(RLConfig, None, QWEN2_7B + [item])
    assert message in str(e.value) and "did you mean" not in str(e.value)


def test_grad_offload_off_is_what_hybridrl_does():
    load_config(RLConfig, None, ["actor_rollout_ref.actor.fsdp_config.grad_offload=False",
                                 "critic.model.fsdp_config.grad_offload=False"])


# --- Hydra's forms -----------------------------------------------------------------------------


def test_plus_and_plus_plus_set_the_key():
    cfg = load_config(RLConfig, None, ["+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
                                       "++data.train_batch_size=4", "+trainer.logger=[console]"])
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "bf16"
    assert cfg.data.train_batch_size == 4 and cfg.trainer.logger == ["console"]


def test_plus_on_an_unknown_key_is_still_an_unknown_key():
    with pytest.raises(ConfigError, match=r"unknown key 'data\.train_batch_sise'; did you mean 'data\.train_batch_size'"):
        load_config(RLConfig, None, ["+data.train_batch_sise=4"])


@pytest.mark.parametrize("item", ["~trainer.logger", "~trainer.logger=null"])
def test_tilde_deletion_is_refused_saying_keys_always_exist(item):
    with pytest.raises(ConfigError, match=re.escape(f"override {item!r}: Hydra's ~ deletes a key") + ".*always exist.*"
                                          + re.escape("or set trainer.logger=<value>")):
        load_config(RLConfig, None, [item])


@pytest.mark.parametrize("item", ["+++data.seed=1", "+=3"])
def test_too_many_pluses_or_no_key_is_malformed(item):
    with pytest.raises(ConfigError, match="must look like key=value"):
        load_config(RLConfig, None, [item])


# --- did you mean: never another section ---------------------------------------------------------------------


@pytest.mark.parametrize("typed,expected", [
    ("actor.ppo_micro_batch_size_per_gpu", "did you mean 'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu'?"),
    # the rollout's key alone: the actor's ppo_micro_batch_size_per_gpu lacks "log prob", another quantity
    ("actor_rollout_ref.actor.log_prob_micro_batch_size_per_gpu",
     "did you mean 'actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu'?"),
    ("critc.ppo_epochs", "did you mean 'critic.ppo_epochs'?"),
    ("critic.use_kl_loss", "no similar key exists"),  # an actor key, not the critic's
    ("critic.optim.grad_clip", "did you mean 'critic.grad_clip'?"),
])
def test_suggestion(typed, expected):
    with pytest.raises(ConfigError, match=re.escape(f"unknown key {typed!r}; ") + ".*" + re.escape(expected)):
        load_config(RLConfig, None, [f"{typed}=1"])


def _section(key: str) -> str:
    parts = key.split(".")
    return ".".join(parts[:2]) if parts[0] == "actor_rollout_ref" else parts[0]


@pytest.mark.parametrize("key", sorted(SCHEMA_KEYS))
def test_a_misspelt_leaf_is_matched_in_its_own_section(key):
    typo = key + key[-1]  # the last letter typed twice
    with pytest.raises(ConfigError) as e:
        load_config(RLConfig, None, [f"{typo}=1"])
    assert "did you mean" in str(e.value)
    first, *others = re.findall(r"'([^']+)'", str(e.value).split("did you mean", 1)[1])
    assert _section(first) == _section(key), str(e.value)  # the closest key of its own section
    assert all(o.split(".")[0] == key.split(".")[0] for o in others), str(e.value)  # a sibling role at most


# --- the table -----------------------------------------------------------------------------------------


def test_every_key_verl_has_or_had_is_a_schema_key_or_answered_by_the_table():
    vllm_kwargs = "actor_rollout_ref.rollout.engine_kwargs.vllm."  # passed to vllm.LLM as they are
    unanswered = [k for k in VERL_KEYS if k not in SCHEMA_KEYS and not k.startswith(vllm_kwargs) and entry_for(k) is None]
    assert unanswered == []
    assert len(VERL_KEYS) > 550


def test_no_entry_shadows_a_schema_key():
    assert [(p, k) for e in TABLE for p in e.patterns for k in SCHEMA_KEYS if fnmatch.fnmatchcase(k, p)] == []


def test_every_entry_answers_some_key_verl_has_or_had():
    assert [e.patterns for e in TABLE if not any(entry_for(k) is e for k in VERL_KEYS)] == []


@pytest.mark.parametrize("entry", [e for e in TABLE if e.accepted is not ANY], ids=lambda e: e.patterns[0])
def test_a_refusal_names_the_key_and_says_what_why_and_instead(entry):
    key = next(k for k in VERL_KEYS if entry_for(k) is entry)
    verdict = judge(key, "some-other-value")
    assert not verdict.accepted
    assert verdict.message.startswith(f"{key}=some-other-value: in verl, ")
    assert all(part and "{" not in part for part in verdict.message.split("; ")), verdict.message
    assert len(verdict.message.split("; ")) >= 3
    for value in entry.accepted:
        assert judge(key, value).accepted


@pytest.mark.parametrize("a,b", [(True, "True"), (True, "true"), (None, "null"), (None, "None"), (1, 1.0), (0.5, "0.5"),
                                 ("AdamW", "adamw"), (["model", "extra"], ["extra", "model"])])
def test_spellings_of_one_value_are_equal(a, b):
    assert normalise(a) == normalise(b)


@pytest.mark.parametrize("a,b", [(True, 1), (False, None), (0, None), ("fsdp", "fsdp2")])
def test_different_values_stay_different(a, b):
    assert normalise(a) != normalise(b)


def test_accepted_value_leaves_the_config_as_it_was():
    # layered_summon=True (verl's GRPO LoRA GSM8K script) and model.torch_dtype (its CISPO GSM8K script): the
    # same weights reach the engine, and verl itself does not read torch_dtype
    cfg = load_config(RLConfig, None, ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
                                       "actor_rollout_ref.rollout.mode=async", "trainer.balance_batch=False",
                                       "actor_rollout_ref.hybrid_engine=True", "data.trust_remote_code=False",
                                       "actor_rollout_ref.rollout.layered_summon=True",
                                       "actor_rollout_ref.model.torch_dtype=bfloat16"])
    assert cfg == load_config(RLConfig, None, [])


@pytest.mark.parametrize("item,message", [
    ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "hybridrl has no sequence parallelism"),
    ("actor_rollout_ref.rollout.enable_chunked_prefill=False",
     "set actor_rollout_ref.rollout.engine_kwargs.vllm.enable_chunked_prefill=False with rollout.name=vllm"),
    ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4", "hybridrl trains with DDP or FSDP2 only"),
    ("actor_rollout_ref.model.trust_remote_code=True", "never runs code from a model folder"),
    ("critic.optim.clip_grad=0.5", "set critic.grad_clip=0.5"),
    ("actor_rollout_ref.actor.fsdp_config.dtype=bfloat16",
     "set actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bfloat16"),
    ("trainer.balance_batch=True", "(accepted here: False)"),
])
def test_refused_verl_key_through_the_loader(item, message):
    with pytest.raises(ConfigError, match="^command line: " + re.escape(item) + ": in verl, ") as e:
        load_config(RLConfig, None, [item])
    assert message in str(e.value)


def test_a_verl_config_file_names_the_file_and_accepts_targets(tmp_path):
    path = tmp_path / "verl.yaml"
    path.write_text("actor_rollout_ref:\n  _target_: verl.workers.config.X\n  rollout:\n    mode: async\n"
                    "    enable_prefix_caching: true\n")
    with pytest.raises(ConfigError, match=re.escape(f"--config {path}: actor_rollout_ref.rollout.enable_prefix_caching"
                                                    "=True: in verl, ")):
        load_config(RLConfig, str(path))


def test_example_script_keys_validate(vllm_installed):
    path = os.path.join(HERE, "../../../examples/gsm8k_verl_command/run.sh")
    overrides = re.findall(r"^\s+([\w.+]+=\S+?)\s*\\?$", open(path).read(), flags=re.M)
    cfg = load_config(RLConfig, None, [shlex.split(o.replace("$DATA", "/data").replace("$MODEL", "/model"))[0]
                                       for o in overrides])
    validate_rl_config(cfg)
    assert len(overrides) >= 35 and cfg.actor_rollout_ref.rollout.n == 5 and cfg.trainer.backend == "local"


def test_train_help_points_at_the_table():
    from hybridrl.cli import _keys_help
    from hybridrl.config.sft import SFTConfig

    assert "hybridrl/vocab/verl_key_table.py lists them" in _keys_help(RLConfig)
    assert "verl_key_table" not in _keys_help(SFTConfig)
    assert os.path.isfile(os.path.join(HERE, "../../../hybridrl/vocab/verl_key_table.py"))

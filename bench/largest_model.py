"""The largest Qwen2-shaped model that completes GRPO steps on this machine (issue #21), with `hybridrl plan`'s
estimate next to the measured peak.

    .venv/bin/python bench/largest_model.py --shape 0.5b                  # Qwen2-0.5B's shape, ~400M parameters
    .venv/bin/python bench/largest_model.py --shape 1b --levers bf16-ref  # with the reference's weights in bf16
    .venv/bin/python bench/largest_model.py --shape 0.5b --plan-only      # the estimate, no run

Each shape is a random-init Qwen2ForCausalLM written from a config (SHAPES; the vocabulary is SmolLM2's 49152,
whose tokenizer files are copied into the folder), trained with GRPO for a few short steps: 2 prompts x 2
samples x 32 tokens (EOS ignored) of bench/workload.py's additions with its shaped reward (a random model is
never right; the digit share still differs within a group, so every step has a gradient), a KL loss against
a frozen reference, micro-batches of one response, no validation. bench/memory.py runs and measures it (a fresh
process; its kernel-reported peak RSS). Appends to bench/results/largest_model.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile

# each row names its dtype: `auto` precision (plan/precision_auto.py) is fp32 here unless a row sets bf16
os.environ.setdefault("HYBRIDRL_AUTO_DTYPE", "fp32")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import memory  # noqa: E402  (bench/memory.py: estimate, measure, data)

SHAPES = {  # hidden, layers, heads, kv_heads, intermediate (Qwen2's published shapes; vocab is SmolLM2's)
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864),
    "1b": dict(hidden_size=1536, num_hidden_layers=16, num_attention_heads=12, num_key_value_heads=2,
               intermediate_size=8960),
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                 intermediate_size=8960),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "generation_config.json")
LEVERS = {
    "bf16-ref": ["actor_rollout_ref.ref.fsdp_config.model_dtype=bf16",
                 "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=bf16"],
    "ckpt": ["actor_rollout_ref.model.enable_gradient_checkpointing=true", "actor_rollout_ref.model.use_remove_padding=true"],
    "bf16": ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16"],
}
STEP = ["data.train_batch_size=2", "actor_rollout_ref.rollout.n=2", "data.max_response_length=32",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1", "actor_rollout_ref.actor.use_kl_loss=true",
        "data.val_files=[]", "actor_rollout_ref.actor.optim.lr=1e-6",
        f"custom_reward_function.path={os.path.join(HERE, 'workload.py')}", "custom_reward_function.name=compute_score"]


def write_model(shape: str, folder: str) -> str:
    """A random-init Qwen2 of `shape` with SmolLM2's tokenizer, written once (fp32 safetensors)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path = os.path.join(folder, f"qwen2-{shape}")
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    config = Qwen2Config(vocab_size=49152, tie_word_embeddings=True, max_position_embeddings=4096,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2, **SHAPES[shape])
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(memory.SMOLLM2, name)):
            shutil.copy(os.path.join(memory.SMOLLM2, name), path)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    p.add_argument("--levers", nargs="*", default=[], choices=sorted(LEVERS))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--plan-only", action="store_true", help="print the estimate, run nothing")
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "hybridrl-largest"))
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = write_model(a.shape, a.work)
    train, _ = memory.data_files(a.work)["arith"]
    overrides = [*memory.RUN, f"actor_rollout_ref.model.path={model}", f"data.train_files=[{train}]", *STEP,
                 *[o for lever in a.levers for o in LEVERS[lever]], f"trainer.total_training_steps={a.steps}",
                 f"data.train_max_samples={2 * a.steps}"]
    overrides.append(f"data.max_prompt_length={memory.prompt_length(overrides)}")
    est = memory.estimate(overrides)
    params = memory.read_params(model)
    print(f"qwen2-{a.shape} ({params / 1e6:.0f}M parameters), levers {a.levers or 'none'}: estimate "
          f"{est['bytes'] / memory.GIB:.2f} GiB ({est['phase']})", flush=True)
    if a.plan_only:
        return
    name = f"qwen2-{a.shape}" + "".join(f"+{lever}" for lever in a.levers)
    got = memory.measure(overrides, os.path.join(a.work, "runs", name), os.path.join(a.work, f"{name}.log"))
    later = got["step_s"][1:] or got["step_s"]
    row = {"name": name, "shape": SHAPES[a.shape], "params": params, "levers": a.levers, "estimate": est, **got,
           "s_per_step": statistics.median(later), "ratio": est["bytes"] / got["peak_rss"]}
    print(f"{name}: {row['s_per_step']:.0f} s/step (steps {[round(s) for s in got['step_s']]}), peak RSS "
          f"{got['peak_rss'] / memory.GIB:.2f} GiB, estimate {est['bytes'] / memory.GIB:.2f} GiB ({row['ratio']:.2f})",
          flush=True)
    save(row, a.out)


def save(row: dict, out: str) -> None:
    """Append the row to largest_model.json (one row per model and levers, the newest kept) and rewrite the table."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "largest_model.json")
    rows = json.load(open(path))["rows"] if os.path.exists(path) else []
    rows = [r for r in rows if r["name"] != row["name"]] + [{**row, "date": datetime.date.today().isoformat()}]
    with open(path, "w") as f:
        json.dump({"machine": memory.machine(), "rows": rows}, f, indent=1)
    lines = ["| model | parameters | levers | s/step | measured peak RSS | `plan` estimate | estimate / measured |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['params'] / 1e6:.0f}M | {', '.join(r['levers']) or 'none'} | "
                     f"{r['s_per_step']:.0f} | {r['peak_rss'] / memory.GIB:.2f} GiB | "
                     f"{r['estimate']['bytes'] / memory.GIB:.2f} GiB | {r['ratio']:.2f} |")
    with open(os.path.join(out, "largest_model.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

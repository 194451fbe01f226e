"""hybridrl from Python, notebook style: train the bundled tiny-arith model a few GRPO steps on arithmetic
prompts given as a list of dicts, scored by a TRL-style reward function, with a callback that adds a
validation metric; then evaluate the result and load it as a transformers model.

    python examples/python_api.py [RUN_DIR]     # default: runs/python_api
"""

import random
import re
import sys

import hybridrl


# %% Data: TRL's row schema (a `prompt` as text; the other columns reach the reward function by name)
def problems(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        rows.append({"prompt": f"What is {a}+{b}?", "answer": a + b})
    return rows


train_rows, val_rows = problems(64, seed=0), problems(16, seed=1)


# %% Reward: TRL's signature; `answer` is the dataset column of the same name
def correct(prompts, completions, answer, **kwargs):
    """1.0 when the completion's first number is the sum, else 0.0."""
    found = [re.search(r"-?\d+", c) for c in completions]
    return [float(m is not None and int(m.group()) == a) for m, a in zip(found, answer)]


# %% Callback: one more validation metric, logged as val-core/best_accuracy in the same step's line
class BestSoFar(hybridrl.Callback):
    best = 0.0

    def on_validation(self, step, metrics):
        # rows without a data_source are named "custom" (val-core/<data_source>/reward/mean@<n>)
        self.best = max(self.best, metrics["val-core/custom/reward/mean@1"])
        return {"best_accuracy": self.best}


# %% Train: verl's config keys, a handful of them for a seconds-long run on a laptop CPU
run_dir = sys.argv[1] if len(sys.argv) > 1 else "runs/python_api"
run = hybridrl.train(
    {
        "data.train_batch_size": 8,
        "actor_rollout_ref.rollout.n": 4,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "actor_rollout_ref.actor.optim.lr": 1e-4,
        "trainer.total_training_steps": 2,
        "trainer.default_local_dir": run_dir,
    },
    data=train_rows,
    val_data=val_rows,
    reward=correct,
    callbacks=[BestSoFar()],
)
print("validation:", {k: v for k, v in run.metrics()[-1].items() if k.startswith("val-core/")})
print("checkpoint:", run.last_checkpoint())

# %% Evaluate the trained model on the validation prompts (4 samples each), with the same reward
result = hybridrl.evaluate(run, val_rows, reward=correct, n=4)
print("eval:", {k: round(v, 3) for k, v in result.metrics.items() if k.startswith("val-core/")})

# %% Load it as transformers objects and generate
model, tokenizer = hybridrl.load(run)
text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 12+30?"}], add_generation_prompt=True,
                                     tokenize=False)
ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
out = model.generate(ids, max_new_tokens=8, do_sample=False)
print("12+30 ->", tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))

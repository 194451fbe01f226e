"""TRL's GRPOTrainer on the benchmark workload (bench/workload.py); runs in bench/.venv-trl.

    bench/.venv-trl/bin/python bench/trl_grpo.py --model DIR --steps 6 --out trl.jsonl

Writes one JSON line per optimizer step: wall and process-CPU seconds, the generation share
(`model.generate`), the rollout share (generation + reward + batch preparation) and the
training share (the rest of the step: forward, backward, optimizer), the generated and the
trained (prompt + completion, non-padding) token counts, and the process's peak RSS so far.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workload  # noqa: E402


def main() -> None:
    a = workload.runner_args(__doc__.splitlines()[0])

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    if a.threads:
        torch.set_num_threads(a.threads)
    pairs = workload.workload_prompts(a.workload, workload.PROMPTS_PER_STEP * a.steps)
    learning = a.workload == "learning"
    rule = workload.last_integer_correct if learning else workload.shaped
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": q}] for q, _ in pairs],
                              "answer": [ans for _, ans in pairs]})

    def reward(completions, answer, **_):
        scores = [rule(c[0]["content"], ans) for c, ans in zip(completions, answer)]
        phase["zero_std_share"] = workload.zero_std_share(scores)  # TRL repeats each prompt num_generations times in a row
        phase["score"] = sum(scores) / len(scores)
        return scores

    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    n = workload.PROMPTS_PER_STEP * workload.SAMPLES_PER_PROMPT
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), use_cpu=True, bf16=a.bf16, fp16=False, torch_compile=a.compile, seed=workload.SEED,
        per_device_train_batch_size=n, gradient_accumulation_steps=1, num_generations=workload.SAMPLES_PER_PROMPT,
        max_completion_length=workload.NEW_TOKENS,
        generation_kwargs={} if learning else {"min_new_tokens": workload.NEW_TOKENS},  # learning: stops at EOS
        temperature=1.0, learning_rate=workload.LR, lr_scheduler_type="constant", warmup_steps=0,
        beta=0.0, loss_type="dapo", num_iterations=1, max_steps=a.steps, logging_steps=1, save_strategy="no",
        report_to=[], dataloader_num_workers=0, shuffle_dataset=False, disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tokenizer)

    phase = {"gen_s": 0.0, "rollout_s": 0.0, "gen_tokens": 0, "train_tokens": 0, "zero_std_share": 0.0, "score": 0.0}

    def timed(key, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                phase[key] += time.perf_counter() - start
        return wrapper

    trainer.model.generate = timed("gen_s", trainer.model.generate)
    score = timed("rollout_s", trainer._generate_and_score_completions)

    def generate_and_score(*args, **kwargs):
        out = score(*args, **kwargs)
        phase["gen_tokens"] += int(out["completion_mask"].sum())
        phase["train_tokens"] += int(out["completion_mask"].sum() + out["prompt_mask"].sum())
        return out
    trainer._generate_and_score_completions = generate_and_score

    out = open(a.out, "w")

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.wall, self.cpu = time.perf_counter(), time.process_time()
            phase.update(gen_s=0.0, rollout_s=0.0, gen_tokens=0, train_tokens=0)

        def on_step_end(self, *_, **__):
            step_s = time.perf_counter() - self.wall
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            record = {"step_s": step_s, "cpu_s": time.process_time() - self.cpu, **phase,
                      "train_s": step_s - phase["rollout_s"], "peak_rss_gb": rss / 2**30}
            out.write(json.dumps(record) + "\n")
            out.flush()

    trainer.add_callback(StepTimer())
    trainer.train()


if __name__ == "__main__":
    main()

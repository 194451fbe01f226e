"""Preference pairs for the reward-model example, from the arithmetic task and the bundled tiny model.

For every prompt of an arithmetic parquet file (`hybridrl data arithmetic`), --samples responses are
sampled from the policy (temperature 1) and scored by the arithmetic scorer
(hybridrl/rewards/scorers/arithmetic.py: 1 if the last integer is the answer). A pair is
  chosen   = a sampled response scored 1, or, when no sample is right, the correct answer written out
             the way the tiny model answers (just the number; the row says chosen_source=constructed)
  rejected = a sampled response scored 0 (a prompt whose samples are all right gives no pair: counted)
Rows are written in TRL's conversational preference layout (prompt / chosen / rejected message lists),
with data_source and ground_truth kept for reference.
"""

from __future__ import annotations

import argparse
import os
import random
import time

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from hybridrl.data.dataset import RLDataset
from hybridrl.models.loading import eos_token_ids, load_causal_lm, load_tokenizer
from hybridrl.rewards.scorers.arithmetic import compute_score
from hybridrl.rollout.base import SamplingParams, generate_rollout
from hybridrl.rollout.hf import HFRolloutEngine


def sample_scored(model_path: str, prompts_file: str, samples: int, seed: int, batch: int = 64):
    """[(record, [(text, score), ...])] for every prompt of the file."""
    tok = load_tokenizer(model_path)
    model = load_causal_lm(model_path)
    data = RLDataset([prompts_file], tok, "prompt", 128, key=prompts_file)
    engine = HFRolloutEngine(model, eos_token_ids(model, tok), tok.pad_token_id, seed=seed)
    sampling = SamplingParams(max_new_tokens=16, temperature=1.0)
    out = []
    for start in range(0, len(data.records), batch):
        idx = list(range(start, min(start + batch, len(data.records))))
        rollout = generate_rollout(engine, data.collate(idx, tok.pad_token_id), samples, sampling)
        texts = tok.batch_decode(rollout.response_ids * rollout.response_mask, skip_special_tokens=True)
        for k, i in enumerate(idx):
            rec = data.records[i]
            mine = texts[k * samples:(k + 1) * samples]
            out.append((rec, [(t.strip(), compute_score("arithmetic", t, rec.ground_truth)) for t in mine]))
    return out


def to_pairs(scored, seed: int) -> tuple[list[dict], dict[str, int]]:
    rng = random.Random(seed)
    rows, counts = [], {"sampled": 0, "constructed": 0, "all_right": 0}
    for rec, samples in scored:
        right = [t for t, s in samples if s == 1.0 and t]
        wrong = [t for t, s in samples if s == 0.0 and t]
        if not wrong:
            counts["all_right"] += 1
            continue
        source = "sampled" if right else "constructed"
        chosen = rng.choice(right) if right else rec.ground_truth
        counts[source] += 1
        rows.append({"prompt": rec.messages, "chosen": [{"role": "assistant", "content": chosen}],
                     "rejected": [{"role": "assistant", "content": rng.choice(wrong)}], "chosen_source": source,
                     "data_source": rec.data_source, "ground_truth": rec.ground_truth})
    return rows, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-arith", help="policy that samples the responses (default: %(default)s)")
    ap.add_argument("--prompts", default="data/rm_arith/prompts", help="folder with train/val.parquet of "
                                                                       "`hybridrl data arithmetic` (default: %(default)s)")
    ap.add_argument("--out", default="data/rm_arith", help="writes train.parquet and val.parquet here (default: %(default)s)")
    ap.add_argument("--samples", type=int, default=4, help="responses sampled per prompt (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    for split in ("train", "val"):
        t0 = time.perf_counter()
        scored = sample_scored(args.model, os.path.join(args.prompts, f"{split}.parquet"), args.samples, args.seed)
        rows, counts = to_pairs(scored, args.seed)
        solve = sum(s for _, ss in scored for _, s in ss) / sum(len(ss) for _, ss in scored)
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(args.out, f"{split}.parquet"))
        print(f"{split}: {len(scored)} prompts, sample accuracy {solve:.3f}; {len(rows)} pairs (chosen sampled: "
              f"{counts['sampled']}, constructed: {counts['constructed']}; prompts with no wrong sample, no pair: "
              f"{counts['all_right']}) in {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()

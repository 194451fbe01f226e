"""Held-out pair accuracy of a trained reward model, overall and by how the chosen answer was made
(sampled from the policy, or constructed because no sample was right), next to a baseline that needs
no training: the policy's own log-likelihood of the chosen response against the rejected one."""

from __future__ import annotations

import argparse

import pyarrow.parquet as pq
import torch

from hybridrl.data.preference import PreferenceColumns, PreferenceDataset
from hybridrl.models.loading import load_causal_lm, load_reward_model, load_tokenizer
from hybridrl.trainer.rm import score_pairs


@torch.no_grad()
def response_log_likelihood(model, prompt: list[int], response: list[int]) -> float:
    """sum_t log p(response_t | prompt, response_<t)."""
    ids = torch.tensor([prompt + response])  # [1, P+R]
    logp = model(input_ids=ids).logits[0, :-1].log_softmax(-1)  # [P+R-1, V] predicts tokens 1..
    targets = ids[0, 1:]
    return logp[torch.arange(len(targets)), targets][len(prompt) - 1:].sum().item()


def accuracy(wins: list[bool], sources: list[str], which: str | None = None) -> str:
    picked = [w for w, s in zip(wins, sources) if which is None or s == which]
    return f"{sum(picked) / len(picked):.3f} ({len(picked)} pairs)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rm", default="build/rm_arith", help="trained reward model (default: %(default)s)")
    ap.add_argument("--pairs", default="data/rm_arith/val.parquet", help="held-out pairs (default: %(default)s)")
    ap.add_argument("--policy", default="tiny-arith", help="policy for the likelihood baseline (default: %(default)s)")
    args = ap.parse_args()
    tok = load_tokenizer(args.rm)
    data = PreferenceDataset([args.pairs], tok, PreferenceColumns(), 256, "--pairs")
    sources = [r["chosen_source"] for r in pq.read_table(args.pairs, columns=["chosen_source"]).to_pylist()]
    r_c, r_r = score_pairs(load_reward_model(args.rm), data, 64, tok.pad_token_id)
    rm_wins = (r_c > r_r).tolist()
    policy = load_causal_lm(args.policy)
    lik_wins = [response_log_likelihood(policy, p.prompt_ids, p.chosen_ids)
                > response_log_likelihood(policy, p.prompt_ids, p.rejected_ids) for p in data.pairs]
    for name, wins in (("reward model", rm_wins), ("policy likelihood baseline", lik_wins)):
        print(f"{name}: pair accuracy {accuracy(wins, sources)}; chosen sampled {accuracy(wins, sources, 'sampled')}, "
              f"chosen constructed {accuracy(wins, sources, 'constructed')}")


if __name__ == "__main__":
    main()

"""The tuning guide's claims, measured on the default task (issue #38 part 2; docs/guide_claims.md): reads what
the three commands below wrote and makes the page's tables and figures. It runs nothing itself.

    hybridrl sweep examples/sweep/guide_grpo.yaml       # 24 trials, ASHA: lr x clip_ratio x kl_loss_coef
    bash examples/sweep/guide_seeds.sh LR CLIP KL       # default vs the guide's cold start vs the sweep's best, 3 seeds
    hybridrl sweep examples/sweep/guide_ppo.yaml        # PPO: actor lr x critic lr, 2 x 4 grid, whole curves
    .venv/bin/python bench/guide_claims.py              # -> bench/results/guide_claims.md, docs/guide_*.png

"Oscillation" is measured as a curve's up-and-down: the distance it travels beyond its net change,
sum |v[i+1] - v[i]| - |v[-1] - v[0]| (the total variation less the net move; 0 for a monotone curve).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from hybridrl.eval.runs import load_run  # noqa: E402
from hybridrl.sweep.results import read_sweep  # noqa: E402

VAL = "val-core/arithmetic/reward/mean@1"
ARMS = {"default": "the default config (lr 2e-4, clip 0.2, no KL loss)",
        "guide": "the guide's cold start (clip 0.15, KL loss 0.05)",
        "swept": "the sweep's best"}
SEEDS = (1, 2, 3)
LR, CRITIC_LR = "actor_rollout_ref.actor.optim.lr", "critic.optim.lr"


def up_and_down(values: list[float]) -> float:
    """The distance a curve travels beyond its net change: 0 when monotone, 2h for one detour of height h."""
    if len(values) < 2:
        return 0.0
    travelled = sum(abs(b - a) for a, b in zip(values, values[1:]))
    return travelled - abs(values[-1] - values[0])


def values(run_dir: str, key: str) -> list[float]:
    return [v for _, v in load_run(run_dir).series.get(key, [])]


def seeds_rows(folder: str) -> dict[str, dict]:
    """Per arm: each seed's final validation accuracy and curve, and the mean of the finals."""
    rows = {}
    for arm in ARMS:
        runs = [os.path.join(folder, f"{arm}_s{s}") for s in SEEDS]
        if not all(os.path.isfile(os.path.join(r, "metrics.jsonl")) for r in runs):
            continue
        curves = [load_run(r).series[VAL] for r in runs]
        finals = [c[-1][1] for c in curves]
        rows[arm] = {"finals": finals, "mean": statistics.mean(finals), "min": min(finals),
                     "curves": curves}
    return rows


def ppo_rows(sweep_dir: str) -> list[dict]:
    """Per trial of the PPO sweep: the two learning rates, validation best/final, and each curve's up-and-down."""
    _, trials = read_sweep(sweep_dir)
    rows = []
    for t in trials:
        folder = os.path.join(sweep_dir, t.trial)
        val = values(folder, VAL)
        reward = values(folder, "critic/score/mean")
        rows.append({"trial": t.trial, "actor_lr": t.sampled[LR], "critic_lr": t.sampled[CRITIC_LR],
                     "ratio": t.sampled[CRITIC_LR] / t.sampled[LR], "best": t.best, "final": t.final,
                     "val_up_down": up_and_down(val), "reward_up_down": up_and_down(smooth(reward, 10)),
                     "vf_loss_last20": _mean_tail(values(folder, "critic/vf_loss"), 20),
                     "val": load_run(folder).series.get(VAL, [])})
    return sorted(rows, key=lambda r: (r["actor_lr"], r["critic_lr"]))


def smooth(series: list[float], window: int) -> list[float]:
    """Means of consecutive non-overlapping windows: the training reward's sampling noise averaged out."""
    return [statistics.mean(series[i:i + window]) for i in range(0, len(series) - window + 1, window)]


def _mean_tail(series: list[float], n: int) -> float:
    return statistics.mean(series[-n:]) if series else float("nan")


def markdown(grpo_dir: str, seeds: dict, ppo: list[dict], cpu: str) -> str:
    spec, trials = read_sweep(grpo_dir)
    keys = list(spec["space"])
    out = [f"Measured {datetime.date.today()} on {cpu}; `python bench/guide_claims.py` read the runs.", "",
           f"## The GRPO sweep ({len(trials)} trials, ASHA)", "",
           "| # | status | best val acc | steps | " + " | ".join(k.rsplit(".", 1)[-1] for k in keys) + " |",
           "|---|---|---:|---:|" + "---:|" * len(keys)]
    for i, t in enumerate(trials, 1):
        best = "-" if t.best is None else f"{100 * t.best:.1f} %"
        out.append(f"| {i} | {t.status} | {best} | {t.steps} | " +
                   " | ".join(_fmt(t.sampled.get(k)) for k in keys) + " |")
    out += ["", "## Best against default, 3 seeds (200 steps each)", "",
            "| config | final val acc, seeds 1 / 2 / 3 | mean | min |", "|---|---|---:|---:|"]
    for arm, r in seeds.items():
        out.append(f"| {ARMS[arm]} | " + " / ".join(f"{100 * v:.1f}" for v in r["finals"]) +
                   f" % | {100 * r['mean']:.1f} % | {100 * r['min']:.1f} % |")
    out += ["", "## PPO: actor lr x critic lr (100 steps each)", "",
            "| actor lr | critic lr | critic:actor | best val acc | final val acc | val up-and-down | "
            "reward up-and-down (10-step means) | critic vf_loss, last 20 steps |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in ppo:
        out.append(f"| {r['actor_lr']:g} | {r['critic_lr']:g} | {r['ratio']:.2g} | {100 * r['best']:.1f} % | "
                   f"{100 * r['final']:.1f} % | {100 * r['val_up_down']:.1f} pts | "
                   f"{r['reward_up_down']:.3f} | {r['vf_loss_last20']:.4f} |")
    return "\n".join(out) + "\n"


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def figures(seeds: dict, ppo: list[dict], out_dir: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if seeds:
        fig, ax = plt.subplots(figsize=(7, 4))
        for (arm, r), color in zip(seeds.items(), ("tab:gray", "tab:orange", "tab:blue")):
            for i, curve in enumerate(r["curves"]):
                ax.plot([s for s, _ in curve], [100 * v for _, v in curve], color=color, alpha=0.8,
                        label=ARMS[arm] if i == 0 else None)
        ax.set(xlabel="step", ylabel="validation accuracy (%)", title="3 seeds each (data and sampling seed)")
        ax.legend(fontsize=8)
        written.append(_save(fig, os.path.join(out_dir, "guide_seeds.png")))
    if ppo:
        actors = sorted({r["actor_lr"] for r in ppo})
        fig, axes = plt.subplots(1, len(actors), figsize=(5 * len(actors), 4), sharey=True, squeeze=False)
        for ax, lr in zip(axes[0], actors):
            for r in (r for r in ppo if r["actor_lr"] == lr):
                style = "-" if abs(r["ratio"] - 1) > 1e-9 else "--"
                ax.plot([s for s, _ in r["val"]], [100 * v for _, v in r["val"]], style,
                        label=f"critic lr {r['critic_lr']:g} ({r['ratio']:.2g}x)")
            ax.set(xlabel="step", title=f"PPO, actor lr {lr:g}")
            ax.legend(fontsize=8)
        axes[0][0].set_ylabel("validation accuracy (%)")
        written.append(_save(fig, os.path.join(out_dir, "guide_ppo.png")))
    return written


def _save(fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grpo", default="checkpoints/sweeps/guide_grpo")
    p.add_argument("--seeds", default="checkpoints/guide_seeds")
    p.add_argument("--ppo", default="checkpoints/sweeps/guide_ppo")
    a = p.parse_args()
    from hybridrl.doctor import collect
    from speed import cpu_kind  # the CPU kind goes with every figure (NOTES.md)

    cpu = collect(quick=True)["cpu"]
    seeds, ppo = seeds_rows(a.seeds), ppo_rows(a.ppo) if os.path.isdir(a.ppo) else []
    text = markdown(a.grpo, seeds, ppo, f"{cpu.get('model')} ({cpu.get('usable_cores')} cores, CPU kind {cpu_kind(cpu.get('flags', []))})")
    with open(os.path.join(ROOT, "bench", "results", "guide_claims.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    for path in figures(seeds, ppo, os.path.join(ROOT, "docs")):
        print("wrote", path)


if __name__ == "__main__":
    main()

"""`compare_table` and `hybridrl compare` on two small runs whose final and best values are worked by hand."""

from __future__ import annotations

import json
import math

import pytest

from hybridrl.cli import main
from hybridrl.errors import DataError
from hybridrl.eval.compare import BEST_RULE, best_direction, compare_table, default_keys, render, to_json
from hybridrl.eval.runs import load_runs

A = [  # validated at steps 0 and 2, a KL loss, entropy NaN at step 2, a last line cut by a kill
    {"step": 0, "val-core/math/reward/mean@4": 0.2, "val-core/gsm8k/reward/mean@4": 0.4,
     "val-core/math/reward/pass@2": 0.3},
    {"step": 1, "critic/score/mean": 0.1, "actor/entropy": 1.0, "actor/kl_loss": 0.01, "actor/ppo_kl": 0.5,
     "timing_s/step": 3.0, "response_length/mean": 10.0},
    {"step": 2, "critic/score/mean": 0.5, "actor/entropy": "nan", "actor/kl_loss": 0.03, "timing_s/step": 2.0,
     "response_length/mean": 12.0, "val-core/math/reward/mean@4": 0.6, "val-core/gsm8k/reward/mean@4": 0.8,
     "val-core/math/reward/pass@2": 0.7},
    {"step": 3, "critic/score/mean": 0.3, "actor/entropy": 0.8, "actor/kl_loss": 0.02, "timing_s/step": 2.5,
     "response_length/mean": 11.0},
]
B = [  # no validation, no KL loss (ppo_kl is its KL), the last step time infinite
    {"step": 1, "critic/score/mean": 0.2, "actor/ppo_kl": 0.004, "timing_s/step": 1.5, "actor/entropy": 0.9},
    {"step": 2, "critic/score/mean": 0.4, "actor/ppo_kl": 0.002, "timing_s/step": 1.0, "actor/entropy": 0.7},
    {"step": 3, "critic/score/mean": 0.35, "actor/ppo_kl": 0.003, "timing_s/step": "inf", "actor/entropy": 0.6},
]


@pytest.fixture
def folders(tmp_path) -> list[str]:
    """Two runs sharing the experiment name "exp", in folders seed1 and seed2."""
    out = []
    for seed, lines, tail in ((1, A, '{"step": 4, "critic/sc'), (2, B, "")):
        folder = tmp_path / f"seed{seed}"
        folder.mkdir()
        (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + tail)
        (folder / "config.yaml").write_text("trainer:\n  experiment_name: exp\n")
        out.append(str(folder))
    return out


@pytest.mark.parametrize("key,direction", [
    ("val-core/math/reward/mean@4", "max"), ("val-core/math/reward/pass@2", "max"), ("critic/score/mean", "max"),
    ("actor/entropy", "max"), ("perf/throughput", "max"), ("timing_s/step", "min"), ("perf/cpu_time_s", "min"),
    ("actor/kl_loss", "min"), ("actor/ppo_kl", "min"), ("actor/reward_kl_penalty", "min"),
    ("response_length/mean", None), ("actor/pg_loss", None), ("actor/grad_norm", None), ("steps", None),
])
def test_best_direction(key, direction):
    assert best_direction(key) == direction


def test_default_keys_are_those_logged(folders):
    assert default_keys(load_runs(folders)) == [
        "val-core/gsm8k/reward/mean@4", "val-core/math/reward/mean@4", "val-core/math/reward/pass@2",
        "critic/score/mean", "response_length/mean", "actor/entropy", "actor/kl_loss", "actor/ppo_kl",
        "timing_s/step", "steps"]  # no perf/cpu_time_s: neither run logged it


def test_final_and_best_by_hand(folders):
    rows = {r.metric: r for r in compare_table(load_runs(folders))}
    score = rows["critic/score/mean"]
    assert (score.best_is, score.final, score.best) == ("max", [0.3, 0.35], [0.5, 0.4])
    assert rows["actor/entropy"].final == [0.8, 0.6] and rows["actor/entropy"].best == [1.0, 0.9]  # NaN skipped
    assert rows["actor/kl_loss"].final == [0.02, None] and rows["actor/kl_loss"].best == [0.01, None]
    assert rows["actor/ppo_kl"].final == [0.5, 0.003] and rows["actor/ppo_kl"].best == [0.5, 0.002]
    assert rows["timing_s/step"].final == [2.5, math.inf] and rows["timing_s/step"].best == [2.0, 1.0]
    assert rows["val-core/math/reward/mean@4"].final == [0.6, None] == rows["val-core/math/reward/mean@4"].best
    assert rows["val-core/math/reward/pass@2"].best == [0.7, None]
    length = rows["response_length/mean"]
    assert (length.best_is, length.final, length.best) == (None, [11.0, None], [None, None])
    assert (rows["steps"].final, rows["steps"].best) == ([3.0, 3.0], [None, None])  # the cut step 4 does not count


def test_a_nan_last_value_is_the_final_value_and_never_the_best(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(f'{{"step": {i}, "actor/entropy": {v}}}\n'
                                                    for i, v in enumerate(['"nan"', 0.5, '"nan"'])))
    row, = compare_table(load_runs([str(tmp_path)]), ["actor/entropy"])
    assert math.isnan(row.final[0]) and row.best == [0.5]


def test_chosen_keys_keep_their_order_and_a_typo_is_an_error(folders):
    runs = load_runs(folders)
    assert [r.metric for r in compare_table(runs, ["steps", "actor/ppo_kl"])] == ["steps", "actor/ppo_kl"]
    with pytest.raises(DataError, match="'critic/score/maen'; did you mean critic/score/mean"):
        compare_table(runs, ["critic/score/maen"])


def test_render_is_a_fixed_width_table(folders):
    runs = load_runs(folders)
    text = render(compare_table(runs, ["critic/score/mean", "timing_s/step", "actor/kl_loss", "steps"]),
                  [r.name for r in runs])
    # value columns 5 wide ("final"), each run's group max(len(name) = 11, 5 + 2 + 5) = 12 wide
    assert text.splitlines() == [
        BEST_RULE,
        "                         exp (seed1)   exp (seed2)",
        "metric             best  final   best  final   best",
        "critic/score/mean  max     0.3    0.5   0.35    0.4",
        "timing_s/step      min     2.5      2    inf      1",
        "actor/kl_loss      min    0.02   0.01      -      -",
        "steps              -         3      -      3      -",
    ]


def test_json_has_the_same_data_and_is_strict_json(folders):
    runs = load_runs(folders)
    data = to_json(compare_table(runs, ["timing_s/step", "actor/kl_loss"]), [r.name for r in runs])
    assert data["runs"] == ["exp (seed1)", "exp (seed2)"]
    assert data["rows"][0] == {"metric": "timing_s/step", "best_is": "min",
                               "final": {"exp (seed1)": 2.5, "exp (seed2)": "inf"},
                               "best": {"exp (seed1)": 2.0, "exp (seed2)": 1.0}}
    assert data["rows"][1]["final"] == {"exp (seed1)": 0.02, "exp (seed2)": None}
    json.dumps(data, allow_nan=False)  # no bare NaN/Infinity for other tools to choke on


def test_cli_compare(folders, tmp_path, capsys):
    out = tmp_path / "table.json"
    assert main(["compare", *folders, "--keys", "critic/score/mean, steps", "--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert stdout.splitlines()[3].split() == ["critic/score/mean", "max", "0.3", "0.5", "0.35", "0.4"]
    assert [r["metric"] for r in json.loads(out.read_text())["rows"]] == ["critic/score/mean", "steps"]

    (tmp_path / "not-a-run").mkdir()
    assert main(["compare", folders[0], str(tmp_path / "not-a-run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hybridrl compare: error: ") and "not-a-run: no metrics.jsonl" in err
    assert err.count("\n") == 1
    assert main(["compare", *folders, "--keys", "nope"]) == 2

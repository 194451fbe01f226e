"""`hybridrl view` driven in headless Chromium (Selenium) as a user would: on a real tiny GRPO run (dumps
with per-token detail) beside a real multi-turn calculator run, the curves draw with both runs' traces, EMA
and log scale change the plot, a closed section's series load when it opens, new metric lines appear without
a reload, a prompt opens into its n responses with coloured tokens, the "same prompt at step" picker lists
only the steps that sampled it and opens one beside it, the tool run's turns show with the tool's tokens
marked untrained, the A/B table fills, and the console stays free of errors. Every chart's title is clear of
plotly's toolbar, and a constant series (a hand-written third run: 2e-4, 0, 1e6, one point, NaN gaps) is drawn
at its value with its value on the axis. Screenshots go to tests/artifacts/view/ (gitignored).

Needs chromium and chromedriver (apt-get install chromium chromium-driver; .ci/run installs them).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
from view_browser_helpers import ARTIFACTS, chrome, needs_browser, view_server, wait_equal, wait_for  # noqa: E402

webdriver = needs_browser()
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402


def tiny_run(arith_data, folder: Path) -> Path:
    """A real 3-step GRPO run on the bundled tiny model, with rollout and validation dumps and token detail."""
    sys.path.insert(0, str(Path(__file__).parent))
    from run_helpers import overrides, train

    train(overrides(arith_data, str(folder), 3, f"trainer.rollout_data_dir={folder / 'rollouts'}",
                    f"trainer.validation_data_dir={folder / 'val'}", "trainer.dump_token_details=true",
                    "trainer.test_freq=1", "trainer.experiment_name=tiny_grpo"))
    return folder


def tool_run(random_model_dir: str, folder: Path) -> Path:
    """A real 2-step multi-turn GRPO run with the calculator (tests/integration/test_multi_turn_runs.py's setup: a
    tiny model warm-started to call the tool), its rollouts dumped with token detail: tool turns in the dump."""
    sys.path.insert(0, str(Path(__file__).parent))
    from run_helpers import train
    from tool_helpers import warm_start, write_sum_prompts

    folder.mkdir(parents=True)
    data = write_sum_prompts(str(folder / "sums.parquet"))
    (folder / "tools.yaml").write_text("tools:\n  - class_name: calculator\n")
    model = warm_start(random_model_dir, str(folder / "warm"))
    run = folder / "run"
    train([f"data.train_files={data}", f"data.val_files={data}", "data.train_batch_size=4", "data.val_max_samples=4",
           "data.max_response_length=150", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "actor_rollout_ref.rollout.n=4",
           f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.multi_turn.enable=true",
           "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
           f"actor_rollout_ref.rollout.multi_turn.tool_config_path={folder / 'tools.yaml'}",
           "actor_rollout_ref.rollout.temperature=0.5", "trainer.total_training_steps=2", "trainer.logger=[file]",
           f"trainer.default_local_dir={run}", f"trainer.rollout_data_dir={run / 'rollouts'}",
           "trainer.dump_token_details=true", "trainer.experiment_name=tools"])
    return run


# the "flat" run's series (hand-written): constants, a single point, NaN and unlogged steps, and one that varies
FLAT_ROWS = [
    {"step": 1, "flat/lr": 2e-4, "flat/zero": 0.0, "flat/big": 1e6, "flat/single": 0.25, "flat/gaps": 0.5,
     "flat/varies": 1},
    {"step": 2, "flat/lr": 2e-4, "flat/zero": 0.0, "flat/big": 1e6, "flat/gaps": "nan", "flat/varies": 2},
    {"step": 3, "flat/lr": 2e-4, "flat/zero": 0.0, "flat/big": 1e6, "flat/varies": 3},
    {"step": 4, "flat/lr": 2e-4, "flat/zero": 0.0, "flat/big": 1e6, "flat/gaps": 0.5, "flat/varies": 4},
]


def flat_run(folder: Path) -> Path:
    """A run folder with metrics only (as a run's trainer.logger=[file] writes them: NaN as the string "nan")."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("trainer:\n  experiment_name: flat\n")
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in FLAT_ROWS))
    return folder


@pytest.fixture(scope="module")
def runs(arith_data, random_model_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("view")
    return tiny_run(arith_data, base / "tiny"), tool_run(random_model_dir, base / "tools"), flat_run(base / "flat")


@pytest.fixture(scope="module")
def server(runs):
    yield from view_server(list(map(str, runs)), r"on (http://127\.0\.0\.1:\d+/)", "")


@pytest.fixture(scope="module")
def browser():
    yield from chrome(webdriver)


def shot(driver, name: str) -> None:
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")


def trace_names(metric: str) -> str:
    return f"(document.querySelector('.plot[data-metric=\"{metric}\"]')?.data || []).map(t => t.name).join(',')"


def other_steps(driver, prompt: str) -> list[str]:
    """The "same prompt at step" choices once the page has filled them for `prompt` ("kind:step:i"): a CI run
    once read the rollout prompt's choices after switching to validation, when only the step list had changed."""
    wait_for(driver, f"document.getElementById('other-step').dataset.prompt === '{prompt}'")
    return driver.execute_script("return [...document.getElementById('other-step').options].map(o => o.value)")


def test_the_viewer_in_a_browser(server, browser, runs):
    d = browser
    d.get(server)
    # curves: one plot per metric, a trace per run, named by experiment_name
    assert wait_for(d, f"{trace_names('critic/score/mean')} === 'tiny_grpo,tools'")
    assert d.execute_script("return document.querySelector('.plot[data-metric=\"critic/score/mean\"]').data[0].x"
                            ".length") == 3
    assert d.execute_script("return document.querySelector('.plot[data-metric=\"val-core/arithmetic/reward/mean@1\"]')"
                            " !== null")
    sections = d.execute_script("return [...document.querySelectorAll('details.section')].map(s => s.dataset.section)")
    assert {"actor", "critic", "timing_s", "val-core"} <= set(sections)
    shot(d, "curves")
    # smoothing and log scale change what is drawn: the debiased EMA's 2nd point is (0.09 y0 + 0.1 y1) / 0.19
    raw = d.execute_script("return document.querySelector('.plot[data-metric=\"actor/entropy\"]').data[0].y")
    d.execute_script("const e = document.getElementById('ema'); e.value = '0.9'; e.dispatchEvent(new Event('input'))")
    smooth = wait_for(d, "document.querySelector('.plot[data-metric=\"actor/entropy\"]').data[0].y")
    assert smooth[0] == pytest.approx(raw[0]) and smooth[1] == pytest.approx((0.09 * raw[0] + 0.1 * raw[1]) / 0.19)
    assert raw[1] != pytest.approx(raw[0])  # (else smoothing would change nothing)
    # a closed section's series arrive when it is opened (the first load sends the open sections' only)
    assert d.execute_script("return document.querySelector('.plot[data-metric=\"perf/throughput\"]')") is None
    d.find_element(By.CSS_SELECTOR, 'details.section[data-section="perf"] summary').click()
    assert wait_equal(d, "document.querySelector('.plot[data-metric=\"perf/throughput\"]')?.data?.length", 2) == 2
    d.find_element(By.ID, "log-y").click()
    assert wait_for(d, "document.querySelector('.plot[data-metric=\"actor/entropy\"]').layout.yaxis.type === 'log'")
    # hide a run, then a new line of the other one arrives while the page is open
    d.find_element(By.ID, "run-1").click()
    assert wait_for(d, f"{trace_names('critic/score/mean')} === 'tiny_grpo'")
    d.find_element(By.ID, "run-1").click()
    with open(runs[1] / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 3, "critic/score/mean": 0.9}) + "\n")
    assert wait_for(d, "document.querySelector('.plot[data-metric=\"critic/score/mean\"]').data[1].x.join()"
                    " === '1,2,3'", 15)

    # generations of the real run: the last step's prompts, one opened into its 4 responses with token colours
    d.find_element(By.ID, "tab-gens").click()
    wait_for(d, "document.querySelectorAll('tr.prompt-row').length")
    kinds = [o.text for o in Select(d.find_element(By.ID, "gen-kind")).options]
    assert kinds == ["rollout", "validation"]  # val_generations.jsonl is empty: log_val_generations=0
    rows = d.find_elements(By.CSS_SELECTOR, "tr.prompt-row")
    assert len(rows) == 8  # data.train_batch_size=8 prompts at step 3
    rows[0].click()
    assert wait_equal(d, "document.querySelectorAll('.step-col .sample').length", 4) == 4
    assert wait_for(d, "document.querySelectorAll('.sample .tok').length") > 0
    coloured = d.execute_script("return [...document.querySelectorAll('.sample .tok')].filter(s => s.style.background)"
                                ".length")
    assert coloured > 0
    shot(d, "generations")
    # the same prompt at another step: the picker offers only the steps that sampled it (rollouts: seldom any)
    offered = other_steps(d, "rollout:3:0")
    prompt = d.execute_script("return document.querySelector('.step-col .prompt-text').textContent")
    sampled = [int(p.stem) for p in (runs[0] / "rollouts").glob("*.jsonl") if p.stem != "3"
               and any(json.loads(line)["input"] == prompt for line in open(p))]
    assert offered == [""] + [str(s) for s in sorted(sampled)]
    # the page polls for new steps every 3 s: a poll once refilled these choices with every step of the kind
    # (a CI run saw step 3 offered for its own prompt); they stay the prompt's
    time.sleep(3.5)
    assert d.execute_script("return [...document.getElementById('other-step').options].map(o => o.value)") == offered
    # validation prompts repeat at every validation: the same prompt at two steps, side by side
    Select(d.find_element(By.ID, "gen-kind")).select_by_visible_text("validation")
    assert wait_equal(d, "document.getElementById('gen-step').options.length", 4) == 4  # steps 0..3
    d.find_elements(By.CSS_SELECTOR, "tr.prompt-row")[0].click()
    wait_for(d, "document.querySelectorAll('.step-col .sample').length")
    assert other_steps(d, "validation:3:0") == ["", "0", "1", "2"]
    Select(d.find_element(By.ID, "other-step")).select_by_value("0")
    columns = "[...document.querySelectorAll('.step-col')].map(c => c.dataset.step).join(',')"
    assert wait_equal(d, columns, "3,0") == "3,0"
    texts = d.execute_script("return [...document.querySelectorAll('.step-col .prompt-text')].map(p => p.textContent)")
    assert texts[0] == texts[1]
    shot(d, "same-prompt-two-steps")
    # a search that matches nothing, then switching runs: the tool run's turns, the tool's tokens marked untrained
    d.find_element(By.ID, "f-q").send_keys("no such text anywhere")
    assert wait_for(d, "document.getElementById('prompt-count').textContent.includes('0 of')")
    d.find_element(By.ID, "f-q").clear()
    Select(d.find_element(By.ID, "gen-run")).select_by_visible_text("tools")
    assert wait_equal(d, "document.querySelectorAll('tr.prompt-row').length", 4) == 4  # data.train_batch_size=4
    dumped = [json.loads(line) for line in open(runs[1] / "rollouts" / "2.jsonl")]
    with_tool = next(i for i, r in enumerate(dumped) if "<tool_response>" in r["output"]) // 4  # n=4 rows a prompt
    d.find_elements(By.CSS_SELECTOR, "tr.prompt-row")[with_tool].click()
    wait_for(d, "document.querySelectorAll('.step-col .sample').length === 4")
    masked = d.execute_script("return [...document.querySelectorAll('.sample .tok.masked')].map(s => s.textContent).join('')")
    assert "<tool_response>" in masked  # the tool's reply: shown, marked as not trained on
    trained = d.execute_script("return [...document.querySelectorAll('.sample .tok:not(.masked)')].map(s => s.textContent)"
                               ".join('')")
    assert "<tool_call>" in trained and "<tool_response>" not in trained  # the model's own call is trained on
    assert "num_turns=2" in d.find_element(By.CSS_SELECTOR, ".step-col").text
    want = sum(r["token_trained"].count(0) for r in dumped[with_tool * 4:with_tool * 4 + 4])
    assert d.execute_script("return document.querySelectorAll('.sample .tok.masked').length") == want
    d.execute_script("document.querySelector('.sample .tok.masked').scrollIntoView({block: 'center'})")
    shot(d, "tool-turns")

    # A/B: compare's final/best of the two runs
    d.find_element(By.ID, "tab-ab").click()
    assert wait_for(d, "document.querySelector('#ab-table tr[data-metric=\"critic/score/mean\"]') !== null")
    cells = [c.text for c in d.find_elements(By.CSS_SELECTOR, '#ab-table tr[data-metric="critic/score/mean"] td')]
    assert cells[1] == "max" and cells[4] == "0.9"  # run B's final score is the line appended above
    shot(d, "ab")

    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


# Every chart's title (the page's, or plotly's own in the chart), whether it meets the chart's toolbar (plotly's
# modebar) and whether it is what the page shows at its centre: the toolbar once floated over plotly's titles.
TITLES = """return [...document.querySelectorAll('.plot')].map(p => {
  const title = p.closest('.chart')?.querySelector('.chart-title') || p.querySelector('.gtitle');
  const bar = p.querySelector('.modebar');
  if (!title || !bar) return {metric: p.dataset.metric, title: null};
  title.scrollIntoView({block: 'center'});
  const t = title.getBoundingClientRect(), b = bar.getBoundingClientRect();
  const top = document.elementFromPoint(t.left + t.width / 2, t.top + t.height / 2);
  return {metric: p.dataset.metric, title: title.textContent, width: t.width, uncovered: title.contains(top),
          meets: t.left < b.right && b.left < t.right && t.top < b.bottom && b.top < t.bottom};
})"""


def axis(driver, metric: str) -> dict:
    """A chart's y-axis as drawn: plotly's range and the tick labels on the page, whether every label lies inside
    the chart (not cut by the margin), and the markers drawn (a lone point needs one to be seen)."""
    return driver.execute_script(f"""const p = document.querySelector('.plot[data-metric="{metric}"]');
      const left = p.getBoundingClientRect().left, labels = [...p.querySelectorAll('.ytick text')];
      return {{range: p._fullLayout.yaxis.range, ticks: labels.map(t => t.textContent),
               inside: labels.every(t => t.getBoundingClientRect().left >= left),
               markers: [...p.querySelectorAll('.scatterlayer .point')].filter(e => e.getBoundingClientRect().width > 0)
                          .length}}""")


def test_chart_titles_clear_of_the_toolbar_and_constant_series_at_their_value(server, browser):
    d = browser
    d.get(server)
    wait_for(d, "document.querySelector('.plot[data-metric=\"val-core/arithmetic/reward/mean@1\"]')?.data?.length")
    titles = d.execute_script(TITLES)  # the real runs' open sections: actor, critic, response_length, val-core
    assert len(titles) > 20 and "val-core/arithmetic/reward/mean@1" in {t["metric"] for t in titles}
    for t in titles:
        assert t["title"] == t["metric"] and t["width"] > 0 and t["uncovered"] and not t["meets"], t

    d.find_element(By.ID, "metric-filter").send_keys("flat/")
    d.find_element(By.CSS_SELECTOR, 'details.section[data-section="flat"] summary').click()
    wait_for(d, "document.querySelector('.plot[data-metric=\"flat/varies\"]')?._fullLayout?.yaxis?.range")
    # a constant c is drawn at c, on c ± c/2 (± 1 around 0), with one tick labelled c (the page's %.4g)
    for metric, lo, hi, tick in [("flat/lr", 1e-4, 3e-4, "0.0002"), ("flat/zero", -1, 1, "0"),
                                 ("flat/big", 5e5, 1.5e6, "1000000"), ("flat/single", 0.125, 0.375, "0.25"),
                                 ("flat/gaps", 0.25, 0.75, "0.5")]:
        a = axis(d, metric)
        assert a["range"] == pytest.approx([lo, hi]) and a["ticks"] == [tick] and a["inside"], (metric, a)
    # a single point, and points between a NaN and unlogged steps, have no neighbour to draw a line to: markers
    assert axis(d, "flat/single")["markers"] == 1 and axis(d, "flat/gaps")["markers"] == 2
    assert axis(d, "flat/lr")["markers"] == 0
    varies = axis(d, "flat/varies")  # 1, 2, 3, 4: plotly's own range and ticks
    assert varies["range"][0] <= 1 and varies["range"][1] >= 4 and len(varies["ticks"]) > 2
    assert all(t["uncovered"] and not t["meets"] for t in d.execute_script(TITLES))
    # the debiased EMA of a constant may move in its last bits; on a log axis the range is log10(c/2)..log10(2c)
    d.execute_script("const e = document.getElementById('ema'); e.value = '0.9'; e.dispatchEvent(new Event('input'))")
    d.find_element(By.ID, "log-y").click()
    wait_for(d, "document.querySelector('.plot[data-metric=\"flat/lr\"]')._fullLayout.yaxis.type === 'log'")
    a = axis(d, "flat/lr")
    assert a["range"] == pytest.approx([-4, math.log10(4e-4)]) and a["ticks"] == ["0.0002"], a
    shot(d, "constant-series")
    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors

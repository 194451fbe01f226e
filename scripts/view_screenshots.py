"""The README's `hybridrl view` screenshots (docs/view_*.png), taken from real runs in headless Chromium at a
fixed window size: the curves of a run, a prompt's n responses with tokens coloured by entropy, one validation
prompt at its first and last validation, and a multi-turn tool run's turns.

    PYTHONPATH=. python scripts/view_screenshots.py RUN [TOOL_RUN] [--out docs]

RUN needs trainer.rollout_data_dir, trainer.validation_data_dir and trainer.dump_token_details=true;
TOOL_RUN (optional: without it, view_tool_turns.png is not made) a multi-turn run (examples/tool_calc) with
rollout dumps. Needs chromium, chromedriver, selenium.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

SIZE = (1400, 950)


def serve(runs: list[str], root: str | None = None) -> tuple[subprocess.Popen, str]:
    """`hybridrl view RUNS` on a free port, and its address; the hybridrl of `root` if given (else the importable
    one)."""
    env = dict(os.environ, PYTHONPATH=root) if root else None
    proc = subprocess.Popen([sys.executable, "-m", "hybridrl", "view", *map(os.path.abspath, runs), "--port", "0"],
                            stderr=subprocess.PIPE, text=True, cwd=root, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        if m := re.search(r"on (http://127\.0\.0\.1:\d+/)", proc.stderr.readline()):
            return proc, m[1]
    proc.kill()
    raise SystemExit("hybridrl view printed no address within 60 s")


def browser(size: tuple[int, int] = SIZE) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={size[0]},{size[1]}",
                "--hide-scrollbars"):
        options.add_argument(arg)
    return webdriver.Chrome(service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")), options=options)


def wait(d, js: str, timeout: float = 30):
    return WebDriverWait(d, timeout, poll_frequency=0.2).until(lambda drv: drv.execute_script(f"return {js}"))


def open_prompt(d, i: int) -> None:
    d.find_elements(By.CSS_SELECTOR, "tr.prompt-row")[i].click()
    wait(d, "document.querySelectorAll('.step-col .sample').length")
    wait(d, "document.getElementById('other-step').dataset.prompt")
    d.execute_script("window.scrollTo(0, 0)")  # the click scrolled the row into view: show the controls again


def mixed_prompt(dump: str, n: int) -> int:
    """A prompt whose n responses have different scores (more to see than all-right or all-wrong)."""
    rows = [json.loads(line) for line in open(dump)]
    groups = [rows[k:k + n] for k in range(0, len(rows), n)]
    return next((g for g, rs in enumerate(groups) if len({r["score"] for r in rs}) > 1), 0)


def learnt_prompt(val_dir: str, first: str, last: str) -> int:
    """A validation prompt answered wrong at the first validation and right at the last (else prompt 0)."""
    read = lambda step: [json.loads(line) for line in open(os.path.join(val_dir, f"{step}.jsonl"))]  # noqa: E731
    before = {r["input"]: r["score"] for r in read(first)}
    order = list(dict.fromkeys(r["input"] for r in read(last)))  # the page's prompt order: first appearance
    after = {r["input"]: r["score"] for r in read(last)}
    return next((i for i, p in enumerate(order) if before.get(p, 1) <= 0 < after[p]), 0)


def most_calls(rows: list[dict], n: int) -> int:
    """The prompt whose n responses ran the tool most often (ties: the best scored)."""
    groups = [rows[k:k + n] for k in range(0, len(rows), n)]
    return max(range(len(groups)), key=lambda g: (sum("<tool_response>" in r["output"] for r in groups[g]),
                                                  sum(r["score"] for r in groups[g])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("tool_run", nargs="?", help="a multi-turn run (view_tool_turns.png is made only with one)")
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    proc, url = serve([args.run, args.tool_run] if args.tool_run else [args.run])
    d = browser()
    try:
        d.get(url)
        if args.tool_run:
            wait(d, "document.querySelector('.plot[data-metric=\"critic/score/mean\"]')?.data?.length === 2")
            d.find_element(By.ID, "run-1").click()  # the curves of the main run alone
        wait(d, "document.querySelector('.plot[data-metric=\"critic/score/mean\"]')?.data?.length === 1")
        d.execute_script("const e = document.getElementById('ema'); e.value = '0.6'; e.dispatchEvent(new Event('input'))")
        d.find_element(By.ID, "metric-filter").send_keys("mean")  # an overview: every section's means
        wait(d, "document.querySelector('.plot[data-metric=\"val-core/arithmetic/reward/mean@1\"]')?.data?.length")
        time.sleep(2)
        d.save_screenshot(os.path.join(args.out, "view_curves.png"))

        d.find_element(By.ID, "tab-gens").click()
        wait(d, "document.querySelectorAll('tr.prompt-row').length")
        last = d.execute_script("return document.getElementById('gen-step').value")
        rows = [json.loads(line) for line in open(os.path.join(args.run, "rollouts", f"{last}.jsonl"))]
        n = sum(1 for r in rows if r["input"] == rows[0]["input"])
        Select(d.find_element(By.ID, "colour-by")).select_by_value("token_entropy")
        open_prompt(d, mixed_prompt(os.path.join(args.run, "rollouts", f"{last}.jsonl"), n))
        d.save_screenshot(os.path.join(args.out, "view_generations.png"))

        Select(d.find_element(By.ID, "gen-kind")).select_by_visible_text("validation")
        # (the rollout step list and rows stay until the validation ones arrive: wait for its first step)
        first_val = min(int(n.split(".")[0]) for n in os.listdir(os.path.join(args.run, "val")) if n.endswith(".jsonl"))
        wait(d, f"document.getElementById('gen-step').options[0]?.value === '{first_val}'")
        wait(d, "document.querySelectorAll('tr.prompt-row').length")
        first = d.execute_script("return document.getElementById('gen-step').options[0].value")
        val_last = d.execute_script("return document.getElementById('gen-step').value")
        open_prompt(d, learnt_prompt(os.path.join(args.run, "val"), first, val_last))
        Select(d.find_element(By.ID, "other-step")).select_by_value(first)
        wait(d, "document.querySelectorAll('.step-col').length === 2")
        d.save_screenshot(os.path.join(args.out, "view_same_prompt.png"))
        if not args.tool_run:
            print(f"wrote {args.out}/view_{{curves,generations,same_prompt}}.png (rollout step {last})")
            return

        Select(d.find_element(By.ID, "gen-run")).select_by_value("1")
        wait(d, "document.querySelectorAll('tr.prompt-row').length")
        step = d.execute_script("return document.getElementById('gen-step').value")
        tool_rows = [json.loads(line) for line in open(os.path.join(args.tool_run, "rollouts", f"{step}.jsonl"))]
        n = sum(1 for r in tool_rows if r["input"] == tool_rows[0]["input"])
        Select(d.find_element(By.ID, "colour-by")).select_by_value("token_logprobs")
        open_prompt(d, most_calls(tool_rows, n))
        d.save_screenshot(os.path.join(args.out, "view_tool_turns.png"))
        print(f"wrote {args.out}/view_{{curves,generations,same_prompt,tool_turns}}.png (rollout step {last}, "
              f"tool run step {step})")
    finally:
        d.quit()
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()

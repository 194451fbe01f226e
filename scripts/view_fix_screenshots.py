"""Before/after screenshots of the viewer's chart fixes (issue #37): the curves page of a run whose metrics hold
constants (a GRPO run logs actor/lr = 2e-4 and actor/ppo_kl = 0 at every step), drawn by the viewer of an
older revision and by this checkout's, in headless Chromium at the same size:
docs/view_fix_before.png and docs/view_fix_after.png.

    PYTHONPATH=. python scripts/view_fix_screenshots.py RUN --before REV [--out docs] [--filter actor/]

REV is a git revision from before the fixes (c2c64ab): its hybridrl/ is extracted to a temporary folder
(`git archive`) and served from there. Needs git, chromium, chromedriver, selenium.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from selenium.webdriver.common.by import By

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from view_screenshots import browser, serve, wait  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZE = (1000, 860)  # two charts a row; the page shows two rows of them (lr on the second)


def extract(rev: str, dest: str) -> str:
    """hybridrl/ as it was at `rev`, under `dest`."""
    archive = subprocess.run(["git", "archive", rev, "hybridrl"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest


def curves(run: str, root: str, metric_filter: str, path: str) -> None:
    """The curves page of `run`, filtered, as the viewer in `root` draws it."""
    proc, url = serve([run], root)
    d = browser(SIZE)
    try:
        d.get(url)
        d.find_element(By.ID, "metric-filter").send_keys(metric_filter)
        wait(d, "document.querySelector('.plot[data-metric=\"actor/lr\"]')?.data?.length === 1")
        time.sleep(2)  # (plotly's responsive resize)
        d.save_screenshot(path)
        bottom = d.execute_script("return document.querySelector('.grid').children[3].getBoundingClientRect().bottom")
        from PIL import Image  # (pillow: a transformers dependency)

        Image.open(path).crop((0, 0, SIZE[0], round(bottom) + 6)).save(path)  # the page down to the second row's end
    finally:
        d.quit()
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--before", required=True, help="a git revision from before the fixes, e.g. c2c64ab")
    ap.add_argument("--out", default="docs")
    ap.add_argument("--filter", default="actor/", help="the page's metric filter (default: actor/, which has lr)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as old:
        curves(args.run, extract(args.before, old), args.filter, os.path.join(args.out, "view_fix_before.png"))
    curves(args.run, ROOT, args.filter, os.path.join(args.out, "view_fix_after.png"))
    print(f"wrote {args.out}/view_fix_before.png (hybridrl at {args.before}) and {args.out}/view_fix_after.png")


if __name__ == "__main__":
    main()

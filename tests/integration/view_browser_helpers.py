"""What the headless-browser tests of `hybridrl view` share: the viewer started in a subprocess on a free port,
a headless Chromium, and waiting for a page expression. A test module imports this after its own skip on a
missing chromium/chromedriver/selenium (`needs_browser` does it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "view"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")


def needs_browser():
    """selenium's webdriver module, or the calling test module skipped with what to install."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs chromium and chromedriver on PATH (apt-get install chromium chromium-driver)",
                    allow_module_level=True)
    return pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install selenium)")


def view_server(args: list[str], address_line: str, what: str) -> Iterator[str]:
    """`hybridrl view ARGS --port 0` until the end of the generator; yields the URL it printed in the line that
    matches `address_line` (a regex whose group 1 is the URL); `what` names the wait in the failure."""
    proc = subprocess.Popen([sys.executable, "-m", "hybridrl", "view", *args, "--port", "0"], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stderr=subprocess.PIPE, text=True)
    url, deadline = None, time.time() + 60
    while url is None and time.time() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise RuntimeError(f"hybridrl view exited with {proc.returncode}")
        if m := re.search(address_line, line):
            url = m[1]
    assert url, f"hybridrl view printed no address {what} within 60 s"
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def chrome(webdriver) -> Iterator:
    """A headless Chromium that keeps the page's console log, quit at the end of the generator."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1500,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def wait_for(driver, js: str, timeout: float = 20):
    """The value of `js` (a JS expression) once it is truthy."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: d.execute_script(f"return {js}"))


def wait_equal(driver, js: str, expected, timeout: float = 20):
    """The value of `js` once it equals `expected`, or its last value at the timeout (for the caller's assert to
    show). A page renders in parts: the first truthy value (a list's first column) may not be the settled one."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    seen = []

    def settled(d):
        seen[:] = [d.execute_script(f"return {js}")]
        return seen[0] == expected

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.2).until(settled)
    except TimeoutException:
        pass
    return seen[0] if seen else None

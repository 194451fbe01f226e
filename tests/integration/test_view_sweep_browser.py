"""`hybridrl view SWEEP_DIR` in headless Chromium: the Sweep tab lists the trials best first with their values,
unticking a choice and typing a bound narrow the list, a header click sorts it, and "open" shows that trial
alone on the curves; the console stays free of errors. The sweep folder is hand-written with the sweep's own
writers (tests/unit/sweep/sweep_folder.py), so the test takes seconds. Screenshots go to tests/artifacts/view/.

Needs chromium and chromedriver (apt-get install chromium chromium-driver; .ci/run installs them).
"""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.slow
from view_browser_helpers import ARTIFACTS, ROOT, chrome, needs_browser, view_server, wait_for  # noqa: E402

webdriver = needs_browser()
from selenium.webdriver.common.by import By  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "unit" / "sweep"))
from sweep_folder import ADV, LR, write_sweep  # noqa: E402

ROWS = "[...document.querySelectorAll('#sweep-table tbody tr')].map(r => r.dataset.trial).join(',')"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = write_sweep(tmp_path_factory.mktemp("view_sweep") / "sw")
    yield from view_server([str(folder)], r"a sweep of 4 trial\(s\) on (http://127\.0\.0\.1:\d+/)",
                           "for a sweep of 4 trials")


@pytest.fixture(scope="module")
def browser():
    yield from chrome(webdriver)


def test_the_sweep_tab_lists_filters_sorts_and_opens_trials(server, browser):
    d = browser
    d.get(server)
    # the page opens on the Sweep tab: best first (mode max), the refused trial last
    assert wait_for(d, f"{ROWS} === 't_00001,t_00000,t_00002,t_00003'")
    assert d.find_element(By.ID, "sweep").is_displayed() and not d.find_element(By.ID, "curves").is_displayed()
    cells = d.execute_script("return [...document.querySelectorAll('#sweep-table tbody tr:first-child td')]"
                             ".map(c => c.textContent)")
    assert cells[:5] == ["t_00001", "finished", "0.7", "0.7", "2"] and cells[5:8] == ["0.00001", "rloo", "0.1"]
    assert wait_for(d, "document.getElementById('sweep-head').textContent").startswith("4 of 4 trials")
    d.save_screenshot(str(ARTIFACTS / "sweep_table.png"))
    # untick rloo: the grpo trials stay; a minimum learning rate of 5e-4 then keeps t_00002 (1e-3) alone
    d.find_element(By.CSS_SELECTOR, f'#sweep-filters input[data-key="{ADV}"][data-j="1"]').click()
    assert wait_for(d, f"{ROWS} === 't_00000,t_00002'")
    d.find_element(By.CSS_SELECTOR, f'#sweep-filters input[data-key="{LR}"][data-bound="min"]').send_keys("5e-4")
    assert wait_for(d, f"{ROWS} === 't_00002'")
    assert d.execute_script("return document.getElementById('sweep-head').textContent").startswith("1 of 4 trials")
    # clear the bound, tick rloo again; sort by the learning rate, then the other way
    d.find_element(By.CSS_SELECTOR, f'#sweep-filters input[data-key="{LR}"][data-bound="min"]').clear()
    d.execute_script(f"document.querySelector('#sweep-filters input[data-key=\"{LR}\"][data-bound=\"min\"]')"
                     ".dispatchEvent(new Event('input'))")
    d.find_element(By.CSS_SELECTOR, f'#sweep-filters input[data-key="{ADV}"][data-j="1"]').click()
    assert wait_for(d, f"{ROWS} === 't_00001,t_00000,t_00002,t_00003'")  # (the table is drawn anew: wait for it)
    d.find_element(By.CSS_SELECTOR, f'#sweep-table th[data-col="{LR}"]').click()
    assert wait_for(d, f"{ROWS} === 't_00001,t_00000,t_00003,t_00002'")  # 1e-5, 1e-4, 5e-4, 1e-3
    assert d.execute_script(f"return document.querySelector('#sweep-table th[data-col=\"{LR}\"]').textContent"
                            ".endsWith('↑')")
    d.find_element(By.CSS_SELECTOR, f'#sweep-table th[data-col="{LR}"]').click()
    assert wait_for(d, f"{ROWS} === 't_00002,t_00003,t_00000,t_00001'")
    # the refused trial has no run to open; "open" on t_00002 shows its curves alone
    assert d.execute_script("return document.querySelector('#sweep-table tr[data-trial=\"t_00003\"] button')"
                            ".disabled") is True
    d.find_element(By.CSS_SELECTOR, '#sweep-table tr[data-trial="t_00002"] button').click()
    assert wait_for(d, "!document.getElementById('curves').hidden")
    plot = "document.querySelector('.plot[data-metric=\"val-core/arithmetic/reward/mean@1\"]')"
    assert wait_for(d, f"({plot}?.data || []).filter(t => t.visible !== false).map(t => t.name).join(',')"
                    " === 't_00002'")
    d.save_screenshot(str(ARTIFACTS / "sweep_open.png"))
    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors

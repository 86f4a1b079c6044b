"""A real browser test of the stepper: JupyterLab on 127.0.0.1, the tour notebook opened in Debian's chromium driven by
Playwright, run all cells, click Step until the debate ends (the round header and the positions grid change with every
click), fork once, and save a screenshot to test-artifacts/."""
from __future__ import annotations
import json, os, re, shutil, time
from pathlib import Path
import pytest
from jupyter_helpers import CHROMIUM, CHROMIUM_ARGS, ROOT, jupyter_lab

pytestmark = pytest.mark.slow
TOUR = ROOT / "nbs" / "51_stepper_tour.ipynb"
ARTIFACTS = ROOT / "test-artifacts"

def _need_browser():
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    try: import playwright.sync_api  # noqa: F401
    except ImportError:
        if ci: pytest.fail("CI: the playwright package is missing")
        pytest.skip("the playwright package is not installed")
    if not Path(CHROMIUM).exists():
        if ci: pytest.fail(f"CI: chromium is missing at {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no chromium at {CHROMIUM}; install Debian's chromium to run the browser test")

def _wait(pred, timeout, what, poll=0.1):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = pred()
        if v: return v
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")

def test_stepper_in_jupyterlab(tmp_path):
    _need_browser()
    from playwright.sync_api import sync_playwright
    root = tmp_path / "lab"; root.mkdir()
    shutil.copy(TOUR, root / TOUR.name)
    ARTIFACTS.mkdir(exist_ok=True)
    with jupyter_lab(root, tmp_path / "home") as (base, token), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            page.goto(f"{base}/lab/tree/{TOUR.name}?token={token}", wait_until="domcontentloaded", timeout=60_000)
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
            # wait for the kernel, then run every cell through JupyterLab's own command
            _wait(lambda: page.evaluate("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                                        " return !!(w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
                                        " && w.sessionContext.session.kernel.status === 'idle'); }"), 60, "an idle kernel")
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            stepper = page.locator(".madlab-stepper").first
            stepper.wait_for(state="visible", timeout=60_000)
            # the headless part of the tour (second stepper, fork, comparison) finishes too
            page.locator(".madlab-compare-table").first.wait_for(state="attached", timeout=90_000)
            _wait(lambda: not page.locator(".jp-InputPrompt:has-text('[*]')").count(), 60, "every cell to finish")
            assert not page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']:has-text('Error')").count()

            header, grid = stepper.locator(".madlab-header"), stepper.locator(".madlab-positions")
            step = stepper.locator("button.madlab-step")
            assert "not started" in header.inner_text()
            seen, clicks = [], 0
            while step.is_enabled() and clicks < 40:
                h0, g0 = header.inner_text(), grid.inner_html()
                step.click(); clicks += 1
                _wait(lambda: header.inner_text() != h0 and step.is_enabled() or "status done" in header.inner_text() and header.inner_text() != h0,
                      30, f"the header to change after click {clicks}")
                assert grid.inner_html() != g0, f"the positions grid did not change after click {clicks}"
                seen.append(header.inner_text())
                # the grid is players x agents: every cell coloured right/wrong once the first round has run
                assert grid.locator("td.madlab-cell").count() >= 4 * 3
            _wait(lambda: step.is_disabled(), 30, "the Step button to be disabled at the end")
            assert clicks >= 10, seen                                  # initial + 4 x (debate, self-adjustment) + final
            assert "status done" in header.inner_text() and "result:" in header.inner_text()
            assert grid.locator("td.madlab-cell.right, td.madlab-cell.wrong").count() >= 4 * 3
            assert len(set(seen)) == len(seen)
            n = int(re.search(r"Round (\d+) of (\d+)", header.inner_text()).group(2))
            assert n in (clicks, clicks - 1)                           # the last click may only find that the debate is over
            # browse back and forward
            stepper.locator("button.madlab-back").click()
            _wait(lambda: f"Round {n - 1} of {n}" in header.inner_text(), 10, "Back to show the previous round")
            stepper.locator("button.madlab-forward").click()
            _wait(lambda: f"Round {n} of {n}" in header.inner_text(), 10, "Forward")

            # fork at round 2 with the first message there edited, then step the new branch
            stepper.locator(".madlab-fork-round select").select_option(index=1)
            stepper.locator(".madlab-fork-agent select").select_option(index=0)
            text = stepper.locator(".madlab-fork-text textarea")
            _wait(lambda: text.input_value().strip().startswith("{"), 10, "the chosen message in the editor")
            msg = json.loads(text.input_value())                      # a debate reply on the player in focus: flip its role
            msg.update(role="knave" if msg.get("role") != "knave" else "knight", disagree_reasoning="edited in the browser")
            text.fill(json.dumps(msg))
            stepper.locator("button.madlab-fork").click()
            _wait(lambda: "fork 1" in header.inner_text(), 30, "the forked branch to show")
            assert "Round 2 of 2+" in header.inner_text()
            assert stepper.locator(".madlab-branch select option").count() == 2
            assert "edited" in stepper.locator(".madlab-columns").inner_text()
            h0, g0 = header.inner_text(), grid.inner_html()
            step.click()
            _wait(lambda: header.inner_text() != h0 and "Round 3" in header.inner_text(), 30, "a step in the forked branch")
            assert grid.inner_html() != g0
            stepper.locator(".madlab-compare-table").wait_for(state="visible", timeout=10_000)
            stepper.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "stepper.png"), full_page=False)
            stepper.screenshot(path=str(ARTIFACTS / "stepper-widget.png"))
            assert not errors, errors
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "stepper-failure.png"))
            raise
        finally:
            browser.close()

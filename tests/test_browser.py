"""A real browser test of the stepper: JupyterLab on 127.0.0.1, the tour notebook opened in Debian's chromium driven by
Playwright, run all cells, click Step until the debate ends (the round header, the positions grid and the consensus row
agree at every round), fork (the round numbers agree everywhere), fork with an unreadable message (shown "invalid"),
export the branch and read it back, Stop a Run to end during its third round, and save screenshots to test-artifacts/. One JupyterLab serves
the module's browser tests, each in its own folder."""
from __future__ import annotations
import contextlib, json, os, re, shutil, time, urllib.request
from pathlib import Path
import pytest
from jupyter_helpers import CHROMIUM, CHROMIUM_ARGS, ROOT, need_browser, jupyter_lab, wait_until

pytestmark = pytest.mark.slow
TOUR = ROOT / "nbs" / "51_stepper_tour.ipynb"
ARTIFACTS = ROOT / "test-artifacts"


_wait = wait_until                       # the one polling wait of the browser tests

def _open_and_run_all(page, base, token, name):
    "Open notebook `name` in JupyterLab, wait for an idle kernel, and run every cell through JupyterLab's own command."
    page.goto(f"{base}/lab/tree/{name}?token={token}", wait_until="domcontentloaded", timeout=60_000)
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    _wait(lambda: page.evaluate("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                                " return !!(w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
                                " && w.sessionContext.session.kernel.status === 'idle'); }"), 60, "an idle kernel")
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")

# a stepper whose rounds take ~0.8 s, appended to the tour, to click Stop while a round is in flight
_SLOW_CELL = ('slow = DebateStepper(Debate("controlmad", item, ["synthetic:strong,seed=1,latency=0.8", "synthetic:medium,seed=2,latency=0.8",'
              ' "synthetic:weak,seed=3,latency=0.8"], depth=1))\nslow')

_GRID_JS = """el => ({rows: [...el.querySelectorAll('.madlab-positions table.madlab-grid tr')].slice(1).map(tr => ({
    row: tr.querySelector('th').childNodes[0].textContent.trim(),
    agents: [...tr.querySelectorAll('td.madlab-agent')].map(td => td.dataset.value),
    majority: (tr.querySelector('td.madlab-majority') || {dataset: {}}).dataset.value})),
  shown: JSON.parse((el.querySelector('.madlab-cons-cell.madlab-shown') || {dataset: {consensus: 'null'}}).dataset.consensus)})"""

def _plurality(values):
    "The most common readable value, or '' on a tie or when there is none (what the grid's majority column must show)."
    counts = {}
    for v in values:
        if v and v != "invalid": counts[v] = counts.get(v, 0) + 1
    top = sorted(counts.values(), reverse=True)
    return "" if not top or (len(top) > 1 and top[0] == top[1]) else max(counts, key=counts.get)

def _check_consensus(stepper, prev):
    "The grid's majority column is the plurality of the agents' cells; the consensus row's shown cell holds the same and names the rows that turned."
    g = stepper.evaluate(_GRID_JS)
    now = {r["row"]: _plurality(r["agents"]) for r in g["rows"]}
    assert {r["row"]: r["majority"] or "" for r in g["rows"]} == now, g
    assert {k: v or "" for k, v in g["shown"]["majority"].items()} == now, g
    assert g["shown"]["turned"] == [r for r in now if r in prev and now[r] != prev[r]], (g, prev)
    return now

@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    "One JupyterLab for the module's browser tests: (root folder, base url, token). Each test works in its own subfolder and shuts its kernels down."
    need_browser()
    root, home = tmp_path_factory.mktemp("lab"), tmp_path_factory.mktemp("lab-home")
    with jupyter_lab(root, home) as (base, token): yield root, base, token

def _kernels(base, token) -> list:
    with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as r: return json.loads(r.read())

@contextlib.contextmanager
def _own_kernels(base, token):
    "Shut down, at the end, every kernel started meanwhile on the shared JupyterLab, and wait for each to be gone."
    before = {k["id"] for k in _kernels(base, token)}
    try: yield
    finally:
        for k in _kernels(base, token):
            if k["id"] not in before:
                urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}", method="DELETE"), timeout=30).close()
        _wait(lambda: {k["id"] for k in _kernels(base, token)} <= before, 30, "the test's kernels to shut down")

def test_stepper_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright
    import madlab.protocols.controlmad  # noqa: F401  (to read the exported transcript back)
    from madlab.core import Transcript
    from madlab.debate import Debate
    top, base, token = lab
    root = top / "stepper"; root.mkdir()
    nb = json.loads(TOUR.read_text())
    nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "slowstep", "metadata": {}, "outputs": [], "source": _SLOW_CELL})
    (root / TOUR.name).write_text(json.dumps(nb))
    ARTIFACTS.mkdir(exist_ok=True)
    with _own_kernels(base, token), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            _open_and_run_all(page, base, token, f"{root.name}/{TOUR.name}")
            stepper = page.locator(".madlab-stepper").first
            stepper.wait_for(state="visible", timeout=60_000)
            # the headless part of the tour (second stepper, fork, comparison) finishes too
            page.locator(".madlab-compare-table").first.wait_for(state="attached", timeout=90_000)
            _wait(lambda: not page.locator(".jp-InputPrompt:has-text('[*]')").count(), 60, "every cell to finish")
            assert not page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']:has-text('Error')").count()

            header, grid = stepper.locator(".madlab-header"), stepper.locator(".madlab-positions")
            step = stepper.locator("button.madlab-step")
            assert "not started" in header.inner_text()
            # record every text the busy indicator shows (a MutationObserver misses none, however short a round is)
            page.evaluate("""() => { window.__madlabBusy = [];
                const el = document.querySelector('.madlab-stepper .madlab-busy');
                new MutationObserver(ms => { for (const m of ms) { if (el.textContent) window.__madlabBusy.push(el.textContent);
                    for (const n of m.addedNodes) if (n.textContent) window.__madlabBusy.push(n.textContent); } })
                  .observe(el, {childList: true, subtree: true, characterData: true}); }""")
            seen, clicks, by_round, turns = [], 0, {}, []
            cons = stepper.locator(".madlab-consensus-view")
            while step.is_enabled() and clicks < 40:
                h0, g0 = header.inner_text(), grid.inner_html()
                step.click(); clicks += 1
                # each piece of the widget is its own comm message: wait for the header, the grid (its caption names the round) and the consensus row
                shown = lambda: cons.locator(".madlab-cons-cell.madlab-shown[data-round='%s']" % re.search(r"Round (\d+) of", header.inner_text()).group(1)).count() == 1
                _wait(lambda: header.inner_text() != h0 and grid.inner_html() != g0 and (step.is_enabled() or "status done" in header.inner_text()) and shown(),
                      30, f"the round header, the positions grid and the consensus row to show the next round after click {clicks}")
                k = re.search(r"Round (\d+) of", header.inner_text()).group(1)
                seen.append(header.inner_text())
                prev = by_round.get(int(k) - 1, {})                     # the majority after the round before
                by_round[int(k)] = now = _check_consensus(stepper, prev)
                turns += [r for r in now if r in prev and now[r] != prev[r]]
                # the grid is players x agents: every cell coloured right/wrong once the first round has run
                assert grid.locator("td.madlab-cell").count() >= 4 * 3
            _wait(lambda: step.is_disabled() and "status done" in header.inner_text() and "result:" in header.inner_text()
                  and grid.locator("td.madlab-cell.right, td.madlab-cell.wrong").count() >= 4 * 3, 30,
                  "the Step button disabled, the header done with its result and every cell coloured at the end")
            assert clicks >= 10, seen                                  # initial + 4 x (debate, self-adjustment) + final
            assert len(set(seen)) == len(seen)
            assert turns, "the team's majority never changed: the consensus row was not tested on a change"
            _wait(lambda: not stepper.locator(".madlab-busy").inner_text().strip(), 30, "the busy indicator to clear")
            busy = page.evaluate("() => window.__madlabBusy")
            assert any("running round" in b for b in busy), busy          # each round in flight showed progress
            n = int(re.search(r"Round (\d+) of (\d+)", header.inner_text()).group(2))
            assert n in (clicks, clicks - 1)                           # the last click may only find that the debate is over
            # browse back and forward
            stepper.locator("button.madlab-back").click()
            _wait(lambda: f"Round {n - 1} of {n}" in header.inner_text(), 10, "Back to show the previous round")
            stepper.locator("button.madlab-forward").click()
            _wait(lambda: f"Round {n} of {n}" in header.inner_text(), 10, "Forward")

            # fork at round 2 with the first message there edited, then step the new branch
            text = stepper.locator(".madlab-fork-text textarea")
            editing = lambda: stepper.locator(".madlab-fork-what-text").first.get_attribute("data-round") if stepper.locator(".madlab-fork-what-text").count() else None
            _wait(lambda: editing() == str(n), 10, "the editor to hold a message of the round shown")
            stepper.locator(".madlab-fork-round select").select_option(index=1)
            stepper.locator(".madlab-fork-agent select").select_option(index=0)
            # the label naming the message comes after the editor's text: once it says round 2, the text is round 2's
            _wait(lambda: editing() == "2" and text.input_value().strip().startswith("{"), 10, "round 2's message in the editor")
            msg = json.loads(text.input_value())                      # a debate reply on the player in focus: flip its role
            msg.update(role="knave" if msg.get("role") != "knave" else "knight", disagree_reasoning="edited in the browser")
            text.fill(json.dumps(msg))
            stepper.locator("button.madlab-fork").click()
            _wait(lambda: "fork 1" in header.inner_text(), 30, "the forked branch to show")
            # round 2 everywhere: the header, the fork list, the branch name and the comparison table (each its own comm message)
            nbsp = lambda loc: loc.inner_text().replace("\xa0", " ")                 # a select shows its spaces as no-break spaces
            checked = lambda sel: nbsp(sel) if sel.count() else ""
            _wait(lambda: "Round 2 of 2+" in header.inner_text()
                  and checked(stepper.locator(".madlab-fork-round select option:checked")).startswith("round 2:")
                  and stepper.locator(".madlab-branch select option").count() == 2
                  and "fork 1: round 2, " in checked(stepper.locator(".madlab-branch select option:checked"))
                  and stepper.locator(".madlab-compare-table td.madlab-cmp-fork_round").all_inner_texts() == ["", "2"], 30,
                  "round 2 in the header, the fork list, the branch list and the comparison table")
            _wait(lambda: "EDITED" in stepper.locator(".madlab-columns").inner_text() and step.is_enabled(), 10, "the edited message in the columns")
            h0, g0 = header.inner_text(), grid.inner_html()
            step.click()
            _wait(lambda: "Round 3" in header.inner_text() and grid.inner_html() != g0 and editing() == "3", 30, "a step in the forked branch")

            # export the branch shown: the transcript reads back
            stepper.locator("button.madlab-export").click()
            note = stepper.locator(".madlab-note")
            _wait(lambda: "exported" in note.inner_text(), 10, "the export to say where it wrote")
            path = root / re.search(r" to (\S+\.json) and ", note.inner_text()).group(1)
            back = Debate.from_transcript(path)
            assert len(back.rounds) == 3 and Transcript.from_json(path).meta["forked_from"]["round"] == 2

            # fork again at round 2 with a message no parser reads: the cell shows "invalid" and the widget says why
            stepper.locator(".madlab-fork-round select").select_option(index=1)
            _wait(lambda: editing() == "2" and text.input_value().strip().startswith("{"), 10, "round 2's message in the editor")
            text.fill("I would rather not say.")
            stepper.locator("button.madlab-fork").click()
            bad = grid.locator("td.madlab-agent.invalid")
            _wait(lambda: "fork 2" in header.inner_text() and "could not be read" in note.inner_text() and bad.count() >= 1, 30,
                  "the second fork to show, its note saying the message could not be read and its cell invalid")
            assert bad.first.inner_text() == "invalid"
            assert "NaN" not in grid.inner_text()
            header.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "stepper.png"), full_page=False)
            stepper.screenshot(path=str(ARTIFACTS / "stepper-widget.png"))

            # Run to end keeps its Stop button; Stop during round 3 stops after round 3
            slow = page.locator(".madlab-stepper").last
            busy, run, sh = slow.locator(".madlab-busy"), slow.locator("button.madlab-run"), slow.locator(".madlab-header")
            slow.scroll_into_view_if_needed()
            # at each change of the header, the round it names and the round of the grid at that moment: the grid is never behind it
            page.evaluate("""() => { const el = [...document.querySelectorAll('.madlab-stepper')].pop(); window.__madlabRounds = [];
                const h = el.querySelector('.madlab-header'), g = el.querySelector('.madlab-positions');
                const num = (e, re) => { const m = e.innerText.match(re); return m ? +m[1] : 0; };
                new MutationObserver(() => window.__madlabRounds.push([num(h, /Round (\\d+) of/), num(g, /positions after round (\\d+)/)]))
                  .observe(h, {childList: true, subtree: true, characterData: true}); }""")
            run.click()
            _wait(lambda: "running round 2" in busy.inner_text(), 30, "round 2 of Run to end")
            _wait(lambda: run.inner_text().strip() == "Stop" and run.is_enabled(), 10, "Run to end to become an enabled Stop button")
            _wait(lambda: "running round 3" in busy.inner_text(), 30, "round 3 of Run to end")
            # the busy label never squeezes the toolbar's buttons (their text fits)
            squeezed = slow.evaluate("el => [...el.querySelectorAll('.madlab-toolbar button')].filter(b => b.scrollWidth > b.clientWidth + 1).map(b => b.innerText)")
            assert not squeezed, squeezed
            run.click()
            _wait(lambda: "stopping after round 3" in busy.inner_text() or not busy.inner_text().strip(), 10, "Stop to be acknowledged")
            _wait(lambda: not busy.inner_text().strip() and "Round 3 of 3+" in sh.inner_text() and "status paused" in sh.inner_text()
                  and "positions after round 3" in slow.locator(".madlab-positions").inner_text()
                  and "stopped after round 3" in slow.locator(".madlab-note").inner_text()
                  and run.inner_text().strip() == "Run to end" and run.is_enabled(), 30,
                  "the run to stop after round 3: header paused at round 3, the grid after round 3, the note saying so, Run to end back")
            pairs = page.evaluate("() => window.__madlabRounds")
            assert pairs and max(h for h, _ in pairs) == 3 and all(h <= g for h, g in pairs), pairs
            assert not errors, errors
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "stepper-failure.png"))
            raise
        finally:
            browser.close()


def _execute(kc, code: str, timeout: float = 60) -> str:
    "Run `code` on the kernel; its stdout (raises on an error)."
    out = []
    def hook(msg):
        if msg["msg_type"] == "stream": out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error": out.append("\n".join(msg["content"]["traceback"]))
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    assert reply["content"]["status"] == "ok", "".join(out)
    return "".join(out).strip()

def test_stepper_round_in_flight_does_not_block_kernel(tmp_path):
    """A real kernel: a Step click (the comm message JupyterLab sends) starts a slow round; while it is in flight the
    kernel answers other cells at once, the stepper shows progress, and the round lands when it is done."""
    pytest.importorskip("ipykernel")
    from jupyter_client.manager import start_new_kernel
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["MADLAB_CACHE"], env["IPYTHONDIR"] = str(tmp_path / "cache"), str(tmp_path / "ipython")
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path), startup_timeout=120)
    try:
        model_id = _execute(kc, "\n".join([
            "import madlab.protocols.baselines",
            "from madlab.debate import Debate",
            "from madlab.tasks.arith import toy_arith_items",
            "from madlab.widgets import DebateStepper",
            "s = DebateStepper(Debate('du', toy_arith_items(1, seed=3)[0], ['synthetic:strong,latency=8', 'synthetic:weak,latency=8'], rounds=1))",
            "print(s.b_step.model_id)"]))
        # what the browser sends when Step is clicked
        kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": model_id, "data": {"method": "custom", "content": {"event": "click"}}}))
        t0, states = time.time(), []
        while time.time() - t0 < 5:                     # the round takes 8 s: every answer here comes while it is in flight
            t1 = time.time()
            states.append(_execute(kc, "print(s.busy, 'running round 1' in s.w_busy.value, s.pos)", timeout=10))
            assert time.time() - t1 < 3, f"the kernel took {time.time() - t1:.1f}s to answer while a round ran"
            time.sleep(0.2)
        assert "True True -1" in states, states
        _wait(lambda: _execute(kc, "print(s.busy, s.pos)") == "False 0", 60, "the round to land")
        assert _execute(kc, "print(s.error, s.w_busy.value == '', 'Round 1 of 2' in s.w_header.value)") == "None True True"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_run_browser_in_jupyterlab(lab, tmp_path):
    """Two finished runs under a folder, browsed in JupyterLab: the list shows both with their accuracy, picking one shows its
    table, the `wrong` filter keeps the wrong rows, and picking a row opens its debate in the stepper, which steps."""
    from playwright.sync_api import sync_playwright
    import madlab.protocols.baselines  # noqa: F401
    from madlab.run import run_experiment
    from madlab.runs import open_run
    from madlab.tasks.arith import toy_arith_items
    top, base, token = lab
    root = top / "browse"; root.mkdir()
    run_experiment("du", toy_arith_items(6, seed=5), rounds=1, out=root / "runs" / "du_run", cache=False, progress=False)
    run_experiment("single", toy_arith_items(6, seed=5), out=root / "runs" / "single_run", cache=False, progress=False)
    wrong = int((~open_run(root / "runs" / "du_run").df.correct.astype(bool)).sum())
    from madlab.import_run import import_run                  # an imported debate: its stepper forks with a model typed in the model field
    chat = lambda *r: [m for k, x in enumerate(r) for m in ({"role": "user", "content": f"prompt {k}"}, {"role": "assistant", "content": x})]
    (tmp_path / "du.json").write_text(json.dumps({"What is 7 * 6?": [[chat("\\boxed{42}", "\\boxed{42}"), chat("\\boxed{48}", "\\boxed{42}")], "#### 42"]}))
    import_run("du", tmp_path / "du.json", root / "runs" / "imported_run")
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "browse", "metadata": {}, "outputs": [],
                     "source": "from madlab.runs import RunBrowser\nRunBrowser('runs')"}],
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
    (root / "browse.ipynb").write_text(json.dumps(nb))
    ARTIFACTS.mkdir(exist_ok=True)
    with _own_kernels(base, token), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            _open_and_run_all(page, base, token, f"{root.name}/browse.ipynb")
            rb = page.locator(".madlab-run-browser").first
            rb.wait_for(state="visible", timeout=60_000)
            runs = rb.locator(".madlab-runs select option")
            _wait(lambda: runs.count() == 3, 30, "the three runs in the list")
            labels = [l.replace("\xa0", " ") for l in runs.all_inner_texts()]        # a select shows its spaces as no-break spaces
            assert any("· du ·" in l and "accuracy" in l for l in labels) and any("· single ·" in l for l in labels), labels
            du = [i for i, l in enumerate(labels) if "du_run" in l][0]
            rb.locator(".madlab-runs select").select_option(index=du)
            table, items = rb.locator(".madlab-run-table"), rb.locator(".madlab-run-items select option")
            _wait(lambda: "6 of 6 rows" in table.inner_text() and items.count() == 6 and "du_run" in rb.locator(".madlab-run-info").inner_text(),
                  30, "the du run's table and rows")
            rb.locator(".madlab-run-filter button:has-text('wrong')").click()
            _wait(lambda: f"{wrong} of 6 rows (wrong)" in table.inner_text() and items.count() == wrong, 30, "the wrong rows only")
            rb.locator(".madlab-run-filter button:has-text('all')").click()
            _wait(lambda: items.count() == 6, 30, "every row again")
            rb.locator(".madlab-run-items select").select_option(index=0)
            stepper = rb.locator(".madlab-stepper")
            stepper.wait_for(state="visible", timeout=30_000)
            header = stepper.locator(".madlab-header")
            # a finished debate opens at its last round, with its positions and result
            _wait(lambda: "Round 2 of 2" in header.inner_text() and "status done" in header.inner_text() and "result:" in header.inner_text()
                  and "positions after round 2" in stepper.locator(".madlab-positions").inner_text(), 30, "the debate's stepper at its last round")
            stepper.locator("button.madlab-back").click()
            _wait(lambda: "Round 1 of 2" in header.inner_text(), 30, "the first recorded round")
            rb.screenshot(path=str(ARTIFACTS / "run-browser.png"))
            assert stepper.locator(".madlab-fork-model").is_hidden()             # a madlab debate forks on its own team
            rb.locator(".madlab-runs select").select_option(index=[i for i, l in enumerate(labels) if "imported_run" in l][0])
            _wait(lambda: items.count() == 1 and "imported_run" in rb.locator(".madlab-run-info").inner_text(), 30, "the imported run")
            rb.locator(".madlab-run-items select").select_option(index=0)
            model = stepper.locator(".madlab-fork-model input")
            _wait(lambda: model.count() == 1 and model.is_visible(), 30, "the model field of the imported debate's stepper")
            def typed():                                                        # typed again if the view was drawn anew meanwhile
                if model.input_value() != "synthetic:medium": model.fill("synthetic:medium")
                return stepper.locator(".madlab-fork-imported").get_attribute("data-model") == "synthetic:medium"
            _wait(typed, 30, "the kernel to have the model typed (the fork help names it)")
            stepper.locator(".madlab-fork-round select").select_option(index=0)
            stepper.locator("button.madlab-fork").click()
            _wait(lambda: "fork 1: round 1, synthetic:medium" in header.inner_text(), 60, "the imported debate continued by the model")
            stepper.locator("button.madlab-step").click()
            _wait(lambda: "Round 2 of 2" in header.inner_text() and "2 calls made" in stepper.locator(".madlab-usage").first.inner_text(), 30, "the model's round")
            assert not errors, errors
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "run-browser-failure.png"))
            raise
        finally:
            browser.close()

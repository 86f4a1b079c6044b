"""A person in a real JupyterLab, driven by a real browser (Playwright + Debian's chromium): a du debate with two
synthetic agents and `human:tester` runs in the background while the test reads the desk's forms and types the
answers; the transcripts hold them with the name and the messages sent; a stop and a resume ask only for what was not
answered; bad input is refused in place with the reason; a fork from the stepper seats the person at round 2; judging
an oversight debate, the person is shown the transcript with its quotes checked, and not the hidden story."""
from __future__ import annotations
import contextlib, json, urllib.request
import nbformat
import pytest
from jupyter_helpers import CHROMIUM, CHROMIUM_ARGS, need_browser, jupyter_lab, wait_until

pytestmark = pytest.mark.slow

CELLS = [
    # 0: the desk, where a person answers
    "import asyncio, json\nfrom madlab.backends.human import desk\nfrom madlab.run import arun_experiment\n"
    "from madlab.debate import Debate\nfrom madlab.widgets import DebateStepper\n"
    "from madlab.tasks import task_items\ndesk()",
    # 1: a du run in the background (the cell ends; the desk takes the clicks)
    'TEAM = ["synthetic:strong,seed=1", "synthetic:weak,seed=2", "human:tester"]\n'
    'KW = dict(task="arith", team=TEAM, out="runs", n=2, rounds=1, concurrency=1, cache="cache")\n'
    "task = asyncio.ensure_future(arun_experiment('du', **KW))",
    # 2: stop it
    "task.cancel()",
    # 3: resume it
    "task2 = asyncio.ensure_future(arun_experiment('du', **KW))",
    # 4: a request held to a schema with an option and a probability
    "from madlab.formats import AnswerFormat, register_format, reasoned\n"
    "from madlab.backends.base import get_backend\nfrom madlab.core import Ask\n"
    'register_format(AnswerFormat("_pick", schema=lambda ask: reasoned({"answer": {"enum": ["A", "B"]}, '
    '"probability": {"type": "number", "minimum": 0, "maximum": 1}})), replace=True)\n'
    'pick = asyncio.ensure_future(get_backend("human:tester,timeout=300").complete([{"role": "user", "content": "A or B?"}], '
    'Ask(kind="_pick", agent="Human-tester")))',
    # 5: what the pick sent
    "print('PICK', pick.result().text)",
    # 6: a stepper whose fork seats the person
    's = DebateStepper(Debate("du", task_items("arith")[0], ["synthetic:strong,seed=1", "synthetic:weak,seed=2"], '
    'rounds=2))\ns',
    # 7: who answered each round of the shown branch
    "print('SEATS', json.dumps([r.by_agent()['Synthetic-weak'].meta.get('answered_by') for r in s.branch.rounds]))",
    # 8: the person judges an oversight debate with the question view: the story is hidden from them
    "from madlab.tasks.stories import story_items\nitems = story_items(1, seed=0, facts=6, closeness='near', hops=1)\n"
    "OT = [{'name': 'Debater 1', 'spec': 'synthetic:truthful,seed=1'}, "
    "{'name': 'Debater 2', 'spec': 'synthetic:deceptive,seed=2'}, {'name': 'Judge', 'spec': 'human:tester', "
    "'role': 'judge'}]\nov = asyncio.ensure_future(arun_experiment('oversight', items=items, team=OT, cache=False, "
    "seed=7, rounds=1, out='ov'))\nprint('STORY', json.dumps(items[0].context))",
]

_wait = wait_until                       # the one polling wait of the browser tests

def _kernels(base, token) -> list:
    with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as r: return json.loads(r.read())

@contextlib.contextmanager
def _own_kernels(base, token):
    before = {k["id"] for k in _kernels(base, token)}
    try: yield
    finally:
        for k in _kernels(base, token):
            if k["id"] not in before:
                urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}",
                                                              method="DELETE"), timeout=30).close()
        _wait(lambda: {k["id"] for k in _kernels(base, token)} <= before, 30, "the test's kernels to shut down")

def _run_cell(page, i):
    page.evaluate("""i => { const nb = window.jupyterapp.shell.currentWidget; nb.content.activeCellIndex = i;
                           return window.jupyterapp.commands.execute('notebook:run-cell'); }""", i)

def _output(page, i) -> str:
    return page.locator(".jp-NotebookPanel .jp-Cell").nth(i).locator(".jp-OutputArea").inner_text()

def _form(page, n):
    "Question number `n` on the desk (the first view of it), once it waits there."
    f = page.locator(f".mlh-desk .mlh-form.mlh-q{n}").first
    f.wait_for(state="visible", timeout=60_000)
    return f

def _answer(page, n, values: dict) -> str:
    "Type `values` (field -> text) into question `n` and send it; the form's head and text, as the person read them."
    f = _form(page, n)
    head, seen = f.locator(".mlh-head").inner_text(), f.locator(".mlh-seen").inner_text()
    for k, v in values.items():
        f.locator(f".mlh-field-{k} textarea, .mlh-field-{k} input").first.fill(v)
    f.locator("button.mlh-send").click()
    return head + "\n" + seen

def test_a_person_answers_in_jupyterlab(tmp_path):
    need_browser()
    from playwright.sync_api import sync_playwright
    from madlab.core import Transcript
    root, home = tmp_path / "root", tmp_path / "home"
    root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "people.ipynb")
    with jupyter_lab(root, home) as (base, token), _own_kernels(base, token), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{base}/lab/tree/people.ipynb?token={token}", wait_until="domcontentloaded", timeout=60_000)
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
            _wait(lambda: page.evaluate("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                                        " return !!(w && w.sessionContext && w.sessionContext.session &&"
                                        " w.sessionContext.session.kernel &&"
                                        " w.sessionContext.session.kernel.status === 'idle'); }"), 60, "an idle kernel")
            _run_cell(page, 0)
            page.locator(".mlh-desk .mlh-idle").first.wait_for(timeout=60_000)
            _run_cell(page, 1)
            # three answers typed by the person: item 1 (two rounds), then item 2's first round
            shown = [_answer(page, k + 1, {"reasoning": f"my answer {k}", "answer": str(40 + k)}) for k in range(3)]
            assert all("tester, you answer as Human-tester" in s for s in shown)
            assert "What is" in shown[0] and "round 2" in shown[1] and "Synthetic-strong" in shown[1]  # peers' turns
            _form(page, 4)                                       # the fourth question waits: stop the run here
            _run_cell(page, 2)
            page.locator(".mlh-desk .mlh-idle").first.wait_for(timeout=30_000)
            _run_cell(page, 3)
            fourth = _answer(page, 5, {"reasoning": "my answer 3", "answer": "43"})
            assert "round 2" in fourth                           # only item 2's second round is asked again
            _wait(lambda: len(list((root / "runs" / "debates").glob("*/transcript.json"))) == 2
                  and all(Transcript.from_json(p).meta.get("status") == "done"
                          for p in (root / "runs" / "debates").glob("*/transcript.json")), 60, "both items done")
            page.locator(".mlh-desk .mlh-idle").first.wait_for(timeout=30_000)
            # bad input, refused in place with the reason; then a good answer is sent
            _run_cell(page, 4)
            f = _form(page, 6)
            assert "time limit 300 s" in f.locator(".mlh-head").inner_text()               # the limit, visible
            _wait(lambda: "s left" in f.locator(".mlh-left").inner_text(), 30, "the time left")
            _answer(page, 6, {"answer": "E", "probability": "0.5"})
            err = f.locator(".mlh-error")
            err.wait_for(timeout=30_000)
            assert "answer: 'E' is not one of the options offered (A, B)" in err.inner_text()
            _answer(page, 6, {"answer": "A", "probability": "1.5"})
            _wait(lambda: "probability: 1.5 is out of range (0 to 1)" in err.inner_text(), 30, "the range refused")
            _answer(page, 6, {"answer": "A", "probability": "0.7"})
            page.locator(".mlh-desk .mlh-idle").first.wait_for(timeout=30_000)
            _run_cell(page, 5)
            _wait(lambda: "PICK" in _output(page, 5), 30, "the pick's reply")
            assert '"answer": "A", "probability": 0.7' in _output(page, 5)
            # the stepper: two rounds, then the person takes Synthetic-weak's seat in a fork at round 2
            _run_cell(page, 6)
            st = page.locator(".madlab-stepper").first
            st.wait_for(timeout=60_000)
            for k in (1, 2):
                st.locator("button.madlab-step").click()
                _wait(lambda: f"Round {k} of 3" in st.locator(".madlab-header").inner_text(), 30, f"round {k}")
            st.locator(".madlab-fork-round select").select_option(index=1)                     # round 2
            agent = st.locator(".madlab-fork-agent select")
            agent.select_option(label=next(o for o in agent.locator("option").all_inner_texts() if "weak" in o))
            st.locator(".madlab-seat-spec input").fill("human:tester")
            st.locator("button.madlab-seat-fork").click()
            _wait(lambda: st.locator(".madlab-branch select").input_value() == "fork 1: round 1", 30, "the fork")
            st.locator("button.madlab-step").click()             # round 2: the person answers for Synthetic-weak
            seat = _answer(page, 7, {"reasoning": "seated", "answer": "1"})
            assert "tester, you answer as Synthetic-weak" in seat and "round 2" in seat
            st.locator("button.madlab-run").click()
            _answer(page, 8, {"reasoning": "seated again", "answer": "2"})
            _wait(lambda: "status done" in st.locator(".madlab-header").inner_text(), 60, "the fork to end")
            _run_cell(page, 7)
            _wait(lambda: "SEATS" in _output(page, 7), 30, "who answered")
            assert 'SEATS [null, "tester", "tester"]' in _output(page, 7)
            # judging oversight: the form shows the transcript, its quotes checked, and not the story
            _run_cell(page, 8)
            _wait(lambda: "STORY" in _output(page, 8), 60, "the oversight run to start")
            story = json.loads(_output(page, 8).split("STORY", 1)[1].strip())
            f = _form(page, 9)
            seen = f.locator(".mlh-seen").inner_text()
            assert "Judge" in f.locator(".mlh-head").inner_text() and "<story>" not in seen and story not in seen
            assert f.locator(".mlh-seen .mlh-verified").count() >= 1                 # a quote shown as verified
            for box in f.locator("textarea").all(): box.fill("I read the transcript")
            for box in f.locator("input").all(): box.fill("0.5")
            f.locator("button.mlh-send").click()
            _wait(lambda: (root / "ov" / "results.csv").exists(), 60, "the judged run to finish")
            import pandas as pd
            assert list(pd.read_csv(root / "ov" / "results.csv").answered_by) == ["tester"]
        finally:
            page.screenshot(path=str(tmp_path / "people.png"))
            browser.close()
    # the transcripts hold the four answers, with the name and the messages sent
    mine = [tu for p in sorted((root / "runs" / "debates").glob("*/transcript.json"))
            for r in Transcript.from_json(p).rounds for tu in r.turns if tu.agent == "Human-tester"]
    assert [json.loads(tu.reply)["answer"] for tu in mine] == [40, 41, 42, 43]
    assert {tu.meta["answered_by"] for tu in mine} == {"tester"} and all(tu.messages for tu in mine)
    assert [tu.cached for tu in mine] == [False, False, True, False]    # the resume replayed the third answer

"""A person as the judge of the `oversight` protocol, answering on the notebook's desk (driven here as a person would:
read the form, fill it, send): the desk shows the judge only what its view allows (the story only to the oracle), the
speakers' quotes marked verified or not, and the verdict is recorded with the person's name."""
from __future__ import annotations
import html, threading
import pytest
from madlab.backends.human import desk, set_asker
from madlab.run import run_experiment
from madlab.tasks.stories import story_items

TEAM = [{"name": "Debater 1", "spec": "synthetic:truthful,seed=1"},
        {"name": "Debater 2", "spec": "synthetic:deceptive,seed=2"},
        {"name": "Judge", "spec": "human:tester", "role": "judge"}]

@pytest.fixture(autouse=True)
def _no_asker_left():
    yield
    set_asker(None)

def _judged_on_the_desk(tmp_path, **kw):
    "Run oversight in a thread with the desk as the asker; answer every form; (item, result, what each form showed)."
    items = story_items(1, seed=0, facts=6, closeness="near", hops=1)
    set_asker(desk())
    box = {}
    def run():
        try: box["res"] = run_experiment("oversight", items=items, team=TEAM, cache=False, seed=7, rounds=1,
                                         out=tmp_path / "run", **kw)
        except BaseException as e: box["err"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    shown = []
    while th.is_alive():
        waiting = desk().waiting
        if not waiting: th.join(0.02); continue
        f = waiting[0]
        shown.append((f.head.value, f.seen.value))
        for fld in f.req.fields:          # even odds: the person cannot tell
            f.inputs[fld.path].value = (str(fld.options[0]) if fld.options else "0.5" if fld.kind == "number"
                                        else "I read the transcript")
        assert f.submit(), f.error.value
    th.join()
    if "err" in box: raise box["err"]
    return items[0], box["res"], shown

@pytest.mark.parametrize("sees", ["question", "context"])
def test_a_person_judging_oversight_sees_the_story_only_when_the_view_allows(tmp_path, sees):
    item, res, shown = _judged_on_the_desk(tmp_path, judge_sees=sees)
    assert len(shown) == 1 and 'you answer as <b class="mlh-agent">Judge</b>' in shown[0][0]
    seen = shown[0][1]
    story = html.escape(item.context, quote=True)
    if sees == "question": assert story not in seen and "&lt;story&gt;" not in seen      # hidden means hidden
    else: assert story in seen and "&lt;story&gt;" in seen                                  # the oracle reads it
    assert html.escape(item.prompt.splitlines()[0], quote=True) in seen                     # the question, always
    assert "mlh-quote mlh-verified" in seen                                                 # quotes marked as checked
    row = res.df.iloc[0]
    assert row.status == "done" and row.answered_by == "tester" and row.unanswered == 0

def test_a_person_debating_in_oversight_reads_the_story_and_their_side(tmp_path):
    "A person in a debater's seat is shown what a debater may read: the story, and the side they argue."
    items = story_items(1, seed=0, facts=6, closeness="near", hops=1)
    team = [{"name": "Debater 1", "spec": "human:tester"}, TEAM[1],
            {"name": "Judge", "spec": "synthetic:skill=0.8,seed=3", "role": "judge"}]
    shown = []
    def ask(req):
        shown.append(req)
        return {f.path: "Look: <quote>x</quote>" if f.kind == "text" else "0.5" for f in req.fields}
    set_asker(ask)
    res = run_experiment("oversight", items=items, team=team, cache=False, seed=7, rounds=1, out=tmp_path / "run")
    assert len(shown) == 1 and shown[0].agent == "Debater 1"
    text = "\n".join(m["content"] for m in shown[0].messages)
    side = res.transcripts[items[0].id].result["sides"]["Debater 1"]
    assert items[0].context in text and f"You argue that the answer is {side}" in text
    assert res.df.answered_by[0] == "tester"

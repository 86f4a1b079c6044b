"""A person in the debate: `human:NAME` agents answered through an asker (a fake one here, standing for the person),
in a du debate with two synthetic agents; the run is recorded, resumable and says who answered."""
from __future__ import annotations
import asyncio, json, os, subprocess, sys
from pathlib import Path
import pandas as pd
import pytest
from madlab.core import Transcript, run_sync
from madlab.backends.human import set_asker, HumanRequest, terminal_asker, answer_fields
from madlab.run import arun_experiment, run_experiment
from madlab.run_folder import transcript_text

ROOT = Path(__file__).resolve().parents[1]
TEAM = ["synthetic:strong,seed=1", "synthetic:weak,seed=2", "human:tester"]

@pytest.fixture(autouse=True)
def _no_asker_left():
    yield
    set_asker(None)

def _gold_asker(log: list):
    "A person who answers each arithmetic item right, noting what they were shown."
    def ask(req: HumanRequest):
        log.append(req)
        return {"reasoning": "I worked it out", "answer": str(_gold_of(req))}
    return ask

def _gold_of(req: HumanRequest):
    from madlab.tasks import task_items
    first = next(m["content"] for m in req.messages if m["role"] == "user")
    return next(it.gold for it in task_items("arith") if it.prompt in first)

def _run(tmp_path, n=3, **kw):
    return run_experiment("du", task="arith", team=TEAM, out=tmp_path / "run", n=n, cache=tmp_path / "cache",
                          rounds=1, **kw)

def test_a_du_debate_with_a_person_records_their_turns_with_their_name(tmp_path):
    asked = []
    set_asker(_gold_asker(asked))
    res = _run(tmp_path)
    assert len(asked) == 3 * 2                                       # three items, two rounds, one person
    t = Transcript.from_json(Path(res.out) / "debates" / res.df.item_id[0] / "transcript.json")
    mine = [tu for r in t.rounds for tu in r.turns if tu.agent == "Human-tester"]
    assert [tu.meta.get("answered_by") for tu in mine] == ["tester", "tester"]
    assert all(tu.valid and json.loads(tu.reply)["reasoning"] == "I worked it out" for tu in mine)
    # the messages sent are what the person saw: round 2 holds the peers' round-1 turns
    assert all(tu.messages in [r.messages for r in asked] for tu in mine)
    assert any("Synthetic-strong" in m["content"] for m in mine[1].messages if m["role"] != "assistant")
    assert list(res.df.answered_by) == ["tester"] * 3                 # the results table says who answered
    assert list(res.df.unanswered) == [0] * 3
    assert "Human-tester (tester): " in transcript_text(t)

def test_stop_and_resume_asks_only_what_was_not_answered(tmp_path):
    asked, stopped, run = [], [], {}
    async def first_item_only(req):
        if len(asked) == 2:                 # item 1 answered (two rounds): the person leaves, the run is stopped
            stopped.append(req); run["task"].cancel(); await asyncio.Event().wait()
        asked.append(req); return _gold_asker([])(req)
    set_asker(first_item_only)
    async def main():
        run["task"] = asyncio.ensure_future(arun_experiment(
            "du", task="arith", team=TEAM, out=tmp_path / "run", n=3, cache=tmp_path / "cache", rounds=1,
            concurrency=1))
        try: return await run["task"]
        except asyncio.CancelledError: return None
    run_sync(main())
    assert len(asked) == 2 and stopped
    again = []
    set_asker(_gold_asker(again))
    res = _run(tmp_path, concurrency=1)
    first = {r.messages[-1]["content"] for r in asked}
    assert len(again) == 4 and not first & {r.messages[-1]["content"] for r in again}   # item 1 never asked again
    assert (res.df.status == "done").all() and list(res.df.answered_by) == ["tester"] * 3
    # the cache replays every answer: a third run into a fresh folder asks nobody
    set_asker(_gold_asker(never := []))
    run_experiment("du", task="arith", team=TEAM, out=tmp_path / "run2", n=3, cache=tmp_path / "cache", rounds=1)
    assert never == []

def test_an_answer_never_given_is_recorded_as_such_not_invalid(tmp_path):
    async def away(req): await asyncio.Event().wait()
    set_asker(away)
    team = [*TEAM[:2], "human:tester,timeout=0.2"]
    res = run_experiment("du", task="arith", team=team, out=tmp_path / "run", n=1, cache=tmp_path / "cache",
                         rounds=1)
    row = res.df.iloc[0]
    assert (row.unanswered, row.invalid, row.answered_by) == (2, 0, "tester")   # both rounds
    t = Transcript.from_json(Path(res.out) / "debates" / row.item_id / "transcript.json")
    tu = next(tu for r in t.rounds for tu in r.turns if tu.agent == "Human-tester")
    assert tu.meta["unanswered"] == "time limit of 0.2 s passed" and tu.reply == ""
    assert "(no answer: time limit of 0.2 s passed)" in transcript_text(t)
    page = t.to_html()
    assert 'class="turn unanswered"' in page and "no answer (time limit of 0.2 s passed)" in page
    assert "answered by tester" in page
    # not cached: a later run asks again
    set_asker(_gold_asker(asked := []))
    run_experiment("du", task="arith", team=team, out=tmp_path / "run2", n=1, cache=tmp_path / "cache", rounds=1)
    assert len(asked) == 2

def test_the_other_agents_calls_run_while_the_person_reads(tmp_path):
    from madlab.debate import Debate
    from madlab.agents import make_team
    done = set()
    async def reads_until_the_others_replied(req):
        await asyncio.wait_for(_until(lambda: {"Synthetic-strong", "Synthetic-weak"} <= done), 10)
        return {"reasoning": "", "answer": "1"}
    set_asker(reads_until_the_others_replied)
    from madlab.tasks import task_items
    d = Debate("du", task_items("arith")[0], make_team(TEAM), rounds=1)
    d.listeners.append(lambda ev, agent=None, **kw: ev == "call_end" and done.add(agent))
    run_sync(d.arun())
    assert {tu.agent for tu in d.transcript.rounds[0].turns} == {"Synthetic-strong", "Synthetic-weak", "Human-tester"}

async def _until(cond):
    while not cond(): await asyncio.sleep(0.01)

def test_the_terminal_asks_again_with_the_reason_until_the_answer_fits():
    from click.testing import CliRunner
    req = HumanRequest("Human-ana", "ana", [{"role": "user", "content": "Pick one"}],
                       answer_fields({"type": "object", "properties": {"answer": {"enum": ["A", "B"]}, "p": {
                           "type": "number", "minimum": 0, "maximum": 1}}}), timeout=120)
    with CliRunner().isolation(input="E\nB\n1.5\n0.5\n") as streams:
        values = terminal_asker(req)
        text = streams[0].getvalue().decode()
    assert values == {"answer": "B", "p": "0.5"} and req.reply(values) == '{"answer": "B", "p": 0.5}'
    assert "refused: answer: 'E' is not one of the options offered (A, B)" in text
    assert "refused: p: 1.5 is out of range (0 to 1)" in text and "time limit 120 s" in text and "Pick one" in text

def test_the_command_line_without_a_terminal_refuses_a_person_naming_them(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MADLAB_CACHE": str(tmp_path / "c")}
    r = subprocess.run([str(ROOT / ".venv/bin/madlab"), "run", "du", "--task", "arith", "--n", "1", "--agents",
                        "synthetic:strong,human:ana", "--out", str(tmp_path)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "human:ana is answered by a person" in r.stderr and "no terminal" in r.stderr
    assert "Traceback" not in r.stderr

SEAT = """
import json, os, sys, time
from pathlib import Path
from madlab.core import OptionError
from madlab.backends.human import set_asker
from madlab.run import run_experiment
from madlab.tasks import task_items
tmp, n, wait = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "wait"
kw = dict(task="arith", team=["synthetic:strong,seed=1", "synthetic:weak,seed=2", "human:annotator"], out=tmp / "out",
          cache=tmp / "cache", rounds=1, concurrency=1)
asked = []
def ask(req):
    asked.append(req)
    with open(tmp / "asked.txt", "a") as f: f.write(req.person + "\\n")
    if not wait and len(asked) == 3:                 # ana is on item 2: bob comes to the same folder
        try: run_experiment("du", n=4, **kw)
        except OptionError as e: (tmp / "refused.txt").write_text(str(e))
        (tmp / "go").write_text("")
        while not (tmp / "bob-waits").exists(): time.sleep(0.01)
    first = next(m["content"] for m in req.messages if m["role"] == "user")
    return {"reasoning": "", "answer": next(it.gold for it in task_items("arith") if it.prompt in first)}
set_asker(ask)
if wait:
    while not (tmp / "go").exists(): time.sleep(0.01)
    (tmp / "bob-waits").write_text("")
res = run_experiment("du", n=n, lock_timeout=120 if wait else 0, **kw)
print(json.dumps(res.df.sort_values("item_id").answered_by.tolist()))
"""

def test_several_people_share_a_run_folder_each_with_their_own_name_in_turn(tmp_path):
    """ana and bob, each in their own process, take one seat (`human:annotator`) in one run folder: the lock keeps them
    in turn (bob's run waits for ana's), each answer records who gave it, and nobody is asked twice."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = lambda who, n, how: subprocess.Popen([sys.executable, "-c", SEAT, str(tmp_path), str(n), how],
                                               env={**env, "MADLAB_PERSON": who}, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True)
    ana, bob = run("ana", 2, "first"), run("bob", 4, "wait")
    (_, a_err), (b_out, b_err) = ana.communicate(timeout=240), bob.communicate(timeout=240)
    assert ana.returncode == 0 and bob.returncode == 0, a_err[-2000:] + b_err[-2000:]
    assert "is in use by another madlab run" in (tmp_path / "refused.txt").read_text()   # no waiting: refused
    assert (tmp_path / "asked.txt").read_text().split() == ["ana"] * 4 + ["bob"] * 4   # in turn, nobody twice
    assert json.loads(b_out.splitlines()[-1]) == ["ana", "ana", "bob", "bob"]          # who answered each item

def test_a_person_takes_a_role_agent_seat_and_a_team_file_seat(tmp_path):
    "`--moderator human:ana` (a role agent) and a team file member `spec: human:bo` ask the person; each says who."
    from madlab.agents import load_team
    asked = []
    def ask(req):
        asked.append((req.person, req.agent, req.kind))
        return {f.path: (f.options[0] if f.options else "1" if f.kind in ("number", "integer") else "mine")
                for f in req.fields}
    set_asker(ask)
    res = run_experiment("multi_persona", task="arith", team=["synthetic:strong", "synthetic:weak"],
                         moderator="human:ana", out=tmp_path / "run", n=1, cache=tmp_path / "cache", rounds=1)
    assert asked == [("ana", "Moderator", "multi_persona.moderator")] and res.df.answered_by[0] == "ana"
    team = tmp_path / "team.yaml"
    team.write_text("agents:\n  - synthetic:strong\n  - {name: Reader, spec: 'human:bo,timeout=30'}\n")
    members = load_team(team)
    assert [a.name for a in members] == ["Synthetic-strong", "Reader"]
    res = run_experiment("du", task="arith", team=team, out=tmp_path / "run2", n=1, cache=tmp_path / "cache",
                         rounds=1)
    assert ("bo", "Reader", "number") in asked and res.df.answered_by[0] == "bo"

def test_the_command_line_asks_a_person_in_the_terminal(tmp_path):
    "`madlab run du --agents ...,human:ana` on a terminal: the prompt shows the question, refuses a non-number, sends."
    pexpect = pytest.importorskip("pexpect")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MADLAB_CACHE": str(tmp_path / "c"), "COLUMNS": "200"}
    child = pexpect.spawn(str(ROOT / ".venv/bin/madlab"), ["run", "du", "--task", "arith", "--n", "1", "--rounds", "0",
                          "--agents", "synthetic:strong,human:ana", "--out", str(tmp_path / "out")],
                          env=env, cwd=str(tmp_path), timeout=120, encoding="utf-8")
    try:
        child.expect("ana, you answer as Human-ana")
        child.expect("What is 26 \\+ 28 \\* 2")
        child.expect("reasoning"); child.sendline("by hand")
        child.expect("answer"); child.sendline("eighty")
        child.expect("refused: answer: 'eighty' is not a number"); child.sendline("82")
        child.expect(pexpect.EOF)
    finally: child.close()
    assert child.exitstatus == 0, child.before
    t = Transcript.from_json(next((tmp_path / "out").rglob("transcript.json")))
    tu = next(tu for r in t.rounds for tu in r.turns if tu.agent == "Human-ana")
    assert (tu.answer, tu.meta["answered_by"]) == (82, "ana")

def test_an_item_left_undecided_by_a_missing_answer_is_neither_right_nor_wrong(tmp_path):
    async def away(req): await asyncio.Event().wait()
    set_asker(away)
    res = run_experiment("du", task="arith", team=["human:tester,timeout=0.1"], out=tmp_path / "run", n=1,
                         cache=tmp_path / "cache", rounds=0)
    row = res.df.iloc[0]
    assert (row.unanswered, row.invalid) == (1, 0) and pd.isna(row.correct)


def test_a_notebook_blocked_on_a_run_refuses_to_ask_a_person_and_says_how(monkeypatch):
    """`run_experiment` called in a notebook cell blocks the kernel, which then takes no widget input: a person's form
    would wait forever. Asked from such a run, the human agent refuses, saying to start the run in the background."""
    import concurrent.futures, threading
    import madlab.backends.human as H
    from madlab.core import thread_waits, wait_here
    monkeypatch.setattr(H, "_in_kernel", lambda: True)
    monkeypatch.setattr(H, "desk", lambda: "the desk")
    got = concurrent.futures.Future()

    def ask():
        while not thread_waits(threading.main_thread().ident): threading.Event().wait(0.001)
        try: got.set_result(H.current_asker("human:ana"))
        except Exception as e: got.set_result(e)
    threading.Thread(target=ask).start()
    e = wait_here(got)                                   # the main thread waits, as a kernel in run_experiment does
    assert isinstance(e, H.NoPerson) and "ensure_future(arun_experiment" in str(e) and "human:ana" in str(e), e
    assert H.current_asker("human:ana") == "the desk"   # not waiting: the form

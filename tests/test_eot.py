"""Exchange-of-Thought (`eot`): the relay paradigm from the command line and from Python (the same table), usage errors,
replay of a run folder's transcript without a call, re-deciding a finished run, and the routing seen at the HTTP level
(a scripted OpenAI-compatible server: each request holds exactly the solutions its paradigm routes to it)."""
from __future__ import annotations
import json, re
import pandas as pd
from click.testing import CliRunner
from madlab.agents import Agent
from madlab.backends import OpenAIBackend
from madlab.cli import main
from madlab.core import Item, Transcript
from madlab.debate import Debate
from madlab.protocols.eot import PERSONAS, eot_routes
from madlab.run import run_experiment

def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])

def test_relay_from_the_command_line_and_from_python(tmp_path):
    r = _cli("run", "eot", "--paradigm", "relay", "--rounds", 3, "--n", 6, "--seed", 3, "--no-cache", "--no-progress", "--out", tmp_path, "--name", "relay")
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "relay" / "results.parquet")
    assert len(df) == 6 and set(df.paradigm) == {"relay"} and (df.status == "done").all()
    assert df.exchange_rounds.between(0, 3).all() and set(df.stopped_by) <= {"consensus", "rounds"}
    cfg = json.loads((tmp_path / "relay" / "config.json").read_text())
    assert json.dumps(cfg).count('"relay"') >= 1
    py = run_experiment("eot", paradigm="relay", rounds=3, n=6, seed=3, cache=False)
    cols = ["item_id", "answer", "correct", "exchange_rounds", "stopped_by"]
    pd.testing.assert_frame_equal(py.df[cols].astype(str).reset_index(drop=True), df[cols].astype(str).reset_index(drop=True))
    # a transcript of the run folder replays without a call, to the same answers
    path = next((tmp_path / "relay" / "debates").rglob("transcript.json"))
    t = Transcript.from_json(path)
    d = Debate.from_transcript(t)
    again = d.run()
    assert [[tu.reply for tu in rr.turns] for rr in again.rounds] == [[tu.reply for tu in rr.turns] for rr in t.rounds]
    assert all(tu.cached for rr in again.rounds for tu in rr.turns) and again.result["answer"] == t.result["answer"]
    for rr in t.rounds[1:]:
        assert rr.meta["sees"] == {n: eot_routes("relay", [a["name"] for a in t.team])[n] for n in rr.meta["active"]}

def test_usage_errors_exit_2_naming_the_option(tmp_path):
    for args, opt in ((["--paradigm", "star"], "--paradigm"), (["--stop", "sometimes"], "--stop"), (["--rounds", "99"], "--rounds")):
        r = _cli("run", "eot", *args, "--n", 1, "--out", tmp_path, "--no-progress")
        assert r.exit_code == 2 and opt in r.output and "Traceback" not in r.output, r.output

def test_rescore_re_decides_a_finished_run(tmp_path):
    r = _cli("run", "eot", "--paradigm", "debate", "--stop", "none", "--rounds", 1, "--n", 4, "--no-cache", "--no-progress", "--out", tmp_path, "--name", "d")
    assert r.exit_code == 0, r.output
    r = _cli("rescore", tmp_path / "d", "--decision", "majority")
    assert r.exit_code == 0 and "0 calls made" in r.output, r.output
    own = pd.read_parquet(tmp_path / "d" / "results.parquet")
    maj = pd.read_parquet(tmp_path / "d" / "results.decision-majority.parquet")
    assert list(maj.item_id) == list(own.item_id)
    for (_, o), (_, m) in zip(own.iterrows(), maj.iterrows()):     # each agent's latest answer is its ballot: a strict majority is EoT's own answer too
        if m.answer is not None and str(m.answer) not in ("None", "nan"): assert float(m.answer) == float(o.answer), (o, m)

def _reply(req) -> str:
    "First answers by persona (Kitty 10, Ben 20, Peter 30); in an exchange, the smallest number among the solutions shown."
    msgs = req["messages"]
    system, text = msgs[0]["content"] if msgs[0]["role"] == "system" else "", msgs[-1]["content"]
    if "Your previous solution" not in text:
        return "Step by step. The answer is " + {"Kitty": "10", "Ben": "20", "Peter": "30"}[system.split(",")[0].removeprefix("You are ")] + "."
    shown = [int(x) for x in re.findall(r"solution\n.*?The answer is (\d+)\.", text.split("Here ")[1], flags=re.S)]
    return f"Re-examined. The answer is {min(shown)}."

def test_routing_reaches_the_server(fake_server):
    srv = fake_server(reply=_reply)
    team = [Agent(n, "openai:fake-model", backend=OpenAIBackend("fake-model", base_url=srv.url, max_retries=0)) for n in ("A", "B", "C")]
    item = Item("q", "arith", "What is 5 + 5?", gold=10)
    t = Debate("eot", item, team, paradigm="report", rounds=3).run()
    assert t.meta["status"] == "done"
    bodies = [req for _, _, req in srv.log]
    assert [b["messages"][0]["content"] for b in bodies[:3]] == list(PERSONAS.values())
    exchange = [b for b in bodies if "Your previous solution" in b["messages"][-1]["content"]]
    names = lambda b: sorted(re.findall(r"### (\w)'s solution", b["messages"][-1]["content"]))
    who = {b["messages"][0]["content"].split(",")[0].removeprefix("You are "): names(b) for b in exchange[:3]}
    assert who == {"Kitty": ["B", "C"], "Ben": ["A"], "Peter": ["A"]}          # the report star: A is the centre
    # each takes the smallest answer it is shown: A takes min(B, C), B and C take A's; the star swaps them every round and never agrees
    assert [[tu.answer for tu in r.turns] for r in t.rounds] == [[10, 20, 30], [20, 10, 10], [10, 20, 20], [20, 10, 10]]
    assert (t.result["answer"], t.result["stopped_by"], t.result["exchange_rounds"]) == (10, "rounds", 3)
    assert "A's confidence in this solution: 0.50" in t.rounds[2].by_agent()["B"].messages[-1]["content"]     # A answered 10, then 20

# ---- as the released code runs it: scripted agents that record what each is sent --------------------------------------

from madlab.core import Backend, Completion, Usage

class Recorder(Backend):
    "Replies with its own answer table by round (prose, or with `held` the JSON object of a reply held to its schema); records every call."
    spec = "recorder:"
    def __init__(self, answers, held=False): self.answers, self.held, self.calls = list(answers), held, []
    @property
    def structured(self): return "requested" if self.held else None
    async def complete(self, messages, ctx=None, **kw):
        self.calls.append({"messages": [dict(m) for m in messages], "round": ctx.round, "schema": "schema" in kw})
        n = self.answers[min(ctx.round or 0, len(self.answers) - 1)]
        text = json.dumps({"reasoning": f"Working of round {ctx.round}: {n}.", "answer": n}) if self.held else f"Working of round {ctx.round}. The answer is {n}."
        return Completion(text, Usage(10, 5, 1))

def _recorders(table, held=False):
    backends = {n: Recorder(v, held) for n, v in table.items()}
    return backends, [Agent(n, "recorder:", backend=b) for n, b in backends.items()]

Q = Item("q1", "arith", "What is 40 + 2?", gold=42)

def test_the_relay_ring_runs_as_released_each_agent_reads_the_next():
    bs, team = _recorders({"A": [1], "B": [2], "C": [3]})
    t = Debate("eot", Q, team, paradigm="relay", rounds=1).run()
    seen = {n: sorted(re.findall(r"### (\w)'s solution", b.calls[1]["messages"][-1]["content"])) for n, b in bs.items()}
    assert seen == {"A": ["B"], "B": ["C"], "C": ["A"]} == t.rounds[1].meta["sees"]
    # the personas are fixed by position: Kitty (A) reads Ben's (B) solution, Peter (C) reads Kitty's
    assert bs["A"].calls[1]["messages"][0]["content"] == PERSONAS["Kitty"] and "Working of round 0. The answer is 2." in bs["A"].calls[1]["messages"][-1]["content"]
    assert bs["C"].calls[1]["messages"][0]["content"] == PERSONAS["Peter"] and "Working of round 0. The answer is 1." in bs["C"].calls[1]["messages"][-1]["content"]

def test_the_first_answers_follow_worked_examples_unless_zero_shot():
    bs, team = _recorders({"A": [7], "B": [7], "C": [7]})
    t = Debate("eot", Q, team).run()
    first = bs["A"].calls[0]["messages"][-1]["content"]
    assert first.count("\nA: ") == 8 and "The answer is 210." in first and first.endswith("Q: What is 40 + 2?\nA:")
    assert (t.rounds[0].meta["first"], t.result["first_answers"], t.result["exchange_rounds"]) == ("few-shot", "few-shot", 0)
    bs, team = _recorders({"A": [7], "B": [7], "C": [7]})
    t = Debate("eot", Q, team, first="zero-shot").run()
    assert bs["A"].calls[0]["messages"][-1]["content"] == "What is 40 + 2?\n\nThink step by step, then end with 'The answer is N.'"
    assert t.result["first_answers"] == "zero-shot"
    # a choice among A-D gets the four worked choices; a format without examples starts zero-shot, and says so
    mc = Item("m1", "mmlu", "Which planet is largest?\n\nA. Mars\nB. Jupiter\nC. Venus\nD. Earth", "B")
    t = Debate("eot", mc, ["synthetic:strong", "synthetic:medium", "synthetic:weak"]).run()
    assert t.rounds[0].turns[0].messages[-1]["content"].count(". Answer: ") == 4 and t.result["first_answers"] == "few-shot"
    t = Debate("eot", Item("s1", "scenario", "Plan a picnic."), ["synthetic:strong", "synthetic:medium"]).run()
    assert t.result["first_answers"] == "zero-shot" and "Q: " not in t.rounds[0].turns[0].messages[-1]["content"]

def test_first_answers_from_the_command_line(tmp_path):
    r = _cli("run", "eot", "--first", "zero-shot", "--n", 2, "--no-cache", "--no-progress", "--out", tmp_path, "--name", "z")
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "z" / "results.parquet")
    assert set(df.first_answers) == {"zero-shot"}
    r = _cli("run", "eot", "--first", "once", "--n", 1, "--no-progress", "--out", tmp_path)
    assert r.exit_code == 2 and "--first" in r.output and "Traceback" not in r.output, r.output

def test_solutions_held_to_json_are_read_as_prose():
    bs, team = _recorders({"A": [1, 1], "B": [2, 2], "C": [3, 3]}, held=True)
    t = Debate("eot", Q, team, paradigm="memory", rounds=1).run()
    assert all(c["schema"] for b in bs.values() for c in b.calls) and [tu.answer for tu in t.rounds[0].turns] == [1, 2, 3]
    p = bs["A"].calls[1]["messages"][-1]["content"]
    assert "### B's solution\nWorking of round 0: 2.\n\nThe answer is 2." in p and "Your previous solution:\nWorking of round 0: 1.\n\nThe answer is 1." in p
    assert '{"reasoning": "Working' not in p

def test_the_planned_rounds_are_the_rounds_it_runs_when_no_stop_ends_it():
    "The first answers and `rounds` exchange rounds: exactly so without a stop rule, at most so under one."
    for stop, rounds in (("none", 3), ("consensus", 2), ("majority", 0)):
        _, team = _recorders({"A": [1, 2, 3, 4], "B": [5, 6, 7, 8], "C": [9, 10, 11, 12]})  # never agree, never repeat
        d = Debate("eot", Q, team, rounds=rounds, stop=stop)
        t = d.run()
        assert len(t.rounds) == d.planned_rounds == rounds + 1 and d.may_end_early == (stop != "none")
    _, team = _recorders({"A": [7], "B": [7], "C": [7]})
    d = Debate("eot", Q, team, rounds=3)
    assert len(d.run().rounds) == 1 < d.planned_rounds                     # agreed at once: consensus ends it sooner

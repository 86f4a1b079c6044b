"""Who talks to whom (`topology`) and when to stop (`stop_on`): scripted agents under ring, star, random:K and a file's graph,
the round a consensus rule stops at, replay and fork keeping both, the results table and summary, command-line usage errors."""
from __future__ import annotations
import json, re
from pathlib import Path
import pytest
from click.testing import CliRunner
from madlab.core import Backend, Completion, Usage, OptionError, Transcript
from madlab.agents import Agent
from madlab.debate import Debate, fork, from_transcript
from madlab.protocol import get_protocol
from madlab.tasks.arith import toy_arith_items
from madlab.run import run_experiment
from madlab.cli import main

ITEM = toy_arith_items(1, seed=5)[0]

class Scripted(Backend):
    "Answers from a list, one per call, and keeps every request's messages."
    spec, synthetic = "scripted:", False
    def __init__(self, replies): self.replies, self.seen = list(replies), []
    async def complete(self, messages, ctx=None, **params) -> Completion:
        self.seen.append([dict(m) for m in messages])
        text = self.replies.pop(0) if self.replies else "The answer is 0."
        return Completion(text, Usage(sum(len((m.get("content") or "").split()) for m in messages), len(text.split()), 1))
    def count_tokens(self, text): return len(text.split())

def team(n, answers=None, rounds=3):
    "n scripted agents A0..; agent i says `answers[i][k]` in round k (default: its own number, 100 + i, every round)."
    answers = answers or [[100 + i] * rounds for i in range(n)]
    return [Agent(f"A{i}", "scripted:", backend=Scripted([f"I say {a}. The answer is {a}." for a in answers[i]])) for i in range(n)]

def heard(agent, round_index):
    "Who `agent`'s request of round `round_index` (0-based) showed a peer's answer from."
    msgs = agent.backend.seen[round_index]
    return sorted({m for msg in msgs for m in re.findall(r"I say (\d+)\.", msg.get("content") or "")} - {str(100 + int(agent.name[1:]))})

def test_ring_and_star_route_only_to_neighbours():
    members = team(5)
    d = Debate("du", ITEM, members, topology="ring", rounds=1); d.run()
    # in round 2 (index 1) each agent was sent its two ring neighbours' round-1 answers, no one else's
    assert {a.name: heard(a, 1) for a in members} == {"A0": ["101", "104"], "A1": ["100", "102"], "A2": ["101", "103"], "A3": ["102", "104"], "A4": ["100", "103"]}
    members = team(4)
    d = Debate("du", ITEM, members, topology="star", rounds=1); d.run()
    assert {a.name: heard(a, 1) for a in members} == {"A0": ["101", "102", "103"], "A1": ["100"], "A2": ["100"], "A3": ["100"]}
    assert d.transcript.meta["topology"] == {"spec": "star", "neighbours": {"A0": ["A1", "A2", "A3"], "A1": ["A0"], "A2": ["A0"], "A3": ["A0"]}}
    members = team(4)
    Debate("du", ITEM, members, rounds=1).run()                       # full: everyone hears everyone
    assert all(len(heard(a, 1)) == 3 for a in members)

def test_synthetic_agents_under_a_star_hear_the_hub_or_everyone():
    d = Debate("du", ITEM, ["synthetic:strong"] * 4, topology="star", rounds=1)
    t = d.run()
    hub, *rest = [a.name for a in d.agents]
    for tu in t.rounds[1].turns:
        msgs = [m for m in tu.messages if m.get("role") != "system"]
        senders = {a.name for a in d.agents if a.name != tu.agent and any(f"[{a.name}]" in (m.get("content") or "") for m in msgs)}
        assert senders == ({*rest} if tu.agent == hub else {hub}), (tu.agent, senders)

def test_random_k_is_seeded_and_a_file_graph_is_recorded(tmp_path):
    names = [f"A{i}" for i in range(6)]
    g = lambda seed: Debate("du", ITEM, team(6), topology="random:2", seed=seed, rounds=1).topology
    assert g(1) == g(1) and all(len(v) == 2 for v in g(1).values())
    assert any(g(s) != g(1) for s in range(2, 6))
    f = tmp_path / "g.yaml"; f.write_text("A0: [A1]\nA1: [A2]\nA2: []\n")
    members = team(3)
    t = Debate("du", ITEM, members, topology=str(f), rounds=1).run()
    assert t.settings["topology"] == {"A0": ["A1"], "A1": ["A2"], "A2": []}      # the file's content, not its path
    assert {a.name: heard(a, 1) for a in members} == {"A0": ["101"], "A1": ["102"], "A2": []}
    csv = tmp_path / "m.csv"; csv.write_text("0,1,1\n0,0,1\n1,0,0\n")
    assert Debate("du", ITEM, team(3), topology=str(csv)).topology == {"A0": ["A1", "A2"], "A1": ["A2"], "A2": ["A0"]}
    for bad, words in [("mesh", "must be full, ring, star, random:K"), ("random:9", "K <= 2"), (str(tmp_path / "none.json"), "no such file")]:
        with pytest.raises(OptionError, match="topology") as e: Debate("du", ITEM, team(3), topology=bad)
        assert words in str(e.value)
    with pytest.raises(OptionError, match="cannot honour topology ring"): Debate("self_consistency", ITEM, team(3), topology="ring")
    with pytest.raises(OptionError, match="stop_on"): Debate("single", ITEM, team(1), stop_on="consensus")

def test_stop_on_consensus_stops_at_the_first_agreeing_round():
    # round 1: 2 of 4 agree; round 2: 3 of 4 (0.75); round 3: all four
    answers = [[7, 7, 7, 7], [7, 7, 7, 7], [5, 7, 7, 7], [3, 4, 7, 7]]
    t = Debate("du", ITEM, team(4, answers, 4), rounds=3, stop_on="consensus").run()
    assert len(t.rounds) == 3 and t.result["stopped_after"] == 3 and t.result["rounds_saved"] == 1
    whole = Debate("du", ITEM, team(4, answers, 4), rounds=3).run()       # the same debate without the stop
    measured = sum(r.usage.total_tokens for r in whole.rounds) - sum(r.usage.total_tokens for r in t.rounds)
    assert abs(t.result["tokens_saved"] / measured - 1) < 0.15, (t.result["tokens_saved"], measured)   # the round not run: the costliest
    t = Debate("du", ITEM, team(4, answers, 4), rounds=3, stop_on="consensus:0.75").run()
    assert len(t.rounds) == 2 and t.result["rounds_saved"] == 2 and t.result["answer"] == 7
    t = Debate("du", ITEM, team(4, answers, 4), rounds=3).run()
    assert len(t.rounds) == 4 and "rounds_saved" not in t.result

def test_replay_and_fork_keep_topology_and_stop():
    d = Debate("du", ITEM, ["synthetic:strong", "synthetic:weak"] * 3, topology="ring", stop_on="consensus:0.8", rounds=4, seed=2)
    t = d.run()
    back = Transcript.from_json(t.to_json())
    r = from_transcript(back)
    assert r.topology == d.topology and len(r.rounds) == len(t.rounds) and r.result == t.result
    assert [tu.reply for x in r.rounds for tu in x.turns] == [tu.reply for x in t.rounds for tu in x.turns]
    f = fork(d, 1)
    assert f.topology == d.topology and f.settings["stop_on"] == "consensus:0.8"
    f.run()
    assert all(set(m.sender for m in a.history if m.role == "other_agent") <= set(d.topology[a.name]) for a in f.agents)

def test_run_experiment_records_and_summarises(tmp_path):
    res = run_experiment("du", task="arith", n=4, team=["synthetic:strong"] * 4, cache=False, out=tmp_path / "run", stop_on="consensus:0.8", topology="ring")
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["options"]["topology"] == "ring" and cfg["options"]["stop_on"] == "consensus:0.8"
    assert {"rounds_saved", "tokens_saved", "stopped_after"} <= set(res.df.columns)
    assert "stop on consensus:" in res.summary() and "tokens saved" in res.summary()
    log = next((tmp_path / "run" / "debates").glob("*/log.html")).read_text()
    assert "<svg" in log and "topology: ring" in log

def invoke(*args): return CliRunner().invoke(main, list(args))

@pytest.mark.parametrize("args, option, words", [
    (["du", "--topology", "mesh"], "--topology", ["full, ring, star, random:K"]),
    (["du", "--topology", "random:0"], "--topology", ["K >= 1"]),
    (["du", "--topology", "random:9"], "--topology", ["K <= 2"]),
    (["du", "--stop-on", "majority"], "--stop-on", ["consensus:Q"]),
    (["du", "--stop-on", "consensus:2"], "--stop-on", ["(0, 1]"]),
    (["self_consistency", "--topology", "ring"], "--topology", ["cannot honour", "du"]),
])
def test_cli_usage_errors(args, option, words, tmp_path):
    r = invoke("run", *args, "--agents", "synthetic:strong,synthetic:strong,synthetic:weak", "--n", "1", "--out", str(tmp_path))
    assert r.exit_code == 2, r.output
    assert option in r.output and "Traceback" not in r.output, r.output
    for w in words: assert w in r.output, (w, r.output)

def test_cli_runs_with_topology_and_stop(tmp_path):
    r = invoke("run", "du", "--agents", "synthetic:strong,synthetic:strong,synthetic:weak", "--n", "3", "--out", str(tmp_path),
               "--topology", "star", "--stop-on", "consensus", "--no-cache")
    assert r.exit_code == 0, r.output
    assert "stop on consensus:" in r.output
    assert "topology-star" in next(tmp_path.iterdir()).name

def test_protocols_command_says_which_honour_the_axes():
    r = invoke("protocols")
    assert r.exit_code == 0
    lines = r.output.splitlines()
    i = next(k for k, l in enumerate(lines) if l.startswith("du:"))
    j = next((k for k in range(i + 1, len(lines)) if not lines[k].startswith(" ")), len(lines))
    assert "    honours --topology, --stop-on" in lines[i:j]
    s = next(k for k, l in enumerate(lines) if l.startswith("single:"))
    assert not any("honours" in l for l in lines[s:s + 3])

def test_a_graph_that_does_not_fit_the_team_is_refused_before_the_run(tmp_path):
    g = tmp_path / "g.csv"; g.write_text("A,B,C\n0,1,0\n0,0,1\n1,0,0\n")
    r = invoke("run", "du", "--agents", "synthetic:strong,synthetic:weak,synthetic:medium", "--n", "1", "--out", str(tmp_path / "out"), "--topology", str(g), "--dry-run")
    assert r.exit_code == 2 and "--topology" in r.output and "names no debater: 'A', 'B', 'C'" in r.output, r.output
    assert not (tmp_path / "out").exists()

"""Debate dynamics (`madlab.dynamics`) on whole runs: `madlab run du` with synthetic teams whose conformity is set, published logs
imported as runs (Du et al.'s format, CS546's critic-actor files) with transitions known by hand, and ControlMAD games read player by player."""
from __future__ import annotations
import json
from pathlib import Path
import pytest
import yaml
from click.testing import CliRunner
from conftest import needs_public_data
from madlab.cli import main
from madlab.core import public_data
from madlab.import_run import import_run
from madlab.runs import open_run
from test_imports import du_log, ca_log

def _run(tmp_path, name, *args) -> Path:
    "`madlab run ARGS --out tmp/NAME`: the run folder it wrote."
    r = CliRunner().invoke(main, ["run", *args, "--out", str(tmp_path / name), "--no-cache", "--no-progress"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("outputs: "), r.output
    return Path(last[len("outputs: "):])

def _team(tmp_path, susceptibility: float) -> str:
    f = tmp_path / f"team-{susceptibility}.yaml"
    f.write_text(yaml.safe_dump([{"name": f"A{i}", "spec": f"synthetic:skill=0.5,susceptibility={susceptibility},seed={i}"} for i in range(3)]))
    return str(f)

def test_a_conformist_team_shows_more_conformity_than_an_independent_one(tmp_path, monkeypatch):
    "Synthetic teams whose susceptibility is set: the conformists take most of their chances to adopt the previous round's majority, the independent agents none."
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    rates = {}
    for s in (0.9, 0.0):
        run = open_run(_run(tmp_path, f"s{s}", "du", "--task", "arith", "--n", "30", "--rounds", "2", "--team", _team(tmp_path, s)))
        d, per_item = run.debate_dynamics(), run.dynamics()
        tr = d.transitions
        assert tr.conform_chance.sum() >= 10, (s, tr.conform_chance.sum())        # enough chances to compare
        rates[s] = tr.conformed.sum() / tr.conform_chance.sum()
        assert per_item.conformed.sum() == tr.conformed.sum() and per_item.conform_chances.sum() == tr.conform_chance.sum()
        assert set(per_item.item_id) == set(run.df.item_id.astype(str)) and len(per_item) == 30
        assert list(d.by_round().index) == [2, 3]          # answer rounds from 1: transitions into rounds 2 and 3
        right = dict(zip(run.df.item_id.astype(str), run.df.correct))
        assert all(right[i] == r for i, r in zip(per_item.item_id, per_item.decided_right))   # the decision scored as the run scored it
    assert rates[0.9] > 0.6 > 0.05 > rates[0.0], rates
    assert rates[0.0] == 0

@pytest.fixture
def logs(tmp_path):
    (tmp_path / "du.json").write_text(json.dumps(du_log()))
    (tmp_path / "ca.json").write_text(json.dumps(ca_log()))
    return tmp_path

def _by_question(run) -> dict:
    "item id -> the first words of its question."
    return {str(i): run.transcript(str(i)).item.prompt[:5] for i in run.df.item_id}

def test_a_du_log_imported_has_the_transitions_read_by_hand(logs):
    "Question 1 (gold 7): agents 7 7 7 / 8 7 7 / 8 8 7; question 2 (gold 36): 36 36 / 35 / unreadable then 35, decided 35; question 3: one round."
    import_run("du", logs / "du.json", logs / "du")
    run = open_run(logs / "du")
    q = _by_question(run)
    d = run.debate_dynamics()
    tr = d.transitions.assign(q=lambda x: x.item_id.map(q))
    t1 = tr[tr.q == "A far"]
    assert t1[["step", "agent", "kind", "conform_chance", "conformed"]].values.tolist() == [
        [2, "Agent 1", "kept correct", True, False],       # the first round's majority was 8: Agent 1 held on to 7
        [2, "Agent 2", "incorrect→correct", False, False],
        [2, "Agent 3", "kept incorrect", False, False],
        [3, "Agent 1", "kept correct", False, False],
        [3, "Agent 2", "kept correct", False, False],
        [3, "Agent 3", "incorrect→correct", True, True]]     # the second round's majority 7, taken
    assert tr[tr.q == "Sam r"][["agent", "kind"]].values.tolist() == [["Agent 1", "kept correct"]]   # Agent 3's first readable answer is no move
    assert tr[tr.q == "A box"].empty
    items = run.dynamics().assign(q=lambda x: x.item_id.map(q)).set_index("q")
    assert items.loc["Sam r", "oracle_gap"] and not items.loc["A far", "oracle_gap"] and not items.loc["A box", "oracle_gap"]
    assert list(run.filter("oracle_gap").item_id.astype(str).map(q)) == ["Sam r"]
    assert list(run.filter("flipped").item_id.astype(str).map(q)) == ["A far"]                     # the filters of before still hold
    inf = d.influence()
    assert inf.loc[["Agent 1", "Agent 2", "Agent 3"], ["chances", "moves"]].values.tolist() == [[3, 2], [3, 1], [3, 0]]
    assert d.oracle() == {"items": 3, "decided right": 2, "oracle right": 3, "oracle gap": 1, "oracle gap share": 1 / 3}
    assert "1 of 2 conformity chances taken" in repr(d)

def test_a_cs546_critic_actor_file_leaves_the_critic_out(logs):
    "CS546's critic-actor files: the critic's scores are no answers; question 2 (gold 36) goes 36 35 35 -> 35 35 36, decided 35."
    import_run("critic_actor", logs / "ca.json", logs / "ca")
    run = open_run(logs / "ca")
    d = run.debate_dynamics()
    assert set(d.positions.agent) == {"Agent 1", "Agent 2", "Agent 3"}
    q = _by_question(run)
    t2 = d.transitions[d.transitions.item_id.map(q) == "Sam r"]
    assert t2[["agent", "kind", "majority", "conformed"]].values.tolist() == [
        ["Agent 1", "correct→incorrect", 35, True], ["Agent 2", "kept incorrect", 35, False], ["Agent 3", "incorrect→correct", 35, False]]
    assert d.by_round().loc[2, "correct→incorrect"] == 1 and d.oracle()["oracle gap"] == 1
    fig = d.figure()
    assert {b.name for b in fig.data} >= {"incorrect→correct", "correct→incorrect", "conformity"}

@needs_public_data("ControlMAD's games", "controlmad", "4.jsonl")
def test_controlmad_games_are_read_player_by_player(tmp_path, monkeypatch):
    "A ControlMAD run on public games: every position is about a player of its game, a debate round moves only its player, and the decision matches the run's table."
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    out = _run(tmp_path, "cm", "controlmad", "--data", str(public_data("controlmad")), "--size", "4", "--n", "3", "--depth", "1",
               "--agents", "synthetic:weak,synthetic:medium,synthetic:strong")
    run = open_run(out)
    d = run.debate_dynamics()
    for iid in run.df.item_id.astype(str):
        t = run.transcript(iid)
        assert set(d.positions[d.positions.item_id == iid].part) <= set(t.item.gold)
        deb = d.transitions[(d.transitions.item_id == iid) & (d.transitions.phase == "debate")]
        assert all(p == t.rounds[r - 1].meta["focus"] for p, r in zip(deb.part, deb["round"]))
    right = dict(zip(run.df.item_id.astype(str), run.df.correct))
    assert all(right[i] == r for i, r in zip(d.items.item_id, d.items.decided_right))
    assert len(d.transitions) > 0 and set(d.transitions.kind) <= {"incorrect→correct", "correct→incorrect", "kept correct", "kept incorrect",
                                                                  "changed, still incorrect", "invalid", "failed"}

@pytest.mark.parametrize("protocol", ["du", "self_consistency", "single", "s4", "agentverse", "controlmad", "cluster"])
def test_every_protocol_reads_and_scores_its_decision_as_the_run(tmp_path, monkeypatch, protocol):
    "Each protocol's default synthetic run: positions only of debaters, the decision scored as the run's table scores it, and every table renders."
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    run = open_run(_run(tmp_path, protocol, protocol, "--n", "3"))
    d = run.debate_dynamics()
    helpers = {a["name"] for iid in run.df.item_id.astype(str) for a in run.transcript(iid).team if a.get("role") in ("supervisor", "judge", "critic", "summariser")}
    assert len(d.positions) and not helpers & set(d.positions.agent)
    right = {str(i): (None if c is None or c != c else bool(c)) for i, c in zip(run.df.item_id, run.df.correct)} if "correct" in run.df else {}
    assert {i: right.get(i) for i in d.items.item_id} == dict(zip(d.items.item_id, d.items.decided_right))
    assert "<table" in d._repr_html_() and d.svg().startswith("<svg") and len(run.dynamics()) == len(run.df)

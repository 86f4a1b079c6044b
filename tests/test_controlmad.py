"""ControlMAD end to end: the command line on 20 games with the synthetic team, accuracy against the configured skills,
resume after a run stopped halfway, and ControlMAD's own games."""
from __future__ import annotations
import itertools, json, math, time
from pathlib import Path
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.cli import main
from madlab.synthetic import PERSONAS, synthetic_backend
from madlab.agents import DEFAULT_TEAM

from conftest import needs_public_data
from madlab.core import public_data

CONTROLMAD_DATA = public_data("controlmad") or Path("controlmad-not-found")

@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch): monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))

def _run(*args):
    r = CliRunner().invoke(main, ["run", "controlmad", "--no-progress", *args])
    assert r.exit_code == 0, r.output + repr(r.exception)
    out = r.output.strip().splitlines()[-1]
    assert out.startswith("outputs: ")
    return r.output, Path(out[len("outputs: "):])

def _bounds(p, n, z=4.0):
    "A z-sigma binomial interval for the mean of n draws with success probability p."
    s = math.sqrt(max(p * (1 - p), 1e-9) / n)
    return p - z * s, p + z * s

def test_demo_run_is_fast_and_writes_everything(tmp_path):
    t0 = time.perf_counter()
    text, run_dir = _run("--size", "6", "--games", "1-20", "--out", str(tmp_path / "results"))
    took = time.perf_counter() - t0
    assert took < 30, f"20 synthetic games took {took:.1f} s"
    for s in ("per-player accuracy by phase", "team decision", "flips initial→final", "tokens"): assert s in text
    team = "Synthetic-strong+Synthetic-medium+Synthetic-weak_team-4211a2"     # the default team seeds its agents
    assert run_dir.parent == tmp_path / "results" and run_dir.name == f"controlmad_kks6_{team}"
    res = pd.read_parquet(run_dir / "results.parquet")
    assert len(res) == 20 and res.correct.dtype == bool and set(res.status) == {"done"}
    assert list(res.item_id) == [f"kks-6-{i:04d}" for i in range(1, 21)] and (res.protocol == "controlmad").all()
    assert {"n_correct", "accuracy", "per_player", "gold", "assignment", "majority", "supervisor_used"} <= set(res.columns)
    assert (res.correct == (res.n_correct == 6)).all() and (res.accuracy == res.n_correct / 6).all()
    assert len(pd.read_csv(run_dir / "results.csv")) == 20
    pos = pd.read_parquet(run_dir / "positions.parquet")
    assert set(pos.phase) == {"initial", "debate", "self_adjustment", "final"} and pos.game.nunique() == 20
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["protocol"] == "controlmad" and cfg["options"]["depth"] == 1 and len(cfg["items"]) == 20
    assert [a["spec"] for a in cfg["team"] if a.get("role") != "supervisor"] == list(DEFAULT_TEAM)
    assert (run_dir / "summary.txt").read_text().strip() == text.strip()
    for f in ("flips", "consensus", "decisions", "usage"): assert (run_dir / f"{f}.parquet").is_file(), f
    figs = {p.stem for p in (run_dir / "figures").glob("*.html")}
    assert figs == {"performance_matrix", "prediction_matrix", "player_changes", "consensus", "agent_comparison", "flips"}
    games = sorted((run_dir / "debates").iterdir())
    assert len(games) == 20
    for g in games:
        names = {p.name for p in g.iterdir()}
        assert {"transcript.json", "log.html", "log.txt"} <= names
        assert len([n for n in names if n.startswith("chat_")]) == 4          # three debaters and the supervisor
    page = (games[0] / "log.html").read_text()
    assert "<script" not in page and "Positions by round" in page
    # rounds are numbered from 1 in everything a user reads, as in the stepper and du's logs
    assert "<b>round 1 · initial proposals</b>" in page and "<td>1 initial</td>" in page and "<b>0 · " not in page
    assert (games[0] / "log.txt").read_text().count("\n== round 1 · initial proposals [initial]") == 1
    assert pos["round"].min() == 1 and pd.read_parquet(run_dir / "consensus.parquet")["round"].min() == 1
    chat = json.loads((games[0] / "chat_Synthetic-strong.json").read_text())
    assert chat["messages"][0]["role"] == "system" and any(m["role"] == "other_agent" for m in chat["messages"])

def _expected_team_accuracy(agents, sup):
    "Per-player accuracy of majority-then-supervisor when positions never move: each agent right w.p. p(1-m), one of two wrong roles, or invalid."
    outcomes = []
    for p, m in agents: outcomes.append({"C": p * (1 - m), "W1": (1 - p) * (1 - m) / 2, "W2": (1 - p) * (1 - m) / 2, "I": m})
    total = 0.0
    for combo in itertools.product(*[o.items() for o in outcomes]):
        prob = math.prod(x[1] for x in combo)
        votes = [x[0] for x in combo if x[0] != "I"]
        top = next((v for v in set(votes) if votes.count(v) * 2 > len(agents)), None)
        total += prob * (1.0 if top == "C" else 0.0 if top else sup)
    return total

def test_accuracy_matches_configured_skills(tmp_path):
    # the default team: initial per-player accuracy of each agent is its skill (malformed replies are wrong)
    _, run_dir = _run("--size", "6", "--games", "1-40", "--out", str(tmp_path / "a"), "--no-cache")
    pos = pd.read_parquet(run_dir / "positions.parquet")
    init = pos[pos.phase == "initial"]
    for spec in DEFAULT_TEAM:
        persona = synthetic_backend(spec.split(":", 1)[1]).persona
        name = "Synthetic-" + spec.split(":")[1].split(",")[0]
        acc, n = init[init.agent == name].correct.mean(), (init.agent == name).sum()
        lo, hi = _bounds(persona.skill * (1 - persona.malformed), n)
        assert lo <= acc <= hi, (name, acc, lo, hi)
    # a team that never conforms: final positions are the initial beliefs, so the team's accuracy is predictable
    team = [("synthetic:skill=0.8,susceptibility=0,seed=11", 0.8, 0.0), ("synthetic:skill=0.6,susceptibility=0,seed=12", 0.6, 0.0),
            ("synthetic:skill=0.5,susceptibility=0,malformed=0.05,seed=13", 0.5, 0.05)]
    _, run_dir = _run("--size", "6", "--games", "1-40", "--out", str(tmp_path / "b"), "--no-cache", "--agents", ",".join(s for s, _, _ in team))
    pos = pd.read_parquet(run_dir / "positions.parquet")
    res = pd.read_parquet(run_dir / "results.parquet")
    n_players = 40 * 6
    for phase in ("initial", "final"):
        ph = pos[pos.phase == phase]
        for k, (spec, p, m) in enumerate(team):
            name = ["Synthetic", "Synthetic-2", "Synthetic-3"][k]
            acc = ph[ph.agent == name].correct.mean()
            lo, hi = _bounds(p * (1 - m), n_players)
            assert lo <= acc <= hi, (phase, name, acc, lo, hi)
    expected = _expected_team_accuracy([(p, m) for _, p, m in team], sup=0.8)
    acc = res.n_correct.sum() / n_players
    lo, hi = _bounds(expected, n_players)
    assert lo <= acc <= hi, (acc, expected, lo, hi)

def test_resume_after_a_run_stopped_halfway(tmp_path):
    out = str(tmp_path / "r")
    _, run_dir = _run("--size", "5", "--games", "1-10", "--out", out, "--no-cache")
    # two of the finished games were interrupted mid-debate
    stopped = sorted((run_dir / "debates").iterdir())[:2]
    for g in stopped:
        f = g / "transcript.json"
        d = json.loads(f.read_text()); d["meta"]["status"] = "stopped"; d["rounds"] = d["rounds"][:2]
        f.write_text(json.dumps(d))
    keep = {g.name: (g / "transcript.json").stat().st_mtime_ns for g in sorted((run_dir / "debates").iterdir())[2:]}
    text, run_dir2 = _run("--size", "5", "--games", "1-20", "--out", out, "--no-cache")
    assert run_dir2 == run_dir and "8 resumed" in text
    res = pd.read_csv(run_dir / "results.csv")
    assert len(res) == 20 and set(res.status) == {"done"}
    assert res.resumed.fillna(False).astype(bool).sum() == 8
    for name, mtime in keep.items(): assert (run_dir / "debates" / name / "transcript.json").stat().st_mtime_ns == mtime
    cfg = json.loads((run_dir / "config.json").read_text())
    assert len(cfg["items"]) == 20
    # a changed setting in the same folder is refused rather than mixed in (by default it names a folder of its own)
    r = CliRunner().invoke(main, ["run", "controlmad", "--size", "5", "--games", "1-3", "--out", out, "--name", run_dir.name,
                                  "--max-tokens", "50", "--no-progress"])
    assert r.exit_code == 2 and "--out" in r.output and "holds a run with different" in r.output and "max_tokens" in r.output

@needs_public_data("ControlMAD's games", "controlmad", "6.jsonl")
def test_controlmads_own_games(tmp_path):
    text, run_dir = _run("--data", str(CONTROLMAD_DATA / "6.jsonl"), "--games", "1-3", "--out", str(tmp_path), "--depth", "2", "--order", "agents")
    res = pd.read_parquet(run_dir / "results.parquet")
    assert list(res.item_id) == ["controlmad-6-0001", "controlmad-6-0002", "controlmad-6-0003"]
    assert "depth-2" in run_dir.name and "order-agents" in run_dir.name
    t = json.loads((run_dir / "debates" / "controlmad-6-0001" / "transcript.json").read_text())
    assert "Player name: Hank" in t["item"]["prompt"]
    _, run_dir = _run("--data", str(CONTROLMAD_DATA), "--size", "4", "--games", "2,5", "--out", str(tmp_path), "--no-self-adjustment")
    assert list(pd.read_parquet(run_dir / "results.parquet").item_id) == ["controlmad-4-0002", "controlmad-4-0005"]
    assert run_dir.name.startswith("controlmad_kks4_") and "no-self_adjustment" in run_dir.name

def test_game_logs_state_whether_the_decision_is_right(tmp_path):
    "log.html and log.txt of each game say whether the team's decision is right, as the results table scores it."
    _, run_dir = _run("--size", "4", "--games", "1-6", "--out", str(tmp_path), "--no-cache")
    res = pd.read_parquet(run_dir / "results.parquet").set_index("item_id")
    assert res.correct.any()                                # the synthetic team gets some 4-player games right
    for iid, row in res.iterrows():
        g = run_dir / "debates" / iid
        assert f"correct: {bool(row.correct)}" in (g / "log.txt").read_text(), iid
        chip = '<span class="chip r">correct</span>' if row.correct else '<span class="chip w">wrong</span>'
        assert f"Decision: {chip}" in (g / "log.html").read_text(), iid

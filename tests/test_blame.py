"""Interventional blame (`madlab.blame`), checked against a known cause: a synthetic saboteur (always wrong, sure of itself,
never moves) in a team of susceptible agents. Also: the estimate is checked before any call, the forks run through the
response cache and a resumable folder (a second blame makes no call), and `OpenRun.blame` writes what it says."""
from __future__ import annotations
import shutil
import pandas as pd
import pytest
from madlab.blame import run_blame
from madlab.core import OptionError
from madlab.run import run_experiment
from madlab.runs import open_run
from madlab.tasks.arith import toy_arith_items

SABOTEUR = "Synthetic-saboteur"
# honest agents that always know the answer, follow a strict majority of their peers (0.9), give way to a lone dissent (`defer`)
# and, with `conviction`, hold their answer on the items they find easy (the more so the easier the item)
HONEST = "synthetic:skill=1.0,susceptibility=0.9,defer={defer},conviction={conviction},seed={seed}"

def _run(tmp_path, n=50, honest=4, defer=0.1, rounds=2, conviction=0):
    team = [HONEST.format(defer=defer, conviction=conviction, seed=k) for k in range(1, honest + 1)] + ["synthetic:saboteur"]
    run_experiment("du", items=toy_arith_items(n, seed=1), team=team, out=tmp_path / "run", cache=tmp_path / "cache", rounds=rounds)
    return open_run(tmp_path / "run")

@pytest.fixture(scope="module")
def sabotaged(tmp_path_factory):
    "Six such agents (defer 0.15, conviction 1) and a saboteur, 400 arithmetic items, Du et al.'s debate with 2 rounds after the first answers."
    tmp = tmp_path_factory.mktemp("blame")
    return tmp, _run(tmp, n=400, honest=6, defer=0.15, conviction=1)

def test_the_saboteur_is_blamed_first(sabotaged):
    "On the items the team decided wrong, blame (gold and neutral forks at every turn) lays them on the saboteur, alone at rank 1, on >= 90 %."
    tmp, run = sabotaged
    b = run.blame("wrong", "gold,neutral", cache=tmp / "cache")
    first = b.first()
    assert len(first) >= 5, f"too few items decided wrong to check ({len(first)})"
    share = b.first_share(SABOTEUR)
    print(f"saboteur ranked first on {share:.3f} of {len(first)} items decided wrong")
    assert share >= 0.9, first.to_string()

def test_placebo_on_the_honest_agents_changes_few_decisions(sabotaged):
    "Placebo forks (each honest agent's reply to another item) at every turn of the first 30 items change at most 5 % of the decisions."
    tmp, run = sabotaged
    b = run.blame([str(i) for i in run.df.item_id[:30]], "placebo", cache=tmp / "cache")
    honest = b.df[b.df.agent != SABOTEUR]
    rate = float(honest.changed.mean())
    print(f"placebo on the honest agents changed {rate:.3f} of {len(honest)} decisions")
    assert len(honest) == 30 * 6 * 3 and (b.df.placebo_item != b.df.item).all()
    assert rate <= 0.05

def test_without_conviction_the_decisions_hang_on_the_dice(tmp_path):
    "The same team without conviction: the saboteur wins or loses by a vote or two, and placebos (which also draw every later reply afresh) change more than 5 % of the decisions: the check above holds because of the agents' conviction."
    run = _run(tmp_path, n=30, honest=6, defer=0.15)
    b = run.blame("all", "placebo", cache=tmp_path / "cache")
    honest = b.df[b.df.agent != SABOTEUR]
    assert honest.changed.mean() > 0.05, honest.changed.mean()

def test_estimate_refuses_before_any_call(tmp_path):
    run = _run(tmp_path, n=6, honest=2, defer=0.3)
    with pytest.raises(OptionError, match=r"max_calls: blame would make up to \d+ calls"):
        run.blame("all", "gold", max_calls=10)
    assert not (run.path / "blame").exists()
    with pytest.raises(OptionError, match="intervention"): run.blame("all", "louder")
    with pytest.raises(OptionError, match="items"): run.blame("nope")

def test_forks_resume_from_their_folder_and_the_cache(tmp_path):
    "A second blame reads every fork (no call, even without the cache); one with forks deleted makes only those; a blame into a new folder is answered by the cache."
    run = _run(tmp_path, n=6, honest=2, defer=0.3)
    b = run.blame("all", "gold,neutral", cache=tmp_path / "cache")
    assert b.calls > 0 and b.calls <= b.estimate and b.df.made.all()
    again = run.blame("all", "gold,neutral", cache=False)
    assert (again.calls, again.estimate, int(again.df.made.sum())) == (0, 0, 0)
    gone = sorted((run.path / "blame" / "forks").glob("*/*-r1-gold"))[:3]
    for p in gone: shutil.rmtree(p)
    part = run.blame("all", "gold,neutral", cache=tmp_path / "cache")
    assert int(part.df.made.sum()) == 3 and part.calls == 0          # made again, every call answered by the cache
    fresh = run_blame(run, "all", "gold,neutral", cache=tmp_path / "cache", out=tmp_path / "elsewhere")
    assert fresh.df.made.all() and fresh.calls == 0
    same = ["item", "agent", "round", "intervention", "decision_before", "decision_after", "changed", "became_right"]
    pd.testing.assert_frame_equal(fresh.df[same], b.df[same])                # the cache gives the same continuations

def test_blame_files_and_the_fork_in_the_stepper(tmp_path):
    run = _run(tmp_path, n=6, honest=2, defer=0.3)
    b = run.blame("all", "gold", concurrency=1)
    on_disk = pd.read_parquet(run.path / "blame" / "blame.parquet")
    assert len(on_disk) == len(b.df) == 6 * 3 * 3 and {"item", "agent", "round", "intervention", "decision_before", "decision_after", "changed", "became_right", "fork"} <= set(on_disk)
    run.blame("all", "neutral")                                      # adds its rows
    assert len(pd.read_parquet(run.path / "blame" / "blame.parquet")) == 2 * 6 * 3 * 3
    row = b.df.iloc[0]
    s = b.open(row["item"], row.agent, int(row["round"]))
    assert s.branch.src.meta["forked_from"]["edit"]["intervention"] == "gold" and b.log_path(row["item"], row.agent, int(row["round"])).exists()
    assert "blame of run" in b._repr_html_() and b.figure().data[0].type == "heatmap"

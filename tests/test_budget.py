"Baselines at the debate's budget (madlab.budget): the matched budget, the comparison the personas imply, and `madlab baseline`."
import json
import pytest
from click.testing import CliRunner
from madlab.budget import run_baseline, vs_budget, mean_budget
from madlab.cli import main
from madlab.core import OptionError
from madlab.run import run_experiment
from madlab.runs import open_run

EQUAL = "synthetic:skill=0.6,susceptibility=0"
INDEPENDENT = EQUAL + ",sample_corr=0"       # each repeated sample of an item drawn afresh

@pytest.fixture
def cache(tmp_path, monkeypatch): monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))

def _debate(tmp_path, team, n=40, rounds=2):
    run_experiment("du", task="arith", items=range(1, n + 1), team=team, out=tmp_path / "debate", rounds=rounds)
    return open_run(tmp_path / "debate")

@pytest.mark.parametrize("match", ["tokens", "calls"])
def test_the_matched_baseline_spends_the_debates_budget_within_ten_percent(tmp_path, cache, match):
    debate = _debate(tmp_path, [EQUAL] * 3, n=12)
    [b] = debate.baseline("self_consistency", match)
    assert abs(b.ratio - 1) <= 0.1, b
    assert abs(mean_budget(b.run.df, match) / mean_budget(debate.df, match) - 1) <= 0.1
    rec = json.loads((b.run.path / "baseline.json").read_text())
    assert rec["samples"] == b.samples and rec["debate"] == str(debate.path) and rec["match"] == match
    assert b.run.path.name == f"debate-baseline-self_consistency-{match}" and b.run.path.parent == debate.path.parent
    assert b.run.config["protocol"] == "self_consistency" and b.run.config["options"]["samples"] == b.samples
    assert sorted(b.run.df.item_id) == sorted(debate.df.item_id)

def test_a_mixed_team_gets_one_baseline_per_model_and_one_pooled(tmp_path, cache):
    team = ["synthetic:strong", "synthetic:weak", "synthetic:weak"]
    debate = _debate(tmp_path, team, n=8)
    found = run_baseline(debate, "self_consistency", "tokens")
    assert [b.run.name.rsplit("-", 1)[-1] for b in found][-1] == "pooled" and len(found) == 3
    assert [set(b.models) for b in found] == [{"synthetic:strong"}, {"synthetic:weak"}, set(team)]
    for b in found: assert abs(b.ratio - 1) <= 0.1, b

def test_independent_equals_gain_nothing_from_debate_at_equal_budget(tmp_path, cache):
    "Three equals whose errors are independent, their repeated samples' too (sample_corr=0), and who never move: at the debate's budget a vote of their samples is right more often than the debate (which is a vote of three), and more than one sample."
    debate = _debate(tmp_path, [INDEPENDENT] * 3, n=60)
    [sc] = debate.baseline("self_consistency", "tokens")
    [one] = debate.baseline("single", "tokens")
    cmp = vs_budget(debate, sc, one)
    t_sc, t_one = cmp.tests.iloc[0], cmp.tests.iloc[1]
    assert t_sc.shared == 60 and t_sc.diff_low > 0 and t_sc.p_mcnemar < 0.05, cmp       # the matched vote beats the debate
    d, s, o = cmp.table.accuracy.iloc[:3]
    assert s > o and s > d and sc.samples > 3, cmp
    assert t_one.diff_low <= 0 <= t_one.diff_high, cmp                                   # a debate of equals that never move: about one agent's vote of three

def test_samples_that_repeat_themselves_add_nothing(tmp_path, cache):
    "With the default sample_corr=1 a model's samples of an item share one belief: the matched vote decides each item as the debate of equals does."
    debate = _debate(tmp_path, [EQUAL] * 3, n=30)
    [b] = debate.baseline("self_consistency", "tokens")
    t = vs_budget(debate, b).tests.iloc[0]
    assert (t.shared, t.only_ref, t.only_other) == (30, 0, 0), t

def test_the_comparison_is_reproducible_and_marks_the_frontier(tmp_path, cache):
    debate = _debate(tmp_path, [EQUAL] * 3, n=10)
    [sc] = debate.baseline("self_consistency", "calls")
    [one] = debate.baseline("single", "calls")
    a, b = vs_budget(debate, sc, one, seed=3), debate.vs_budget(sc, one, seed=3)
    assert a.table.equals(b.table) and a.tests.equals(b.tests)
    assert a.table.pareto.iloc[2]                    # the cheapest run is never dominated
    assert one.samples == 1 and one.achieved == 1.0
    fig = a.figure()
    assert [tr.name for tr in fig.data] == ["runs", "Pareto frontier"]

def test_bad_options_name_the_option(tmp_path, cache):
    debate = _debate(tmp_path, [EQUAL] * 2, n=3, rounds=1)
    for kw, option in (({"method": "vote"}, "method"), ({"match": "dollars"}, "match"), ({"match": "cost"}, "match")):
        with pytest.raises(OptionError) as e: debate.baseline(**kw)
        assert e.value.option == option

def test_the_command_runs_end_to_end_and_refuses_bad_options(tmp_path, cache):
    r = CliRunner().invoke(main, ["run", "du", "--task", "arith", "--n", "5", "--agents", f"{EQUAL},{EQUAL},{EQUAL}", "--out", str(tmp_path / "runs")])
    assert r.exit_code == 0, r.output
    [run] = [p for p in (tmp_path / "runs").iterdir()]
    r = CliRunner().invoke(main, ["baseline", str(run), "--method", "self_consistency", "--match", "tokens"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "runs" / f"{run.name}-baseline-self_consistency-tokens"
    assert (out / "results.parquet").exists() and (out / "baseline.json").exists()
    assert "ratio" in r.output and "p_mcnemar" in r.output and "Traceback" not in r.output
    for flag, value in (("--method", "vote"), ("--match", "dollars")):
        r = CliRunner().invoke(main, ["baseline", str(run), flag, value])
        assert r.exit_code == 2 and flag in r.output and "Traceback" not in r.output, r.output
    r = CliRunner().invoke(main, ["baseline", str(run), "--match", "cost"])
    assert r.exit_code == 2 and "--match" in r.output and "no cost" in r.output, r.output

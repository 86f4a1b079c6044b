"""Decision rules on finished debates: `--decision` on `madlab run` (refused before any call when the answers lack what the rule needs),
`rescore --decision` with zero backend calls, a judge's calls cached, and the rules side by side on a du run and a ControlMAD run."""
from __future__ import annotations
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.cli import main
from madlab.synthetic import SyntheticBackend
from madlab.debate import Debate
from madlab.run import run_experiment
from madlab.rescore import rescore
from madlab.runs import open_run
from madlab.tasks.arith import toy_arith_items

def invoke(*args): return CliRunner().invoke(main, [str(a) for a in args])

TEAM = ["synthetic:strong", "synthetic:weak", "synthetic:weak"]

def _no_calls(monkeypatch):
    "Every synthetic call fails from now on."
    async def boom(self, *a, **k): raise AssertionError("a backend was called")
    monkeypatch.setattr(SyntheticBackend, "complete", boom)

def test_run_records_the_rule_in_every_row(tmp_path):
    r = invoke("run", "du", "--task", "arith", "--n", "6", "--decision", "supermajority:0.75", "--out", tmp_path, "--no-cache", "--name", "r")
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "r" / "results.parquet")
    assert set(df.decision_rule) == {"supermajority:0.75"} and "decision_reason" in df and "protocol_answer" in df
    r = invoke("run", "du", "--task", "arith", "--n", "3", "--out", tmp_path, "--no-cache", "--name", "p")
    assert set(pd.read_parquet(tmp_path / "p" / "results.parquet").decision_rule) == {"protocol"}

@pytest.mark.parametrize("args, words", [
    (["du", "--task", "arith", "--decision", "confidence"], ["--decision", "needs answers with a confidence", "carry only the answer"]),
    (["controlmad", "--size", "4", "--decision", "borda"], ["--decision", "needs answers with a ranking"]),
    (["controlmad", "--size", "4", "--no-confidence", "--decision", "confidence"], ["--decision", "needs answers with a confidence"]),
    (["du", "--decision", "veto"], ["--decision", "unknown decision rule 'veto'"]),
    (["du", "--decision", "supermajority:0.3"], ["--decision", "0.5 < q <= 1"]),
])
def test_a_rule_the_answers_cannot_serve_is_refused_before_any_call(tmp_path, monkeypatch, args, words):
    _no_calls(monkeypatch)
    r = invoke("run", *args, "--n", "2", "--out", tmp_path, "--no-cache")
    assert r.exit_code == 2, r.output
    for w in words: assert w in r.output, (w, r.output)
    assert not any(tmp_path.iterdir())                      # no run folder either

def test_rescore_decision_makes_no_call_and_writes_beside(tmp_path, monkeypatch):
    run_experiment("du", toy_arith_items(8), TEAM, tmp_path / "du", rounds=1, cache=False)
    before = (tmp_path / "du" / "results.parquet").read_bytes()
    _no_calls(monkeypatch)
    r = invoke("rescore", tmp_path / "du", "--decision", "unanimity")
    assert r.exit_code == 0, r.output
    assert "results.decision-unanimity.parquet" in r.output
    df = pd.read_parquet(tmp_path / "du" / "results.decision-unanimity.parquet")
    assert len(df) == 8 and set(df.decision_rule) == {"unanimity"}
    assert (tmp_path / "du" / "results.parquet").read_bytes() == before
    assert (df.decision_reason != "decided").sum() == df.answer.isna().sum()   # no decision: no answer, scored wrong
    assert not df[df.answer.isna()].correct.any()
    r = invoke("rescore", tmp_path / "du", "--compare")                     # every rule side by side: no call either
    assert r.exit_code == 0 and "unanimity" in r.output and "ci_low" in r.output, r.output

def test_a_judge_makes_only_its_own_calls_cached(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    run_experiment("du", toy_arith_items(6), TEAM, tmp_path / "du", rounds=0, cache=False)
    calls = []
    orig = SyntheticBackend.complete
    async def count(self, messages, *a, **k):
        calls.append(messages[-1]["content"]); return await orig(self, messages, *a, **k)
    monkeypatch.setattr(SyntheticBackend, "complete", count)
    r1 = rescore(tmp_path / "du", decision="judge:synthetic:oracle", cache=cache)
    assert calls and all("You are the judge" in c for c in calls)          # only the judge was asked
    assert int(r1.df.judge_calls.sum()) == len(calls)
    n = len(calls)
    r2 = rescore(tmp_path / "du", decision="judge:synthetic:oracle", cache=cache)
    assert len(calls) == n and int(r2.df.judge_calls.sum()) == 0           # the second time from the cache
    assert list(r1.df.answer) == list(r2.df.answer)

def test_a_judge_in_a_live_debate_replays_without_calls():
    t = Debate("du", toy_arith_items(1)[0], TEAM, rounds=0, decision="judge:synthetic:oracle").run()
    assert t.result["decision_rule"] == "judge:synthetic:oracle"
    assert [a["role"] for a in t.team][-1:] == ["judge"] or len({str(x.answer) for x in t.rounds[0].turns}) == 1
    d = Debate.from_transcript(t)
    assert d.result["answer"] == t.result["answer"] and d.done

def test_comparison_on_a_du_run_and_a_controlmad_run(tmp_path):
    from madlab.cli_options import load_items
    run_experiment("du", toy_arith_items(12), TEAM, tmp_path / "du", rounds=1, cache=False)
    run_experiment("controlmad", load_items("kks", None, 4, [1, 2, 3, 4, 5, 6]), None, tmp_path / "cm", depth=0, cache=False)
    du = open_run(tmp_path / "du").decisions()
    assert list(du.rule) == ["protocol", "plurality", "majority", "supermajority:0.75", "unanimity", "freemad"]
    cm = open_run(tmp_path / "cm").decisions(n_boot=200)
    assert "borda" not in set(cm.rule)                                    # ControlMAD's answers carry no ranking
    assert "confidence" not in set(cm.rule)                               # their confidences are simulated, calibrated by no persona: not offered
    team = ["synthetic:strong,calibration=0.5", "synthetic:medium,calibration=0.5", "synthetic:weak,calibration=0.5"]
    run_experiment("controlmad", load_items("kks", None, 4, [1, 2, 3, 4, 5, 6]), team, tmp_path / "cmc", depth=0, cache=False)
    cmc = open_run(tmp_path / "cmc").decisions(n_boot=200)
    assert cmc.set_index("rule").loc["confidence", "signal"] == "simulated"          # a calibration stated: offered, and marked
    assert cmc.attrs["notes"] == ["simulated signal: synthetic agents' self-reported confidences (calibration 0.5 stated by the personas)"]
    assert (cm.ci_low <= cm.accuracy).all() and (cm.accuracy <= cm.ci_high).all()
    assert cm.set_index("rule").loc["protocol", "changed"] == 0

def test_a_run_decided_by_a_judge_rescored_by_a_count_counts_only_the_debaters(tmp_path):
    "A judge's decision turn is the last turn of a du transcript, not a ballot: plurality over a judged run reads the debaters' latest answers."
    from madlab.decisions import ballots
    run_experiment("du", toy_arith_items(8), TEAM, tmp_path / "judged", rounds=1, cache=False, decision="judge:synthetic:oracle")
    plain = open_run(tmp_path / "judged")
    judged = [t for t in (plain.transcript(i) for i in range(len(plain.df))) if t.rounds[-1].phase == "decision"]   # a judge is asked where the debaters differ
    assert judged
    for t in judged: assert [b.agent for b in ballots(t)] == [a["name"] for a in t.team if a.get("role") != "judge"]
    counted = rescore(tmp_path / "judged", decision="plurality")
    run_experiment("du", toy_arith_items(8), TEAM, tmp_path / "plain", rounds=1, cache=False)
    assert list(counted.df.answer.astype(str)) == list(open_run(tmp_path / "plain").df.answer.astype(str))   # as if no judge had been asked


# ---- simulated signals ----------------------------------------------------------------------------------------------

GSM_TEAM = "synthetic:strong,synthetic:medium,synthetic:weak"
CAL_TEAM = "synthetic:strong,calibration=0.5,synthetic:medium,calibration=0.5,synthetic:weak,calibration=0.5"

@pytest.mark.parametrize("args, signal", [(["du", "--task", "arith", "--decision", "confidence:logprob"], "log-probabilities"),
                                          (["controlmad", "--size", "4", "--decision", "confidence"], "self-reported confidences")])
def test_a_rule_over_a_simulated_signal_no_persona_calibrated_is_refused_before_any_call(tmp_path, monkeypatch, args, signal):
    _no_calls(monkeypatch)
    r = invoke("run", *args, "--agents", GSM_TEAM, "--n", "2", "--out", tmp_path, "--no-cache")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    for w in ("--decision", signal, "Synthetic-strong, Synthetic-medium, Synthetic-weak", "no calibration stated", "calibration=0.5"):
        assert w in " ".join(r.output.split()), (w, r.output)
    assert not any(tmp_path.iterdir())

def test_every_table_on_a_calibrated_simulated_signal_says_so(tmp_path, monkeypatch):
    import json
    r = invoke("run", "du", "--task", "arith", "--n", "8", "--agents", CAL_TEAM, "--decision", "confidence:logprob", "--out", tmp_path, "--no-cache",
               "--name", "lp")
    note = "simulated signal: synthetic agents' log-probabilities (calibration 0.5 stated by the personas)"
    assert r.exit_code == 0 and note in r.output, r.output                                        # the run's summary
    assert note in (tmp_path / "lp" / "summary.txt").read_text()
    assert json.loads((tmp_path / "lp" / "config.json").read_text())["simulated_signal"] == note
    assert set(pd.read_parquet(tmp_path / "lp" / "results.parquet").decision_signal) == {note}   # every row of the results table
    _no_calls(monkeypatch)
    r = invoke("rescore", tmp_path / "lp", "--compare")
    assert r.exit_code == 0 and note in r.output and "protocol (confidence:logprob)" in r.output, r.output
    r = invoke("rescore", tmp_path / "lp", "--decision", "confidence:logprob")
    assert r.exit_code == 0 and note in r.output, r.output
    assert set(pd.read_parquet(tmp_path / "lp" / "results.decision-confidence-logprob.parquet").decision_signal) == {note}
    r = invoke("rescore", tmp_path / "lp", "--decision", "plurality")                         # a count reads no signal: no note
    assert r.exit_code == 0 and "simulated signal" not in r.output, r.output

def test_rescore_by_a_signal_the_run_holds_uncalibrated_or_not_at_all_is_refused(tmp_path, monkeypatch):
    from madlab.cli_options import load_items
    run_experiment("controlmad", load_items("kks", None, 4, [1, 2]), None, tmp_path / "cm", depth=0, cache=False)
    run_experiment("controlmad", load_items("kks", None, 4, [1, 2]), None, tmp_path / "nc", depth=0, cache=False, confidence=False)
    _no_calls(monkeypatch)
    r = invoke("rescore", tmp_path / "cm", "--decision", "confidence")
    assert r.exit_code == 2 and "no calibration stated" in r.output and "Traceback" not in r.output, r.output
    r = invoke("rescore", tmp_path / "nc", "--decision", "confidence")
    assert r.exit_code == 2 and "needs answers with a confidence" in r.output, r.output          # the run's answers hold none
    assert not list(tmp_path.glob("*/results.decision-*"))

def _vectors(run_dir, rules):
    "Each rule's per-item scores on the run's finished debates (the protocol's own: the run's answers)."
    from madlab.decisions import redecide
    from madlab.scoring import score_result
    ts = [t for t in open_run(run_dir).folder.transcripts()[0].values() if t.meta.get("status") == "done"]
    own = lambda t, r: t.result if r.startswith("protocol") else redecide(t, r)
    return {r: tuple(score_result(t.item, own(t, r)).get("correct") for t in ts) for r in rules}

def test_compare_gives_identical_decisions_identical_intervals_and_names_the_runs_rule(tmp_path):
    """eot relay on 20 items: every rule is scored on the same resamples, so rules whose decisions score alike on every item have one interval;
    on a run made with --decision plurality the protocol's row says so."""
    for name, extra in (("relay", []), ("relay_pl", ["--decision", "plurality"])):
        r = invoke("run", "eot", "--paradigm", "relay", "--n", "20", "--out", tmp_path, "--no-cache", "--name", name, *extra)
        assert r.exit_code == 0, r.output
    tab = open_run(tmp_path / "relay").decisions()
    vec = _vectors(tmp_path / "relay", list(tab.rule))
    groups = {}
    for row in tab.itertuples(): groups.setdefault(vec[row.rule], set()).add((row.accuracy, row.ci_low, row.ci_high))
    assert all(len(g) == 1 for g in groups.values()), tab
    assert len(groups) < len(tab) - 1                          # more than the protocol and plurality decide alike here
    r = invoke("rescore", tmp_path / "relay_pl", "--compare")
    assert r.exit_code == 0 and "protocol (plurality)" in r.output, r.output
    pl = open_run(tmp_path / "relay_pl").decisions().set_index("rule")
    assert list(pl.loc["protocol (plurality)", ["accuracy", "ci_low", "ci_high"]]) == list(pl.loc["plurality", ["accuracy", "ci_low", "ci_high"]])

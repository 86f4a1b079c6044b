"""Published debate logs imported as runs: small files in Du et al.'s and CS546's critic-actor layouts, written here, read by every analysis."""
from __future__ import annotations
import json, subprocess, sys
from pathlib import Path
import pandas as pd
import pytest
from madlab.imports import import_run, log_transcripts, LogError, get_log_format
from madlab.runs import open_run
from madlab.run import rescore
from madlab.protocols.critic_actor import round_accuracy, answer_flips

def chat(*pairs, tail=None):
    out = []
    for p, r in pairs: out += [{"role": "user", "content": p}, {"role": "assistant", "content": r}]
    return out + ([{"role": "user", "content": tail}] if tail else [])

GOLD = {"A farm has 4 cows and 3 pigs. How many animals?": "4 + 3 = <<4+3=7>>7\n#### 7",
        "Sam reads 12 pages a day. How many pages in 3 days?": "12 * 3 = <<12*3=36>>36\n#### 36",
        "A box holds 1,200 nails; 250 are used. How many are left?": "1200 - 250 = 950\n#### 950"}

def du_log():
    q1, q2, q3 = GOLD
    return {
        # three agents, three rounds; every context ends with a prompt nobody answered (as in many CS546 files)
        q1: [[chat(("solve", "4 + 3 = \\boxed{7}"), ("others: 8", "\\boxed{7}"), ("others: 7", "\\boxed{7}"), tail="others: 7"),
              chat(("solve", "\\boxed{8}"), ("others: 7", "\\boxed{7}"), ("others: 7", "\\boxed{7}"), tail="others: 7"),
              chat(("solve", "\\boxed{8}"), ("others: 7", "\\boxed{8}"), ("others: 7", "\\boxed{7}"), tail="others: 7")], GOLD[q1]],
        # the second agent stopped after one round; the third reply has no number
        q2: [[chat(("solve", "\\boxed{36}"), ("others", "\\boxed{36}")),
              chat(("solve", "\\boxed{35}")),
              chat(("solve", "I am not sure."), ("others", "\\boxed{35}"))], GOLD[q2]],
        q3: [[chat(("solve", "The answer is 950.")), chat(("solve", "\\boxed{1,050}")), chat(("solve", "\\boxed{950}"))], GOLD[q3]]}

def ca_log():
    q1, q2, _ = GOLD
    s = lambda a, l=9, c=9: {"solution": f"Let's think step by step. \\boxed{{{a}}}", "score": {"logic_score": l, "computation_score": c, "critique": "ok"}}
    return {q1: {"ground_truth": GOLD[q1], "round_1_results": [s(7), s(8, 3, 2), s(8, 4, 4)], "final_round_results": [s(7), s(7), s(8)],
                 "all_rounds_data": [[s(7), s(8, 3, 2), s(8, 4, 4)], [s(7), s(7), s(8)], [s(7), s(7), s(8)]]},
            q2: {"ground_truth": GOLD[q2], "round_1_results": [s(36), s(35), {"solution": "\\boxed{35}", "score": None}],
                 "final_round_results": [s(35), s(35), s(36, "eight", 9)]}}

@pytest.fixture
def files(tmp_path):
    (tmp_path / "du.json").write_text(json.dumps(du_log()))
    (tmp_path / "ca.json").write_text(json.dumps(ca_log()))
    return tmp_path

def test_du_import_is_honest(files):
    res = import_run("du", files / "du.json", files / "du")
    assert list(res.df.correct) == [True, False, True] and int(res.df.calls.sum()) == 0
    ts = {t.item.prompt[:5]: t for t in log_transcripts("du", files / "du.json")}
    t1, t2, t3 = ts["A far"], ts["Sam r"], ts["A box"]
    assert len(t1.rounds) == 3 and all(len(r.turns) == 3 for r in t1.rounds)         # the unanswered prompts make no round
    assert t1.meta["unanswered_prompts"] == {"Agent 1": 4, "Agent 2": 4, "Agent 3": 4}
    assert [len(r.turns) for r in t2.rounds] == [3, 2] and t2.rounds[1].meta["missing"] == {"Agent 2": "no such round in the log"}
    assert t2.rounds[0].turns[2].answer is None and not t2.rounds[0].turns[2].valid   # a reply with no number is invalid, kept
    assert t2.result["votes"] == {"36": 1, "35": 2}      # each agent's last answer: 36, 35 (its only one), 35
    assert t3.rounds[0].turns[1].answer == 1050
    cfg = json.loads((files / "du" / "config.json").read_text())
    assert cfg["calls_made"] == 0 and cfg["imported"]["format"] == "du" and cfg["imported"]["records"] == 3 and len(cfg["imported"]["sha256"]) == 64
    for d in (files / "du" / "debates").iterdir():
        assert {"transcript.json", "log.html", "log.txt", "chat_Agent_1-"} <= {p.name[:13] if p.name.startswith("chat_") else p.name for p in d.iterdir()}

def test_every_analysis_reads_an_imported_run(files):
    import_run("du", files / "du.json", files / "du", model="llama-3-8b")
    run = open_run(files / "du")
    assert run.info()["items"] == 3 and run.info()["calls"] == 0
    assert list(run.filter("flipped").item_id) == [run.df.item_id[0]]      # question 2: invalid then 35 is no flip
    ts = run.folder.transcripts()[0]
    ra = round_accuracy(ts)
    assert list(ra.groupby("step").correct.mean().round(3)) == [round(2 / 3, 3), 1.0, 1.0]     # 8 (wrong), 36 (a tie goes to the first agent), 950
    fl = answer_flips(ts)
    assert (fl.kind == "wrong→right").sum() == 2 and len(fl) == 6 + 2 and (fl.kind == "invalid").sum() == 1   # Agent 2 of question 2 has no second round
    again = rescore(files / "du")
    pd.testing.assert_series_equal(again.df.correct, run.df.correct)
    un = rescore(files / "du", decision="majority")
    assert dict(zip(un.df.item_id, un.df.correct)) == dict(zip(run.df.item_id, [True, False, True]))   # 35 holds a strict majority too
    d = run.decisions(["plurality", "unanimity"], n_boot=200)
    assert list(d.accuracy) == [round(2 / 3, 3), round(1 / 3, 3)]    # unanimity decides question 1 only
    assert run.transcript(0).team[0]["spec"] == "imported:llama-3-8b"

def test_the_stepper_browses_an_imported_debate(files):
    from madlab.widgets import DebateStepper
    import_run("du", files / "du.json", files / "du")
    s = open_run(files / "du").stepper(0, live=False)
    assert isinstance(s, DebateStepper)
    s.forward(); s.forward()
    assert "Agent 3" in s.w_cols.value

def test_critic_actor_import(files):
    res = import_run("critic_actor", files / "ca.json", files / "ca")
    assert list(res.df.correct) == [True, False]
    t1, t2 = log_transcripts("critic_actor", files / "ca.json")
    assert [r.phase for r in t1.rounds] == ["initial", "critique", "debate", "critique", "debate", "critique"]
    assert [tu.focus for tu in t1.rounds[1].turns] == ["Agent 1", "Agent 2", "Agent 3"] and t1.rounds[1].turns[1].answer.logic_score == 3.0
    assert t2.rounds[1].meta["missing"] == {"Agent 3": "no critic score in the log"}
    assert "not in the log" in t2.rounds[2].meta["note"]
    assert t2.rounds[3].turns[2].answer.failures                    # a score that is not a number is a parse failure, not a guess
    assert res.df.critic_parse_failures.tolist() == [0, 1]
    ra = round_accuracy(open_run(files / "ca").folder.transcripts()[0])
    assert len(ra) == 3 + 2

def test_bad_files_are_refused_naming_where(files):
    bad = du_log()
    q = next(iter(bad))
    bad[q][0][1][2] = {"role": "assistant"}
    (files / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(LogError, match=r"bad\.json:A farm has 4 cows.*\[0\]\[1\]\[2\]: expected a message"): import_run("du", files / "bad.json", files / "x")
    bad = ca_log(); bad[q]["ground_truth"] = "seven"
    (files / "bad2.json").write_text(json.dumps(bad))
    with pytest.raises(LogError, match=r"bad2\.json:A farm.*:ground_truth: the gold answer has no '#### N'"): import_run("critic_actor", files / "bad2.json", files / "x")
    (files / "list.json").write_text(json.dumps(["a", "b"]))
    with pytest.raises(LogError, match=r"not a du log; expected a JSON object \{question: \[agent_contexts, gold\]\}"): import_run("du", files / "list.json", files / "x")
    assert not (files / "x").exists()                                   # nothing written for a refused file

def test_cli(files):
    run = lambda *a: subprocess.run([sys.executable, "-m", "madlab.cli", *a], capture_output=True, text=True, timeout=300)
    p = run("import", "du", str(files / "du.json"), "--out", str(files / "cli"), "--limit", "2")
    assert p.returncode == 0 and "2 items" in p.stdout and "0 calls made" in p.stdout, p.stdout + p.stderr
    p = run("import", "du", str(files / "du.json"), "--out", str(files / "cli2"), "--limit", "0")
    assert p.returncode == 2 and "--limit" in p.stderr and "Traceback" not in p.stderr
    p = run("import", "du", str(files / "ca.json"), "--out", str(files / "cli3"))
    assert p.returncode == 1 and "not a du log" in p.stderr and "it reads as critic_actor" in p.stderr
    p = run("rescore", str(files / "cli"), "--decision", "unanimity")
    assert p.returncode == 0 and "2 items" in p.stdout, p.stdout + p.stderr

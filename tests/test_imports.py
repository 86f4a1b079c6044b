"""Published debate logs imported as runs: small files in Du et al.'s and CS546's critic-actor layouts, written here, read by every analysis."""
from __future__ import annotations
import json, re, subprocess, sys
from pathlib import Path
import pandas as pd
import pytest
from conftest import needs_public_data
from madlab.core import public_data
from madlab.imports import log_transcripts, LogError, get_log_format
from madlab.import_run import import_run
from madlab.runs import open_run
from madlab.rescore import rescore
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

# ControlMAD: its runs write, per game, game_size<N>_id<ID>/debate_session_game<ID>_<time>.json and chat_history_<agent>_game<ID>_<time>.json
# (debate/debate_system_chat.py: _save_debate_session, _save_chat_histories). The repository holds no such outputs, so the files are written
# here the way those two functions write them.
CONTROLMAD_DATA = public_data("controlmad") or Path("controlmad-not-found")
needs_controlmad = needs_public_data("ControlMAD's games", "controlmad", "4.jsonl")

def _cm_full(roles, conf=None):
    d = {"players": [{"name": p, "role": r} for p, r in roles.items()], "explanation": "Case analysis."}
    return json.dumps(d | ({"confidence": conf} if conf is not None else {}), indent=2)

def _cm_resp(agent, phase, rn, text):
    ro = None if text is None else {"text": text, "usage": {"input": 1000, "output": 200, "reasoning": 0, "cached": 0, "total": 1200}, "summary": "", "error": ""}
    return {"agent_name": agent, "game_id": 7, "round_number": rn, "phase": phase, "player_role_assignments": {}, "explanation": "", "confidence": 5.0,
            "response_obj": ro, "timestamp": "2025-10-01T10:00:00", "error": "" if text else "500 Internal Server Error",
            "agree_with": None, "disagree_with": None, "agree_reasoning": None, "disagree_reasoning": None}

def write_controlmad_game(root, game, answers, final, supervisor=None, depth=2, stamp="20251001_100000"):
    "answers[agent][player] = the role it holds from the start; `final[agent]` its final roles (None: no final answer); depth-2 debates, no self-adjustment."
    agents = list(answers)
    chat = {a: [{"role": "system", "content": "You are playing Knight-Knave-Spy...", "phase": "initial", "round_number": None},
                {"role": "user", "content": game["text_game"], "phase": "initial", "round_number": None}] for a in agents}
    def said(a, text, phase, rn=None, p=None): chat[a].append({"role": "assistant", "content": text, "phase": phase, "round_number": rn, "player_focus": p})
    init = [_cm_resp(a, "initial", 0, "Let me reason. " + _cm_full(answers[a], 7)) for a in agents]
    for a in agents: said(a, _cm_full(answers[a], 7), "initial")
    players, rounds, rn = list(answers[agents[0]]), [], 0
    for p in players:
        for k in range(depth):
            rn += 1
            resp = [_cm_resp(a, "debate", rn, json.dumps({"player_role": p, "role": answers[a][p], "agree_with": [], "disagree_with": [], "confidence": 8})) for a in agents]
            for a, r in zip(agents, resp):
                chat[a] += [{"role": "debate_moderator", "content": f"Now debate {p}.", "phase": "debate", "player_focus": p, "round_number": rn}]
                said(a, r["response_obj"]["text"], "debate", rn, p)
            rounds.append({"player_name": p, "round_number": rn, "agent_responses": resp, "debate_summary": "", "consensus_reached": False, "majority_role": None})
    for a in agents:
        chat[a].append({"role": "debate_moderator", "content": "Final discussion.", "phase": "final", "round_number": None})
        if final[a] is not None: said(a, _cm_full(final[a], 5.0), "final")
    votes = {p: [final[a][p] for a in agents if final[a]] for p in players}
    session = {"game_id": 7, "game_text": game["text_game"], "ground_truth_solution": {}, "initial_proposals": init, "debate_rounds": rounds,
               "final_vote": {p: max(set(v), key=v.count) for p, v in votes.items() if v}, "supervisor_decision": supervisor, "performance_tracking": {}}
    d = Path(root) / "agent3_a_b_c_conf_true" / f"game_size{game['num_player']}_id7"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"debate_session_game7_{stamp}.json").write_text(json.dumps(session, indent=2, ensure_ascii=False))
    for a in agents: (d / f"chat_history_{a}_game7_{stamp}.json").write_text(json.dumps({"agent_name": a, "game_id": 7, "messages": chat[a]}, indent=2))
    return d

@needs_controlmad
def test_controlmad_import_matches_the_game_by_its_text(tmp_path):
    line = 3
    game = json.loads((CONTROLMAD_DATA / "4.jsonl").read_text().splitlines()[line - 1])
    gold = dict(re.findall(r"(\w+) is a (knight|knave|spy)\.", game["text_solution"]))
    wrong = {p: ("knave" if r != "knave" else "knight") for p, r in gold.items()}
    agents = ["OpenAI-gpt-5-nano", "Gemini-gemini-2.5-flash", "Qwen-qwen-flash"]
    write_controlmad_game(tmp_path / "results", game, {agents[0]: gold, agents[1]: gold, agents[2]: wrong},
                          {agents[0]: gold, agents[1]: wrong, agents[2]: None})           # the third agent's final call failed: no final answer
    # the session carries no solution (ControlMAD's parser found none): the game is found among ControlMAD's games by its text
    with pytest.raises(LogError, match="ground_truth_solution: no solution in the log"): import_run("controlmad", tmp_path / "results", tmp_path / "x")
    res = import_run("controlmad", tmp_path / "results", tmp_path / "run", games=CONTROLMAD_DATA)
    assert res.df.item_id.tolist() == [f"controlmad-4-{line:04d}"] and res.df.calls.sum() == 0
    t = open_run(tmp_path / "run").transcript(0)
    assert t.item.gold == gold
    assert [r.name for r in t.rounds][:3] == ["initial proposals", f"debate on {list(gold)[0]} (1/2)", f"debate on {list(gold)[0]} (2/2)"]
    assert t.settings["depth"] == 2 and t.settings["self_adjustment"] is False and t.settings["confidence"] is True
    assert t.rounds[-1].meta["missing"] == {agents[2]: "no final answer in its chat history"}
    assert t.rounds[-1].turns[0].answer.confidence == 5                                   # conf_true: the confidence is kept
    assert t.result["votes"][list(gold)[0]] == {gold[list(gold)[0]]: 1, wrong[list(gold)[0]]: 1}
    # decided as ControlMAD logged it (the most common final role, ties to the first agent's): right; unanimity decides nothing
    assert bool(res.df.correct[0]) is (t.result["assignment"] == gold)
    assert not rescore(tmp_path / "run", decision="unanimity").df.correct[0]
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["protocol"] == "controlmad" and cfg["tasks"] == ["kks"] and cfg["imported"]["games"] == str(CONTROLMAD_DATA.resolve())

@needs_controlmad
def test_controlmad_supervisor_and_cli(tmp_path):
    game = json.loads((CONTROLMAD_DATA / "5.jsonl").read_text().splitlines()[0])
    gold = dict(re.findall(r"(\w+) is a (knight|knave|spy)\.", game["text_solution"]))
    a = ["A-1", "A-2"]
    write_controlmad_game(tmp_path / "r", game, {a[0]: gold, a[1]: gold}, {a[0]: None, a[1]: None}, supervisor=gold, depth=1)
    run = lambda *x: subprocess.run([sys.executable, "-m", "madlab.cli", *x], capture_output=True, text=True, timeout=300)
    p = run("import", "controlmad", str(tmp_path / "r"), "--out", str(tmp_path / "run"), "--games", str(CONTROLMAD_DATA / "5.jsonl"))
    assert p.returncode == 0 and "accuracy 1.000 (1/1); 0 calls made" in p.stdout, p.stdout + p.stderr
    t = open_run(tmp_path / "run").transcript(0)
    assert t.rounds[-1].phase == "supervisor" and t.result["supervisor_used"] and t.team[-1]["role"] == "supervisor"
    p = run("import", "controlmad", str(tmp_path / "r"), "--out", str(tmp_path / "run2"), "--task", "gsm8k")
    assert p.returncode == 2 and "--task" in p.stderr and "Traceback" not in p.stderr

def test_continue_an_imported_debate_with_a_model(files):
    from madlab.debate import continue_log
    from madlab.scoring import score_result
    from madlab.widgets import DebateStepper
    import_run("du", files / "du.json", files / "du")
    t = open_run(files / "du").transcript(0)                      # question 1: 7, 8, 8 then 7, 7, 8 then 7, 7, 7
    d = continue_log(t, 1, "synthetic:medium", rounds=3)
    s = DebateStepper(d)                                          # the continued debate steps in the stepper like any debate
    s.step(); s.step()
    assert len(d.rounds) == 3
    new = d.run()
    assert [tu.reply for tu in new.rounds[0].turns] == [tu.reply for tu in t.rounds[0].turns]      # round 1 is the log's
    assert all(tu.meta.get("from_log") for tu in new.rounds[0].turns) and not any(tu.meta.get("from_log") for r in new.rounds[1:] for tu in r.turns)
    assert all(tu.reply.endswith(f"The answer is {tu.answer}.") for r in new.rounds[1:] for tu in r.turns)  # the model's, in its own words
    assert new.rounds[1].turns[0].messages[:2] == [{"role": "user", "content": "solve"}, {"role": "assistant", "content": "4 + 3 = \\boxed{7}"}]
    assert len(new.rounds) == 4 and new.usage.calls == 9 and new.team[0]["spec"] == "synthetic:medium"
    sc = score_result(new.item, new.result)
    assert sc["correct"] == (new.result["answer"] == 7)
    with pytest.raises(ValueError, match="round 2: Agent 2 has no reply"): continue_log(open_run(files / "du").transcript(1), 2, "synthetic:strong")

def test_the_stepper_forks_an_imported_debate_with_a_model(files):
    "Opened from the run folder (open_run, RunBrowser), an imported debate forks from round k with a model; what cannot be continued is the stepper's error."
    from madlab.runs import RunBrowser
    import_run("du", files / "du.json", files / "du")
    s = open_run(files / "du").stepper(0)                        # question 1: 7, 8, 8 then 7, 7, 8 then 7, 7, 7
    assert s.w_fmodel.layout.display == "" and not s.b_fork.disabled and "imported:unknown" in s.w_fhelp.value
    d = s.fork(2, model="synthetic:medium")
    assert s.current == "fork 1: round 2, synthetic:medium" and [tu.reply for tu in d.rounds[1].turns] == ["\\boxed{7}", "\\boxed{7}", "\\boxed{8}"]
    s.run()
    assert d.done and len(d.rounds) == 3 and d.transcript.usage.calls == 3 and all(not tu.meta.get("from_log") for tu in d.rounds[2].turns)
    row = s.compare().iloc[1]
    assert (row.forked_from, row.fork_round, row.calls, row.cached_calls, row.correct) == ("main", 2, 3, 6, d.result["answer"] == 7)
    s.show(branch="main")
    with pytest.raises(ValueError, match="model: "): s.fork(1, model="nosuch:model")
    assert "error: OptionError: model: " in s.w_error.value and "Traceback" not in s.w_error.value
    # question 2: Agent 2 stopped after round 1, so round 2 cannot be continued; round 1 can, from the runs browser too
    b = RunBrowser(files)
    b.show_run(files / "du")
    b.show_debate(1)
    v = b.viewer
    with pytest.raises(ValueError, match="round 2: Agent 2 has no reply in the log"): v.fork(2, model="synthetic:medium")
    assert "Agent 2 has no reply in the log" in v.w_error.value
    e = v.fork(1, agent="Agent 3", reply="\\boxed{36}", model="synthetic:strong")
    assert v.current == "fork 1: round 1, synthetic:strong, Agent 3 edited" and e.rounds[0].turns[2].answer == 36 and "EDITED" in v.w_cols.value
    v.run()
    assert e.done and e.rounds[1].turns[2].messages[1] == {"role": "assistant", "content": "\\boxed{36}"}
    # critic-actor files keep no chats: refused, and the stepper says why
    import_run("critic_actor", files / "ca.json", files / "ca")
    c = open_run(files / "ca").stepper(0)
    with pytest.raises(ValueError, match="cannot be continued with a model: CS546's critic-actor files keep each actor's solutions"): c.fork(1, model="synthetic:medium")
    assert "not the chats" in c.w_error.value

def test_import_run_lives_beside_the_runner():
    "import_run (it writes run folders) is madlab.import_run's; madlab.imports only reads logs and has no import_run."
    import madlab.imports as mi, madlab.import_run as mir
    assert mir.import_run is import_run and not hasattr(mi, "import_run")

def test_continue_log_lives_beside_fork(files):
    """continue_log is madlab.debate's (beside Debate.fork), not madlab.imports'. The views run nothing: in a fresh process
    the stepper alone (madlab.widgets) does not import the log readers; continue_log loads them (the protocols' parts) when asked; with
    madlab.imports, or a run folder opened by madlab.runs (the caller that opens imported runs), imported logs go on."""
    import madlab.imports as mi, madlab.debate as md
    assert md.continue_log.__module__ == "madlab.debate" and not hasattr(mi, "continue_log")
    import_run("du", files / "du.json", files / "du")
    import_run("critic_actor", files / "ca.json", files / "ca")       # their formats, the protocols' parts, say whether their logs go on
    assert md.LOG_CONTINUATIONS["du"] is None and "not the chats" in md.LOG_CONTINUATIONS["critic_actor"]
    code = ("import sys; from madlab.core import Transcript; import madlab.imports; from madlab.debate import continue_log\n"
            "t = Transcript.from_json(open(sys.argv[1]).read()); d = continue_log(t, 1, 'synthetic:medium', rounds=3); print(len(d.run().rounds))\n"
            "c = Transcript.from_json(open(sys.argv[2]).read())\n"
            "try: continue_log(c, 1, 'synthetic:medium')\nexcept ValueError as e: print(e)")
    ts = [files / f"{r}.transcript.json" for r in ("du", "ca")]
    for r, f in zip(("du", "ca"), ts): f.write_text(open_run(files / r).transcript(0).to_json())
    p = subprocess.run([sys.executable, "-c", code, *map(str, ts)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "4" and "cannot be continued with a model: CS546" in p.stdout, p.stdout
    alone = ("import sys, madlab.widgets; from madlab.core import Transcript; from madlab.debate import continue_log\n"
             "assert 'madlab.imports' not in sys.modules\n"
             "d = continue_log(Transcript.from_json(open(sys.argv[1]).read()), 1, 'synthetic:medium', rounds=3)\n"
             "print(len(d.run().rounds), 'madlab.imports' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", alone, str(ts[0])], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.split() == ["4", "True"], p.stdout + p.stderr   # continue_log loads the formats
    opened = ("import sys; from madlab.runs import open_run\n"
              "s = open_run(sys.argv[1]).stepper(0); d = s.fork(1, model='synthetic:medium'); s.run(); print(len(d.rounds) > 1, d.done)")
    p = subprocess.run([sys.executable, "-c", opened, str(files / "du")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.split() == ["True", "True"], p.stdout + p.stderr[-2000:]

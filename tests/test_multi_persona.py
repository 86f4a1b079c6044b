"""Multi-persona debate (Liang et al., 2023) on hand-made scripted agents: who is sent what, when the moderator stops, the
judge's two steps; the command line and Python; replay and fork; every task whose answers compare (arith, gsm8k, mmlu, a task file)."""
from __future__ import annotations
import json
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.core import Backend, Completion, Usage, Item, Transcript
from madlab.agents import Agent
from madlab.cli import main
from madlab.debate import Debate, from_transcript, comparable
from madlab.run import run_experiment
from madlab.scoring import score_result
from madlab.tasks.arith import toy_arith_items
from madlab.tasks import load_task_file
from madlab.protocols.multi_persona import TIT_FOR_TAT, multi_persona_team

ITEM = Item("q1", "arith", "What is 3 + 4 * 5?", 23)

def _verdict(pref, side="", answer=""):
    return json.dumps({"Whether there is a preference": pref, "Supported Side": side, "Reason": "scripted", "debate_answer": answer})

class Scripted(Backend):
    "Replies in order from a list (the last one repeats), recording every call's messages, request kind, temperature and whether a schema held it."
    spec = "scripted:"
    def __init__(self, *replies): self.replies, self.calls = list(replies), []
    async def complete(self, messages, ctx=None, **kw):
        self.calls.append({"kind": ctx.kind, "messages": [dict(m) for m in messages], "temperature": kw.get("temperature"), "schema": "schema" in kw})
        return Completion(self.replies[min(len(self.calls), len(self.replies)) - 1], Usage(10, 5, 1))

def _team(aff, neg, mod, judge=None):
    t = [Agent("Affirmative", "scripted:", backend=aff), Agent("Negative", "scripted:", backend=neg), Agent("Moderator", "scripted:", role="moderator", backend=mod)]
    return t + ([Agent("Judge", "scripted:", role="judge", backend=judge)] if judge is not None else [])

def _args(k): return f"Argument {k}. The answer is {35 if k % 2 else 23}."

# ---- who is sent what --------------------------------------------------------------------------------------------

def test_who_is_sent_what():
    aff, neg = Scripted("Aff says 35. The answer is 35.", "Aff again: 35. The answer is 35."), Scripted("Neg says 23. The answer is 23.", "Neg again: 23. The answer is 23.")
    mod = Scripted(_verdict("No"), _verdict("Yes", "Negative", "23"))
    t = Debate("multi_persona", ITEM, _team(aff, neg, mod), rounds=3, tit_for_tat=2).run()
    a, n, m = aff.calls, neg.calls, mod.calls
    # the meta prompts: the debaters' states the topic and the tit-for-tat level; the moderator's says it evaluates each round
    for c in (a[0], n[0]):
        assert c["messages"][0]["role"] == "system" and TIT_FOR_TAT[2] in c["messages"][0]["content"] and ITEM.prompt in c["messages"][0]["content"]
    assert m[0]["messages"][0]["role"] == "system" and m[0]["messages"][0]["content"].startswith("You are a moderator.")
    # round 1: the affirmative gets the question (with the task's instructions); the negative gets the affirmative's argument and is told it disagrees
    assert a[0]["messages"][-1] == {"role": "user", "content": ITEM.prompt + "\n\nThink step by step, then end with 'The answer is N.'"}
    assert n[0]["messages"][-1]["content"].startswith("Aff says 35. The answer is 35.\n\nYou disagree with my answer. Provide your answer and reasons.")
    # the moderator reads both sides of the round it is told it judges
    assert "Now the first round of debate" in m[0]["messages"][-1]["content"] and "Affirmative side arguing:\nAff says 35." in m[0]["messages"][-1]["content"]
    assert "Negative side arguing: Neg says 23." in m[0]["messages"][-1]["content"]
    # round 2: each side reads the other's last argument in its own, growing chat
    assert a[1]["messages"][-1]["content"].startswith("Neg says 23. The answer is 23.\n\nDo you agree with my perspective?")
    assert n[1]["messages"][-1]["content"].startswith("Aff again: 35. The answer is 35.\n\nDo you agree with my perspective?")
    assert [x["role"] for x in a[1]["messages"]] == ["system", "user", "assistant", "user"]
    assert "Now the second round" in m[1]["messages"][-1]["content"] and [x["role"] for x in m[1]["messages"]] == ["system", "user", "assistant", "user"]     # the moderator's chat goes on too
    assert [c["kind"] for c in m] == ["multi_persona.moderator"] * 2 and a[0]["kind"] == "number"
    assert [r.name for r in t.rounds] == ["debate round 1", "moderator 1", "debate round 2", "moderator 2"]

# ---- when the moderator stops ------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 4])
def test_the_moderator_stops_at_the_round_it_prefers_a_side(k):
    mod = Scripted(*[_verdict("No")] * (k - 1), _verdict("Yes", "Affirmative", "23"))
    aff, neg, judge = Scripted(*[_args(i) for i in range(6)]), Scripted(*[_args(i + 1) for i in range(6)]), Scripted("unused")
    t = Debate("multi_persona", ITEM, _team(aff, neg, mod, judge), rounds=5).run()
    assert len(aff.calls) == len(neg.calls) == len(mod.calls) == k and judge.calls == []
    assert [r.phase for r in t.rounds].count("moderator") == k and t.rounds[-1].phase == "moderator"
    assert t.result["answer"] == 23 and t.result["decided_by"] == "moderator" and t.result["stopped_at"] == k and t.result["supported_side"] == "Affirmative"
    assert score_result(ITEM, t.result)["correct"]

def test_a_preference_without_an_answer_does_not_stop_and_no_adaptive_break_runs_every_round():
    mod = Scripted(_verdict("Yes", "Negative", ""), _verdict("No"), _verdict("Yes", "Negative", "35"))
    t = Debate("multi_persona", ITEM, _team(Scripted(_args(1)), Scripted(_args(2)), mod, Scripted("x")), rounds=3).run()
    assert t.result["stopped_at"] == 3 and t.result["answer"] == 35               # the released code stops on a non-empty debate_answer
    mod = Scripted(_verdict("Yes", "Affirmative", "23"), _verdict("No"), _verdict("Yes", "Negative", "35"))
    t = Debate("multi_persona", ITEM, _team(Scripted(_args(1)), Scripted(_args(2)), mod, Scripted("x")), rounds=3, adaptive_break=False).run()
    assert len(mod.calls) == 3 and t.result["stopped_at"] is None and t.result["decided_by"] == "moderator" and t.result["answer"] == 35   # the last verdict

def test_a_non_empty_debate_answer_stops_whatever_the_preference_says():
    # the released code's test (`if self.mod_ans["debate_translation"] != ''`): "No" with an answer ends the debate there
    mod = Scripted(_verdict("No", "Negative", "23"), _verdict("Yes", "Affirmative", "35"))
    aff, neg, judge = Scripted(_args(1), _args(3)), Scripted(_args(2), _args(4)), Scripted("unused")
    t = Debate("multi_persona", ITEM, _team(aff, neg, mod, judge), rounds=3).run()
    assert len(mod.calls) == 1 and len(aff.calls) == 1 and judge.calls == []
    assert (t.result["stopped_at"], t.result["decided_by"], t.result["answer"]) == (1, "moderator", 23)
    # madlab's stricter test, by name: the "No" does not end it; the "Yes" of round 2 does
    mod = Scripted(_verdict("No", "Negative", "23"), _verdict("Yes", "Affirmative", "35"))
    t = Debate("multi_persona", ITEM, _team(Scripted(_args(1)), Scripted(_args(2)), mod, Scripted("unused")), rounds=3, break_test="preference").run()
    assert len(mod.calls) == 2 and (t.result["stopped_at"], t.result["answer"]) == (2, 35)
    # without adaptive break, the last verdict decides under the same test
    mod = Scripted(_verdict("Yes", "Affirmative", "35"), _verdict("No", "Negative", "23"))
    judge = Scripted("Candidates.", json.dumps({"Reason": "r", "debate_answer": "35"}))
    t = Debate("multi_persona", ITEM, _team(Scripted(_args(1)), Scripted(_args(2)), mod, judge), rounds=2, adaptive_break=False).run()
    assert (t.result["decided_by"], t.result["answer"], judge.calls) == ("moderator", 23, [])
    mod = Scripted(_verdict("Yes", "Affirmative", "35"), _verdict("No", "Negative", "23"))
    judge = Scripted("Candidates.", json.dumps({"Reason": "r", "debate_answer": "35"}))
    t = Debate("multi_persona", ITEM, _team(Scripted(_args(1)), Scripted(_args(2)), mod, judge), rounds=2, adaptive_break=False, break_test="preference").run()
    assert (t.result["decided_by"], t.result["answer"], len(judge.calls)) == ("judge", 35, 2)

def test_an_unreadable_verdict_means_no_preference():
    mod = Scripted("I think the negative side is right.", _verdict("Yes", "Negative", "23"))
    t = Debate("multi_persona", ITEM, _team(Scripted(_args(1)), Scripted(_args(2)), mod), rounds=3).run()
    assert t.result["stopped_at"] == 2 and not t.rounds[1].turns[0].valid

# ---- the judge's two steps ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("sees", ["last", "first"])
def test_the_judge_lists_candidates_then_decides(sees):
    aff, neg = Scripted("First aff: 35. The answer is 35.", "Last aff: 35. The answer is 35."), Scripted("First neg: 23. The answer is 23.", "Last neg: 23. The answer is 23.")
    judge = Scripted("Candidates: 35 and 23.", json.dumps({"Reason": "4 * 5 first.", "debate_answer": "23"}))
    t = Debate("multi_persona", ITEM, _team(aff, neg, Scripted(_verdict("No")), judge), rounds=2, judge_sees=sees).run()
    assert [c["kind"] for c in judge.calls] == ["multi_persona.candidates", "multi_persona.judge"]
    first, second = judge.calls
    assert first["messages"][0]["content"].startswith("You are a moderator.")          # the judge has the moderator's meta prompt
    ask1 = first["messages"][-1]["content"]
    word = "Last" if sees == "last" else "First"
    assert ask1.startswith(f"Affirmative side arguing: {word} aff") and f"Negative side arguing: {word} neg" in ask1 and ask1.endswith("Present them without reasons.")
    assert [m["content"] for m in second["messages"][-3:-1]] == [ask1, "Candidates: 35 and 23."]     # one conversation: the decision follows the list
    assert second["messages"][-1]["content"].startswith("Therefore, " + ITEM.prompt)
    assert t.rounds[-1].phase == "decision" and [tu.agent for tu in t.rounds[-1].turns] == ["Judge", "Judge"]
    assert t.result["decided_by"] == "judge" and t.result["answer"] == 23 and t.result["stopped_at"] is None

def test_the_judge_reads_the_first_round_by_default():
    aff, neg = Scripted("First aff: 35. The answer is 35.", "Last aff: 23. The answer is 23."), Scripted("First neg: 23. The answer is 23.", "Last neg: 35. The answer is 35.")
    judge = Scripted("Candidates: 35 and 23.", json.dumps({"Reason": "4 * 5 first.", "debate_answer": "23"}))
    t = Debate("multi_persona", ITEM, _team(aff, neg, Scripted(_verdict("No")), judge), rounds=2).run()
    ask1 = judge.calls[0]["messages"][-1]["content"]
    assert ask1.startswith("Affirmative side arguing: First aff") and "Negative side arguing: First neg" in ask1 and "Last" not in ask1
    assert t.settings["judge_sees"] == "first" and t.result["decided_by"] == "judge"

def test_every_role_samples_at_temperature_0_unless_the_agent_has_its_own():
    aff, neg, mod, judge = Scripted(_args(1)), Scripted(_args(2)), Scripted(_verdict("No")), Scripted("Candidates.", json.dumps({"Reason": "r", "debate_answer": "23"}))
    Debate("multi_persona", ITEM, _team(aff, neg, mod, judge), rounds=2).run()
    assert [c["temperature"] for b in (aff, neg, mod, judge) for c in b.calls] == [0.0] * 8
    # an explicit temperature wins: a member's params, and run_experiment's (the command line's --temperature) for every role
    aff, neg, mod = Scripted(_args(1)), Scripted(_args(2)), Scripted(_verdict("Yes", "Negative", "23"))
    team = [Agent("Affirmative", "scripted:", params={"temperature": 0.7}, backend=aff), Agent("Negative", "scripted:", backend=neg),
            Agent("Moderator", "scripted:", role="moderator", backend=mod)]
    Debate("multi_persona", ITEM, team, rounds=1).run()
    assert (aff.calls[0]["temperature"], neg.calls[0]["temperature"], mod.calls[0]["temperature"]) == (0.7, 0.0, 0.0)
    aff, neg = Scripted(_args(1)), Scripted(_args(2))
    team = [Agent("Affirmative", "scripted:", backend=aff), Agent("Negative", "scripted:", backend=neg)]
    res = run_experiment("multi_persona", [ITEM], team, None, rounds=1, cache=False, temperature=0.9, progress=False)
    assert not res.failed and {c["temperature"] for b in (aff, neg) for c in b.calls} == {0.9}
    # the moderator and judge made from the affirmative's backend take its temperature too
    assert {c["temperature"] for c in aff.calls if c["kind"].startswith("multi_persona.")} == {0.9}

class Held(Scripted):
    "A scripted backend that holds replies to their schema, as an OpenAI-compatible server asked with `response_format` does."
    structured = "requested"

def test_arguments_held_to_json_are_read_as_prose():
    aff = Held('{"reasoning": "4 * 5 = 20, and 3 + 20 = 23.", "answer": 23}', '{"reasoning": "I keep 23.", "answer": 23}')
    neg = Held('{"reasoning": "Left to right: 7 * 5 = 35.", "answer": 35}')
    mod = Held(_verdict("No"))
    judge = Held("Candidates: 23 and 35.", json.dumps({"Reason": "precedence", "debate_answer": "23"}))
    t = Debate("multi_persona", ITEM, _team(aff, neg, mod, judge), rounds=2).run()
    assert aff.calls[0]["schema"] and neg.calls[0]["schema"]                          # each side's answer is held to its format ...
    assert t.rounds[0].turns[0].answer == 23 and t.rounds[0].turns[1].answer == 35
    sent = [m["content"] for b in (aff, neg, mod, judge) for c in b.calls for m in c["messages"] if m["role"] == "user"]
    replies = [r for b in (aff, neg) for r in b.replies]
    assert not any(r in s for r in replies for s in sent)                             # ... and nobody reads an argument as JSON
    assert neg.calls[0]["messages"][-1]["content"].startswith("4 * 5 = 20, and 3 + 20 = 23.\n\nThe answer is 23.\n\nYou disagree with my answer.")
    assert aff.calls[1]["messages"][-1]["content"].startswith("Left to right: 7 * 5 = 35.\n\nThe answer is 35.\n\nDo you agree")
    assert "Affirmative side arguing:\n4 * 5 = 20, and 3 + 20 = 23.\n\nThe answer is 23." in mod.calls[0]["messages"][-1]["content"]
    assert "Negative side arguing: Left to right: 7 * 5 = 35.\n\nThe answer is 35." in judge.calls[0]["messages"][-1]["content"]
    assert t.result["answer"] == 23

def test_one_spec_plays_both_sides_in_a_debate_as_on_the_command_line():
    t = Debate("multi_persona", ITEM, ["synthetic:strong"], rounds=2).run()
    assert [(a["name"], a["spec"]) for a in t.team][:2] == [("Affirmative", "synthetic:strong"), ("Negative", "synthetic:strong")]
    assert t.meta["status"] == "done" and t.result["answer"] is not None

def test_the_judge_and_moderator_specs_make_role_agents():
    team = [Agent("Affirmative", "scripted:", backend=Scripted(_args(1))), Agent("Negative", "scripted:", backend=Scripted(_args(2)))]
    t = Debate("multi_persona", ITEM, team, rounds=1, moderator="synthetic:oracle", judge="synthetic:oracle").run()
    roles = {a["name"]: (a["role"], a["spec"]) for a in t.team}
    assert roles["Moderator"] == ("moderator", "synthetic:oracle")
    if t.result["decided_by"] == "judge": assert roles["Judge"] == ("judge", "synthetic:oracle")
    assert t.result["answer"] == 23                                                    # an oracle moderator (or judge) picks the right side

def test_two_debaters_are_needed():
    with pytest.raises(Exception, match="multi_persona needs two debaters"):
        Debate("multi_persona", ITEM, [Agent("A", "scripted:", backend=Scripted("x")), Agent("M", "scripted:", role="moderator", backend=Scripted("x"))]).run()

# ---- replay and fork ---------------------------------------------------------------------------------------------

def test_replay_and_fork():
    t = Debate("multi_persona", ITEM, ["synthetic:random,seed=1", "synthetic:random,seed=2"], rounds=3, moderator="synthetic:oracle").run()
    assert t.result["decided_by"] == "judge" and len(t.rounds) == 7
    again = from_transcript(Transcript.from_json(t.to_json()))
    assert comparable(again.transcript)["rounds"] == comparable(t)["rounds"] and again.transcript.result["answer"] == t.result["answer"]
    assert again.usage.calls == 0 or all(tu.cached for r in again.rounds for tu in r.turns)
    d = Debate("multi_persona", ITEM, ["synthetic:random,seed=1", "synthetic:random,seed=2"], rounds=3, moderator="synthetic:oracle")
    d.run()
    f = d.fork(1, agent=d.rounds[0].turns[1].agent, reply="I disagree: 3 + 20 = 23. The answer is 23.")   # the negative now holds the right answer
    f.run()
    ft = f.transcript
    assert ft.rounds[0].turns[1].answer == 23 and ft.rounds[0].turns[1].meta.get("edited")
    assert ft.rounds[1].phase == "moderator" and ft.rounds[1].turns[0].answer.side == "Negative"    # the oracle moderator now prefers the negative side ...
    assert ft.result["answer"] == 23 and ft.result["stopped_at"] == 1 and len(ft.rounds) == 2         # ... and ends the debate there

# ---- every task whose answers compare, from Python and from the command line ---------------------------------------

def _file_task(tmp_path):
    "A task file of three-way multiple choice (its own letters, so its own synthetic choices)."
    rows = [("Which is a fruit?", "a stone", "an apple", "a chair", "B"), ("Which is a colour?", "red", "seven", "north", "A")]
    (tmp_path / "mc3.jsonl").write_text("\n".join(json.dumps(dict(zip(("q", "A", "B", "C", "a"), r))) for r in rows) + "\n")
    (tmp_path / "mc3.yaml").write_text("name: mc3_mp\ndata: mc3.jsonl\nprompt: \"{{ q }}\\nA. {{ A }}\\nB. {{ B }}\\nC. {{ C }}\"\ngold: '{{ a }}'\n"
                                       "answer: {format: choice, letters: ABC}\n")
    return load_task_file(tmp_path / "mc3.yaml")

def test_every_comparable_task(tmp_path):
    items = {"arith": toy_arith_items(2, seed=1),
             "gsm8k": [Item("g1", "gsm8k", "Natalia sold 48 clips in April and half as many in May. How many in all?", 72)],
             "mmlu": [Item("m1", "mmlu", "Which planet is largest?\n\nA. Mars\nB. Jupiter\nC. Venus\nD. Earth", "B")]}
    task = _file_task(tmp_path)
    items[task.name] = task.load(None, None)
    for name, its in items.items():
        res = run_experiment("multi_persona", its, multi_persona_team(["synthetic:oracle"]), tmp_path / name, cache=False, progress=False)
        df = res.df
        assert not res.failed and len(df) == len(its) and df.correct.all(), (name, df[["answer", "gold", "correct"]])
        assert {"decided_by", "stopped_at", "debate_rounds", "moderator_parse_failures"} <= set(df.columns)

def test_command_line(tmp_path):
    r = CliRunner().invoke(main, ["run", "multi_persona", "--n", "3", "--rounds", "2", "--tit-for-tat", "0", "--judge-sees", "first",
                                  "--no-cache", "--no-progress", "--out", str(tmp_path), "--name", "mp"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "mp" / "results.parquet")
    assert len(df) == 3 and set(df.decided_by) <= {"moderator", "judge"} and (df.debate_rounds <= 2).all()
    cfg = json.loads((tmp_path / "mp" / "config.json").read_text())
    assert cfg["options"]["tit_for_tat"] == 0 and [a["name"] for a in cfg["team"]] == ["Affirmative", "Negative"]
    r = CliRunner().invoke(main, ["run", "multi_persona", "--agents", "synthetic:oracle;synthetic:weak;synthetic:strong", "--n", "1", "--no-cache", "--no-progress",
                                  "--out", str(tmp_path), "--name", "mp3"])
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "mp3" / "config.json").read_text())
    assert [(a["name"], a["role"]) for a in cfg["team"]] == [("Affirmative", None), ("Negative", None), ("Moderator", "moderator")]
    for bad, flag in ((["--tit-for-tat", "4"], "--tit-for-tat"), (["--judge-sees", "all"], "--judge-sees"), (["--break-test", "maybe"], "--break-test"), (["--rounds", "0"], "--rounds"), (["--moderator", "nosuch:x"], "--moderator")):
        r = CliRunner().invoke(main, ["run", "multi_persona", *bad, "--n", "1", "--no-progress", "--out", str(tmp_path)])
        assert r.exit_code == 2 and flag in r.output and "Traceback" not in r.output, r.output

def test_the_planned_rounds_are_the_rounds_it_runs_when_no_verdict_ends_it():
    "Each round's debate and moderator rounds, then the judge's: 2 * rounds + 1 at most, fewer once a verdict ends it."
    for rounds, adaptive in ((1, True), (3, True), (2, False)):
        judge = Scripted("Candidates.", json.dumps({"Reason": "r", "debate_answer": "23"}))
        team = _team(Scripted(_args(1)), Scripted(_args(2)), Scripted(_verdict("No")), judge)
        d = Debate("multi_persona", ITEM, team, rounds=rounds, adaptive_break=adaptive)
        t = d.run()
        assert t.result["decided_by"] == "judge" and d.may_end_early
        assert len(t.rounds) == d.planned_rounds == 2 * rounds + 1
    team = _team(Scripted(_args(1)), Scripted(_args(2)), Scripted(_verdict("Yes", "Affirmative", "35")))
    d = Debate("multi_persona", ITEM, team, rounds=3)
    assert len(d.run().rounds) == 2 < d.planned_rounds                      # the moderator's first verdict ends it

"""The `oversight` protocol (debate as scalable oversight) on the stories task: hidden means hidden at the HTTP level,
the ordering that truthful/deceptive synthetic speakers and a judge of low skill give (oracle >= debate > consultancy >=
blind) and that it comes from what the judge reads, best-of-N, the run table, logs and stepper, and usage errors."""
from __future__ import annotations
import json
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.agents import Agent
from madlab.cli import main
from madlab.core import Item
from madlab.debate import Debate
from madlab.protocols.oversight import oversight_table
from madlab.run import run_experiment
from madlab.tasks.stories import story_items
from fake_openai_server import FakeOpenAIServer

def stories(n: int, seed: int = 0, hops=1) -> list[Item]:
    "`n` items of the stories task: a story (the hidden context), a question one of its facts answers, a distractor."
    return story_items(n, seed=seed, facts=6, closeness="near", hops=hops)

TEAM = [{"name": "Debater 1", "spec": "synthetic:truthful,seed=1"},
        {"name": "Debater 2", "spec": "synthetic:deceptive,seed=2"},
        {"name": "Judge", "spec": "synthetic:skill=0.8,seed=3", "role": "judge"}]
CONSULTANT = [{"name": "Debater 1", "spec": "synthetic:deceptive,seed=2"}, TEAM[2]]

def _acc(items, team, **kw):
    res = run_experiment("oversight", items=items, team=team, cache=False, seed=7, progress=False, rounds=2, **kw)
    assert (res.df.status == "done").all()
    return res, oversight_table(res.df).set_index("judge")

# -- hidden means hidden ------------------------------------------------------------------------------------------

def _route_reply(req):
    "A debater argues with a quote; a judge gives probabilities; a question is a question."
    system = next((m["content"] for m in req["messages"] if m["role"] == "system"), "")
    last = req["messages"][-1]["content"]
    if "the judge of a" in system:
        if "one short question" in last: return "Which sentence says where it was hidden?"
        if "letter of the right answer alone" in last: return "A"
        return json.dumps({"reasoning": "the verified quote", "probabilities": {"A": 0.7, "B": 0.3}})
    if "Which answer does the story support" in last: return json.dumps({"reasoning": "it says so", "answer": "B"})
    return "The story says <quote>before dawn</quote>, so my answer holds."

@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(reply=_route_reply) as s: yield s

@pytest.fixture(autouse=True)
def _key(monkeypatch): monkeypatch.setenv("OPENAI_API_KEY", "sk-test")

def _judge_requests(server, since):
    reqs = [r for _, _, r in server.log[since:]]
    judged = [r for r in reqs if "the judge of a" in next((m["content"] for m in r["messages"]
                                                            if m["role"] == "system"), "")]
    return reqs, judged

@pytest.mark.parametrize("mode", ["debate", "consultancy", "open-debate", "open-consultancy"])
def test_no_judge_request_carries_the_story_unless_the_judge_sees_it(server, mode):
    items = stories(3, seed=11, hops=(1, 2, 3))
    spec = f"openai:fake-model,base_url={server.url}"
    team = [{"name": "Debater 1", "spec": spec}, {"name": "Debater 2", "spec": spec},
            {"name": "Judge", "spec": spec, "role": "judge"}]
    extra = {"judge_turns": 1} if "consultancy" in mode else {}
    for sees in ("question", "context"):
        since = len(server.log)
        res = run_experiment("oversight", items=items, team=team, cache=False, progress=False, rounds=2, mode=mode,
                             judge_sees=sees, **extra)
        assert (res.df.status == "done").all(), res.df.error.tolist()
        reqs, judged = _judge_requests(server, since)
        # any sentence of a story in a request would leak it
        story = lambda r, it: any(x in json.dumps(r["messages"]) for x in it.context.split(". ") if len(x) > 12)
        # every request went to the fake server; the debaters read the story, the judge only as the oracle
        speeches = [r for r in reqs if r not in judged]
        assert judged and speeches and all(any(story(r, it) for it in items) for r in speeches)
        carried = [any(story(r, it) for it in items) for r in judged]
        assert all(carried) if sees == "context" else not any(carried), (sees, carried)
        assert all((tu.meta.get("saw_context") is True) == (sees == "context")
                   for t in res.transcripts.values() for r in t.rounds for tu in r.turns if tu.agent == "Judge")

def test_with_baselines_only_the_oracle_request_carries_the_story(server):
    items = stories(2, seed=12)
    spec = f"openai:fake-model,base_url={server.url}"
    team = [{"name": "Debater 1", "spec": spec}, {"name": "Debater 2", "spec": spec},
            {"name": "Judge", "spec": spec, "role": "judge"}]
    since = len(server.log)
    res = run_experiment("oversight", items=items, team=team, cache=False, progress=False, rounds=1, baselines=True)
    _, judged = _judge_requests(server, since)
    with_story = [r for r in judged if any(x in json.dumps(r["messages"]) for it in items
                                           for x in it.context.split(". ") if len(x) > 12)]
    assert len(judged) == 3 * len(items) and len(with_story) == len(items)
    assert all("you are shown the story too" in r["messages"][0]["content"] for r in with_story)
    assert set(res.df.blind_correct.dropna().map(bool)) <= {True, False} and res.df.oracle_probs.notna().all()

# -- synthetic teams behave as their personas imply -----------------------------------------------------------------

N = 240

@pytest.fixture(scope="module")
def ordering():
    items = stories(N, seed=1)
    _, deb = _acc(items, TEAM, mode="debate", baselines=True)
    _, con = _acc(items, CONSULTANT, mode="consultancy")
    return items, deb, con

def test_oracle_debate_consultancy_blind_ordering(ordering):
    _, deb, con = ordering
    o, d, c, b = deb.loc["oracle"], deb.loc["judge"], con.loc["judge"], deb.loc["blind"]
    assert d.n == c.n == N
    assert o.accuracy >= d.accuracy - 0.02 and o.acc_hi >= d.accuracy              # oracle >= debate
    assert d.acc_lo > c.acc_hi, (d.accuracy, c.accuracy)                            # debate > consultancy
    assert c.acc_lo > b.acc_lo and c.accuracy >= b.accuracy                         # consultancy >= blind
    assert b.acc_lo < 0.5 < b.acc_hi, (b.accuracy, b.acc_lo, b.acc_hi)              # blind: near chance
    assert d.brier < c.brier and d.ece < 0.2

def test_the_verdict_comes_from_what_the_judge_reads(ordering):
    items, deb, con = ordering
    # quotes shown unchecked: the deceptive debater's made-up quotes read as evidence, and debate loses what the
    # verified quotes gave it (on the items where the liar made a quote up, the judge is at chance)
    _, raw = _acc(items, TEAM, mode="debate", verify_quotes=False)
    assert raw.loc["judge"].acc_hi < deb.loc["judge"].acc_lo
    # nothing to read (the blind judge: no transcript, no story): chance
    assert deb.loc["blind"].acc_lo < 0.5 < deb.loc["blind"].acc_hi
    # the same stories with the distractor labelled right: a judge that read the gold would still score; it falls
    flipped = [Item(it.id, it.task, it.prompt, "B" if it.gold == "A" else "A", it.data, context=it.context,
                    meta={k: v for k, v in it.meta.items() if k != "distractor"}) for it in items[:120]]
    _, f = _acc(flipped, TEAM, mode="debate", baselines=True)
    assert f.loc["judge"].accuracy < 0.25 and f.loc["oracle"].accuracy < 0.25

def test_rows_carry_mode_view_sides_and_probabilities(tmp_path):
    res = run_experiment("oversight", items=stories(6, seed=2), team=TEAM, out=tmp_path / "run", cache=False,
                         progress=False, rounds=2, turns="sequential", baselines=True)
    df = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert {"mode", "judge_sees", "sides", "judge_probs", "judge_p_right", "judge_brier", "blind_probs",
            "oracle_probs", "quotes", "verified_quotes", "first"} <= set(df.columns)
    sides = [json.loads(s) for s in df.sides]
    assert all(sorted(s.values()) == ["A", "B"] for s in sides)
    assert len({s["Debater 1"] for s in sides}) == 2 and df["first"].nunique() == 2       # swapped across items
    assert (df.judge_brier.between(0, 2)).all() and (df.quotes >= df.verified_quotes).all()
    assert (tmp_path / "run" / "oversight.csv").exists() and "oversight: judge accuracy" in res.report
    # the chat files: the speakers read the story, the judge only as the oracle
    for f in (tmp_path / "run").rglob("chat_*.json"):
        msgs = json.loads(f.read_text())["messages"]
        storied = [m for m in msgs if res.transcripts[f.parent.name].item.context in m["content"]]
        if "Judge" in f.name: assert msgs and storied and all(m["phase"] == "oracle" for m in storied), f.name
        else: assert [m["role"] for m in storied] == ["system"], f.name
    cal = pd.read_csv(tmp_path / "run" / "calibration.csv")
    assert set(cal.judge) == {"judge", "blind", "oracle"} and (cal.groupby("judge").n.sum() == 6).all()
    from madlab.core import Transcript
    back = Transcript.from_json(next((tmp_path / "run").rglob("transcript.json")))
    verdict = back.rounds[-1].turns[0]
    assert type(verdict.answer).__name__ == "Judgement" and abs(sum(verdict.answer.probs.values()) - 1) < 1e-6
    page = next((tmp_path / "run").rglob("*.html")).read_text()
    t = next(iter(res.transcripts.values()))
    # sequential: the second speaker of a round read the first's speech of that round
    r1 = t.rounds[0]
    assert r1.turns[0].reply.split("<quote>")[0][:20] in r1.turns[1].messages[-1]["content"]
    assert "quote-verified" in page or "quote-unverified" in page

def test_best_of_n_keeps_the_candidate_the_judge_prefers():
    it = stories(1, seed=5)[0]
    t = Debate("oversight", it, [Agent(**m) for m in CONSULTANT], seed=3, mode="consultancy", rounds=1,
               best_of=4).run()
    [tu] = [x for x in t.rounds[0].turns if x.meta.get("speech")]
    cands = tu.meta["candidates"]
    assert len(cands) == 4 and all(c["how"] == "logprob" for c in cands)
    assert tu.reply == max(cands, key=lambda c: c["score"])["reply"]
    # every call is in the round, in the order made: four arguments, each scored by the judge model's letter
    test = [(x.agent, x.meta["kind"]) for x in t.rounds[0].turns]
    assert test == [("Debater 1", "oversight.argument"), ("Judge", "oversight.preference")] * 4
    # so the debate replays without a call
    again = Debate.from_transcript(t).run()
    assert [x.reply for x in again.rounds[0].turns] == [x.reply for x in t.rounds[0].turns]

@pytest.mark.parametrize("logprobs", [True, False])
def test_best_of_n_reads_log_probabilities_where_the_server_gives_them(logprobs):
    with FakeOpenAIServer(reply=_route_reply, logprobs=logprobs) as s:
        spec = f"openai:fake-model,base_url={s.url}"
        it = stories(1, seed=6)[0]
        t = Debate("oversight", it, [Agent("Debater 1", spec), Agent("Judge", spec, role="judge")], seed=1,
                   mode="consultancy", rounds=1, best_of=2).run()
        asked = [r for _, _, r in s.log if "letter of the right answer alone" in r["messages"][-1]["content"]]
    [speech] = [x for x in t.rounds[0].turns if x.meta.get("speech")]
    cands = speech.meta["candidates"]
    assert len(asked) == 2 and all(r.get("logprobs") for r in asked)
    side = t.result["sides"]["Debater 1"]
    # the fake server answers "A" with log-probability -0.1, else states {"A": 0.7, "B": 0.3}
    want = (0.905 if side == "A" else 0.095) if logprobs else (0.7 if side == "A" else 0.3)
    assert [c["how"] for c in cands] == ["logprob" if logprobs else "stated"] * 2
    assert all(abs(c["score"] - want) < 0.001 for c in cands), (cands, side)

def test_usage_errors_exit_2_naming_the_option():
    r = CliRunner().invoke(main, ["run", "oversight", "--mode", "bogus", "--n", "1"])
    assert r.exit_code == 2 and "--mode" in r.output and "open-consultancy" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["run", "oversight", "--turns", "both", "--n", "1"])
    assert r.exit_code == 2 and "--turns" in r.output and "sequential" in r.output
    r = CliRunner().invoke(main, ["run", "oversight", "--mode", "consultancy", "--rounds", "2", "--judge-turns", "3",
                                  "--n", "1"])
    assert r.exit_code == 2 and "--judge-turns" in r.output and "Traceback" not in r.output
    with pytest.raises(Exception, match="mode"):
        Debate("oversight", stories(1)[0], [Agent(**m) for m in TEAM], mode="argue")

def test_the_stepper_marks_quotes_as_the_log_does():
    from madlab.widgets import DebateStepper
    it = stories(1, seed=9)[0]
    t = Debate("oversight", it, [Agent(**m) for m in TEAM], seed=2, rounds=1).run()
    st = DebateStepper(t)
    st.show(round=1)
    html = st.w_cols.value
    turns = t.rounds[0].turns
    marks = sum(tu.meta["quotes"] for tu in turns)
    assert html.count("class=\"quote-verified\"") + html.count("class=\"quote-unverified\"") == marks > 0
    assert html.count("class=\"quote-verified\"") == sum(tu.meta["verified_quotes"] for tu in turns)
    assert "&lt;quote&gt;" not in html and "quotes verified" in html

def test_from_the_command_line_on_the_stories_task(tmp_path):
    r = CliRunner().invoke(main, ["run", "oversight", "--task", "stories", "--n", "4", "--mode", "consultancy",
                                  "--rounds", "2", "--judge-turns", "1", "--baselines", "--no-cache", "--no-progress",
                                  "--out", str(tmp_path), "--name", "c"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "c" / "results.parquet")
    assert len(df) == 4 and set(df["mode"]) == {"consultancy"} and df.honest.notna().all()
    t = json.loads(next((tmp_path / "c").rglob("transcript.json")).read_text())
    assert [r["phase"] for r in t["rounds"]] == ["consultancy", "question", "consultancy", "decision"]
    assert t["meta"]["context_seen_by"] == ["Debater 1", "Judge"]        # the judge only as the oracle baseline

def test_critique_and_refine_trades_made_up_quotes_for_real_ones(ordering):
    items, deb, con = ordering
    res, ref = _acc(items, CONSULTANT, mode="consultancy", critique=True)
    speeches = [tu for t in res.transcripts.values() for r in t.rounds if r.phase == "consultancy" for tu in r.turns
                if tu.meta.get("speech")]
    assert all(tu.meta.get("draft") is not None and tu.meta.get("critique") for tu in speeches)
    t = next(iter(res.transcripts.values()))
    assert [x.meta["kind"] for x in t.rounds[0].turns] == ["oversight.argument", "oversight.critique",
                                                            "oversight.argument"]
    again = Debate.from_transcript(t).run()                          # every call recorded: it replays without one
    assert again.result["answer"] == t.result["answer"] and all(x.cached for r in again.rounds for x in r.turns)
    caught = [tu for tu in speeches if "does not occur in the story" in tu.meta["critique"]]
    assert len(caught) > 20 and all(tu.meta["verified_quotes"] == tu.meta["quotes"] > 0 for tu in caught)
    # a more persuasive liar: the consultancy judge is fooled more often, while debate holds
    assert ref.loc["judge"].accuracy < con.loc["judge"].accuracy - 0.04
    _, dref = _acc(items, TEAM, mode="debate", critique=True)
    assert dref.loc["judge"].acc_lo > ref.loc["judge"].acc_hi and dref.loc["judge"].accuracy > 0.8

def test_the_judge_option_names_the_judge(tmp_path):
    r = CliRunner().invoke(main, ["run", "oversight", "--task", "stories", "--n", "2", "--rounds", "1", "--judge",
                                  "synthetic:skill=1.0,seed=9", "--no-cache", "--no-progress", "--out", str(tmp_path),
                                  "--name", "j"])
    assert r.exit_code == 0, r.output
    t = json.loads(next((tmp_path / "j").rglob("transcript.json")).read_text())
    judges = {tu["agent"] for rd in t["rounds"] for tu in rd["turns"] if tu["meta"].get("kind") == "oversight.judge"}
    assert judges == {"Judge"}
    assert [a["spec"] for a in t["team"] if a["name"] == "Judge"] == ["synthetic:skill=1.0,seed=9"]
    r = CliRunner().invoke(main, ["run", "oversight", "--task", "stories", "--n", "1", "--judge", "synthetic:",
                                  "--agents", "synthetic:;synthetic:;synthetic:"])
    assert r.exit_code == 2 and "--judge" in r.output and "Traceback" not in r.output

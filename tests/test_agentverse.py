"""AgentVerse environments (`madlab.protocols.agentverse`): each rule's semantics checked against transcripts, YAML task files
round-tripping and failing with the field named, forking mid-environment with the rule state restored, the summary memory against
a real `transformers serve` on 127.0.0.1 (fixture in conftest.py), and every example file run offline, once through `madlab run`."""
import json, os, subprocess, sys
from pathlib import Path
import pandas as pd
import pytest
import yaml
from madlab.core import Completion, Usage
from madlab.backends import Backend
from madlab.debate import Debate
from madlab.run import run_experiment
from madlab.tasks.arith import toy_arith_items
from madlab.tasks.pairwise import load_pairwise
from madlab.tasks.scenario import load_scenarios
from madlab.protocols.agentverse import (ConfigError, agentverse_team, config_from_dict, example_path, load_config, resolve_config)

EXAMPLES = ["debate_sequential", "brainstorm_concurrent", "independent", "pairwise_eval", "prisoners_dilemma"]
TASK_OF = {"debate_sequential": "kks", "brainstorm_concurrent": "arith", "independent": "arith", "pairwise_eval": "pairwise", "prisoners_dilemma": "scenario"}

class Talker(Backend):
    "Replies that name their author and call number, so a test can trace where each text went; `script(agent, n)` may override."
    def __init__(self, script=None): self.n, self.script = {}, script
    async def complete(self, messages, ctx=None, **params):
        who = ctx.agent if ctx else "?"
        self.n[who] = self.n.get(who, 0) + 1
        text = self.script(who, self.n[who]) if self.script else None
        if text is None: text = f"<<{who} #{self.n[who]}>> The answer is 7."
        return Completion(text, Usage(5, 5, 1))

def team(names, script=None):
    from madlab.agents import Agent
    return [Agent(n, "talker:", backend=Talker(script)) for n in names]

ITEM = toy_arith_items(1, seed=4)[0]
ABC = ["A", "B", "C"]

def sent(turn) -> str: return "\n".join(m["content"] for m in turn.messages)
def speaking(r): return [t for t in r.turns if t.meta.get("kind") != "summary"]

def test_sequential_concurrent_and_random_orders():
    t = Debate("agentverse", ITEM, team(ABC), max_turns=7, order="sequential").run()
    assert [r.meta["speakers"] for r in t.rounds] == [["A"], ["B"], ["C"], ["A"], ["B"], ["C"], ["A"]]
    assert [r.meta["rules"]["order"]["next"] for r in t.rounds][:4] == [1, 2, 0, 1]
    t = Debate("agentverse", ITEM, team(ABC), max_turns=3, order="concurrent").run()
    assert all(sorted(t.agent for t in r.turns) == ABC for r in t.rounds)
    picks = lambda seed: [r.meta["speakers"] for r in Debate("agentverse", ITEM, team(ABC), seed=seed, max_turns=12, order="random").run().rounds]
    assert picks(5) == picks(5) and all(len(p) == 1 for p in picks(5))
    assert len({json.dumps(picks(s)) for s in range(5)}) > 1 and {p[0] for p in picks(5)} <= set(ABC)
    pinned = lambda seed: [r.meta["speakers"] for r in Debate("agentverse", ITEM, team(ABC), seed=seed, max_turns=8, order={"type": "random", "seed": 11}).run().rounds]
    assert pinned(0) == pinned(1)                     # a seed in the rule wins over the debate's

def test_oneself_visibility_no_agent_ever_sees_another():
    t = Debate("agentverse", ITEM, team(ABC), max_turns=4, order="concurrent", visibility="oneself").run()
    for r in t.rounds:
        for tu in speaking(r):
            others = [o for o in ABC if o != tu.agent]
            assert not any(f"<<{o} #" in sent(tu) for o in others), (tu.agent, sent(tu))
        assert r.meta["received"] == {n: [n] for n in ABC}
    assert "<<A #1>>" in sent(t.rounds[1].by_agent()["A"])     # its own words it does see
    for name, h in t.histories.items():
        assert not any(m.sender not in (None, name) for m in h), name
    # the example file says the same with synthetic agents
    cfg = load_config(example_path("independent"))
    t = Debate("agentverse", ITEM, agentverse_team(cfg), config=cfg).run()
    assert all(r.meta["received"] == {n: [n] for n in cfg.names} for r in t.rounds)

def test_all_visibility_and_other_agents_as_prefixed_user_turns():
    t = Debate("agentverse", ITEM, team(ABC), max_turns=2).run()
    b = t.rounds[1].turns[0]
    assert b.agent == "B" and t.rounds[0].meta["received"] == {"A": ["A", "B", "C"]}
    assert [m["role"] for m in b.messages] == ["user"] and b.messages[0]["content"].startswith("[A]: <<A #1>>")
    assert t.rounds[0].turns[0].receivers == ["A", "B", "C"]

def test_updater_named_receivers_and_nobody_else():
    cfg = load_config(example_path("prisoners_dilemma"))
    item = load_scenarios(example_path("prisoners_dilemma").with_name("scenarios.jsonl"))[0]
    t = Debate("agentverse", item, team(cfg.names), config=cfg).run()
    assert [r.meta["speakers"][0] for r in t.rounds] == ["Police", "Suspect1", "Police", "Suspect2"] * 2
    for r in t.rounds:
        (who, rcv), = r.meta["received"].items()
        assert rcv == (["Police", "Suspect1", "Suspect2"] if who == "Police" else [who, "Police"])
    s1, s2 = t.histories["Suspect1"], t.histories["Suspect2"]
    assert not any(m.sender == "Suspect2" for m in s1) and not any(m.sender == "Suspect1" for m in s2)
    assert sum(m.sender == "Suspect1" for m in t.histories["Police"]) == 2
    for r in t.rounds:                          # no suspect's text ever reaches the other suspect's prompts
        for tu in speaking(r):
            other = {"Suspect1": "Suspect2", "Suspect2": "Suspect1"}.get(tu.agent)
            if other: assert f"<<{other} #" not in sent(tu)

def test_silence_when_nobody_spoke():
    quiet = lambda who, n: "" if who == "B" else None          # B says nothing: the basic selector drops it
    t = Debate("agentverse", ITEM, team(ABC, quiet), max_turns=3).run()
    assert [r.meta["silence"] for r in t.rounds] == [False, True, False]
    assert t.rounds[1].meta["received"] == {}
    assert "[Silence]" in sent(t.rounds[2].turns[0]) and all(h[-1].content in ("[Silence]",) or h[-1].sender == "C" for h in t.histories.values())
    assert all("[Silence]" in m for m in t.rounds[1].meta["memory"].values())

def test_blind_judge_last_turns():
    t = Debate("agentverse", ITEM, team(ABC), max_turns=5, order="concurrent", visibility={"type": "blind_judge", "last_n": 2}).run()
    for r in t.rounds:
        k = r.meta["turn"]
        assert r.meta["received"] == ({n: [n] for n in ABC} if k > 3 else {n: [n] + [o for o in ABC if o != n] for n in ABC}), k
    last = t.rounds[-1]
    for tu in last.turns:      # in the blind turns nobody hears the others' new words (turns 4 and 5)
        assert not any(f"<<{o} #{k}>>" in sent(tu) for o in ABC if o != tu.agent for k in (4, 5))
        assert any(f"<<{o} #3>>" in sent(tu) for o in ABC if o != tu.agent)

def test_moderator_order_and_fork_resumes_with_the_right_speaker():
    def calls(who, n):
        if who == "Prof": return {1: "Questions? [CallOn] Yes, Cy", 2: "Good. [CallOn] Yes, Bea", 3: "Anyone? [CallOn] Yes, Cy"}.get(n, "That is all.")
        return None
    names = ["Prof", "Bea", "Cy"]
    d = Debate("agentverse", ITEM, team(names, calls), max_turns=8, order="moderator")
    t = d.run()
    order = [r.meta["speakers"][0] for r in t.rounds]
    assert order == ["Prof", "Cy", "Prof", "Bea", "Prof", "Cy", "Prof", "Prof"]
    assert t.rounds[0].meta["rules"]["order"] == {"next": "Cy", "called": "Cy"}
    f = d.fork(3)                                    # after Prof called on Bea in turn 3
    assert [r.meta["speakers"] for r in f.rounds] == [r.meta["speakers"] for r in t.rounds[:3]]
    assert f.rounds[-1].meta["rules"] == t.rounds[2].meta["rules"]
    assert f.step().meta["speakers"] == ["Bea"]
    # an edited moderator reply changes who is called next
    g = d.fork(3, agent="Prof", reply="Let us hear Cy. [CallOn] Yes, Cy")
    assert g.step().meta["speakers"] == ["Cy"]

def test_fork_mid_environment_sequential_and_summary_replay():
    mem = {"memory_type": "summary", "buffer": 1}
    d = Debate("agentverse", ITEM, team(ABC), max_turns=6, memory=mem)
    t = d.run()
    f = d.fork(4)
    assert f.rounds[-1].meta["rules"]["order"] == {"next": 1}
    assert f.rounds[-1].meta["memory"] == t.rounds[3].meta["memory"]        # summaries replayed from the transcript
    assert f.step().meta["speakers"] == ["B"]
    assert sum(1 for r in f.rounds for tu in r.turns if tu.meta.get("kind") == "summary") > 0

def test_yaml_files_round_trip_and_run_offline(tmp_path):
    for name in EXAMPLES:
        path = example_path(name)
        cfg = load_config(path)
        assert config_from_dict(cfg.to_dict()) == cfg
        raw = yaml.safe_load(path.read_text())
        raw.pop("prompts", None)
        keep = lambda a: {k: a.get(k) for k in ("name", "role_description", "llm")}
        assert [keep(a) for a in cfg.to_dict()["agents"]] == [keep(a) for a in raw["agents"]]
        assert [a["memory"]["memory_type"] for a in cfg.to_dict()["agents"]] == [a["memory"]["memory_type"] for a in raw["agents"]]
        assert cfg.to_dict()["environment"]["rule"]["order"]["type"] == raw["environment"]["rule"]["order"]["type"]
        (tmp_path / f"{name}.yaml").write_text(cfg.to_yaml())
        assert load_config(tmp_path / f"{name}.yaml") == cfg

@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_runs_offline(name, tmp_path):
    from madlab.cli_options import load_items
    cfg = load_config(example_path(name))
    items = load_items(TASK_OF[name], n=2)
    res = run_experiment("agentverse", items, agentverse_team(cfg), tmp_path / "run", config=str(example_path(name)), cache=False)
    assert set(res.df.status) == {"done"} and len(res.df) == len(items)
    t = next(iter(res.transcripts.values()))
    assert t.synthetic and t.result["aggregation"] == cfg.aggregation["type"]
    page = (tmp_path / "run" / "debates" / items[0].id / "log.html").read_text()
    assert "memories after this turn" in page and "rule state" in page
    if name == "pairwise_eval":
        assert len(t.rounds) == 2 * cfg.max_turns and "kappa" in res.report
        final = [tu for r in t.rounds if r.phase == "final" for tu in r.turns]
        assert final and all("The score of Assistant 1: X" in sent(tu) for tu in final)
        assert not any("The score of Assistant 1: X" in sent(tu) for r in t.rounds if r.phase != "final" for tu in r.turns)

def test_bad_files_name_the_field(tmp_path):
    def bad(text, *want):
        p = tmp_path / "bad.yaml"; p.write_text(text)
        with pytest.raises(ConfigError) as e: load_config(p)
        for w in want: assert w in str(e.value), str(e.value)
    bad("agents: [{name: A}]\nenvironment: {rule: {order: {type: round_robin}}}", "environment.rule.order.type", "valid types: sequential, concurrent, random, moderator, scripted")
    bad("agents: [{name: A, memory: {memory_type: vector}}]", "agents[0].memory.memory_type", "valid types: chat_history, token_window, summary")
    bad("agents: [{name: A}]\nenvironment: {max_turns: 0}", "environment.max_turns", "1..1000")
    bad("agents: [{name: A}]\nenvironment: {rule: {visibility: {type: oneself, n: 1}}}", "environment.rule.visibility.n", "unknown parameter")
    bad("agents: [{name: A, llm: {model: 'nope:x'}}]", "agents[0].llm.model", "unknown backend kind")
    bad("agents: [{name: A, prompt_template: 'costs $5'}]", "agents[0].prompt_template", "$$ for a dollar sign")
    bad("agent: []", "bad.yaml: agent", "valid fields: task, environment, agents")
    bad("agents: [{name: A}, {name: A}]", "agents", "names must be unique")
    bad("agents: [: :", "not a readable YAML file")
    # unknown ${variables} are found before any call, naming the valid ones
    cfg = {"agents": [{"name": "A", "prompt_template": "Hi ${agent_name}, solve ${questoin}"}]}
    with pytest.raises(Exception) as e: Debate("agentverse", ITEM, team(["A"]), config=cfg).run()
    assert "agents[0].prompt_template: unknown variable ${questoin}" in str(e.value) and "${question}" in str(e.value)
    with pytest.raises(Exception) as e: resolve_config(None, order="roundrobin")
    assert e.value.option == "order" and "valid types" in str(e.value)

def test_cli_errors_name_the_option(tmp_path):
    from click.testing import CliRunner
    from madlab.cli import main
    p = tmp_path / "bad.yaml"; p.write_text("agents: [{name: A, memory: {memory_type: vector}}]")
    r = CliRunner().invoke(main, ["run", "agentverse", "--config", str(p), "--task", "arith", "--n", "1", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "--config" in r.output and "agents[0].memory.memory_type" in r.output, r.output
    r = CliRunner().invoke(main, ["run", "agentverse", "--config", str(example_path("debate_sequential")), "--task", "arith", "--n", "1", "--out", str(tmp_path / "o")])
    assert r.exit_code != 0 and "written for 'kks' items" in r.output, r.output

@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_through_madlab_run(name, tmp_path):
    env = {**os.environ, "MADLAB_CACHE": str(tmp_path / "cache")}
    exe = Path(sys.executable).parent / "madlab"
    cmd = [str(exe), "run", "agentverse", "--config", str(example_path(name)), "--task", TASK_OF[name], "--n", "2", "--out", str(tmp_path / "out"), "--no-progress"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    run_dir = Path(p.stdout.strip().splitlines()[-1].removeprefix("outputs: "))
    df = pd.read_parquet(run_dir / "results.parquet")
    assert set(df.status) == {"done"} and (run_dir / "agentverse_report.txt").exists()
    cfg = load_config(example_path(name))
    t = json.loads(next((run_dir / "debates").glob("*/transcript.json")).read_text())
    assert [a["name"] for a in t["team"]] == cfg.names

@pytest.mark.slow
def test_summary_memory_against_transformers_serve(served, monkeypatch):
    url, model = served
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    spec = f"openai:{model}"
    cfg = {"environment": {"max_turns": 3, "rule": {"order": "sequential"}},
           "agents": [{"name": n, "memory": {"memory_type": "summary", "buffer": 0, "max_tokens": 8}, "llm": {"model": "synthetic:medium", "max_tokens": 8}} for n in ("A", "B")]}
    cfg["agents"][1]["memory"]["llm"] = spec                   # B's summariser is the served model; both debaters are offline
    cfg["agents"][0]["memory"] = {"memory_type": "chat_history"}
    d = Debate("agentverse", ITEM, agentverse_team(cfg), config=cfg)
    t = d.run()
    sums = [(r.index, tu) for r in t.rounds for tu in r.turns if tu.meta.get("kind") == "summary"]
    assert sums and all(tu.agent == "B" for _, tu in sums), [(i, tu.agent) for i, tu in sums]
    i, s = sums[0]
    assert s.error is None and s.meta["llm"] == spec and s.usage.calls == 1 and s.usage.prompt_tokens > 0 and 0 < s.usage.completion_tokens <= 8
    assert "New lines of conversation:\n[A]: " in s.messages[0]["content"]
    b = next(tu for tu in t.rounds[i].turns if tu.agent == "B" and tu.meta.get("kind") is None)
    assert b.messages[0]["content"].startswith("Summary of the conversation so far:\n" + s.reply)     # the model's text is what B sees
    assert not any(m["content"].startswith("[A]:") for m in b.messages)                                # and not A's words (buffer 0)
    assert t.rounds[i].meta["memory"]["B"].startswith("Summary of the conversation so far:\n" + s.reply)
    # replaying the transcript serves the recorded summary without calling the server
    from madlab.debate import from_transcript
    r = from_transcript(t.to_json())
    assert [tu.reply for rr in r.rounds for tu in rr.turns] == [tu.reply for rr in t.rounds for tu in rr.turns]

# ---- a call budget counts every call, side calls included --------------------------------------------------------------

CALLS: list = []      # (agent, phase) of every call a `counted:` model answered (shared: the debate keeps role backends across tests)

class Counted(Backend):
    "A synthetic model (`counted:SYNTHETIC-SPEC`) that records each call it answers."
    synthetic = True
    def __init__(self, rest):
        from madlab.backends import get_backend
        self.inner, self.spec = get_backend("synthetic:" + rest), "counted:" + rest
    async def complete(self, messages, ctx=None, **params):
        CALLS.append((ctx.agent if ctx else None, ctx.phase if ctx else None))
        return await self.inner.complete(messages, ctx, **params)
    def count_tokens(self, text): return self.inner.count_tokens(text)

@pytest.fixture
def counted():
    from madlab.backends import register_backend, unregister_backend
    register_backend("counted", lambda rest, **kw: Counted(rest))
    CALLS.clear()
    yield CALLS
    unregister_backend("counted")

COUNTED = ["counted:strong,seed=1", "counted:medium,seed=2", "counted:weak,seed=3"]

@pytest.mark.parametrize("llm", [None, "counted:medium,seed=9"])
def test_a_call_budget_holds_for_summaries(counted, llm):
    from madlab.agents import Budget
    budget = Budget(max_calls=7)
    mem = {"memory_type": "summary", "buffer": 0, **({"llm": llm} if llm else {})}
    res = run_experiment("agentverse", toy_arith_items(3, seed=4), COUNTED, budget=budget, memory=mem, max_turns=6, cache=False, concurrency=1)
    assert res.stopped and "call budget" in res.stopped
    assert 0 < len(counted) <= 7 and budget.calls == len(counted)
    assert any(phase == "summary" for _, phase in counted)            # the summaries were among the calls counted

def test_a_call_budget_holds_for_ratings_and_insights_and_replay_makes_no_call(counted):
    from madlab.agents import Budget
    from madlab.debate import from_transcript, comparable
    cfg = config_from_dict({"environment": {"env_type": "reflection", "max_turns": 6, "current_time": "2023-04-01 07:00:00", "time_delta": 1800,
                                            "rule": {"order": {"type": "concurrent"}}},
                            "agents": [{"agent_type": "reflection", "name": n, "llm": {"model": s}, "prompt_template": "${chat_history}", "memory": {"memory_type": "vectorstore"},
                                        "memory_manipulator": {"memory_manipulator_type": "reflection"}} for n, s in (("A", COUNTED[0]), ("B", COUNTED[2]))]})
    item = load_scenarios(example_path("prisoners_dilemma").with_name("scenarios.jsonl"))[0]
    t = Debate("agentverse", item, agentverse_team(cfg), config=cfg, budget=Budget()).run()
    side = [tu for r in t.rounds for tu in r.turns if tu.meta.get("kind") in ("importance", "immediacy", "questions", "insights")]
    assert side and len(counted) == sum(tu.usage.calls or 1 for r in t.rounds for tu in r.turns)
    for n in (5, 11, len(counted) - 1):
        counted.clear()
        budget = Budget(max_calls=n)
        with pytest.raises(Exception, match="call budget"): Debate("agentverse", item, agentverse_team(cfg), config=cfg, budget=budget).run()
        assert len(counted) <= n and budget.calls == len(counted)
    counted.clear()
    r = from_transcript(t)                                           # side calls are served from the transcript
    assert counted == [] and comparable(r.transcript)["rounds"] == comparable(t)["rounds"]

def test_json_written_when_agentverse_was_one_module_reads_in_a_fresh_interpreter():
    "The package's registered classes keep the names they had when AgentVerse was one module (`madlab.protocols.agentverse.X`): a config in an older transcript reads back, with nothing of AgentVerse imported first, and is written under the same names."
    old = {"__type__": "madlab.protocols.agentverse.AgentVerseConfig", "order": {"__type__": "madlab.protocols.agentverse.RandomOrder", "seed": 3},
           "agents": [{"__type__": "madlab.protocols.agentverse.AgentSetup", "name": "Ann", "memory": {"__type__": "madlab.protocols.agentverse.SummaryMemory", "buffer": 1}}]}
    code = ("import json, sys; from madlab.core import from_jsonable, to_jsonable; c = from_jsonable(json.loads(sys.argv[1])); "
            "print(type(c.order).__module__, c.agents[0].memory.buffer, to_jsonable(c)['agents'][0]['memory']['__type__'])")
    p = subprocess.run([sys.executable, "-c", code, json.dumps(old)], capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["madlab.protocols.agentverse", "1", "madlab.protocols.agentverse.SummaryMemory"]

"""AgentVerse's and ChatEval's own task-file layout in `madlab.protocols.agentverse`: small files written here from memory of that layout
(not copies), run through `madlab run` with no --task; refused features named with the file; the classroom order against a scripted
professor; the reflection trigger against a hand computation."""
import json, os, subprocess, sys
from pathlib import Path
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from madlab.cli import main
from madlab.core import Completion, Usage, Transcript
from madlab.backends import Backend
from madlab.debate import Debate
from madlab.tasks.scenario import load_scenarios
from madlab.tasks.pairwise import load_faireval
from madlab.protocols.agentverse import (ConfigError, config_from_dict, example_path, load_config, reflection_due, memory_score)

EXAMPLES = ["debate_sequential", "brainstorm_concurrent", "independent", "pairwise_eval", "prisoners_dilemma"]
SCENARIO = load_scenarios(example_path("prisoners_dilemma").with_name("scenarios.jsonl"))[0]
SYNTH = "synthetic:strong,synthetic:medium,synthetic:weak"

def talk(script):
    "A backend whose reply is `script(agent, n, phase, prompt)` (n counts that agent's calls of that phase)."
    class Scripted(Backend):
        def __init__(self): self.n = {}
        async def complete(self, messages, ctx=None, **params):
            key = (ctx.agent, ctx.phase); self.n[key] = self.n.get(key, 0) + 1
            return Completion(script(ctx.agent, self.n[key], ctx.phase, messages[-1]["content"]), Usage(3, 3, 0))
    return Scripted()

def team(names, script):
    from madlab.agents import Agent
    b = talk(script)
    return [Agent(n, "scripted:", backend=b) for n in names]

PROMPT = "${role_description}\nHistory:\n${chat_history}\n${env_description}\nAnswer as Action: ... / Action Input: ..."

def classroom(n_students=2, parser="nlp_classroom_9players_group", max_turns=8, **vis):
    names = ["Professor Ada"] + [f"Student {x}" for x in ["Bob", "Cy", "Di", "Ed"][:n_students]]
    return {"prompts": {"p": PROMPT}, "name": "a small classroom",
            "environment": {"env_type": "sim-basic", "max_turns": max_turns,
                            "rule": {"order": {"type": "classroom"}, "visibility": {"type": "classroom", **vis}, "selector": {"type": "classroom"},
                                     "updater": {"type": "classroom"}, "describer": {"type": "classroom", "start_prompt": "Your group: ${receiver_name}.", "end_prompt": "Discussion over."}}},
            "agents": [{"agent_type": "conversation", "name": n, "role_description": f"You are {n}.", "prompt_template": PROMPT, "memory": {"memory_type": "chat_history"},
                        "llm": {"llm_type": "gpt-4", "model": "gpt-4", "temperature": 0.7, "max_tokens": 100}, "output_parser": {"type": parser}, "verbose": True}
                       for n in names], "tools": None}

def test_classroom_order_against_a_scripted_professor():
    prof = {1: "Action: Speak\nAction Input: Welcome.", 2: "Action: Speak\nAction Input: Any questions?", 3: "Action: CallOn\nAction Input: Yes, Bob",
            4: "Action: GroupDiscuss\nAction Input: Discuss in pairs.", 5: "Action: Speak\nAction Input: Back to me."}
    def script(agent, n, phase, prompt):
        if agent.startswith("Professor"): return prof.get(n, "Action: Speak\nAction Input: Fine.")
        if agent == "Student Bob" and n == 1: return "Action: RaiseHand\nAction Input: None"
        return "Action: Listen\nAction Input: None" if n == 1 else f"Action: Speak\nAction Input: {agent} says {n}."
    cfg = load_config_from(classroom(4, max_turns=9, student_per_group=2, num_discussion_turn=2))
    t = Debate("agentverse", SCENARIO, team(cfg.names, script), config=cfg).run()
    P, B, C, D, E = cfg.names
    assert [r.meta["speakers"] for r in t.rounds] == [
        [P],                 # the class begins: only the professor
        [P, B, C, D, E],     # after the professor spoke, everyone may act: Bob raises his hand, the others listen
        [P],                 # the professor and a raised hand were kept: the professor again
        [B],                 # "[CallOn] Yes, Bob"
        [P],                 # after a student, the professor: he starts a group discussion
        [B, D],              # groups of two (Bob, Cy) and (Di, Ed): the first of each speaks
        [C, E],              # then the second
        [P],                 # the discussion ended after 2 turns: the professor
        [P, B, C, D, E]]
    r1 = t.rounds[1]
    assert r1.meta["said"][B] == "[RaiseHand]" and set(r1.meta["received"]) == {P, B}      # the listeners were dropped, the hand kept
    assert sorted(r1.meta["received"][B]) == sorted(cfg.names)
    grouped = t.rounds[5]
    assert grouped.meta["received"] == {B: [B, C], D: [D, E]}
    assert grouped.meta["descriptions"] == {B: f"Your group: {B}, {C}.", C: f"Your group: {B}, {C}.", D: f"Your group: {D}, {E}.", E: f"Your group: {D}, {E}."}
    assert "[Discussing]" in t.rounds[5].meta["memory"][P] and t.rounds[5].meta["rules"]["environment"]["params"]["is_grouped"] is True
    assert t.rounds[7].meta["descriptions"] == {n: "Discussion over." for n in cfg.names}
    assert t.rounds[7].meta["rules"]["environment"].get("receivers", {}) == {}

def load_config_from(d):
    return config_from_dict(yaml.safe_load(yaml.safe_dump(d)))

def test_prisoner_order_and_describer():
    pd_cfg = {"environment": {"env_type": "prisoner_dilemma", "max_turns": 8, "rule": {"order": {"type": "prisoner"}, "visibility": {"type": "prisoner"},
                                                                                    "selector": {"type": "basic"}, "updater": {"type": "basic"}, "describer": {"type": "prisoner"}}},
              "agents": [{"agent_type": t, "name": n, "role_description": "${personality} Be brief.", "personality": f"{n} is calm.", "prompt_template": "${role_description} ${env_description} ${chat_history}",
                          "memory": {"memory_type": "chat_history"}, "output_parser": {"type": "prisoner_dilemma"}} for t, n in (("police", "Police"), ("prisoner", "S1"), ("prisoner", "S2"))]}
    cfg = load_config_from(pd_cfg)
    t = Debate("agentverse", SCENARIO, team(cfg.names, lambda a, n, ph, p: f"Action: Speak\nAction Input: {a} #{n}"), config=cfg).run()
    assert [r.meta["speakers"][0] for r in t.rounds] == ["Police", "S1", "Police", "S2"] * 2
    assert [sorted(r.meta["received"][r.meta["speakers"][0]]) for r in t.rounds[:5]] == [["Police", "S1", "S2"], ["Police", "S1"], ["Police", "S2"], ["Police", "S2"], ["Police", "S1"]]
    assert t.rounds[2].meta["descriptions"] == {"Police": "You are now talking to S2"}
    assert "S1 is calm." in t.rounds[1].turns[0].messages[-1]["content"]          # an agent's own field in its role description

def test_reflection_trigger_against_a_hand_computation():
    # both agents speak every turn; A's memory gains two distinct lines per turn (its own and B's) plus its insights;
    # every line is rated 4 for importance. Before A's turn k it holds 2(k-1) lines (+ distinct insights):
    # turn 2: 8 < 10; turn 3: 16 >= 10 -> reflect, threshold 20; turn 4: 6 lines + 1 insight = 28 >= 20 -> reflect, threshold 40;
    # turn 5: 8 + 1 (the same insight) = 36 < 40; turn 6: 10 + 1 = 44 >= 40 -> reflect, threshold 80.
    def script(agent, n, phase, prompt):
        return {"importance": "Rating: 4", "immediacy": "1", "questions": "What happened?", "insights": "1. things happen (because of 1)"}.get(phase, f"<<{agent} {n}>>")
    cfg = config_from_dict({"environment": {"env_type": "reflection", "max_turns": 6, "current_time": "2023-04-01 07:00:00", "time_delta": 1800,
                                            "rule": {"order": {"type": "concurrent"}}},
                            "agents": [{"agent_type": "reflection", "name": "A", "prompt_template": "${chat_history}", "memory": {"memory_type": "vectorstore"},
                                        "memory_manipulator": {"memory_manipulator_type": "reflection"}},
                                       {"agent_type": "reflection", "name": "B", "prompt_template": "${chat_history}"}]})
    t = Debate("agentverse", SCENARIO, team(["A", "B"], script), config=cfg).run()
    kinds = lambda r: [x.meta.get("kind") for x in r.turns if x.agent == "A" and x.meta.get("kind")]
    assert [i + 1 for i, r in enumerate(t.rounds) if "insights" in kinds(r)] == [3, 4, 6]
    st = t.rounds[-1].meta["rules"]["memory_manipulators"]["A"]
    assert st["threshold"] == 80 and st["accumulated"] == 44 and st["insights"][0] == "things happen"
    assert reflection_due(16, 10) == (True, 20) and reflection_due(36, 40) == (False, 40)
    # recency: 0.99 per whole hour since last access, 0.90 per whole minute since creation, each times its rating / 10
    assert memory_score(0.5, 8, 2, 3.7, 0.5) == pytest.approx(0.5 * max(0.99 ** 3 * 0.8, 1.0 * 0.2))
    assert memory_score(1.0, 1, 9, 100, 2) == pytest.approx(max(0.99 ** 100 * 0.1, 0.9 ** 2 * 0.9))

def write(tmp_path, name, d):
    p = tmp_path / name; p.write_text(yaml.safe_dump(d, sort_keys=False)); return p

@pytest.mark.parametrize("bad,feature", [
    ({"tools": [{"tool_name": "bing_search", "tool_url": "http://127.0.0.1:8079/tools/bing_search/"}]}, "tools: tool use is not implemented in madlab (tools: bing_search)"),
    ({"environment": {"env_type": "pokemon", "locations": [{"name": "Town"}]}}, "environment.env_type: 'pokemon': AgentVerse's Pokémon game"),
    ({"agents": [{"agent_type": "tool", "name": "Solver", "tools": [{"tool_name": "wolframalpha"}]}]}, "agents[0].agent_type: tool use is not implemented in madlab (tools: wolframalpha)"),
])
def test_refused_before_any_call_naming_the_feature_and_the_file(tmp_path, bad, feature):
    d = classroom(1)
    for k, v in bad.items(): d[k] = {**d[k], **v} if k == "environment" else v
    p = write(tmp_path, "refused.yaml", d)
    with pytest.raises(ConfigError) as e: load_config(p)
    assert str(e.value).startswith(f"{p}: ") and feature in str(e.value)
    r = CliRunner().invoke(main, ["run", "agentverse", "--config", str(p), "--n", "1", "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and feature in r.output and "Traceback" not in r.output and not (tmp_path / "out").exists()

def test_madlab_layout_typos_still_caught():
    with pytest.raises(ConfigError, match=r"environment.max_turn: unknown field"): config_from_dict({"agents": [{"name": "A"}], "environment": {"max_turn": 3}})
    with pytest.raises(ConfigError, match=r"agents\[0\].agent_type: unknown agent_type 'conversaton'"): config_from_dict({"agents": [{"name": "A", "agent_type": "conversaton"}]})
    with pytest.raises(ConfigError, match=r"agents\[0\].output_parser.type: unknown output parser 'nlp_clasroom'"): config_from_dict({"agents": [{"name": "A", "output_parser": {"type": "nlp_clasroom"}}]})
    with pytest.raises(ConfigError, match=r"agents\[0\].personalty: unknown field"): config_from_dict({"environment": {"env_type": "sim-basic"}, "agents": [{"name": "A", "personalty": "x"}]})
    with pytest.raises(ConfigError, match=r"memory_manipulator_type: unknown memory manipulator 'reflexion'"):
        config_from_dict({"agents": [{"name": "A", "memory_manipulator": {"memory_manipulator_type": "reflexion"}}]})

def run_cli(tmp_path, *args):
    env = {**os.environ, "MADLAB_CACHE": str(tmp_path / "cache")}
    cmd = [str(Path(sys.executable).parent / "madlab"), "run", "agentverse", *map(str, args), "--out", str(tmp_path / "out"), "--no-progress"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)

@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_runs_with_no_task(name, tmp_path):
    p = run_cli(tmp_path, "--config", example_path(name), "--n", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    run_dir = Path(p.stdout.strip().splitlines()[-1].removeprefix("outputs: "))
    df = pd.read_parquet(run_dir / "results.parquet")
    assert set(df.status) == {"done"} and json.loads((run_dir / "config.json").read_text())["task"] == load_config(example_path(name)).task

def test_a_conflicting_task_is_a_usage_error(tmp_path):
    p = run_cli(tmp_path, "--config", example_path("debate_sequential"), "--task", "arith", "--n", "2")
    assert p.returncode == 2 and "--task arith: the config is written for 'kks' items" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "out").exists()

def test_agentverse_files_run_offline_and_list_what_is_ignored(tmp_path):
    d = classroom(2)
    d["environment"]["task_name"] = "HumanEval/0"
    p = write(tmp_path, "classroom.yaml", d)
    r = run_cli(tmp_path, "--config", p, "--n", "1", "--agents", SYNTH)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ignored: ") == 1 and "environment.task_name" in r.stdout and "agents[*].verbose" in r.stdout
    run_dir = Path(r.stdout.strip().splitlines()[-1].removeprefix("outputs: "))
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["task"] == "scenario" and any(x.startswith("agents[*].verbose") for x in cfg["ignored"])
    assert "agent_types" not in cfg and "agent type " not in r.stdout         # AgentVerse's own agent types: nothing to map
    t = json.loads(next((run_dir / "debates").glob("*/transcript.json")).read_text())
    assert len(t["rounds"]) == 8 and t["rounds"][0]["meta"]["speakers"] == ["Professor Ada"]

def test_chateval_referees_on_faireval_data_with_kappa(tmp_path):
    recs = [{"question_id": i, "question": f"Question {i}?", "response": {"gpt35": f"Long careful answer {i}.", "vicuna": f"Short answer {i}."},
             **({"preference": [1, 2, 0][i % 3]} if i != 4 else {})} for i in range(1, 7)]
    (tmp_path / "data").mkdir(); (tmp_path / "data" / "test.json").write_text(json.dumps(recs))
    items = load_faireval(tmp_path / "data" / "test.json")
    assert [it.gold for it in items] == [2, 0, 1, None, 0, 1] and items[0].data["answer_1"] == "Long careful answer 1." and items[0].meta["models"] == ["gpt35", "vicuna"]
    final = "Output two lines:\nThe score of Assistant 1: [score only]\nThe score of Assistant 2: [score only]"
    conf = {"task": "llmeval", "data_path": "data/test.json", "output_dir": "./outputs/llm_eval",
            "prompts": {"prompt": "[Question]\n${source_text}\n[Assistant 1]\n${compared_text_one}\n[Assistant 2]\n${compared_text_two}\n${role_description}\n${agent_name}\n${final_prompt}"},
            "environment": {"env_type": "llm_eval", "max_turns": 4, "rule": {"order": {"type": "sequential"}, "visibility": {"type": "llmeval_blind_judge"},
                                                                             "selector": {"type": "basic"}, "updater": {"type": "basic"}, "describer": {"type": "basic"}}},
            "agents": [{"agent_type": "llm_eval_multi", "name": n, "final_prompt_to_use": final, "role_description": f"You are {n}.", "memory": {"memory_type": "chat_history"},
                        "memory_manipulator": {"memory_manipulator_type": "basic"}, "prompt_template": "PLACEHOLDER",
                        "llm": {"model": "gpt-4", "llm_type": "gpt-4", "temperature": 0, "max_tokens": 512}} for n in ("General Public", "Critic")], "tools": None}
    for a in conf["agents"]: a["prompt_template"] = conf["prompts"]["prompt"]
    p = write(tmp_path, "config.yaml", conf)
    cfg = load_config(p)
    assert (cfg.task, cfg.final_turns, cfg.aggregation) == ("pairwise", 2, {"type": "average", "both_orders": False})
    r = run_cli(tmp_path, "--config", p, "--agents", "synthetic:strong,synthetic:medium")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Cohen's kappa against human labels: " in r.stdout and "n/a" not in r.stdout and "ignored: output_dir" in r.stdout
    run_dir = Path(r.stdout.strip().splitlines()[-1].removeprefix("outputs: "))
    df = pd.read_parquet(run_dir / "results.parquet")
    assert len(df) == 6 and df.preference.notna().all()
    t = json.loads((run_dir / "debates" / "1" / "transcript.json").read_text())
    sent = lambda k: t["rounds"][k]["turns"][0]["messages"][-1]["content"]
    assert "Long careful answer 1." in sent(0) and final not in sent(1) and final in sent(2) and final in sent(3)
    assert t["rounds"][3]["meta"]["received"] == {"Critic": ["Critic"]} and sorted(t["rounds"][2]["meta"]["received"]["General Public"]) == ["Critic", "General Public"]
    missing = write(tmp_path, "elsewhere.yaml", {**conf, "data_path": "nowhere/test.json"})
    r = run_cli(tmp_path, "--config", missing)
    assert r.returncode == 2 and "data_path nowhere/test.json is not found" in r.stderr

# a two-player arithmetic game with tools, in the layout of AgentVerse's tool files (written here, not copied)
TOOL_PROMPT = ("Play the arithmetic game. Tools you may use:\n${tools}\nAction: one of [${tool_names}] or Speak\nAction Input: ...\n"
               "History:\n${chat_history}\nTool log:\n${tool_observation}\n${role_description}")

def tool_game(**top):
    tools = [{"tool_name": "wolframalpha", "tool_url": "http://127.0.0.1:8079/tools/wolframalpha/"}]
    return {"prompts": {"prompt": TOOL_PROMPT}, "tools": tools, **top,
            "environment": {"env_type": "sim-basic", "max_turns": 4, "rule": {k: {"type": "basic"} for k in ("selector", "updater", "describer")} | {"order": {"type": "sequential"}, "visibility": {"type": "all"}}},
            "agents": [{"agent_type": "tool", "name": n, "role_description": f"You are {n}.", "memory": {"memory_type": "chat_history"}, "prompt_template": TOOL_PROMPT,
                        "llm": {"llm_type": "gpt-4", "model": "gpt-4", "max_tokens": 100}, "output_parser": {"type": "math_problem_2players_tools"}, "tools": tools,
                        **({"tool_memory": {"memory_type": "summary"}} if n == "Bob" else {})} for n in ("Alice", "Bob")]}

def test_drop_tools_runs_the_tool_free_part_and_says_so(tmp_path):
    p = write(tmp_path, "tool_game.yaml", tool_game())
    with pytest.raises(ConfigError, match=r"tools: tool use is not implemented in madlab \(tools: wolframalpha\); give --drop-tools"): load_config(p)
    r = run_cli(tmp_path, "--config", p, "--n", "1", "--agents", SYNTH)
    assert r.returncode == 2 and "give --drop-tools" in r.stderr and "Traceback" not in r.stderr and not (tmp_path / "out").exists()
    cfg = load_config(p, drop_tools=True)
    assert cfg.dropped_tools == {"Alice": ["wolframalpha"], "Bob": ["wolframalpha"]}
    assert [a.variables for a in cfg.agents] == [{"tools": "", "tool_names": "", "tool_observation": ""}] * 2     # as AgentVerse fills them with no tools
    assert load_config(write(tmp_path, "opted_in.yaml", tool_game(drop_tools=True))).dropped_tools == cfg.dropped_tools      # the file may opt in itself
    with pytest.raises(ConfigError, match=r"drop_tools: must be true or false"): config_from_dict(tool_game(drop_tools="yes"))
    r = run_cli(tmp_path, "--config", p, "--drop-tools", "--n", "1", "--agents", SYNTH)
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert r.stdout.count("tools dropped: ") == 1
    assert "tools dropped: Alice (wolframalpha); Bob (wolframalpha): the tool agents ran as plain conversational agents, so this is not the original experiment" in r.stdout
    run_dir = Path(r.stdout.strip().splitlines()[-1].removeprefix("outputs: "))
    conf = json.loads((run_dir / "config.json").read_text())
    assert conf["tools_dropped"] == {"Alice": ["wolframalpha"], "Bob": ["wolframalpha"]} and conf["options"]["drop_tools"] is True
    t = Transcript.from_json(next((run_dir / "debates").glob("*/transcript.json")))
    sent = [tu.messages[-1]["content"] for r in t.rounds for tu in r.turns]
    assert len(t.rounds) == 4 and all("Tools you may use:\n\nAction: one of [] or Speak" in s for s in sent) and t.result["tools_dropped"]["Bob"] == ["wolframalpha"]

def test_pokemon_stays_refused_with_drop_tools(tmp_path):
    d = tool_game()
    d["environment"].update(env_type="pokemon", locations=[{"name": "Pallet Town"}])
    p = write(tmp_path, "pokemon.yaml", d)
    with pytest.raises(ConfigError, match="environment.env_type: 'pokemon'"): load_config(p, drop_tools=True)
    r = run_cli(tmp_path, "--config", p, "--drop-tools", "--n", "1", "--agents", SYNTH)
    assert r.returncode == 2 and "'pokemon': AgentVerse's Pokémon game" in r.stderr and "Traceback" not in r.stderr

def test_unreadable_replies_are_asked_again_up_to_max_retry():
    def script(agent, n, phase, prompt):      # two unreadable replies, then a readable one
        return "I would rather just talk." if n <= 2 else "Action: Speak\nAction Input: I stay silent."
    one = lambda **a: {"environment": {"env_type": "sim-basic", "max_turns": 1},
                       "agents": [{"name": "S1", "prompt_template": "${chat_history}", "output_parser": {"type": "prisoner_dilemma"}, **a}]}
    t = Debate("agentverse", SCENARIO, team(["S1"], script), config=config_from_dict(one())).run()
    turns = t.rounds[0].turns
    assert [(x.meta.get("kind"), x.meta.get("attempt"), x.meta.get("parse_failed")) for x in turns] == [("unreadable", 1, True), ("unreadable", 2, True), (None, 3, None)]
    assert [x.reply for x in turns[:2]] == ["I would rather just talk."] * 2 and t.rounds[0].meta["said"] == {"S1": "I stay silent."}
    assert t.usage.prompt_tokens == 3 * 3                                      # every attempt counted (3 tokens each)
    t = Debate("agentverse", SCENARIO, team(["S1"], script), config=config_from_dict(one(max_retry=2))).run()   # the file's bound
    turns = t.rounds[0].turns
    assert [x.meta.get("kind") for x in turns] == ["unreadable", None] and turns[-1].meta == {"content": "", "attempt": 2, "parse_failed": True}
    assert t.rounds[0].meta["said"] == {"S1": ""} and t.usage.prompt_tokens == 2 * 3
    with pytest.raises(ConfigError, match=r"agents\[0\].max_retry: must be an integer in 1..100"): config_from_dict(one(max_retry=0))
    assert config_from_dict(one(max_retry=5)).agents[0].max_retry == 5 and config_from_dict(one()).agents[0].max_retry == 3    # AgentVerse's default

def test_an_edited_config_under_an_existing_run_folder_is_refused(tmp_path):
    import hashlib
    p = write(tmp_path, "classroom.yaml", classroom(2, max_turns=3))
    r = run_cli(tmp_path, "--config", p, "--n", "1", "--agents", SYNTH, "--name", "room")
    assert r.returncode == 0, r.stdout + r.stderr
    conf = json.loads((tmp_path / "out" / "room" / "config.json").read_text())
    assert conf["inputs"] == {"config": {"path": str(p), "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}}
    assert run_cli(tmp_path, "--config", p, "--n", "1", "--agents", SYNTH, "--name", "room").returncode == 0     # the same file resumes
    p.write_text(p.read_text().replace("You are Student Bob.", "You are Student Bob, who never listens."))
    r = run_cli(tmp_path, "--config", p, "--n", "1", "--agents", SYNTH, "--name", "room")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert f"holds a run of config {p} as it was then (sha256 {conf['inputs']['config']['sha256'][:12]}); that file has changed since" in " ".join(r.stderr.split())

def test_a_simulation_runs_as_one_item_built_from_its_config(tmp_path):
    d = classroom(2, max_turns=3)
    d["name"] = "Small NLP Classroom"
    d["environment"]["task_name"] = "HumanEval/0"          # AgentVerse's problem lookup: not the id (madlab does not look problems up)
    p = write(tmp_path, "small_classroom.yaml", d)
    args = ("--config", p, "--agents", SYNTH, "--name", "room")
    r = run_cli(tmp_path, *args, "--n", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "items: Small_NLP_Classroom, built from the config" in r.stderr and "not scored: 1 item has no gold answer" in r.stdout
    run_dir = tmp_path / "out" / "room"
    assert [q.name for q in (run_dir / "debates").iterdir()] == ["Small_NLP_Classroom"]
    df = pd.read_parquet(run_dir / "results.parquet")
    assert df.item_id.tolist() == ["Small_NLP_Classroom"] and df.gold.isna().all() and df.correct.isna().all() and not df.resumed.any()
    conf = json.loads((run_dir / "config.json").read_text())
    assert (conf["task"], conf["items_from"], conf["data"]) == ("scenario", "config", None)
    t = Transcript.from_json(run_dir / "debates" / "Small_NLP_Classroom" / "transcript.json")
    assert t.item.id == "Small_NLP_Classroom" and t.item.gold is None and t.item.prompt.splitlines()[:2] == [
        "Small NLP Classroom", "an AgentVerse simulation (sim-basic): 3 turns, order classroom, visibility classroom."]
    assert "- Student Bob: You are Student Bob." in t.item.prompt and "HumanEval" not in t.item.prompt
    page = (run_dir / "debates" / "Small_NLP_Classroom" / "log.html").read_text()
    assert "<title>agentverse debate Small_NLP_Classroom</title>" in page and "no gold answer: not scored" in page
    from madlab.widgets import DebateStepper
    s = DebateStepper(t)
    assert "<code>Small_NLP_Classroom</code>" in s.w_item.value and "no gold answer: not scored" in s.w_item.value
    # the same command again resumes: nothing is redone (the transcript file is not written again)
    tp = run_dir / "debates" / "Small_NLP_Classroom" / "transcript.json"
    before = (tp.stat().st_ino, tp.stat().st_mtime_ns, tp.read_bytes())
    r = run_cli(tmp_path, *args, "--n", "1", "--no-cache")
    assert r.returncode == 0 and "1 items: 1 done (1 resumed)" in r.stdout, r.stdout + r.stderr
    assert (tp.stat().st_ino, tp.stat().st_mtime_ns, tp.read_bytes()) == before and pd.read_parquet(run_dir / "results.parquet").resumed.all()
    # --n 2 runs it once, as any task with fewer items than --n; --items 2 names the one there is
    r = run_cli(tmp_path, *args, "--n", "2", "--no-cache")
    assert r.returncode == 0 and "1 items: 1 done (1 resumed)" in r.stdout, r.stdout + r.stderr
    assert pd.read_parquet(run_dir / "results.parquet").item_id.tolist() == ["Small_NLP_Classroom"]
    r = run_cli(tmp_path, *args, "--items", "2")
    assert r.returncode == 2 and "there is only 1 item in the config; got 2" in r.stderr and "Traceback" not in r.stderr

def test_a_simulation_item_id_and_when_items_come_from_a_task(tmp_path):
    from madlab.protocols.agentverse import config_item
    d = classroom(1)
    del d["name"]
    assert config_item(write(tmp_path, "my_room.yaml", d)).id == "my_room"                     # no name: the file's stem
    (tmp_path / "nlp_room").mkdir()
    assert config_item(write(tmp_path / "nlp_room", "config.yaml", d)).id == "nlp_room"        # AgentVerse's tasks/<name>/config.yaml
    assert config_item({**d, "name": "  Café: 3 players! "}).id == "Caf_3_players"
    assert config_item({**d, "name": "x", "description": "A lecture."}).prompt.startswith("x: A lecture.\n")
    pd_cfg = {"name": "prisoner_dilemma", "environment": {"env_type": "prisoner_dilemma", "max_turns": 2},
              "agents": [{"name": n, "role_description": "${personality}", "personality": f"{n} is calm.", "prompt_template": "${role_description} ${chat_history}"} for n in ("Police", "S1")]}
    it = config_item(pd_cfg)
    assert it.id == "prisoner_dilemma" and "- S1: S1 is calm." in it.prompt                   # the agents' own fields filled in
    # templates that take the item, or a config of another task: its items come from the task
    for asks in ("${question}", "$prompt", "${context}"):
        d2 = classroom(1); d2["agents"][0]["prompt_template"] = PROMPT + asks
        assert config_item(d2) is None
    assert config_item(example_path("prisoners_dilemma")) is None and config_item(example_path("debate_sequential")) is None
    p = run_cli(tmp_path, "--config", example_path("prisoners_dilemma"), "--n", "2", "--name", "pd")
    assert p.returncode == 0 and "built from the config" not in p.stderr, p.stdout + p.stderr
    assert [q.name for q in (tmp_path / "out" / "pd" / "debates").iterdir()] == ["prisoners-dilemma"]      # madlab's file still gets its scenario
    # --data given: the items are the data's, not the config's
    (tmp_path / "s.jsonl").write_text(json.dumps({"id": "picnic", "prompt": "Plan a picnic."}) + "\n")
    p = run_cli(tmp_path, "--config", write(tmp_path, "room.yaml", classroom(1, max_turns=2)), "--data", tmp_path / "s.jsonl", "--agents", SYNTH, "--name", "d")
    assert p.returncode == 0 and "built from the config" not in p.stderr, p.stdout + p.stderr
    assert pd.read_parquet(tmp_path / "out" / "d" / "results.parquet").item_id.tolist() == ["picnic"]

# a debate agent of a project's own type, in the layout of AgentVerse's task files (written here, not copied)
MY_PROMPT = "You are ${agent_name}.\nContext: ${context}\nQuestion: ${question}\nThe debate so far:\n${chat_history}\nYour argument:"

def my_debaters(bob=None):
    rule = {"order": {"type": "sequential"}, "visibility": {"type": "all"}, **{k: {"type": "basic"} for k in ("selector", "updater", "describer")}}
    return {"environment": {"env_type": "sim-basic", "max_turns": 3, "rule": rule},
            "agents": [{"agent_type": "my_debater", "name": "Alice", "role_description": "You argue for the plan.", "context": "The forecast says sun all day.",
                        "prompt_template": MY_PROMPT, "memory": {"memory_type": "chat_history"}, "llm": {"llm_type": "gpt-4", "model": "gpt-4"}, "verbose": True},
                       {"agent_type": "my_debater", "name": "Bob", "prompt_template": MY_PROMPT, **(bob or {})}]}

MY_MAPPING = {"runs_as": "conversation", "agents": ["Alice", "Bob"], "placeholders": {
    "${agent_name}": "the agent's name",
    "${context}": "the agent's own field context (Alice) | the item's context field ('' when it has none) (Bob)",
    "${question}": "the item's question (its prompt when it has no question field)",
    "${chat_history}": "the agent's memory (chat_history), a '[sender]: text' line per message"}}

def test_an_agent_type_of_the_projects_own_runs_as_the_conversation_agent(tmp_path):
    p = write(tmp_path, "my_debate.yaml", my_debaters())
    (tmp_path / "q.jsonl").write_text(json.dumps({"id": "picnic", "prompt": "Should we have a picnic tomorrow?"}) + "\n")
    r = run_cli(tmp_path, "--config", p, "--data", tmp_path / "q.jsonl", "--agents", "synthetic:strong,synthetic:weak", "--name", "mine")
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    run_dir = tmp_path / "out" / "mine"
    t = Transcript.from_json(run_dir / "debates" / "picnic" / "transcript.json")
    turns = [tu for rd in t.rounds for tu in rd.turns]
    assert [tu.agent for tu in turns] == ["Alice", "Bob", "Alice"] and all(tu.reply for tu in turns)
    assert all(len(tu.messages) == 1 for tu in turns)          # as AgentVerse's conversation agent: the filled template is the one message sent
    sent, (a1, b1, _) = [tu.messages[0]["content"] for tu in turns], [tu.reply for tu in turns]
    q = "Question: Should we have a picnic tomorrow?\nThe debate so far:\n"
    assert sent[0] == f"You are Alice.\nContext: The forecast says sun all day.\n{q}\nYour argument:"
    assert sent[1] == f"You are Bob.\nContext: \n{q}[Alice]: {a1}\nYour argument:"
    assert sent[2] == f"You are Alice.\nContext: The forecast says sun all day.\n{q}[Alice]: {a1}\n[Bob]: {b1}\nYour argument:"
    assert t.result["agent_types"] == {"my_debater": MY_MAPPING}
    conf = json.loads((run_dir / "config.json").read_text())
    assert conf["agent_types"] == {"my_debater": MY_MAPPING} and conf["ignored"] == ["agents[*].verbose (madlab logs every turn)"]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("agent type my_debater: "))
    assert r.stdout.count("agent type ") == 1 and line.startswith("agent type my_debater: ran as AgentVerse's conversation agent (Alice, Bob); placeholders: ${agent_name} <- the agent's name; ")
    assert "${question} <- the item's question" in line and "${chat_history} <- the agent's memory (chat_history)" in line
    assert (run_dir / "agentverse_report.txt").read_text().count("agent type my_debater: ") == 1

@pytest.mark.parametrize("bob,said", [
    ({"prompt_template": None}, "agents[1].agent_type: unknown agent_type 'my_debater'; madlab runs: conversation, llm_eval_multi, police, prisoner, reflection"),
    ({"prompt_template": MY_PROMPT + " ${advice}"}, "agents[1].prompt_template: ${advice}: madlab has no value for it (agent_type 'my_debater'"),
])
def test_an_agent_type_of_the_projects_own_refused_before_any_call(tmp_path, bob, said):
    p = write(tmp_path, "my_debate.yaml", my_debaters(bob))
    with pytest.raises(ConfigError) as e: load_config(p)
    assert str(e.value).startswith(f"{p}: ") and said in str(e.value)
    r = run_cli(tmp_path, "--config", p, "--n", "1", "--agents", SYNTH)
    assert r.returncode == 2 and said in " ".join(r.stderr.split()) and "Traceback" not in r.stderr and not (tmp_path / "out").exists()
    fixed = my_debaters({**bob, "prompt_template": MY_PROMPT + " ${advice}", "advice": "Be brief."})     # a field of the agent fills it
    assert load_config(write(tmp_path, "fixed.yaml", fixed)).agents[1].variables == {"advice": "Be brief."}

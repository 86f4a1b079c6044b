"""Hidden context end to end outside any protocol that shows it: a task file's `context:` template fills `Item.context`;
a du run on items with a context never sends the context in any request (a fake OpenAI server reads every request;
synthetic agents' histories hold every message) and its transcripts record that nobody saw it; a debate on items
without a context is recorded as before."""
import json
from click.testing import CliRunner
from fake_openai_server import FakeOpenAIServer
from madlab.agents import Agent
from madlab.backends import OpenAIBackend
from madlab.cli import main
from madlab.core import Item, Transcript
from madlab.protocol import context_prompt, record_context_seen
from madlab.run import run_experiment
from madlab.tasks import task_items
from madlab.tasks.arith import toy_arith_items
from madlab.tasks.stories import story_items

def _sentences(item):
    "The context's sentences: any one of them in a request would leak it."
    return [s for s in item.context.split(". ") if len(s) > 12]

def _leaks(text, items) -> list:
    return [(it.id, s) for it in items for s in _sentences(it) if s in text]

def test_du_never_sends_the_context_to_a_server_and_records_that_nobody_saw_it():
    items = story_items(4, seed=11, facts=6, closeness="near", hops=(1, 2))
    with FakeOpenAIServer(reply="The story is not given to me.\nAnswer: A") as srv:
        team = [Agent(n, "openai:fake-model", backend=OpenAIBackend("fake-model", base_url=srv.url, api_key="k",
                                                                      max_retries=0)) for n in ("A", "B", "C")]
        res = run_experiment("du", items, team, rounds=2, cache=False)
        requests = [req for _, _, req in srv.log]
    turns = sum(len(rd.turns) for t in res.transcripts.values() for rd in t.rounds)
    assert len(requests) == turns >= 4 * 3 * 2                          # every agent, every round, every item
    sent = "\n".join(json.dumps(r["messages"]) for r in requests)
    assert not _leaks(sent, items) and all(it.prompt.split("\n")[0] in sent for it in items)
    assert res.df.answer.eq("A").all()
    for t in res.transcripts.values():
        assert t.meta["context_seen_by"] == [] and t.item.context is not None
        assert Transcript.from_json(t.to_json()).meta["context_seen_by"] == []

def test_synthetic_du_on_a_task_file_with_a_context_never_shows_it(tmp_path):
    story = "Ada Vell repaired the boat at Corran Quay. Bo Renn painted the boat the next morning."
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"s": story, "q": f"Who repaired the boat? ({i})", "a": "A"})
                                              + "\n" for i in range(3)))
    f = tmp_path / "t.yaml"
    f.write_text("name: hidden_rc\ndata: d.jsonl\nprompt: \"{{ q }}\\n\\nA. Ada Vell\\nB. Bo Renn\"\ngold: a\n"
                 "answer: {format: choice, letters: AB}\ncontext: '{{ s }}'\n")
    items = task_items(f)
    assert [it.context for it in items] == [story] * 3 and all(story not in it.prompt for it in items)
    r = CliRunner().invoke(main, ["run", "du", "--task", str(f), "--out", str(tmp_path / "out"), "--name", "r",
                                  "--no-cache", "--no-progress", "--rounds", "2"])
    assert r.exit_code == 0, r.output
    ts = [Transcript.from_json(p) for p in sorted((tmp_path / "out" / "r").rglob("transcript.json"))]
    assert len(ts) == 3
    for t in ts:
        assert t.item.context == story and t.meta["context_seen_by"] == []
        shown = [m.content for h in t.histories.values() for m in h.messages]
        shown += [json.dumps(tu.messages) for rd in t.rounds for tu in rd.turns]     # what each call was sent
        assert any("Who repaired the boat?" in c for c in shown)
        assert not [c for c in shown if "Corran Quay" in str(c)]

def test_items_without_a_context_are_recorded_as_before():
    res = run_experiment("du", toy_arith_items(2), ["synthetic:strong", "synthetic:weak"], rounds=1, cache=False)
    for t in res.transcripts.values():
        assert "context_seen_by" not in t.meta and "context" not in json.loads(t.to_json())["item"]

def test_a_protocol_shows_the_context_with_context_prompt_and_records_who_saw_it():
    it = Item("x", "arith", "Who fixed the boat?", context="Ada fixed the boat.")
    text = context_prompt(it)
    assert text.index("<context>") < text.index("Ada fixed the boat.") < text.index("</context>") < text.index("Who")
    meta = {}
    record_context_seen(meta, ["Debater A"]); record_context_seen(meta, ["Debater B", "Debater A"])
    assert meta == {"context_seen_by": ["Debater A", "Debater B"]}


# the solution as hidden context: task variants ------------------------------------------------------------------------
import pandas as pd
from conftest import needs_public_data
from madlab.core import public_data
from madlab.tasks.gsm8k import load_gsm8k
from madlab.tasks.kks import kks_solution
from madlab.puzzles import solve
from madlab.scoring import _to_number
import re

def test_kks_solution_runs_with_a_size_and_the_run_records_the_variant(tmp_path):
    out = CliRunner().invoke(main, ["tasks"])
    assert out.exit_code == 0 and "kks-solution:" in out.output and "gsm8k-solution:" in out.output
    r = CliRunner().invoke(main, ["run", "du", "--task", "kks-solution", "--size", "4", "--n", "3", "--out", str(tmp_path),
                                  "--name", "r", "--no-cache", "--no-progress", "--rounds", "1"])
    assert r.exit_code == 0, r.output
    run = tmp_path / "r"
    assert json.loads((run / "config.json").read_text())["task"] == "kks-solution"
    assert set(pd.read_parquet(run / "results.parquet").task) == {"kks-solution"}
    ts = [Transcript.from_json(p) for p in sorted(run.rglob("transcript.json"))]
    assert len(ts) == 3
    for t in ts:
        roles = dict(line[:-1].split(" is a ") for line in t.item.context.splitlines())
        right = dict(re.findall(r"(\w+) is a (\w+)\.", t.item.meta["options"][t.item.gold]))
        assert roles == right and solve(t.item.data) == [roles] and t.item.meta["context_from"] == "the solution"
        assert t.item.gold in "AB" and t.item.meta["distractor"]["label"] == "AB".replace(t.item.gold, "")
        assert t.meta["context_seen_by"] == []
        sent = json.dumps([tu.messages for rd in t.rounds for tu in rd.turns])
        assert json.dumps(t.item.context)[1:-1] not in sent and t.item.prompt.splitlines()[-1] in sent   # shown to nobody

@needs_public_data("GSM8K's test set", "gsm8k", "test.jsonl")
def test_gsm8k_solution_carries_the_reference_solution():
    from madlab.tasks import task_items
    base, var = load_gsm8k(public_data("gsm8k", "test.jsonl")), task_items("gsm8k-solution")
    assert [(b.prompt, b.gold) for b in base] == [(v.meta["question"], _to_number(v.meta["options"][v.gold]))
                                                  for v in var] and len(var) > 1000
    for b, v in zip(base[:200], var[:200]):
        steps = b.meta["solution"].rsplit("####", 1)[0]
        assert v.context.endswith(f"Answer: {b.meta['solution'].rsplit('####', 1)[1].strip()}")
        plain = ["".join(o.replace(">>", "<<").split("<<")[::2]).strip() for o in steps.strip().splitlines()]
        assert v.context.splitlines()[:-1] == plain and "<<" not in v.context        # the steps, calculator notes out
        assert v.task == "gsm8k-solution" and v.context not in v.prompt

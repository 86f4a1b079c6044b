"""The oversight protocol on the two-option variants of existing tasks, `gsm8k-solution` (the reference solution hidden)
and `kks-solution` (the game's solution hidden): every item's gold label is its right answer, both run end to end from
the command line, the truthful speaker quotes the solution verbatim, and no judge request carries the solution unless
the judge sees the context."""
from __future__ import annotations
import json, re
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import needs_public_data
from fake_openai_server import FakeOpenAIServer
from madlab.cli import main
from madlab.core import public_data
from madlab.puzzles import KKS_ROLES, solve
from madlab.run import run_experiment
from madlab.scoring import _to_number
from madlab.tasks import task_items
from madlab.tasks.gsm8k import gsm8k_gold, load_gsm8k
from madlab.tasks.kks import kks_violations
from test_oversight import TEAM, _judge_requests, _route_reply

GSM = needs_public_data("GSM8K's test set", "gsm8k", "test.jsonl")
# the same marks, for a parameter
GSM_MARKS = [pytest.mark.public_data, pytest.mark.skipif(public_data("gsm8k", "test.jsonl") is None,
                                                         reason="GSM8K's test set is missing (madlab data get gsm8k)")]

def _roles(text) -> dict: return dict(re.findall(r"(\w+) is a (\w+)\.", text))

# -- every gold label is the item's right answer --------------------------------------------------------------------

@GSM
def test_gsm8k_solution_gold_labels_the_reference_answer():
    base, var = load_gsm8k(public_data("gsm8k", "test.jsonl"), limit=400), task_items("gsm8k-solution")[:400]
    hows = set()
    for b, v in zip(base, var):
        opts, d = v.meta["options"], v.meta["distractor"]
        assert set(opts) == {"A", "B"} and v.gold in opts and d["label"] == "AB".replace(v.gold, "")
        assert opts[v.gold] == b.meta["solution"].rsplit("####", 1)[1].strip()       # the reference answer, verbatim
        assert _to_number(opts[v.gold]) == gsm8k_gold(b.meta["solution"]) == b.gold
        assert opts[d["label"]] == d["entity"] and _to_number(d["entity"]) != b.gold
        if d["how"] == "intermediate result":       # a result the solution states: its step computes it
            assert f"={d['step'].split('=')[-1]}>>" in b.meta["solution"]
            assert _to_number(d["step"].split("=")[-1]) == _to_number(d["entity"])
        else: assert d["how"] == "offset" and _to_number(d["entity"]) == b.gold + d["offset"]
        hows.add(d["how"])
        assert v.prompt == f"{b.prompt}\n\nA. {opts['A']}\nB. {opts['B']}" and v.context.endswith(opts[v.gold])
    assert hows == {"intermediate result", "offset"}
    golds = [v.gold for v in var]
    assert all(sorted(golds[k:k + 2]) == ["A", "B"] for k in range(0, 400, 2))       # balanced in seeded pairs

def test_kks_solution_gold_labels_the_games_one_solution():
    n = 0
    for size in (4, 5, 6, 7):
        for it in task_items("kks-solution", size=size)[:60]:
            opts, d = it.meta["options"], it.meta["distractor"]
            right, wrong = _roles(opts[it.gold]), _roles(opts[d["label"]])
            assert solve(it.data) == [right] and right == _roles(it.context)       # the solver's one solution
            assert [p for p in right if right[p] != wrong[p]] == [d["player"]] and wrong[d["player"]] == d["role"]
            # no other one-player change breaks fewer of the game's statements and hints
            least = min(kks_violations(it.data, {**right, p: r}) for p in right for r in KKS_ROLES if r != right[p])
            assert kks_violations(it.data, wrong) == d["broken"] == least > 0
            n += 1
    assert n == 240

# -- oversight runs on both --------------------------------------------------------------------------------------

@pytest.mark.parametrize("task", ["kks-solution", pytest.param("gsm8k-solution", marks=GSM_MARKS)])
def test_each_variant_runs_in_oversight_from_the_command_line(tmp_path, task):
    r = CliRunner().invoke(main, ["run", "oversight", "--task", task, "--n", "4", "--rounds", "2", "--baselines",
                                  "--no-cache", "--no-progress", "--out", str(tmp_path), "--name", "o"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "o" / "results.parquet")
    assert len(df) == 4 and (df.status == "done").all() and set(df.task) == {task}
    assert df.judge_probs.notna().all() and df.oracle_probs.notna().all()

@pytest.mark.parametrize("task", ["kks-solution", pytest.param("gsm8k-solution", marks=GSM_MARKS)])
def test_the_truthful_speaker_quotes_the_solution_verbatim(task):
    items = task_items(task)[:40]
    res = run_experiment("oversight", items=items, team=TEAM, cache=False, seed=7, progress=False, rounds=1)
    assert (res.df.status == "done").all()
    n = 0
    for t in res.transcripts.values():
        for tu in (tu for r in t.rounds if r.phase == "debate" for tu in r.turns):
            if tu.agent == "Debater 1" and tu.meta["side"] == t.item.gold:
                quotes = re.findall(r"<quote>(.*?)</quote>", tu.reply)
                assert quotes and tu.meta["verified_quotes"] == tu.meta["quotes"] == len(quotes)
                # a line of the solution, whole
                assert all(q.strip() in [x.strip() for x in re.split(r"\n|(?<=\.) ", t.item.context)] for q in quotes)
                n += 1
    assert n >= 10

# -- hidden means hidden --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(reply=_route_reply) as s: yield s

@pytest.fixture(autouse=True)
def _key(monkeypatch): monkeypatch.setenv("OPENAI_API_KEY", "sk-test")

@pytest.mark.parametrize("task", ["kks-solution", pytest.param("gsm8k-solution", marks=GSM_MARKS)])
@pytest.mark.parametrize("mode", ["debate", "consultancy"])
def test_no_judge_request_carries_the_solution_unless_the_judge_sees_it(server, task, mode):
    items = task_items(task)[:3]
    spec = f"openai:fake-model,base_url={server.url}"
    team = [{"name": "Debater 1", "spec": spec}, {"name": "Debater 2", "spec": spec},
            {"name": "Judge", "spec": spec, "role": "judge"}]
    # the solution as a whole (the KKS options repeat its lines one by one, joined otherwise)
    shows = lambda r, it: json.dumps(it.context)[1:-1] in json.dumps(r["messages"])
    for sees in ("question", "context"):
        since = len(server.log)
        res = run_experiment("oversight", items=items, team=team, cache=False, progress=False, rounds=2, mode=mode,
                             judge_sees=sees, **({"judge_turns": 1} if mode == "consultancy" else {}))
        assert (res.df.status == "done").all(), res.df.error.tolist()
        reqs, judged = _judge_requests(server, since)
        speeches = [r for r in reqs if r not in judged]
        assert judged and speeches and all(any(shows(r, it) for it in items) for r in speeches)
        carried = [any(shows(r, it) for it in items) or "<story>" in json.dumps(r["messages"]) for r in judged]
        assert all(carried) if sees == "context" else not any(carried), (sees, carried)

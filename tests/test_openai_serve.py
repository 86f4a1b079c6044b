"""The `openai:` backend against a real `transformers serve` on 127.0.0.1, serving a tiny random Llama built by
the test (offline: `HF_HUB_OFFLINE=1`). The server is pinned to the model folder, so the model name *is* that path."""
import os, signal, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest
from conftest import free_port
from madlab.core import run_sync
from madlab.backends import OpenAIBackend, get_backend
from madlab.debate import Debate
from madlab.run import run_many
from madlab.tasks.arith import toy_arith_items
from madlab.scoring import score_result
from madlab.scoring import extract_number as final_number
import madlab.protocols.baselines  # noqa: F401  (registers "du")

def test_models_lists_the_served_model(served):
    import json
    url, model = served
    with urllib.request.urlopen(f"{url}/models", timeout=5) as r: data = json.load(r)
    assert data["object"] == "list"

def test_backend_completes_and_records_usage(served):
    url, model = served
    b = get_backend(f"openai:{model}", base_url=url, max_retries=1, timeout=30)
    assert isinstance(b, OpenAIBackend)
    c = run_sync(b.complete([{"role": "user", "content": "What is 6 * 7?"}], max_tokens=8, temperature=0))
    assert isinstance(c.text, str) and c.usage.calls == 1
    assert c.usage.prompt_tokens > 5 and 0 < c.usage.completion_tokens <= 8
    assert not c.meta.get("usage_estimated") and c.meta["finish_reason"] in ("length", "stop")
    run_sync(b.aclose())

def test_debate_end_to_end_through_the_real_client(served, monkeypatch):
    url, model = served
    monkeypatch.setenv("OPENAI_BASE_URL", url)     # the way a user points spec strings at a server
    item = toy_arith_items(1, seed=3)[0]
    team = [{"name": f"Llama-{i}", "spec": f"openai:{model}", "params": {"max_tokens": 8, "temperature": 0}} for i in range(3)]
    d = Debate("du", item, team, rounds=1)
    t = d.run()
    assert d.meta["status"] == "done", d.meta
    turns = [tu for r in t.rounds for tu in r.turns]
    assert len(t.rounds) == 2 and len(turns) == 6
    assert all(tu.error is None for tu in turns), [tu.error for tu in turns]
    for tu in turns:                     # whatever the random model wrote was parsed, or recorded as invalid
        assert isinstance(tu.reply, str)
        assert tu.answer == final_number(tu.reply) and tu.valid == (tu.answer is not None)
        assert tu.usage.calls == 1 and tu.usage.prompt_tokens > 0 and 0 < tu.usage.completion_tokens <= 8
    assert any(not tu.valid for tu in turns), [tu.reply for tu in turns]
    assert score_result(item, t.result)["correct"] is False and t.result["invalid"] == sum(not tu.valid for tu in t.rounds[-1].turns)
    assert t.usage.total_tokens > 0 and t.usage.calls == 6
    assert not t.synthetic and all(a["spec"] == f"openai:{model}" for a in t.team)
    # the later round's prompts carry the other agents' replies
    assert "[Llama-1]" in turns[3].messages[-1]["content"]

def test_run_many_through_the_real_server(served, monkeypatch, tmp_path):
    url, model = served
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    team = [{"name": f"L{i}", "spec": f"openai:{model}", "params": {"max_tokens": 6, "temperature": 0}} for i in range(2)]
    items = toy_arith_items(3, seed=1)
    res = run_many("du", items, team, rounds=1, concurrency=3, cache=False, progress=False, out=tmp_path / "run")
    df = res.df
    assert list(df.item_id) == [it.id for it in items] and set(df.status) == {"done"}
    assert (df.calls == 4).all() and (df.prompt_tokens > 0).all() and (df.completion_tokens > 0).all()
    assert not df.correct.any() and (df.errors == 0).all()
    assert all((tmp_path / "run" / "debates" / it.id / "transcript.json").exists() for it in items)

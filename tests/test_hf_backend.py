"""The `hf:` backend in process with a tiny random Llama: batching of concurrent requests, per-request
`max_new_tokens`, greedy determinism, stop strings, and debates served by batched `generate` calls."""
import asyncio
import pytest
from madlab.core import run_sync
from madlab.backends import HFBackend, get_backend

Q = [{"role": "user", "content": "What is 6 * 7?"}]

def qs(i): return [{"role": "system", "content": "You are a careful debater."},
                   {"role": "user", "content": f"What is {i} + {i * 3} * 2? The answer is"}]

@pytest.fixture(scope="module")
def hf(tiny_model_dir):
    "One loaded backend for the module's backend-level tests (all calls run on madlab's runtime loop)."
    b = HFBackend(tiny_model_dir, max_new_tokens=16)
    run_sync(b.complete(Q, greedy=True, max_new_tokens=1))   # load once
    return b

def gather(b, reqs):
    async def go(): return await asyncio.gather(*(b.complete(m, **p) for m, p in reqs))
    return run_sync(go())

def test_spec_builds_lazily(tiny_model_dir):
    spec = f"hf:{tiny_model_dir},max_new_tokens=7"      # a spec no other test loads (one backend per spec and options is shared)
    b = get_backend(spec)
    assert isinstance(b, HFBackend) and b.model is None and b.spec == spec

def test_complete_records_usage(hf):
    c = run_sync(hf.complete(Q, greedy=True, max_new_tokens=8))
    assert isinstance(c.text, str) and c.usage.calls == 1
    assert c.usage.prompt_tokens > 5 and 0 < c.usage.completion_tokens <= 8
    assert c.model == hf.spec and c.latency > 0

def test_concurrent_requests_are_batched(hf):
    g0, r0 = hf.generate_calls, hf.requests
    out = gather(hf, [(qs(i), {"greedy": True, "max_new_tokens": 6}) for i in range(12)])
    assert len(out) == 12 and hf.requests - r0 == 12
    assert hf.generate_calls - g0 < 12 and max(hf.batch_sizes[-(hf.generate_calls - g0):]) > 1

def test_max_batch_splits(tiny_model_dir):
    b = HFBackend(tiny_model_dir, max_batch=4)
    gather(b, [(qs(i), {"greedy": True, "max_new_tokens": 2}) for i in range(10)])
    assert b.requests == 10 and all(n <= 4 for n in b.batch_sizes) and b.generate_calls >= 3

def test_per_request_max_new_tokens(hf):
    limits = [1, 3, 7, 12]
    out = gather(hf, [(qs(i), {"greedy": True, "max_new_tokens": n}) for i, n in enumerate(limits)])
    for c, n in zip(out, limits): assert 0 <= c.usage.completion_tokens <= n, (c.usage, n)
    assert max(c.usage.completion_tokens for c in out) > 1   # the random model does not stop at once everywhere

def test_openai_style_max_tokens_is_respected(hf):
    "`max_tokens` (what agents written for `openai:` pass) beats the backend's default `max_new_tokens`."
    out = gather(hf, [(qs(i), {"greedy": True, "max_tokens": 2}) for i in range(3)])
    assert all(c.usage.completion_tokens <= 2 for c in out)

def test_greedy_is_deterministic(hf):
    a = run_sync(hf.complete(qs(5), greedy=True, max_new_tokens=10))
    b = run_sync(hf.complete(qs(5), temperature=0, max_new_tokens=10))
    both = gather(hf, [(qs(5), {"greedy": True, "max_new_tokens": 10})] * 2)
    assert a.text == b.text == both[0].text == both[1].text
    assert a.usage == both[0].usage

def test_sampling_groups_apart_from_greedy(hf):
    g0 = hf.generate_calls
    gather(hf, [(qs(1), {"greedy": True, "max_new_tokens": 3}), (qs(2), {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 3}),
                (qs(3), {"greedy": True, "max_new_tokens": 3}), (qs(4), {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 3})])
    assert hf.generate_calls - g0 == 2 and hf.batch_sizes[-2:] == [2, 2]

def test_stop_strings_cut(hf):
    full = run_sync(hf.complete(qs(7), greedy=True, max_new_tokens=16)).text
    assert len(full) >= 4, repr(full)
    stop = full[2:4]
    cut = run_sync(hf.complete(qs(7), greedy=True, max_new_tokens=16, stop=[stop])).text
    assert cut == full[: full.index(stop)] and stop not in cut
    assert run_sync(hf.complete(qs(7), greedy=True, max_new_tokens=16, stop=stop)).text == cut   # a plain string works too

def test_per_request_eos_token_ids(hf):
    "Extra end-of-sequence ids (`eos_token_id` / `stop_token_ids`) end only the request that names them, in a shared batch."
    every = list(range(len(hf.tokenizer)))
    g0 = hf.generate_calls
    cut, full, cut2 = gather(hf, [(qs(8), {"greedy": True, "max_new_tokens": 6, "eos_token_id": every}),
                                  (qs(8), {"greedy": True, "max_new_tokens": 6}),
                                  (qs(8), {"greedy": True, "max_new_tokens": 6, "stop_token_ids": every})])
    assert hf.generate_calls - g0 == 1
    assert (cut.text, cut.usage.completion_tokens, cut2.text) == ("", 0, "") and full.usage.completion_tokens > 0

# ---- debates served in process ----------------------------------------------------------------------------

from madlab.agents import Agent
from madlab.debate import Debate
from madlab.run import run_many
from madlab.tasks.arith import toy_arith_items
from madlab.scoring import extract_number as final_number
import madlab.protocols.baselines  # noqa: F401  (registers "du")

def test_concurrent_debates_share_batched_generate_calls(tiny_model_dir):
    b = HFBackend(tiny_model_dir)
    team = [Agent(f"Llama-{i}", f"hf:{tiny_model_dir}", params={"max_new_tokens": 8, "greedy": True}, backend=b) for i in range(3)]
    items = toy_arith_items(6, seed=2)
    res = run_many("du", items, team, rounds=1, concurrency=6, cache=False, progress=False)
    df = res.df
    assert list(df.item_id) == [it.id for it in items] and set(df.status) == {"done"} and (df.errors == 0).all()
    assert b.requests == 6 * 3 * 2 == df.calls.sum()
    assert b.generate_calls < b.requests and b.generate_calls <= b.requests // 3, (b.generate_calls, b.batch_sizes)
    assert max(b.batch_sizes) >= 6
    for t in res.transcripts.values():
        for r in t.rounds:
            for tu in r.turns:
                assert tu.usage.completion_tokens <= 8 and tu.answer == final_number(tu.reply)
    assert not df.correct.any()       # a random model does not do arithmetic

def test_spec_string_team_shares_one_model(tiny_model_dir):
    "Agents naming the same `hf:` spec share one backend: one model load, one batching queue."
    spec = f"hf:{tiny_model_dir}"
    team = [{"name": f"H{i}", "spec": spec, "params": {"max_new_tokens": 3, "greedy": True}} for i in range(3)]
    b = get_backend(spec)
    r0, g0 = b.requests, b.generate_calls
    res = run_many("du", toy_arith_items(3, seed=9), team, rounds=1, concurrency=3, cache=False, progress=False)
    assert set(res.df.status) == {"done"} and b.requests - r0 == 18 and b.generate_calls - g0 <= 4

def test_debates_with_asyncio_gather(tiny_model_dir):
    b = HFBackend(tiny_model_dir)
    items = toy_arith_items(4, seed=4)
    def team(): return [Agent(f"L{i}", f"hf:{tiny_model_dir}", params={"max_new_tokens": 4, "greedy": True}, backend=b) for i in range(2)]
    debates = [Debate("du", it, team(), rounds=1) for it in items]
    async def go(): return await asyncio.gather(*(d.arun() for d in debates))
    ts = run_sync(go())
    assert all(d.meta["status"] == "done" for d in debates) and len(ts) == 4
    assert b.requests == 16 and b.generate_calls <= 4, b.batch_sizes
    # greedy: the same debate again gives the same transcript text
    again = Debate("du", items[0], team(), rounds=1).run()
    assert [tu.reply for r in again.rounds for tu in r.turns] == [tu.reply for r in ts[0].rounds for tu in r.turns]

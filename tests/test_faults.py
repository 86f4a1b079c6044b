"""The `openai:` backend against a scripted server: bounded retries, Retry-After, auth errors, malformed bodies,
and a batch of debates where some exhaust their retries (failed rows) while the rest complete; plus the cache."""
import time
import pytest
from madlab.core import run_sync, Usage
from madlab.backends import BackendError, OpenAIBackend, get_backend

MSGS = [{"role": "user", "content": "What is 6*7?"}]
KEY = "sk-test-SECRET-0123456789"

def backend(srv, **kw):
    kw = {"max_retries": 2, "timeout": 2.0, "max_wait": 2.0, "api_key": KEY, **kw}
    return OpenAIBackend("fake-model", base_url=srv.url, **kw)

def call(b, **params): return run_sync(b.complete(MSGS, **params))

def test_success_records_usage(fake_server):
    srv = fake_server(reply="Let me see. The answer is 42.")
    b = backend(srv)
    c = call(b, max_tokens=16, temperature=0)
    assert c.text == "Let me see. The answer is 42." and c.usage.calls == 1
    assert c.usage.prompt_tokens > 0 and c.usage.completion_tokens > 0
    assert srv.hits == 1 and b.calls == 1 and srv.auth_headers == [f"Bearer {KEY}"]
    req = srv.log[0][2]
    assert req["model"] == "fake-model" and req["max_tokens"] == 16 and req["temperature"] == 0

@pytest.mark.parametrize("behaviour", ["500", "429", "nonjson", "nochoices", "badjson"])
def test_retries_are_bounded(fake_server, behaviour):
    srv = fake_server(default=behaviour)
    b = backend(srv, max_retries=2, max_wait=0.05)
    t0 = time.perf_counter()
    with pytest.raises(BackendError, match="gave up after 3 attempts"): call(b)
    assert srv.hits == 3 and b.attempts == 3 and b.calls == 0
    assert time.perf_counter() - t0 < 5

def test_a_server_that_drops_every_connection_is_down_until_give_up(fake_server):
    "Connections closed before any answer are not retried a bounded number of times: the endpoint is down, the call waits and probes until give-up."
    srv = fake_server(default="close")
    b = backend(srv, max_retries=2, max_wait=0.05, give_up_after=1.5)
    t0 = time.perf_counter()
    with pytest.raises(BackendError, match=r"has answered nothing for \d s \(give-up after 1.5 s; a connection failed with nothing answered since"): call(b)
    assert 1.4 < time.perf_counter() - t0 < 4 and srv.hits == b.attempts > 3 and b.calls == 0

def test_transient_faults_then_success(fake_server):
    srv = fake_server(schedule=["429", "500", "nonjson", "nochoices", "ok"], reply="The answer is 7.")
    b = backend(srv, max_retries=4, max_wait=0.05)
    c = call(b)
    assert c.text == "The answer is 7." and srv.hits == 5 and b.attempts == 5 and b.calls == 1

def test_timeout_is_retried(fake_server):
    srv = fake_server(schedule=["timeout:3", "ok"], reply="The answer is 1.")
    b = backend(srv, timeout=0.5, max_retries=1, max_wait=0.05)
    t0 = time.perf_counter()
    c = call(b)
    dt = time.perf_counter() - t0
    assert c.text == "The answer is 1." and srv.hits == 2
    assert 0.4 < dt < 2.5, dt

def test_timeout_exhausted(fake_server):
    srv = fake_server(default="timeout:3")
    b = backend(srv, timeout=0.3, max_retries=1, max_wait=0.05)
    with pytest.raises(BackendError, match="APITimeoutError"): call(b)
    assert srv.hits == 2

def test_retry_after_is_honoured(fake_server):
    srv = fake_server(schedule=["429:1", "ok"])
    b = backend(srv, max_retries=2, max_wait=5)
    t0 = time.perf_counter()
    call(b)
    dt = time.perf_counter() - t0
    gap = srv.log[1][0] - srv.log[0][0]
    assert srv.hits == 2 and 0.9 <= gap < 2.0 and dt >= 0.9, (gap, dt)

def test_retry_after_is_capped_by_max_wait(fake_server):
    srv = fake_server(schedule=["429:30", "ok"])
    b = backend(srv, max_retries=2, max_wait=0.2)
    t0 = time.perf_counter()
    call(b)
    assert time.perf_counter() - t0 < 2 and srv.hits == 2

def test_a_retry_after_too_long_to_honour_pauses_no_other_call(fake_server):
    "Retry-After: 99999 (over the 60 s the openai client honours): that call backs off on its own, the endpoint is not paused, and it is counted."
    import asyncio
    srv = fake_server(schedule=["429:99999"])
    b = backend(srv, max_retries=2, max_wait=30)
    async def calls():
        first = asyncio.ensure_future(b.complete(MSGS))
        while srv.hits < 1: await asyncio.sleep(0.005)             # the first call has had its 429
        rest = [await b.complete(MSGS) for _ in range(3)]            # the calls after it are not held back
        return [await first, *rest]
    t0 = time.perf_counter()
    out = run_sync(calls())
    assert len(out) == 4 and srv.hits == 5 and time.perf_counter() - t0 < 5      # a 30 s pause (max_wait) before
    assert b.health()["absurd_retry_after"] == 1

def test_auth_error_is_immediate_and_keeps_the_key_secret(fake_server):
    srv = fake_server(default="401")
    b = backend(srv, max_retries=5)
    with pytest.raises(BackendError) as e: call(b)
    msg = str(e.value)
    assert "authentication failed" in msg and KEY not in msg and "SECRET" not in msg
    assert e.value.__cause__ is None and e.value.__context__ is not None or True
    assert srv.hits == 1 and KEY not in repr(b)

def test_bad_request_is_not_retried(fake_server):
    srv = fake_server(default="400")
    b = backend(srv, max_retries=5)
    with pytest.raises(BackendError, match="bad request"): call(b)
    assert srv.hits == 1

def test_spec_string_and_json_mode(fake_server):
    srv = fake_server(reply='{"answer": 42}')
    b = get_backend("openai:fake-model", base_url=srv.url, api_key=KEY, max_retries=0)
    c = call(b, json=True, greedy=True, max_new_tokens=8, top_k=5)
    req = srv.log[0][2]
    assert c.text == '{"answer": 42}'
    assert req["response_format"] == {"type": "json_object"} and req["temperature"] == 0 and req["max_tokens"] == 8
    assert req["top_k"] == 5          # unknown params travel in extra_body

def test_concurrency_is_bounded(fake_server):
    import asyncio
    srv = fake_server(latency=0.1)
    b = backend(srv, max_concurrency=3)
    async def many(): return await asyncio.gather(*(b.complete(MSGS) for _ in range(9)))
    t0 = time.perf_counter()
    out = run_sync(many())
    dt = time.perf_counter() - t0
    assert len(out) == 9 and srv.hits == 9
    assert dt >= 0.29, dt             # 9 calls, 3 at a time, 0.1 s each: at least 3 waves

# ---- debates over a flaky server: failures stay in their rows, nothing is lost ----------------------------

import re
from madlab.agents import Agent
from madlab.debate import Debate, comparable
from madlab.run import run_many
from madlab.scoring import score_result
from madlab.tasks.arith import toy_arith_items
import madlab.protocols.baselines  # noqa: F401  (registers "du")

def solve(req) -> str:
    "A correct reply for the toy arithmetic question in the request (what a perfect model would say)."
    text = " ".join(str(m.get("content", "")) for m in req["messages"])
    a, b, c = map(int, re.search(r"What is (\d+) \+ (\d+) \* (\d+)\?", text).groups())
    return f"Step by step: {b} * {c} = {b * c}, plus {a}. The answer is {a + b * c}."

def team_for(srv, n=3, **kw):
    kw = {"max_retries": 1, "timeout": 2.0, "max_wait": 0.02, "api_key": KEY, **kw}
    return [Agent(f"A{i}", "openai:fake-model", backend=OpenAIBackend("fake-model", base_url=srv.url, **kw)) for i in range(n)]

def test_exhausted_retries_fail_their_rows_and_the_batch_completes(fake_server):
    items = toy_arith_items(8, seed=5)
    broken = {items[2].prompt, items[5].prompt}
    def route(req):
        text = " ".join(str(m.get("content", "")) for m in req["messages"])
        return "500" if any(p in text for p in broken) else None
    srv = fake_server(reply=solve, route=route, schedule=["429", "nonjson", "500"])   # a few transient faults too
    res = run_many("du", items, team_for(srv, max_retries=3), rounds=1, concurrency=4, cache=False, progress=False)
    df = res.df.set_index("item_id")
    assert list(res.df.item_id) == [it.id for it in items] and set(res.transcripts) == set(df.index)   # every item has its row
    bad, good = [items[2].id, items[5].id], [it.id for i, it in enumerate(items) if i not in (2, 5)]
    assert df.loc[good, "correct"].all() and (df.loc[good, "errors"] == 0).all() and (df.loc[good, "calls"] == 6).all()
    assert (df.loc[good, "status"] == "done").all()
    for iid in bad:   # the debate fails after its first round (on_error="fail"), keeping that round in its transcript
        row, t = df.loc[iid], res.transcripts[iid]
        assert row.status == "failed" and "gave up after 4 attempts" in row.error
        assert row.correct is not True and row.errors == 3 and row.invalid == 3 and row.calls == 0 and len(t.rounds) == 1
        assert all("gave up after 4 attempts" in tu.error for r in t.rounds for tu in r.turns)
        assert all(tu.answer is None and not tu.valid for r in t.rounds for tu in r.turns)
    # each broken call was tried exactly max_retries + 1 = 4 times: 2 items x 3 calls x 4 attempts
    routed = [r for _, b, r in srv.log if any(p in " ".join(str(m["content"]) for m in r["messages"]) for p in broken)]
    assert len(routed) == 2 * 3 * 4

from madlab.protocol import protocol
from madlab.protocols.baselines import du

@protocol("_du_that_breaks", limits={"rounds": (0, 20)})
async def _du_that_breaks(d, rounds: int = 1):
    "du, except that the protocol itself raises on items whose id starts with 'weird'."
    if str(d.item.id).startswith("weird"): raise RuntimeError("the protocol broke on this item")
    async for r in du(d, rounds=rounds): yield r

def test_a_debate_that_raises_is_a_failed_row(fake_server):
    "A debate whose protocol raises is a failed row; the rest run."
    items = toy_arith_items(4, seed=6)
    srv = fake_server(reply=solve)
    team = team_for(srv, 2)
    from madlab.core import Item
    items.insert(1, Item("weird-1", "arith", "What?", gold=1))
    res = run_many("_du_that_breaks", items, team, rounds=1, concurrency=3, cache=False, progress=False)
    df = res.df.set_index("item_id")
    assert len(df) == 5 and df.loc["weird-1", "status"] == "failed" and "the protocol broke on this item" in df.loc["weird-1", "error"]
    assert "RuntimeError" in df.loc["weird-1", "error"] and df.loc["weird-1", "calls"] == 0
    assert (df.drop("weird-1").status == "done").all() and df.drop("weird-1").correct.all()
    assert res.failed == 1 and "1 debate failed" in res.summary()

def test_an_item_without_an_answer_format_is_refused_before_any_call(fake_server):
    "An item of a task with no answer format is refused when the run starts (it used to fail its own row): nothing runs."
    items = toy_arith_items(4, seed=6)
    srv = fake_server(reply=solve)
    from madlab.core import Item
    items.insert(1, Item("weird-1", "no-such-task", "What?", gold=1))
    with pytest.raises(ValueError, match="no answer format"):
        run_many("du", items, team_for(srv, 2), rounds=1, concurrency=3, cache=False, progress=False)
    assert srv.hits == 0

def test_second_cached_run_makes_no_calls(fake_server, tmp_path):
    items = toy_arith_items(5, seed=7)
    srv = fake_server(reply=solve)
    cache = str(tmp_path / "cache")
    r1 = run_many("du", items, team_for(srv), rounds=2, concurrency=5, cache=cache, progress=False)
    hits = srv.hits
    assert hits == 5 * 9 and r1.df.calls.sum() == hits and r1.cache == {"hits": 0, "misses": hits}
    r2 = run_many("du", items, team_for(srv), rounds=2, concurrency=5, cache=cache, progress=False)
    assert srv.hits == hits                                  # zero backend calls
    assert r2.df.calls.sum() == 0 and (r2.df.cached_calls == 9).all() and r2.cache == {"hits": hits, "misses": 0}
    for it in items:
        t1, t2 = r1.transcripts[it.id], r2.transcripts[it.id]
        assert all(tu.cached for r in t2.rounds for tu in r.turns)
        assert comparable(t1) == comparable(t2)
    cols = ["item_id", "status", "correct", "answer", "invalid", "turns"]
    assert r1.df[cols].equals(r2.df[cols])

def test_cache_with_a_single_debate(fake_server, tmp_path):
    item = toy_arith_items(1, seed=8)[0]
    srv = fake_server(reply=solve)
    cache = str(tmp_path / "c")
    t1 = Debate("du", item, team_for(srv), rounds=1, cache=cache).run()
    n = srv.hits
    t2 = Debate("du", item, team_for(srv), rounds=1, cache=cache).run()
    assert n == 6 and srv.hits == n and comparable(t1) == comparable(t2) and score_result(item, t1.result)["correct"]
    assert "correct" not in t1.result                      # protocols decide; the task scores

def test_backends_share_one_client_per_endpoint(fake_server):
    import asyncio
    srv = fake_server()
    a, b, c = backend(srv), backend(srv), backend(srv, api_key="sk-other")
    async def clients(): return a._get_client(), b._get_client(), c._get_client()
    ca, cb, cc = run_sync(clients())
    assert ca is cb and cc is not ca

def test_dropped_backends_do_not_stall_the_others(fake_server):
    "Regression: garbage-collecting a dropped client's pooled connections inside the running loop stalled other requests until their timeout."
    import asyncio, gc
    # A stall shows as requests that time out (errors) or a burst near the timeout; a slow, busy machine only makes
    # bursts slower, so the first (cold: imports, new connections) burst is not timed and the bound sits well above
    # a normal burst (~0.5 s) yet below the client timeout.
    srv = fake_server(latency=0.02)
    for k in range(6):
        b = backend(srv, max_concurrency=120, timeout=8, max_retries=0)
        async def burst(): return await asyncio.gather(*(b.complete(MSGS) for _ in range(120)), return_exceptions=True)
        t0 = time.perf_counter()
        out = run_sync(burst())
        dt = time.perf_counter() - t0
        assert not [e for e in out if isinstance(e, Exception)], [e for e in out if isinstance(e, Exception)][:3]
        assert k == 0 or dt < 6, dt
        del b; gc.collect()

def test_a_scripts_own_event_loop_ends_with_its_session_closed(fake_server, tmp_path):
    "A backend called from a script's own `asyncio.run(...)`: the answer comes, and the interpreter exits with no unclosed-session noise."
    import subprocess, sys
    from pathlib import Path
    srv = fake_server(reply="The answer is 42.")
    script = tmp_path / "script.py"
    script.write_text("import asyncio\nfrom madlab.backends import get_backend\n"
                      f"b = get_backend('openai:fake-model', base_url={srv.url!r}, api_key='sk-test', max_retries=0)\n"
                      "async def main(): return [(await b.complete([{'role': 'user', 'content': 'hi'}])).text for _ in range(2)]\n"
                      "print(asyncio.run(main())); print(asyncio.run(main()))\n")
    root = str(Path(__file__).resolve().parents[1])
    p = subprocess.run([sys.executable, "-X", "dev", str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**__import__("os").environ, "PYTHONPATH": root})
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("['The answer is 42.', 'The answer is 42.']") == 2, p.stdout
    assert "Unclosed" not in p.stderr and "connector" not in p.stderr, p.stderr

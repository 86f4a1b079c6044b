"""Endpoint limits against real local servers: the adaptive in-flight limit settles under a server that answers 429
above a set concurrency, and the circuit breaker ends a run against a server that never answers.

The servers are aiohttp applications started here on free 127.0.0.1 ports, each in its own thread and loop."""
from __future__ import annotations
import asyncio, json, threading, time
import pytest
from aiohttp import web
from madlab.core import run_sync
from madlab.agents import Agent
from madlab.backends import OpenAIBackend, EndpointDown
from madlab.run import run_many
from madlab.tasks.arith import toy_arith_items
import madlab.protocols.baselines  # noqa: F401  (registers "du")

class Server:
    """An aiohttp chat-completions server in its own thread: `capacity` calls at once (the rest get 429), or `hang` (never answers).
    With `hold_until` N, each answer but the very first waits until N calls have arrived (at most `latency` seconds), a condition rather than a time."""
    def __init__(self, capacity: int|None = None, latency: float = 0.05, hang: bool = False, retry_after_ms: int = 20, hold_until: int|None = None):
        self.capacity, self.latency, self.hang, self.retry_after_ms, self.hold_until = capacity, latency, hang, retry_after_ms, hold_until
        self._all_in = None                   # set once `hold_until` calls have arrived (made on the server's loop)
        self.in_flight = self.max_in_flight = self.ok = self.refused = self.hits = 0
        self.accepted_peak = 0                # most calls answered 200 at once: never above capacity
        self.statuses = []                    # 200 or 429, in order of arrival
        self._lock = threading.Lock()

    async def chat(self, request):
        body = await request.json()
        with self._lock:
            self.hits += 1; self.in_flight += 1; self.max_in_flight = max(self.max_in_flight, self.in_flight)
            over = self.capacity is not None and self.in_flight > self.capacity
            if over: self.refused += 1
            self.statuses.append(429 if over else 200)
        try:
            if self.hang: await asyncio.sleep(3600)
            if over:
                return web.json_response({"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}}, status=429,
                                         headers={"retry-after-ms": str(self.retry_after_ms)})
            with self._lock: self.accepted_peak = max(self.accepted_peak, self.in_flight)
            if self.hold_until and self.hits > 1:
                if self._all_in is None: self._all_in = asyncio.Event()
                if self.hits >= self.hold_until: self._all_in.set()
                try: await asyncio.wait_for(self._all_in.wait(), self.latency)
                except asyncio.TimeoutError: pass
            else: await asyncio.sleep(self.latency)
            with self._lock: self.ok += 1
            text = " ".join(str(m.get("content", "")) for m in body["messages"])
            return web.json_response({"id": "x", "object": "chat.completion", "model": body["model"],
                                      "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": _solve(text)}}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
        finally:
            with self._lock: self.in_flight -= 1

    def __enter__(self):
        ready = threading.Event()
        def run():
            self.loop = asyncio.new_event_loop()
            app = web.Application(); app.router.add_post("/v1/chat/completions", self.chat)
            self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, "127.0.0.1", 0, backlog=1024)
            self.loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set(); self.loop.run_forever()
            self.loop.close()
        self.thread = threading.Thread(target=run, daemon=True); self.thread.start(); ready.wait(10)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        return self

    def __exit__(self, *a):
        async def stop():
            await self.runner.cleanup()                   # cancels handlers still sleeping (the server that never answers)
            for t in asyncio.all_tasks():
                if t is not asyncio.current_task(): t.cancel()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop); self.thread.join(10)

def _solve(text):
    import re
    m = re.search(r"What is (\d+) \+ (\d+) \* (\d+)\?", text)
    if not m: return "The answer is 0."
    a, b, c = map(int, m.groups())
    return f"{b} * {c} = {b * c}, plus {a}. The answer is {a + b * c}."

MSGS = [{"role": "user", "content": "What is 1 + 2 * 3?"}]

def test_adaptive_limit_settles_under_a_rate_limited_server():
    "400 calls at once against a server that takes 20: the limit comes down from 512, refusals become rare once it has, and every call gets its answer."
    with Server(capacity=20, latency=0.05) as srv:
        b = OpenAIBackend("m", base_url=srv.url, api_key="sk-test", max_retries=30, max_wait=0.5, timeout=10)
        async def batch():
            out = await asyncio.gather(*(b.complete(MSGS) for _ in range(400)), return_exceptions=True)
            return out, b._endpoint().limit
        out, lim = run_sync(batch())
    errors = [o for o in out if isinstance(o, BaseException)]
    assert not errors, errors[:3]
    assert all(o.text == "2 * 3 = 6, plus 1. The answer is 7." for o in out)
    assert srv.ok == 400 and b.calls == 400 and srv.hits == b.attempts == 400 + srv.refused      # every call accounted for
    # it came down from 512: several cuts, and no collapse. Its last value depends on timing (additive growth keeps probing
    # above 20 while the tail of the batch is answered, the next 429 halves it), so the promise is checked on the traffic
    assert not lim.pinned and lim.cuts >= 3 and 5 <= lim.cap < 64, lim
    assert srv.accepted_peak <= 20, srv.accepted_peak                                        # the server never took more than it can
    # the way down costs refusals; once settled they are rare: the last 200 attempts were mostly answered
    last = srv.statuses[-200:]
    assert last.count(429) < 40, last.count(429)

def test_pinned_limit_is_never_exceeded_and_backoff_holds_no_slot():
    "A pinned limit of 4: never more than 4 requests out, even while calls wait out a Retry-After elsewhere."
    with Server(capacity=None, latency=0.05) as srv:
        b = OpenAIBackend("m", base_url=srv.url, api_key="sk-test", max_concurrency=4, max_retries=0, timeout=10)
        async def batch():
            await asyncio.gather(*(b.complete(MSGS) for _ in range(40)))
            return b._endpoint().limit
        lim = run_sync(batch())
    assert srv.max_in_flight == 4 and srv.ok == 40 and lim.in_flight == 0 and lim.pinned

def test_games_at_once_fill_the_endpoint():
    "By default the runner starts every debate at once against an adaptive endpoint: 60 du debates of 3 agents put their 180 first calls in flight (the endpoint's very first call goes alone: it learns whether the server takes a response schema)."
    with Server(capacity=None, latency=8.0, hold_until=180) as srv:   # answers wait until 180 calls have arrived (at most 8 s), however loaded the machine
        team = [Agent(f"A{i}", "openai:m", backend=OpenAIBackend("m", base_url=srv.url, api_key="sk-test", timeout=10)) for i in range(3)]
        res = run_many("du", toy_arith_items(60, seed=3), team, rounds=1, cache=False, progress=False)
    assert (res.df.status == "done").all() and res.df.correct.all()
    assert srv.max_in_flight >= 179, srv.max_in_flight      # the 179 after the first, at once

def test_a_run_against_a_server_that_never_answers_ends_after_give_up():
    "30 debates against a server that accepts connections and never answers: calls wait for probes, then the run ends within give-up + a timeout, every debate failed with the reason."
    timeout, give_up = 0.5, 2.0
    with Server(hang=True) as srv:
        team = [Agent(f"A{i}", "openai:m", backend=OpenAIBackend("m", base_url=srv.url, api_key="sk-test", timeout=timeout, max_retries=4,
                                                                  max_wait=0.05, give_up_after=give_up)) for i in range(3)]
        t0 = time.perf_counter()
        res = run_many("du", toy_arith_items(30, seed=4), team, rounds=2, cache=False, progress=False)
        dt = time.perf_counter() - t0
    df = res.df
    assert len(df) == 30 and (df.status == "failed").all(), df.status.value_counts()
    assert dt < give_up + 2 * timeout + 1, dt                             # instead of 30 x 3 x 5 attempts x 0.5 s
    reasons = " ".join(df.error.astype(str))
    assert f"endpoint {srv.url} has answered nothing for" in reasons and "--give-up-after" in reasons, reasons[:500]
    assert srv.hits <= 90 + 3 * 10, srv.hits                              # the first wave, then a few attempts and probes
    h = team[0].backend.health()
    assert h["gave_up"] and h["calls_waited"] > 0 and h["unreachable_seconds"] > 0

def test_calls_wait_for_the_probe_and_go_on_when_it_answers():
    "The endpoint stops answering, then answers again: calls that found the breaker open waited (holding no slot) and got their answers."
    with Server(hang=True) as srv:
        b = OpenAIBackend("m", base_url=srv.url, api_key="sk-test", timeout=0.3, max_retries=0, breaker_after=1, give_up_after=30)
        async def go():
            try: await b.complete(MSGS)
            except Exception as e: first = e
            br = b._endpoint().breaker
            assert br.open                                                 # 1 of 1 attempts got no answer
            waiting = [asyncio.ensure_future(b.complete(MSGS)) for _ in range(5)]
            while br.calls_waited < 5: await asyncio.sleep(0.01)           # all five are waiting, none went out
            hits = srv.hits
            srv.hang = False                                               # the server is back before the first probe (1 s after opening)
            out = await asyncio.gather(*waiting)
            return first, hits, out, br
        first, hits, out, br = run_sync(go())
    assert "APITimeoutError" in str(first) and hits == 1
    assert all(c.text for c in out) and not br.open and br.outages == 1 and br.calls_waited == 5

def test_a_cancelled_probe_does_not_hold_the_breaker_shut():
    "The probe call is cancelled (a run stopped during an outage): the next call probes, and an answer closes the breaker."
    with Server(hang=True) as srv:
        b = OpenAIBackend("m", base_url=srv.url, api_key="sk-test", timeout=0.3, max_retries=0, breaker_after=1, give_up_after=30)
        async def go():
            try: await b.complete(MSGS)
            except Exception: pass
            br = b._endpoint().breaker
            br.next_probe = 0                                        # the probe is due at once
            probe = asyncio.ensure_future(b.complete(MSGS))
            while not br._probing: await asyncio.sleep(0.01)
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
            srv.hang = False
            return await asyncio.wait_for(b.complete(MSGS), 10), br
        c, br = run_sync(go())
    assert c.text and not br.open

"""One model served by several replicas, against three fake OpenAI-compatible servers on 127.0.0.1 (`fake_openai_server.py`):
calls split as the replicas' limits imply; a replica stopped after 30 % of the calls and started again on the same port at
70 % loses nothing, sends its calls to the others meanwhile and rejoins once its probe answers; every call and attempt is
accounted for per replica; a run records the replicas in its summary and `config.json`; with every replica down, calls fail
after the give-up time. The stop and the restart wait on call counts, not on time."""
from __future__ import annotations
import asyncio, json, threading, time
import pytest
from madlab.core import run_sync
from madlab.backends import OpenAIBackend, BackendError
from madlab.agents import load_team
from madlab.run import run_experiment
from madlab.tasks.arith import toy_arith_items
from conftest import free_port

def _wait_for(cond, what, limit=120.0):
    "Wait until `cond()` holds (a guard against a hung run: fails after `limit` s)."
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > limit: raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)

def test_a_replica_stopped_and_restarted_loses_nothing_and_calls_split_as_the_limits_imply(fake_server):
    n, limits = 600, (2, 4, 6)
    srvs = [fake_server(latency=0.1) for _ in limits]
    b = OpenAIBackend("m", preset="vllm", base_url="|".join(s.url for s in srvs), max_concurrency="|".join(map(str, limits)),
                      breaker_cooldown=0.2)                   # a down replica is probed at least every 0.2 s
    done, errors, mid = [0], [], {}
    async def one(i):
        try: c = await b.complete([{"role": "user", "content": f"question {i}"}])
        except BackendError as e: errors.append(str(e)); return None
        done[0] += 1
        return c
    async def calls(): return await asyncio.gather(*(one(i) for i in range(n)))
    def chaos():
        _wait_for(lambda: done[0] >= 0.3 * n, "30 % of the calls")
        srvs[1].down(); mid["down_at"], mid["hits_down"] = done[0], srvs[1].hits
        _wait_for(lambda: done[0] >= 0.7 * n, "70 % of the calls")
        mid["hits_up"] = srvs[1].hits; srvs[1].up(); mid["up_at"] = done[0]
    t = threading.Thread(target=chaos, daemon=True); t.start()
    out = run_sync(calls()); t.join(130)
    assert not errors and all(c is not None and c.text for c in out), errors[:3]          # nothing lost
    assert mid["down_at"] < 0.7 * n <= mid["up_at"] < n
    h = b.health(); reps = h["replicas"]
    # every call accounted for: answered once, by one replica; the servers agree
    assert b.calls == n == sum(r["calls"] for r in reps) == sum(s.answered for s in srvs)
    assert [r["calls"] for r in reps] == [s.answered for s in srvs]
    assert sum(r["attempts"] for r in reps) == b.attempts
    for r, s in zip(reps, srvs):
        assert r["attempts"] - r["calls"] >= s.hits - s.answered       # every request a server saw and did not answer was an attempt that failed
        assert r["max_in_flight"] <= r["limit"]
    a, down, c = reps
    assert (a["attempts"], c["attempts"]) == (a["calls"], c["calls"]) and a["outages"] == c["outages"] == 0 and not a["rerouted"] + c["rerouted"]
    # the stopped replica: one outage, its calls went to the others, and it rejoined once its probe answered
    assert down["outages"] == 1 and down["unreachable_seconds"] > 0 and down["rerouted"] >= 1 and not down["gave_up"]
    assert srvs[1].answered > 0 and srvs[1].hits > mid["hits_up"], "the restarted replica got no calls"
    # the two that stayed up were full all along: their calls split as their limits, 2 : 6
    assert 2.4 <= c["calls"] / a["calls"] <= 3.6, (a["calls"], c["calls"])
    # the restarted one served less than its limit's share (it was out for 40 % of the calls)
    assert down["calls"] < n * limits[1] / sum(limits)

def test_a_run_on_replicas_from_a_team_file_records_each_replica(fake_server, tmp_path):
    srvs = [fake_server(reply="The answer is 42.", latency=0.02) for _ in range(2)]
    team = tmp_path / "team.yaml"
    team.write_text(f"max_concurrency: 2\nendpoints:\n  - {srvs[0].url}\n  - {{url: {srvs[1].url}, max_concurrency: 6}}\nagents:\n  - vllm:m\n")
    agents = load_team(team)
    res = run_experiment("single", toy_arith_items(16), agents, tmp_path / "run", cache=False, concurrency=16)
    assert res.df.status.tolist() == ["done"] * 16
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    (e,) = cfg["endpoints"]
    assert e["endpoint"] == f"{srvs[0].url}|{srvs[1].url}"
    assert [(r["url"], r["limit"]) for r in e["replicas"]] == [(srvs[0].url, 2), (srvs[1].url, 6)]
    assert [r["calls"] for r in e["replicas"]] == [s.answered for s in srvs] and sum(s.answered for s in srvs) == 16
    assert srvs[1].answered > srvs[0].answered                        # the replica with three times the limit took more
    s = res.summary()
    assert f"endpoint {srvs[0].url}|{srvs[1].url}: 2 replicas" in s and f"  replica {srvs[1].url}: {srvs[1].answered} calls (limit 6" in s

def test_every_replica_down_fails_after_give_up():
    urls = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]    # nothing listens on them
    b = OpenAIBackend("m", preset="vllm", base_url="|".join(urls), give_up_after=1, max_retries=1, max_wait=0)
    async def call():
        try: await b.complete([{"role": "user", "content": "hi"}])
        except BackendError as e: return str(e)
    msg = run_sync(call())
    assert msg and "every replica of vllm:m has answered nothing for its give-up time" in msg and all(u in msg for u in urls), msg
    h = b.health()
    assert h["gave_up"] and all(r["gave_up"] and r["calls"] == 0 for r in h["replicas"])

def test_bad_replica_options_name_the_field():
    with pytest.raises(ValueError, match="max_concurrency: 2 limits for 3 replica URL"):
        OpenAIBackend("m", preset="vllm", base_url="http://a/v1|http://b/v1|http://c/v1", max_concurrency="2|3")
    with pytest.raises(ValueError, match="base_url: a replica URL appears twice"):
        OpenAIBackend("m", preset="vllm", base_url="http://a/v1|http://a/v1")
    with pytest.raises(ValueError, match="endpoints must be a list"):
        OpenAIBackend("m", preset="vllm").configure(endpoints={"url": "http://a/v1"})

def test_madlab_run_spreads_a_team_over_replicas_from_the_shell(fake_server, tmp_path, monkeypatch):
    from click.testing import CliRunner
    from madlab.cli import main
    srvs = [fake_server(reply="I cannot decide.") for _ in range(2)]
    spec = f"vllm:m,base_url={srvs[0].url}|{srvs[1].url}"
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    r = CliRunner().invoke(main, ["run", "controlmad", "--size", "4", "--games", "1-6", "--depth", "0", "--no-self-adjustment", "--agents",
                                  ",".join([spec] * 3), "--max-concurrency", "3", "--out", str(tmp_path / "out"), "--no-cache", "--no-progress"])
    assert r.exit_code in (0, 1), r.output
    assert f"endpoint {srvs[0].url}|{srvs[1].url}: 2 replicas" in r.output, r.output
    cfg = json.loads(next((tmp_path / "out").glob("*/config.json")).read_text())
    (e,) = cfg["endpoints"]
    assert [x["limit"] for x in e["replicas"]] == [3, 3] and all(s.answered > 0 for s in srvs)
    assert sum(x["calls"] for x in e["replicas"]) == sum(s.answered for s in srvs) == sum(s.hits for s in srvs)

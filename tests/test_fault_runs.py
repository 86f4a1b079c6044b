"""Faults never sink a run, tested through `madlab run` against the fault-injecting server of `fake_openai_server.py`:
mixed HTTP, body and connection faults; hangs and drops; a server restarting mid-run (in this process, and as its own process
killed and started again, at two latencies and three outage lengths); Retry-After values too long to honour; a server that answers
one request at a time; a server that never comes up. Short latency, timeouts and give-up: the file takes about two minutes, most
of it the outages themselves.""" 
from __future__ import annotations
import json, re, threading, time
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.cli import main
from conftest import free_port
from fake_openai_server import FakeOpenAIServer, ServerProcess

RETRYABLE = ("429", "429:none", "500", "503", "reset", "short", "hang", "badjson", "nochoices")   # no answer: the client retries
ANSWERS = ("null", "unreadable")                                                                   # answered: read as invalid
MIXED = {k: 1 for k in RETRYABLE + ANSWERS}
TEAM = "openai:m1,openai:m2,openai:m3"

def madlab_run(monkeypatch, tmp_path, url, *args):
    monkeypatch.setenv("OPENAI_BASE_URL", url); monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fault-runs")
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    t0 = time.perf_counter()
    r = CliRunner().invoke(main, ["run", *args, "--out", str(tmp_path / "out"), "--no-cache", "--no-progress"])
    return r, time.perf_counter() - t0

def results(r) -> pd.DataFrame:
    folder = re.search(r"^outputs: (.+)$", r.output, re.M).group(1)
    return pd.read_parquet(f"{folder}/results.parquet")

def controlmad(monkeypatch, tmp_path, srv, games="1-100", *extra, timeout="0.5"):
    return madlab_run(monkeypatch, tmp_path, srv.url, "controlmad", "--size", "4", "--games", games, "--depth", "0", "--no-self-adjustment",
                      "--agents", TEAM, "--timeout", timeout, *extra)

def test_mixed_faults_lose_nothing_and_every_request_is_accounted_for(monkeypatch, tmp_path):
    "100 games, 30 % of every fault: 100 rows, each failed row with its reason from a call that used all its attempts, and requests = answers + retryable faults."
    with FakeOpenAIServer(faults=MIXED, fault_rate=0.3, seed=7, reply="I cannot decide.") as srv:
        # a timeout long enough that an answer is never late on a loaded machine (a late answer is a request without its call)
        r, dt = controlmad(monkeypatch, tmp_path, srv, "1-100", "--max-retries", "4", timeout="3")
    df = results(r)
    assert len(df) == 100 and set(df.status) <= {"done", "failed"}, r.output
    failed = df[df.status == "failed"]
    assert failed.error.notna().all() and all("gave up after 5 attempts" in e for e in failed.error), failed.error.tolist()
    assert (df.status == "done").sum() >= 95, df.status.value_counts()          # a call fails at about 0.3^5 (retryable share) per call
    # requests = answered calls + retryable faults, exactly: no answer was lost and nothing was asked twice without a reason
    assert srv.hits == df.calls.sum() + sum(v for k, v in srv.injected.items() if k in RETRYABLE), (srv.hits, df.calls.sum(), srv.injected)
    assert r.exit_code == (1 if len(failed) else 0), r.output

def test_hangs_and_dropped_connections_finish_every_debate(monkeypatch, tmp_path):
    with FakeOpenAIServer(faults={"hang": 1, "reset": 1}, fault_rate=0.2, seed=3, reply="I cannot decide.") as srv:
        r, dt = controlmad(monkeypatch, tmp_path, srv, "1-60")
    df = results(r)
    assert r.exit_code == 0 and len(df) == 60 and (df.status == "done").all(), r.output
    assert srv.injected["hang"] > 0 and srv.injected["reset"] > 0

def test_a_restart_mid_run_costs_time_not_debates(monkeypatch, tmp_path):
    "The server goes down for 6 s once the run is under way: every debate finishes, and the summary says how long it was unreachable."
    with FakeOpenAIServer(reply="I cannot decide.", latency=0.05) as srv:
        def restart():
            while srv.hits < 40: time.sleep(0.01)
            srv.down(); time.sleep(6); srv.up()
        th = threading.Thread(target=restart, daemon=True); th.start()
        r, dt = controlmad(monkeypatch, tmp_path, srv, "1-40", "--concurrency", "4", timeout="3")   # a late answer on a loaded machine is not the outage under test
        th.join(10)
    df = results(r)
    assert r.exit_code == 0 and len(df) == 40 and (df.status == "done").all(), r.output
    m = re.search(r"endpoint (\S+): unreachable for ([\d.]+) s \((\d+) outages?\); (\d+) calls? waited", r.output)
    assert m and m.group(1) == srv.url and 2 <= float(m.group(2)) <= 15 and int(m.group(4)) > 0, r.output
    cfg = json.loads(open(re.search(r"^outputs: (.+)$", r.output, re.M).group(1) + "/config.json").read())
    assert cfg["endpoints"][0]["endpoint"] == srv.url and cfg["endpoints"][0]["unreachable_seconds"] == float(m.group(2))

def test_retry_after_too_long_to_honour_stalls_nothing_and_is_reported(monkeypatch, tmp_path):
    "10 % of requests get a 429 with Retry-After: 99999: each such call backs off on its own, the run finishes well within one 30 s pause, and the summary counts them."
    with FakeOpenAIServer(faults={"429:99999": 1}, fault_rate=0.1, seed=5, reply="I cannot decide.") as srv:
        r, dt = controlmad(monkeypatch, tmp_path, srv, "1-20", timeout="5")
    df = results(r)
    n = srv.injected["429:99999"]
    assert r.exit_code == 0 and len(df) == 20 and (df.status == "done").all() and (df.errors == 0).all(), r.output
    assert n > 0 and dt < 20, (n, dt)                                 # each used to pause the whole endpoint for max_wait (30 s)
    assert f"sent {n} Retry-After over 60 s; not honoured" in r.output, r.output
    cfg = json.loads(open(re.search(r"^outputs: (.+)$", r.output, re.M).group(1) + "/config.json").read())
    assert cfg["endpoints"][0]["absurd_retry_after"] == n

def test_a_server_that_answers_one_at_a_time_answers_every_call(monkeypatch, tmp_path):
    "32 calls at once to a server that serves one at a time, slower than the timeout allows for the batch: all answered."
    def solve(req):
        text = " ".join(str(m.get("content", "")) for m in req["messages"])
        a, b, c = map(int, re.search(r"What is (\d+) \+ (\d+) \* (\d+)\?", text).groups())
        return f"The answer is {a + b * c}."
    with FakeOpenAIServer(reply=solve, latency=0.1, serial=True) as srv:       # 32 x 0.1 s queued: most first attempts time out at 1 s
        r, dt = madlab_run(monkeypatch, tmp_path, srv.url, "single", "--task", "arith", "--n", "32", "--agents", "openai:m1", "--timeout", "1")
    df = results(r)
    assert r.exit_code == 0 and len(df) == 32 and (df.status == "done").all() and df.correct.all(), r.output

def test_a_server_that_never_comes_up_ends_the_run_after_give_up(monkeypatch, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"                                    # nothing listens there
    r, dt = madlab_run(monkeypatch, tmp_path, url, "controlmad", "--size", "4", "--games", "1-10", "--depth", "0", "--agents", TEAM,
                       "--timeout", "0.5", "--give-up-after", "2")
    assert r.exit_code == 1, r.output
    assert dt < 2 + 0.5 + 3, dt                                                    # give-up plus one timeout, and the run's own start
    df = results(r)
    assert len(df) == 10 and (df.status == "failed").all()
    assert f"endpoint {url}" in r.output and "Traceback" not in r.output, r.output

# (latency, outage): per latency, games and debates at once so the outage falls mid-run (7 calls a game; down after `at` requests)
# a window of the breaker's full of earlier answers when it goes down (the breaker used to judge the window, and calls gave up first)
SIZES = {0.1: dict(games=48, concurrency=12, at=160), 1.0: dict(games=24, concurrency=12, at=110)}

@pytest.mark.parametrize("outage", [2, 6, 20])
@pytest.mark.parametrize("latency", [0.1, 1.0])
def test_a_killed_server_costs_time_not_debates(monkeypatch, tmp_path, latency, outage):
    "The server process is killed mid-run and a new one starts on its port `outage` s later: every debate finishes, and the summary says how long the endpoint was unreachable."
    z, srv = SIZES[latency], ServerProcess(free_port(), latency, reply="I cannot decide.").start()
    events, ended, lock = {}, threading.Event(), threading.Lock()
    def restart():
        while srv.hits() < z["at"] and not ended.is_set(): time.sleep(0.02)
        with lock:
            if ended.is_set(): return
            srv.kill(); events["down"] = time.perf_counter()
        ended.wait(outage)                                 # the outage itself
        with lock:
            if not ended.is_set(): srv.start(); events["up"] = time.perf_counter()
    th = threading.Thread(target=restart, daemon=True); th.start()
    try: r, dt = controlmad(monkeypatch, tmp_path, srv, f"1-{z['games']}", "--concurrency", str(z["concurrency"]), timeout="5")
    finally:
        with lock: ended.set(); srv.kill()                 # no server is started after this
        th.join(10)
    assert "down" in events and "up" in events, ("the run ended before the outage", r.output)
    df = results(r)
    assert r.exit_code == 0 and len(df) == z["games"] and (df.status == "done").all() and (df.errors == 0).all(), r.output   # no call failed
    m = re.search(r"endpoint (\S+): unreachable for ([\d.]+) s \((\d+) outages?\); (\d+) calls? waited", r.output)
    assert m and m.group(1) == srv.url and int(m.group(4)) > 0, r.output
    # (the first failure may be noticed a little late: it imports the `openai` client's exceptions, a second or two of CPU)
    assert max(0.1, outage - 3) <= float(m.group(2)) <= events["up"] - events["down"] + 5, (m.group(0), events)

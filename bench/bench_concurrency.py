"""Concurrency: `run_many` of N `du` debates through the `openai:` backend against the scripted server
(tests/fake_openai_server.py, in its own process) answering every call after a fixed latency L.

    makespan / lower bound,  lower bound = max(critical path calls x L, total calls x L / concurrency limit)

where the critical path of one du debate is rounds+1 calls (rounds are sequential, agents within a round concurrent)
and the concurrency limit is min(endpoint limit, debate concurrency x agents). Target: <= 1.15.

Run: .venv/bin/python bench/bench_concurrency.py [L_SECONDS] [N_DEBATES]"""
import math, os, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from madlab.agents import Agent
from madlab.backends import OpenAIBackend
from madlab.run import run_many
from madlab.scoring import toy_arith_items
import madlab.protocols.baselines  # noqa: F401

TARGET = 1.15

def free_port():
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

def start_server(latency):
    port = free_port()
    p = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai_server.py"), "--port", str(port), "--latency", str(latency),
                          "--reply", "Step by step. The answer is 42."], stdout=subprocess.DEVNULL, start_new_session=True)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).close(); break
        except OSError: time.sleep(0.05)
    return p, f"http://127.0.0.1:{port}/v1"

def team(url, agents, endpoint_limit):
    return [Agent(f"A{i}", "openai:fake-model", backend=OpenAIBackend("fake-model", base_url=url, api_key="x",
                                                                     max_concurrency=endpoint_limit, max_retries=0)) for i in range(agents)]

def trial(url, n, L, conc, endpoint_limit, agents=3, rounds=2):
    items = toy_arith_items(n, seed=n)
    t0 = time.perf_counter()
    res = run_many("du", items, team(url, agents, endpoint_limit), rounds=rounds, concurrency=conc, cache=False, progress=False)
    wall = time.perf_counter() - t0
    calls = int(res.df.calls.sum())
    assert set(res.df.status) == {"done"} and (res.df.errors == 0).all() and calls == n * agents * (rounds + 1), res.df
    limit = min(endpoint_limit, conc * agents)
    lb = max((rounds + 1) * L, calls * L / limit)
    return wall, calls, limit, lb

def main(L=0.05, n=48):
    proc, url = start_server(L)
    try:
        trial(url, 4, L, 4, 16)                     # warm up
        print(f"du, 3 agents, rounds=2 (critical path 3 calls), L = {L * 1000:.0f} ms, scripted server in its own process")
        print(f"{'N':>4} {'debates':>8} {'endpoint':>9} {'limit':>6} {'calls':>6} {'makespan s':>11} {'bound s':>8} {'ratio':>6}")
        worst = 0
        # the endpoint limit is per base URL and per event loop: each trial uses a fresh server so limits do not mix
        for n_, conc, ep in ((n, 8, 8), (n, 8, 24), (n, 16, 48), (n, 48, 144), (1, 1, 8)):
            proc.send_signal(signal.SIGTERM); proc.wait(5)
            proc, url = start_server(L)
            wall, calls, limit, lb = trial(url, n_, L, conc, ep)
            worst = max(worst, wall / lb)
            print(f"{n_:>4} {conc:>8} {ep:>9} {limit:>6} {calls:>6} {wall:>11.3f} {lb:>8.3f} {wall / lb:>6.3f}")
        print(f"worst ratio {worst:.3f} (target <= {TARGET})", "OK" if worst <= TARGET else "ABOVE TARGET")
        return 0 if worst <= TARGET else 1
    finally:
        proc.send_signal(signal.SIGTERM); proc.wait(5)

if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(float(a[0]) if a else 0.05, int(a[1]) if len(a) > 1 else 48))

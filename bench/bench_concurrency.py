"""Concurrency: `run_many` of N `du` debates through the `openai:` backend against the scripted server
(tests/fake_openai_server.py, in its own process) that answers every call after a fixed latency L.

    ratio = makespan / lower bound,  lower bound = max(critical path calls x L, total calls x L / concurrency limit)

The critical path of one du debate is rounds+1 calls (rounds are sequential, the agents of a round concurrent); the
concurrency limit is min(endpoint limit, debate concurrency x agents). Target: <= 1.15.

The bound ignores CPU: every call also costs c seconds of client + server CPU (measured below as the sequential
round trip at L = 0). When limit x c approaches L the run is CPU-bound on the machine, not latency-bound; such rows
are marked and left out of the target. `overhead/call` = (makespan - bound) x limit / calls, the time a call slot
is held beyond L.

Run: .venv/bin/python bench/bench_concurrency.py [N_DEBATES]"""
import os, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from madlab.core import run_sync
from madlab.agents import Agent
from madlab.backends import OpenAIBackend
from madlab.run import run_many
from madlab.tasks.arith import toy_arith_items
import madlab.protocols.baselines  # noqa: F401

TARGET, AGENTS, ROUNDS = 1.15, 3, 2

def free_port():
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

class Server:
    "The scripted server in a subprocess (so its CPU does not share our GIL)."
    def __init__(self, latency):
        self.port = free_port()
        self.p = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai_server.py"), "--port", str(self.port),
                                   "--latency", str(latency), "--reply", "Step by step. The answer is 42."],
                                  stdout=subprocess.DEVNULL, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        for _ in range(200):
            try: urllib.request.urlopen(f"{self.url}/models", timeout=1).close(); break
            except OSError: time.sleep(0.05)
    def __enter__(self): return self
    def __exit__(self, *a): self.p.send_signal(signal.SIGTERM); self.p.wait(5)

def make_team(url, endpoint_limit):
    return [Agent(f"A{i}", "openai:fake-model", backend=OpenAIBackend("fake-model", base_url=url, api_key="x", max_concurrency=endpoint_limit,
                                                                     max_retries=0, timeout=30)) for i in range(AGENTS)]

def per_call_cost(n=300):
    "c: sequential round trip of one call at L = 0 (client + server CPU and the loopback)."
    with Server(0.0) as s:
        b = OpenAIBackend("fake-model", base_url=s.url, api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": "What is 2 + 3 * 4? Think step by step, then end with 'The answer is N.'"}]
        async def go(k):
            for _ in range(k): await b.complete(msgs)
        run_sync(go(20))
        t0 = time.perf_counter(); run_sync(go(n)); return (time.perf_counter() - t0) / n

def trial(L, n, conc, endpoint_limit):
    with Server(L) as s:
        team = make_team(s.url, endpoint_limit)
        run_many("du", toy_arith_items(4, seed=99), team, rounds=ROUNDS, concurrency=4, cache=False, progress=False)   # warm: clients, pools
        items = toy_arith_items(n, seed=n)
        t0 = time.perf_counter()
        res = run_many("du", items, team, rounds=ROUNDS, concurrency=conc, cache=False, progress=False)
        wall = time.perf_counter() - t0
    calls = int(res.df.calls.sum())
    assert set(res.df.status) == {"done"} and (res.df.errors == 0).all() and calls == n * AGENTS * (ROUNDS + 1), res.df
    limit = min(endpoint_limit, conc * AGENTS)
    lb = max((ROUNDS + 1) * L, calls * L / limit)
    return wall, calls, limit, lb

def main(n=48):
    c = per_call_cost()
    print(f"du, {AGENTS} agents, rounds={ROUNDS} (critical path {ROUNDS + 1} calls); scripted server in its own process; {os.cpu_count()} CPUs")
    print(f"c = sequential round trip per call at L=0: {c * 1000:.2f} ms")
    print(f"{'L ms':>5} {'N':>4} {'debates':>8} {'endpoint':>9} {'limit':>6} {'calls':>6} {'makespan s':>11} {'bound s':>8} {'ratio':>6} {'overhead/call ms':>17}  regime")
    worst = 0.0
    for L in (0.05, 0.2):
        for n_, conc, ep in ((1, 1, 8), (n, 2, 8), (n, 8, 8), (n, 8, 24), (n, 16, 48)):
            wall, calls, limit, lb = trial(L, n_, conc, ep)
            r = wall / lb
            latency_bound = limit * c <= L / 4
            if latency_bound: worst = max(worst, r)
            print(f"{L * 1000:>5.0f} {n_:>4} {conc:>8} {ep:>9} {limit:>6} {calls:>6} {wall:>11.3f} {lb:>8.3f} {r:>6.3f} "
                  f"{(wall - lb) * limit / calls * 1000:>17.2f}  {'latency-bound' if latency_bound else 'CPU-bound here (limit x c > L/4)'}")
    print(f"worst ratio in latency-bound rows: {worst:.3f} (target <= {TARGET})", "OK" if worst <= TARGET else "ABOVE TARGET")
    return 0          # a report, not a test: the verdict is printed above

if __name__ == "__main__": sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 48))

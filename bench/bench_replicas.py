"""One model served by three replicas against one replica, at the same concurrency per replica.

Workload: N chat completions issued at once through one `OpenAIBackend` (`vllm:mock-model`), its limit pinned at C calls in
flight per replica. Each replica is `../shared/bench/mock_llm_server.py` in its own process, sleeping L seconds per request. With
R replicas the makespan is at least ceil(N / (R x C)) x L, so three replicas should take a third of one's time.

    ratio     = makespan / bound          makespan: the client's first call to the last answer of any replica
    CPU/call  = the client process's CPU (user + system) from the first call to the last answer, over N
    split     = the calls each replica answered

Targets: ratio <= 1.15 with three replicas at L = 1 s; client CPU per call with three replicas within 1.15 x one replica's.
The client runs in a fresh process per configuration.

Run: .venv/bin/python bench/bench_replicas.py [--latency 1.0] [--concurrency 32] [--rounds 10]"""
from __future__ import annotations
import argparse, json, math, os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench_controlmad_throughput import MockServer, SERVER      # noqa: E402  (the mock server in its own process, killed by PID)

RATIO_TARGET, CPU_TARGET = 1.15, 1.15

_CLIENT = r"""
import asyncio, json, sys, time, urllib.request
from madlab.backends import OpenAIBackend
urls, c, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = OpenAIBackend("mock-model", preset="vllm", base_url=urls, max_concurrency="|".join([c] * len(urls.split("|"))))
msgs = [[{"role": "user", "content": f"Question {i}: what is {i} + {i}?"}] for i in range(n)]
async def main():
    await asyncio.gather(*(b.complete([{"role": "user", "content": "warm-up"}]) for _ in urls.split("|")))   # imports and connections, outside the measure
    for u in urls.split("|"): urllib.request.urlopen(urllib.request.Request(u[:-3] + "/stats/reset", data=b"", method="POST"), timeout=10).read()
    t0, c0, m0 = time.perf_counter(), time.process_time(), time.monotonic()
    out = await asyncio.gather(*(b.complete(m) for m in msgs))
    return time.perf_counter() - t0, time.process_time() - c0, m0, sum(bool(o.text) for o in out)
wall, cpu, start, ok = asyncio.run(main())
print(json.dumps({"wall": wall, "cpu": cpu, "start": start, "ok": ok}))
"""

def run_client(servers, c: int, n: int) -> dict:
    urls = "|".join(f"{s.root}/v1" for s in servers)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MADLAB_MAX_CONCURRENCY", None)
    p = subprocess.run([sys.executable, "-c", _CLIENT, urls, str(c), str(n)], env=env, capture_output=True, text=True, timeout=900)
    if p.returncode: raise RuntimeError(f"client failed ({p.returncode}):\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    st = [s.stats() for s in servers]
    ends = [x["t0_monotonic"] + x["last_done_s"] for x in st if x["last_done_s"] is not None]
    r["makespan"] = max(ends) - r["start"]                           # from the client's first call (one clock: CLOCK_MONOTONIC)
    r["split"] = [x["total_requests"] for x in st]
    r["max_flight"] = [x["max_in_flight"] for x in st]
    return r

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=32, help="calls in flight per replica (the client's pinned limit)")
    ap.add_argument("--rounds", type=int, default=10, help="N = rounds x 3 x concurrency calls")
    a = ap.parse_args(argv)
    if not SERVER.exists(): sys.exit(f"needs {SERVER} (set MADLAB_SHARED)")
    L, C = a.latency, a.concurrency
    n = a.rounds * 3 * C
    print(__doc__.split("\n\n")[1].replace("\n", " ")[:220] + " ...")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; L = {L:g} s, C = {C} per replica, N = {n}\n")
    print(f"{'replicas':>8} {'calls':>6} {'answered':>8} {'makespan s':>10} {'bound s':>8} {'ratio':>6} {'CPU ms/call':>11} {'split':>16} {'max flight':>14}")
    rows = {}
    servers = [MockServer(L) for _ in range(3)]
    try:
        for r in (1, 3):
            res = run_client(servers[:r], C, n)
            bound = math.ceil(n / (r * C)) * L
            res.update(bound=bound, ratio=res["makespan"] / bound, cpu_ms=1000 * res["cpu"] / n)
            rows[r] = res
            print(f"{r:8d} {n:6d} {res['ok']:8d} {res['makespan']:10.2f} {bound:8.1f} {res['ratio']:6.3f} {res['cpu_ms']:11.3f} "
                  f"{str(res['split']):>16} {str(res['max_flight']):>14}", flush=True)
    finally:
        for s in servers: s.__exit__()
    one, three = rows[1], rows[3]
    cpu_ratio = three["cpu_ms"] / one["cpu_ms"]
    print(f"\nthree replicas: makespan / bound = {three['ratio']:.3f} (target <= {RATIO_TARGET}: {'met' if three['ratio'] <= RATIO_TARGET else 'MISSED'}); "
          f"one replica: {one['ratio']:.3f}")
    print(f"speed-up, three replicas over one: {one['makespan'] / three['makespan']:.2f}x (bound: {one['bound'] / three['bound']:.2f}x)")
    print(f"client CPU per call, three replicas / one: {cpu_ratio:.2f} (target <= {CPU_TARGET}: {'met' if cpu_ratio <= CPU_TARGET else 'MISSED'})")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return rows

if __name__ == "__main__": main()

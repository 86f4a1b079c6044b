"""Throughput of `madlab run controlmad` with its defaults against a fixed-latency OpenAI-compatible server.

Workload: ControlMAD's 5-player games (`controlmad/5.jsonl` in the public data (`$MADLAB_DATA`, default `../shared/data`)), 3 agents on one endpoint, depth 1,
self-adjustment on, confidence off, the game's player order, no cache: 36 calls per game and a critical path of
12 calls, so the makespan of any number of games is at least 12 x L.

The server is `../shared/bench/mock_llm_server.py` (it needs aiohttp), started here in its own process; it sleeps
L seconds per request and counts requests in flight. The command runs in a fresh process, exactly as a user types
it (no concurrency flag: the defaults are what is measured).

    ratio      = makespan / (12 x L)       makespan: the server's first arrival to its last answer
    CPU/call   = the command's process CPU (user + system) / calls; `run` leaves out interpreter start and imports
    max flight = the server's maximum number of requests in flight

Targets on a 2-core machine: ratio <= 1.15 at L = 1.0 s, N = 100; ratio <= 2 at L = 0.2 s, N = 60; CPU/call < 2 ms.

Run: .venv/bin/python bench/bench_controlmad_throughput.py [--games 20 60 100] [--latency 0.2 1.0] [--profile FILE] [--preset openai|vllm]"""
from __future__ import annotations
import argparse, json, os, signal, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from madlab.core import public_data         # noqa: E402
SHARED = Path(os.environ.get("MADLAB_SHARED", ROOT.parent / "shared"))
SERVER = SHARED / "bench" / "mock_llm_server.py"
DATA = public_data("controlmad")
CALLS_PER_GAME, CRITICAL_PATH = 36, 12
TARGETS = {(1.0, 100): 1.15, (0.2, 60): 2.0}
CPU_TARGET_MS = 2.0

# The command runs in a child process through madlab's CLI entry point (`madlab.cli.console`, what the `madlab` command runs);
# this wrapper only records the CPU spent after the imports, so that the per-call figure can be shown with and without
# interpreter start-up.
# With a profile file it profiles every thread (yappi) from the start of the run.
_WRAPPER = r"""
import json, os, sys, time
t_imp = time.process_time()
import madlab.cli
prof = os.environ.get("BENCH_PROFILE")
if prof:
    import yappi
    yappi.set_clock_type("cpu"); yappi.start(builtins=False)
t0 = time.process_time()
def record():
    cpu = time.process_time() - t0
    if prof:
        yappi.stop(); yappi.get_func_stats().save(prof, type="pstat")
    with open(os.environ["BENCH_CPU_FILE"], "w") as f: json.dump({"run_cpu_s": cpu, "import_cpu_s": t0 - t_imp}, f)
_exit = os._exit
def exit_recorded(code): record(); _exit(code)
os._exit = exit_recorded          # the command's own quick exit (madlab.cli.console)
try: madlab.cli.console(sys.argv[1:])
except SystemExit: record(); raise
"""

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

def _get(url, data=None):
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=10) as r: return json.loads(r.read())

class MockServer:
    "mock_llm_server.py with latency L in its own process group; killed by PID."
    def __init__(self, latency: float):
        self.port = free_port()
        self.p = subprocess.Popen([sys.executable, str(SERVER), "--port", str(self.port), "--latency", str(latency)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.root = f"http://127.0.0.1:{self.port}"
        for _ in range(300):
            if self.p.poll() is not None: raise RuntimeError(f"{SERVER} exited with {self.p.returncode} (is aiohttp installed?)")
            try: _get(f"{self.root}/health"); break
            except OSError: time.sleep(0.05)
        else: raise RuntimeError(f"{SERVER} did not start")
    def stats(self): return _get(f"{self.root}/stats")
    def reset(self): _get(f"{self.root}/stats/reset", b"")
    def __enter__(self): return self
    def __exit__(self, *a):
        try: os.killpg(self.p.pid, signal.SIGTERM)
        except ProcessLookupError: pass
        self.p.wait(10)

def run_games(srv: MockServer, n: int, out: Path, profile: str|None = None, extra=(), latency: float = 0, preset: str = "openai") -> dict:
    "One `madlab run controlmad` over the first n 5-player games; the server's figures and the command's CPU."
    srv.reset()
    cpu_file = out / f"cpu-{n}.json"
    env = {**os.environ, "OPENAI_BASE_URL": f"{srv.root}/v1", "OPENAI_API_KEY": "sk-bench-not-a-key", "BENCH_CPU_FILE": str(cpu_file)}
    if profile: env["BENCH_PROFILE"] = profile
    for k in ("MADLAB_MAX_CONCURRENCY",): env.pop(k, None)          # the defaults are what is measured
    cmd = [sys.executable, "-c", _WRAPPER, "run", "controlmad", "--data", str(DATA), "--size", "5", "--n", str(n),
           "--agents", ",".join([f"{preset}:mock-model" + ("" if preset == "openai" else f",base_url={srv.root}/v1")] * 3), "--no-confidence", "--no-cache",
           "--no-progress", "--out", str(out), "--name", f"L{latency}-n{n}", *extra]   # a fresh run folder each time (no resume)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    outp, _ = p.communicate()
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1): raise RuntimeError(f"madlab run failed ({p.returncode}):\n{outp.decode()[-3000:]}")
    s = srv.stats()
    cpu = json.loads(cpu_file.read_text())
    return {"wall": wall, "stats": s, "out": outp.decode(), **cpu}

def _child_cpu() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN); return r.ru_utime + r.ru_stime

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", type=int, nargs="+", default=[20, 60, 100])
    ap.add_argument("--latency", type=float, nargs="+", default=[0.2, 1.0])
    ap.add_argument("--profile", default=None, help="save a yappi profile (pstat) of the largest run at each latency to FILE.L.pstat")
    ap.add_argument("--preset", default="openai", choices=["openai", "vllm"],
                    help="the agents' preset: openai (OPENAI_BASE_URL: nothing says the server takes a schema, so each endpoint's first call holds the others) or vllm (it does: no hold)")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more options for `madlab run controlmad` (the rest of the line)")
    a = ap.parse_args(argv)
    if not SERVER.exists(): sys.exit(f"needs {SERVER} (set MADLAB_SHARED)")
    if DATA is None or not (DATA / "5.jsonl").exists(): sys.exit("ControlMAD's games (controlmad/5.jsonl) not found: set MADLAB_DATA")
    print(__doc__.split("\n\n")[1].replace("\n", " ")[:200] + " ...")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    hdr = f"{'L s':>5} {'games':>6} {'calls':>6} {'makespan s':>10} {'bound s':>8} {'ratio':>6} {'wall s':>7} {'CPU ms/call':>11} {'run ms/call':>11} {'max flight':>10}  target"
    print(hdr); rows = []
    with tempfile.TemporaryDirectory(prefix="madlab-bench-") as tmp:
        for L in a.latency:
            with MockServer(L) as srv:
                for n in a.games:
                    prof = f"{a.profile}.{L}.pstat" if a.profile and n == max(a.games) else None
                    c0 = _child_cpu()
                    r = run_games(srv, n, Path(tmp), prof, a.extra, L, a.preset)
                    cpu = _child_cpu() - c0
                    s = r["stats"]
                    calls, span = s["total_requests"], s["active_span_s"]
                    if not calls: print(f"{L:5.1f} {n:6d}  no calls: {r['out'].strip()[-300:]}"); continue
                    bound = CRITICAL_PATH * L
                    ratio = span / bound
                    tgt = TARGETS.get((L, n))
                    ok = "" if tgt is None else (f"<= {tgt}: " + ("met" if ratio <= tgt else "MISSED"))
                    print(f"{L:5.1f} {n:6d} {calls:6d} {span:10.2f} {bound:8.1f} {ratio:6.2f} {r['wall']:7.1f} {1000 * cpu / calls:11.2f} "
                          f"{1000 * r['run_cpu_s'] / calls:11.2f} {s['max_in_flight']:10d}  {ok}", flush=True)
                    if calls != CALLS_PER_GAME * n: print(f"      note: expected {CALLS_PER_GAME * n} calls; the command said: {r['out'].strip()[-300:]}")
                    rows.append(dict(L=L, games=n, calls=calls, makespan=span, ratio=ratio, cpu_ms=1000 * cpu / calls,
                                     run_cpu_ms=1000 * r["run_cpu_s"] / calls, max_in_flight=s["max_in_flight"]))
    print("\nClient CPU per call, process total (start-up, imports, the run, the report, exit) at the largest N of each latency,")
    print("and the marginal cost of a call (CPU difference between the smallest and largest N over the difference in calls):")
    for L in a.latency:
        rs = sorted((r for r in rows if r["L"] == L), key=lambda r: r["games"])
        if not rs: continue
        big = rs[-1]; line = f"  L = {L:.1f} s: {big['cpu_ms']:.2f} ms/call at N = {big['games']} (target < {CPU_TARGET_MS} ms: {'met' if big['cpu_ms'] < CPU_TARGET_MS else 'MISSED'})"
        if len(rs) > 1 and big["calls"] > rs[0]["calls"]:
            d = (big["cpu_ms"] * big["calls"] - rs[0]["cpu_ms"] * rs[0]["calls"]) / (big["calls"] - rs[0]["calls"])
            fixed = (rs[0]["cpu_ms"] - d) * rs[0]["calls"] / 1000
            line += f"; marginal {d:.2f} ms/call, fixed {fixed:.1f} s per command"
        print(line)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return rows

if __name__ == "__main__": main()

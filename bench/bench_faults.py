"""Faults against `madlab run`: how many debates of a run finish when the server is slow, flaky or restarting, for the code
before the endpoint breaker judged a window (`--before REV`, default the last such commit) and for this checkout, in one run;
then the client CPU per call of both at N = 300 games on the reference mock server (the breaker's cost per call).

Fault rows: `madlab run controlmad --size 4 --games 1-N --agents openai:m1,openai:m2,openai:m3 --timeout 5 --no-cache`, every other
option at its default, against `tests/fake_openai_server.py` (seeded fault injection, in this process; the command runs in its own).

    done / N   debates finished      wall   the command's wall time
    CPU/call   the command's process CPU after its imports / the server's requests (the mock server row)

Run: .venv/bin/python bench/bench_faults.py [--games 100] [--before REV] [--cpu-games 300] [--skip-cpu | --cpu-only] [--only LABEL]"""
from __future__ import annotations
import argparse, json, os, re, subprocess, sys, tempfile, threading, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]
from bench_controlmad_throughput import _WRAPPER, MockServer, SERVER, DATA, free_port, version_root   # noqa: E402
from fake_openai_server import FakeOpenAIServer                                             # noqa: E402

BEFORE = "ddcae08548d6e92ae9cde2ccfb49c22bc6644a8c"    # the last commit with the breaker that opened on 5 failures in a row
HTTP = {"429:1": 1, "429:none": 1, "500": 1, "503": 1}
BODIES = {"badjson": 1, "nochoices": 1}
ANSWERS = {"null": 1, "unreadable": 1}
DROPS = {"reset": 1, "short": 1}
SCENARIOS = [   # label, server options, what happens to the server during the run
    ("no faults", {}, None),
    ("30 % HTTP faults: 429 (Retry-After 1 or none), 500, 503", dict(faults=HTTP, fault_rate=0.3), None),
    ("30 % malformed bodies: truncated JSON, empty choices", dict(faults=BODIES, fault_rate=0.3), None),
    ("30 % null content or unreadable answers", dict(faults=ANSWERS, fault_rate=0.3), None),
    ("10 % of requests hang past the timeout", dict(faults={"hang": 1}, fault_rate=0.1), None),
    ("10 % of connections dropped (reset, short body)", dict(faults=DROPS, fault_rate=0.1), None),
    ("30 % of every fault above, mixed", dict(faults={**HTTP, **BODIES, **ANSWERS, **DROPS, "hang": 1}, fault_rate=0.3), None),
    ("the same with a 429 Retry-After: 99999 among them", dict(faults={**HTTP, **BODIES, **ANSWERS, **DROPS, "hang": 1, "429:99999": 1}, fault_rate=0.3), None),
    ("the server restarts mid-run (down 6 s)", {}, "restart"),
    ("the server comes up 10 s after the run starts", {}, "late"),
]

def madlab(root: Path, args: list, url: str, out: Path, name: str) -> dict:
    "`madlab ARGS` with the package at `root`, in a fresh process: wall, exit code, output, CPU after imports."
    cpu_file = out / f"{name}.cpu.json"
    env = {**os.environ, "PYTHONPATH": str(root), "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-bench-not-a-key", "BENCH_CPU_FILE": str(cpu_file),
           "MADLAB_CACHE": str(out / "cache")}
    env.pop("MADLAB_MAX_CONCURRENCY", None)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _WRAPPER, *args, "--no-cache", "--no-progress", "--out", str(out), "--name", name],
                       env=env, capture_output=True, text=True, cwd=out)
    wall = time.perf_counter() - t0
    cpu = json.loads(cpu_file.read_text()) if cpu_file.exists() else {}
    return {"wall": wall, "rc": p.returncode, "out": p.stdout + p.stderr, **cpu}

def done_of(r: dict, n: int) -> int:
    m = re.search(r"(\d+) done", r["out"])
    return int(m.group(1)) if m else 0

def fault_row(root: Path, label, opts, event, n: int, out: Path, name: str) -> dict:
    args = ["run", "controlmad", "--size", "4", "--games", f"1-{n}", "--agents", "openai:m1,openai:m2,openai:m3", "--timeout", "5"]
    srv = FakeOpenAIServer(reply="I cannot decide.", seed=11, **opts)
    if event == "late":
        srv.port = free_port()
        url = srv.url
        threading.Timer(10, srv.start).start()
    else:
        srv.start(); url = srv.url
    if event == "restart":
        def restart():
            while srv.hits < 200: time.sleep(0.01)
            srv.down(); time.sleep(6); srv.up()
        threading.Thread(target=restart, daemon=True).start()
    try: r = madlab(root, args, url, out, name)
    finally:
        for _ in range(200):                                     # the late server may still be starting
            if srv._loop is not None or event != "late": break
            time.sleep(0.1)
        srv.stop()
    return {**r, "done": done_of(r, n)}

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", type=int, default=100)
    ap.add_argument("--before", default=BEFORE, help="the commit to compare with (its madlab/ package is unpacked from git)")
    ap.add_argument("--cpu-games", type=int, default=300)
    ap.add_argument("--latency", type=float, default=0.2, help="the mock server's latency for the CPU rows")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--cpu-only", action="store_true", help="only the CPU rows")
    ap.add_argument("--only", default=None, help="only the fault rows whose label contains this")
    a = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="madlab-bench-faults-") as tmp:
        tmp = Path(tmp)
        before = version_root(a.before, tmp)
        versions = ([("before", before)] if before else []) + [("after", ROOT)]
        if before is None: print(f"(no commit {a.before} here: only this checkout is measured)")
        print(f"\n{'the server':<58}" + "".join(f"{v:>10} done {v:>6} wall" for v, _ in versions))
        for k, (label, opts, event) in enumerate([] if a.cpu_only else SCENARIOS):
            if a.only and a.only not in label: continue
            line = f"{label:<58}"
            for v, root in versions:
                r = fault_row(root, label, opts, event, a.games, tmp, f"{v}-{k}")
                line += f"{r['done']:>9}/{a.games} {r['wall']:>10.1f} s"
            print(line, flush=True)
        if a.skip_cpu: return
        if not SERVER.exists() or not (DATA / "5.jsonl").exists(): print(f"\nno {SERVER} or {DATA}: CPU rows skipped"); return
        print(f"\nclient CPU per call: `madlab run controlmad` (5-player games, defaults) x {a.cpu_games} games on the mock server (L = {a.latency} s)")
        with MockServer(a.latency) as srv:
            for v, root in versions:
                srv.reset()
                r = madlab(root, ["run", "controlmad", "--data", str(DATA), "--size", "5", "--n", str(a.cpu_games), "--agents",
                                  "openai:mock-model,openai:mock-model,openai:mock-model", "--no-confidence"], f"{srv.root}/v1", tmp, f"{v}-cpu")
                calls = srv.stats()["total_requests"]
                print(f"  {v:>6}: {calls} calls, {1000 * r['run_cpu_s'] / max(calls, 1):.3f} ms CPU/call after imports, wall {r['wall']:.1f} s", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")

if __name__ == "__main__": main()

"""A server killed mid-run and started again on its port: how many runs of `madlab run` lose anything (a failed debate or a
failed call), repeated enough times to catch a rare loss (a 1-in-40 loss shows in 120 runs with probability 0.95).

Each run: `madlab run controlmad --size 4 --games 1-G --depth 0 --no-self-adjustment --agents openai:m1,openai:m2,openai:m3
--timeout 5 --no-cache` in its own process (every other option at its default: all debates at once), against
`tests/fake_openai_server.py` in its own process (latency L); once that server has had AT requests it is killed (SIGKILL:
open connections reset, new ones refused) and a new one starts on the same port OUTAGE s later. Runs go J at a time.

    lost       runs with a failed debate or a failed call (of the runs made)
    worst      the fewest debates done in one run
    wall       median and largest wall time of a run

Run: .venv/bin/python bench/bench_restart.py [--runs 20] [--jobs 3] [--scenario L:OUTAGE:G:AT ...] [--before REV]"""
from __future__ import annotations
import argparse, os, re, statistics, subprocess, sys, tempfile, threading, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]
from fake_openai_server import ServerProcess                     # noqa: E402
from bench_faults import version_root                            # noqa: E402
from bench_controlmad_throughput import free_port                 # noqa: E402

# latency, outage, games, requests before the kill: the case (0.5 s, down 6 s about 4 s in, 60 games), then the test matrix
SCENARIOS = ["0.5:6:60:240", "0.1:2:48:160", "0.1:6:48:160", "0.1:20:48:160", "1.0:2:24:100", "1.0:6:24:100", "1.0:20:24:100"]
CLI = "import sys, madlab.cli; madlab.cli.console(sys.argv[1:])"

def one_run(root: Path, latency: float, outage: float, games: int, at: int, out: Path) -> dict:
    srv = ServerProcess(free_port(), latency, reply="I cannot decide.").start()
    env = {**os.environ, "PYTHONPATH": str(root), "OPENAI_BASE_URL": srv.url, "OPENAI_API_KEY": "sk-bench-not-a-key", "MADLAB_CACHE": str(out / "cache")}
    env.pop("MADLAB_MAX_CONCURRENCY", None)
    cmd = [sys.executable, "-c", CLI, "run", "controlmad", "--size", "4", "--games", f"1-{games}", "--depth", "0", "--no-self-adjustment",
           "--agents", "openai:m1,openai:m2,openai:m3", "--timeout", "5", "--no-cache", "--no-progress", "--out", str(out)]
    ended, ev, lock = threading.Event(), {}, threading.Lock()
    def restart():
        while not ended.is_set() and srv.hits() < at: ended.wait(0.05)
        with lock:
            if ended.is_set(): return
            srv.kill(); ev["down"] = time.perf_counter()
        ended.wait(outage)
        with lock:
            if not ended.is_set(): srv.start(); ev["up"] = time.perf_counter()
    th = threading.Thread(target=restart, daemon=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=out)
        th.start()
        text, _ = p.communicate()
        wall = time.perf_counter() - t0
    finally:
        with lock: ended.set(); srv.kill()                 # no server is started after this
        th.join(10)
    done = int(m.group(1)) if (m := re.search(r"(\d+) done", text)) else 0
    errors = int(m.group(1)) if (m := re.search(r"(\d+) errors\)", text)) else -1
    return {"done": done, "errors": errors, "wall": wall, "rc": p.returncode, "outage_hit": "down" in ev, "out": text}

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per scenario")
    ap.add_argument("--jobs", type=int, default=3, help="runs at once")
    ap.add_argument("--scenario", nargs="*", default=SCENARIOS, help="LATENCY:OUTAGE:GAMES:AT")
    ap.add_argument("--before", default=None, help="also measure the madlab/ package of this commit")
    a = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {a.runs} runs per scenario, {a.jobs} at a time")
    with tempfile.TemporaryDirectory(prefix="madlab-bench-restart-") as tmp:
        tmp = Path(tmp)
        versions = [("this checkout", ROOT)]
        if a.before:
            before = version_root(a.before, tmp)
            if before is not None: (before / "data").symlink_to(ROOT / "data"); versions.insert(0, (a.before[:8], before))
        print(f"\n{'version':<14}{'L s':>5}{'down s':>7}{'games':>6}{'at':>5}{'lost':>10}{'worst':>7}{'wall median':>13}{'max':>7}  first loss")
        k = 0
        for vname, root in versions:
            for sc in a.scenario:
                lat, outage, games, at = sc.split(":")
                lat, outage, games, at = float(lat), float(outage), int(games), int(at)
                def job(i):
                    d = tmp / f"run{k}-{i}"; d.mkdir()
                    return one_run(root, lat, outage, games, at, d)
                with ThreadPoolExecutor(a.jobs) as ex: rs = list(ex.map(job, range(a.runs)))
                k += 1
                lost = [r for r in rs if r["done"] < games or r["errors"] != 0 or r["rc"] != 0]
                missed = sum(not r["outage_hit"] for r in rs)
                walls = [r["wall"] for r in rs]
                first = "" if not lost else re.sub(r"\s+", " ", next(iter(re.findall(r"first error: (.{0,120})", lost[0]["out"])), lost[0]["out"][-120:]))
                print(f"{vname:<14}{lat:>5g}{outage:>7g}{games:>6}{at:>5}{len(lost):>5}/{len(rs):<4}{min(r['done'] for r in rs):>7}"
                      f"{statistics.median(walls):>11.1f} s{max(walls):>6.1f}  {first}" + (f" ({missed} runs ended before the outage)" if missed else ""), flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")

if __name__ == "__main__": main()

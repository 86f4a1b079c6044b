"""Throughput of `madlab run` with its defaults against a fixed-latency OpenAI-compatible server: ControlMAD's games,
and Du et al.'s debate on GSM8K (`--workload du-gsm8k`), whose prompts are short.

Workload `controlmad`: ControlMAD's 5-player games (`controlmad/5.jsonl` in the public data (`$MADLAB_DATA`, default
`../shared/data`)), 3 agents on one endpoint, depth 1, self-adjustment on, confidence off, the game's player order, no
cache: 36 calls per game and a critical path of 12 calls, so the makespan of any number of games is at least 12 x L.
Workload `du-gsm8k`: `madlab run du --task gsm8k`, 3 agents, an answer and 2 rounds: 9 calls per item, a path of 3.

The server is `../shared/bench/mock_llm_server.py` (it needs aiohttp), started here in its own process; it sleeps
L seconds per request and counts requests in flight. Against each server the command first runs once on its own
(`first run`: an `openai:` endpoint behind a custom base_url learns then whether the server takes a schema, and
`servers.json` beside the response cache keeps the answer); the rows after it are later runs against the same server,
which is what the targets are about. Each command runs in a fresh process, exactly as a user types it (no concurrency
flag: the defaults are what is measured). Its imports read compiled bytecode, as an installed package's do (kept under
the bench's folder; the first run writes it): a machine that sets PYTHONDONTWRITEBYTECODE would otherwise compile
madlab's source again in every run, about 0.15 s that no installed copy pays.

    ratio      = makespan / (path x L)   makespan: the server's first arrival to its last answer
    wall / bound = the command's wall time, interpreter start and imports included, over path x L
    CPU/call   = the command's CPU (user + system, its writer process included) / calls
    max flight = the server's maximum number of requests in flight

Targets on a 2-core machine (controlmad, N = 100, later runs): ratio <= 1.08 at L = 1.0 s and <= 1.25 at L = 0.2 s;
wall / bound <= 1.6 at L = 0.2 s; CPU/call <= 1.5 ms at L = 0.2 s.
`--cpu` says where the CPU of each run goes (interpreter start and imports, the debates, the results and report at
the end, the writer process) and where its wall time goes (start to the server's first request, the span, the server's
last answer to the command's exit); `--flame FILE.svg` draws a flame graph of the largest run at the first latency with
py-spy (`pip install py-spy`); `--reference DIR` runs ControlMAD's own code (a checkout of haolun-wu/ControlMAD, its
`run_debate_chat.py flexible` with 5 games at a time, its default) against the same server, for the side-by-side.

Run: .venv/bin/python bench/bench_controlmad_throughput.py [--workload controlmad|du-gsm8k] [--games 20 100]
     [--latency 0.2 1.0] [--cpu] [--flame FILE.svg] [--reference DIR [--reference-python PY]] [--preset openai|vllm]"""
from __future__ import annotations
import argparse, json, os, resource, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from madlab.core import public_data         # noqa: E402
SHARED = Path(os.environ.get("MADLAB_SHARED", ROOT.parent / "shared"))
SERVER = SHARED / "bench" / "mock_llm_server.py"
DATA = public_data("controlmad")             # ControlMAD's games (bench_faults.py runs them too)
# name -> the command's own options (data, n), calls per item, calls on the critical path
WORKLOADS = {
    "controlmad": dict(data="controlmad", calls=36, path=12,
                       args=lambda d, n: ["run", "controlmad", "--data", str(d), "--size", "5", "--n", str(n),
                                          "--no-confidence"]),
    "du-gsm8k": dict(data="gsm8k", calls=9, path=3,
                     args=lambda d, n: ["run", "du", "--task", "gsm8k", "--data", str(d / "test.jsonl"), "--n", str(n)]),
}
TARGETS = {(1.0, 100): 1.08, (0.2, 100): 1.25}            # controlmad, later runs: makespan / bound
WALL_TARGET, CPU_TARGET_MS = {(0.2, 100): 1.6}, 1.5

# The command runs in a child process through madlab's CLI entry point (`madlab.cli.console`, what the `madlab` command
# runs); this wrapper records the CPU spent in imports, in the run and in `_finish_run` (the results table, the report
# and the summary at the end), and that of the processes it waited for (the writer process).
_WRAPPER = r"""
import json, os, resource, sys, time
t_imp = time.process_time()
import madlab.cli, madlab.run
t0 = time.process_time()
fin = [0.0]
_finish = getattr(madlab.run, "_finish_run", None)     # (an older madlab, measured by --before, may not have it)
def finish(*a, **k):
    c = time.process_time()
    try: return _finish(*a, **k)
    finally: fin[0] += time.process_time() - c
if _finish is not None: madlab.run._finish_run = finish
def record():
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.environ["BENCH_CPU_FILE"], "w") as f:
        json.dump({"run_cpu_s": time.process_time() - t0, "import_cpu_s": t0, "finish_cpu_s": fin[0],
                   "writer_cpu_s": ch.ru_utime + ch.ru_stime}, f)
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

def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN); return r.ru_utime + r.ru_stime

def version_root(rev: str, tmp: Path) -> Path|None:
    """The `madlab/` package of commit `rev` and its top-level `data/` (price tables, ...) where it has one, unpacked
    under `tmp` (None when git or the commit is not there)."""
    dest = tmp / f"madlab-{rev[:8]}"
    for paths in (["madlab", "data"], ["madlab"]):          # data/ moved out of the package in later commits
        try: arch = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *paths], capture_output=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError): continue
        try: dest.mkdir(parents=True); subprocess.run(["tar", "-x", "-C", str(dest)], input=arch, check=True)
        except (OSError, subprocess.CalledProcessError): return None
        return dest
    return None

def run_items(srv: MockServer, wl: dict, n: int, out: Path, env_extra: dict, name: str, preset: str = "openai",
              flame: str|None = None) -> dict:
    "One `madlab run` of workload `wl` over its first n items: the server's figures, the wall time and the CPU."
    srv.reset()
    cpu_file = out / f"cpu-{name}.json"
    env = {**os.environ, "OPENAI_BASE_URL": f"{srv.root}/v1", "OPENAI_API_KEY": "sk-bench-not-a-key",
           "BENCH_CPU_FILE": str(cpu_file), **env_extra}
    env.pop("MADLAB_MAX_CONCURRENCY", None)          # the defaults are what is measured
    # imports read compiled bytecode, as an installed package's do (pip compiles at install; Python writes it on first
    # import): a machine that sets PYTHONDONTWRITEBYTECODE would otherwise compile madlab's source anew in every run
    env.pop("PYTHONDONTWRITEBYTECODE", None); env.setdefault("PYTHONPYCACHEPREFIX", str(out / "pycache"))
    agent = f"{preset}:mock-model" + ("" if preset == "openai" else f",base_url={srv.root}/v1")
    cmd = [sys.executable, "-c", _WRAPPER, *wl["args"](wl["dir"], n), "--agents", ",".join([agent] * 3), "--no-cache",
           "--no-progress", "--out", str(out), "--name", name]                # a fresh run folder each time (no resume)
    if flame: cmd = ["py-spy", "record", "--rate", "200", "--subprocesses", "--format", "flamegraph", "-o", flame, "--", *cmd]
    c0, t0 = _child_cpu(), time.monotonic()          # the server's clock too (CLOCK_MONOTONIC)
    # run from the output folder: `python -c` puts the working folder first on the import path, where a checkout's
    # madlab/ would shadow the one PYTHONPATH names
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, cwd=out)
    outp, _ = p.communicate()
    t1 = time.monotonic(); wall, cpu = t1 - t0, _child_cpu() - c0
    if p.returncode not in (0, 1): raise RuntimeError(f"madlab run failed ({p.returncode}):\n{outp.decode()[-3000:]}")
    st = srv.stats()
    phases = {}
    if st.get("first_arrival_s") is not None and st.get("last_done_s") is not None:   # the wall time's start and end
        t_first, t_last = st["t0_monotonic"] + st["first_arrival_s"], st["t0_monotonic"] + st["last_done_s"]
        phases = {"start_s": t_first - t0, "end_s": t1 - t_last}
    return {"wall": wall, "cpu": cpu, "stats": st, "out": outp.decode(), **phases, **json.loads(cpu_file.read_text())}

def reference_run(srv: MockServer, n: int, ref: Path, python: str) -> dict:
    """ControlMAD's own code (`run_debate_chat.py flexible`, 5 games at a time, its default) on the same workload
    against the same server: it reads its key from `secret.json` in its folder (made here when missing)."""
    secret = ref / "secret.json"
    if not secret.exists(): secret.write_text(json.dumps([{"API provider": "OpenAI", "API key": "sk-bench-not-a-key"}]))
    shutil.rmtree(ref / "debate_results", ignore_errors=True)
    srv.reset()
    cfg = json.dumps([{"provider": "openai", "model": "mock-model"}] * 3)
    cmd = [python, "run_debate_chat.py", "flexible", f"llm_configs={cfg}", "game_size=5", f"game_id_range=1,{n}",
           "self_reported_confidence=false", "depth=1", "debate_order_control=0"]
    env = {**os.environ, "OPENAI_BASE_URL": f"{srv.root}/v1", "OPENAI_API_KEY": "sk-bench-not-a-key"}
    c0, t0 = _child_cpu(), time.monotonic()          # the server's clock too (CLOCK_MONOTONIC)
    p = subprocess.run(cmd, cwd=ref, env=env, capture_output=True, start_new_session=True)
    t1 = time.monotonic(); wall, cpu = t1 - t0, _child_cpu() - c0
    if p.returncode != 0: raise RuntimeError(f"ControlMAD's run failed ({p.returncode}):\n{p.stderr.decode()[-2000:]}")
    return {"wall": wall, "cpu": cpu, "stats": srv.stats()}

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="controlmad", choices=sorted(WORKLOADS))
    ap.add_argument("--games", type=int, nargs="+", default=[20, 100], help="items per run (games, for controlmad)")
    ap.add_argument("--latency", type=float, nargs="+", default=[0.2, 1.0])
    ap.add_argument("--cpu", action="store_true", help="say where each run's CPU goes")
    ap.add_argument("--flame", default=None, help="a py-spy flame graph (SVG) of the largest run at the first latency")
    ap.add_argument("--reference", type=Path, default=None, help="a checkout of ControlMAD's code, run side by side")
    ap.add_argument("--reference-python", default=sys.executable, help="the Python ControlMAD's code runs in (needs openai)")
    ap.add_argument("--before", default=None, help="a commit to measure too, in the same run (its madlab/ unpacked from git): the ratios after / before")
    ap.add_argument("--repeat", type=int, default=1, help="later runs of each size and version, interleaved; the summary "
                    "gives their medians and ranges (the figures move by about 10 %% from one run to the next)")
    ap.add_argument("--preset", default="openai", choices=["openai", "vllm"],
                    help="the agents' preset: openai (OPENAI_BASE_URL: nothing says the server takes a schema, so the first run learns it) or vllm (it does)")
    a = ap.parse_args(argv)
    if a.repeat < 1: ap.error(f"--repeat must be at least 1; got {a.repeat}")
    wl = dict(WORKLOADS[a.workload]); wl["dir"] = public_data(wl["data"])
    if not SERVER.exists(): sys.exit(f"needs {SERVER} (set MADLAB_SHARED)")
    if wl["dir"] is None: sys.exit(f"the public data's {wl['data']}/ not found: set MADLAB_DATA")
    if a.flame and not shutil.which("py-spy"): sys.exit("--flame needs py-spy (pip install py-spy)")
    print(__doc__.split("\n\n")[1].replace("\n", " ")[:300] + " ...\n")
    print(f"workload {a.workload}: {wl['calls']} calls per item, critical path {wl['path']} calls; "
          f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    hdr = (f"{'L s':>5} {'items':>6} {'run':>6} {'code':>6} {'calls':>6} {'makespan s':>10} {'bound s':>8} {'ratio':>6} {'wall s':>7} "
           f"{'wall/bound':>10} {'CPU ms/call':>11} {'max flight':>10}  target")
    rows = []
    with tempfile.TemporaryDirectory(prefix="madlab-bench-") as tmp, tempfile.TemporaryDirectory(prefix="madlab-cache-") as cache:
        env_extra = {"MADLAB_CACHE": cache}               # servers.json lives here: new for this bench, kept between its runs
        before = version_root(a.before, Path(tmp)) if a.before else None
        if a.before and before is None: sys.exit(f"--before {a.before}: no such commit here")
        # each version its own servers.json, so each learns the server in its own first run
        # and its own bytecode: each version's first run compiles what it imports
        versions = ([("before", {"PYTHONPATH": str(before), "MADLAB_CACHE": f"{cache}/before",
                                 "PYTHONPYCACHEPREFIX": f"{tmp}/pycache-before"})] if before else []) + \
                   [("after", {"PYTHONPATH": str(ROOT), "MADLAB_CACHE": f"{cache}/after", "PYTHONPYCACHEPREFIX": f"{tmp}/pycache-after"})]
        print(hdr)
        for li, L in enumerate(a.latency):
            with MockServer(L) as srv:
                runs = [("first", min(a.games), v, 0) for v in versions] + \
                       [("later", n, v, i) for i in range(a.repeat) for n in a.games for v in versions]      # interleaved
                for which, n, (code, venv), i in runs:
                    flame = str(Path(a.flame).resolve()) if (a.flame and li == 0 and which == "later" and n == max(a.games) and code == "after") else None
                    r = run_items(srv, wl, n, Path(tmp), {**env_extra, **venv}, f"{a.workload}-L{L}-n{n}-{which}{i}-{code}",
                                  a.preset, flame)
                    s = r["stats"]; calls, span = s["total_requests"], s["active_span_s"]
                    if not calls: print(f"{L:5.1f} {n:6d}  no calls: {r['out'].strip()[-300:]}"); continue
                    bound = wl["path"] * L
                    ratio, wb = span / bound, r["wall"] / bound
                    tgt, wt = (TARGETS.get((L, n)), WALL_TARGET.get((L, n))) if a.workload == "controlmad" and which == "later" else (None, None)
                    ok = "under py-spy: drawn, not measured" if flame else "; ".join(x for x in [None if tgt is None else f"ratio <= {tgt}: " + ("met" if ratio <= tgt else "MISSED"),
                                               None if wt is None else f"wall/bound <= {wt}: " + ("met" if wb <= wt else "MISSED")] if x)
                    print(f"{L:5.1f} {n:6d} {which:>6} {code:>6} {calls:6d} {span:10.2f} {bound:8.1f} {ratio:6.2f} {r['wall']:7.1f} "
                          f"{wb:10.2f} {1000 * r['cpu'] / calls:11.2f} {s['max_in_flight']:10d}  {ok}", flush=True)
                    if calls != wl["calls"] * n: print(f"      note: expected {wl['calls'] * n} calls; the command said: {r['out'].strip()[-300:]}")
                    if a.cpu:
                        main = r["import_cpu_s"] + r["run_cpu_s"]
                        print(f"      CPU ms/call: imports {1000 * r['import_cpu_s'] / calls:.2f}, debates "
                              f"{1000 * (r['run_cpu_s'] - r['finish_cpu_s']) / calls:.2f}, results and report "
                              f"{1000 * r['finish_cpu_s'] / calls:.2f} (this process {1000 * main / calls:.2f}); "
                              f"writer process {1000 * r['writer_cpu_s'] / calls:.2f}", flush=True)
                        if "start_s" in r:
                            print(f"      wall s: start to first request {r['start_s']:.2f}, span {span:.2f}, "
                                  f"last answer to exit {r['end_s']:.2f}", flush=True)
                    if flame: continue                         # a run under the profiler is no figure
                    rows.append(dict(L=L, games=n, run=which, code=code, calls=calls, makespan=span, ratio=ratio, wall=r["wall"],
                                     wall_bound=wb, cpu_ms=1000 * r["cpu"] / calls, max_in_flight=s["max_in_flight"],
                                     start=r.get("start_s"), end=r.get("end_s")))
                if a.reference is not None and a.workload == "controlmad":
                    n = max(a.games); r = reference_run(srv, n, a.reference, a.reference_python)
                    s = r["stats"]; calls, span = s["total_requests"], s["active_span_s"]
                    mine = next(x for x in rows if x["L"] == L and x["games"] == n and x["run"] == "later" and x["code"] == "after")
                    print(f"{L:5.1f} {n:6d} {'':>6} {'ControlMAD':>6} {calls:6d} {span:10.2f} {'':>8} {'':>6} {r['wall']:7.1f} "
                          f"{'':>10} {1000 * r['cpu'] / max(calls, 1):11.2f} {s['max_in_flight']:10d}  "
                          f"madlab {r['wall'] / mine['wall']:.1f}x faster in wall time", flush=True)
                    rows.append(dict(L=L, games=n, run="later", code="ControlMAD", calls=calls, makespan=span, wall=r["wall"],
                                     cpu_ms=1000 * r["cpu"] / max(calls, 1), max_in_flight=s["max_in_flight"]))
    rows = _medians(rows, a)
    later = [r for r in rows if r["run"] == "later" and r["code"] == "after"]
    if later:
        print("\nClient CPU per call (the command's process and its writer process: start-up, imports, the run, the report, exit),"
              "\nat the largest N of each latency:")
        for L in a.latency:
            rs = sorted((r for r in later if r["L"] == L), key=lambda r: r["games"])
            if rs:
                big = rs[-1]
                print(f"  L = {L:.1f} s: {big['cpu_ms']:.2f} ms/call at N = {big['games']}"
                      + (f" (target <= {CPU_TARGET_MS} ms at L = 0.2 s, N = 100: {'met' if big['cpu_ms'] <= CPU_TARGET_MS else 'MISSED'})"
                         if L == 0.2 and big["games"] == 100 and a.workload == "controlmad" else ""))
    if before:
        print(f"\nAfter / before ({a.before[:10]}), later runs (first runs for `first`):")
        for r in rows:
            if r["code"] != "after": continue
            b = next((x for x in rows if x["code"] == "before" and (x["L"], x["games"], x["run"]) == (r["L"], r["games"], r["run"])), None)
            if b: print(f"  L = {r['L']:.1f} s, N = {r['games']:3d} {r['run']:>5}: ratio {r['ratio'] / b['ratio']:.2f}x, "
                        f"wall {r['wall'] / b['wall']:.2f}x, CPU/call {r['cpu_ms'] / b['cpu_ms']:.2f}x")
    if a.flame: print(f"\nflame graph of the largest run at L = {a.latency[0]} s: {a.flame}")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return rows

def _medians(rows: list, a) -> list:
    """One row per (L, N, run, version): the median of its runs (`--repeat`), printed with their ranges when there were
    several; the rows after that use the medians."""
    import statistics
    keys = list(dict.fromkeys((r["L"], r["games"], r["run"], r["code"]) for r in rows))
    out = []
    for k in keys:
        rs = [r for r in rows if (r["L"], r["games"], r["run"], r["code"]) == k]
        measured = ("makespan", "ratio", "wall", "wall_bound", "cpu_ms", "start", "end")
        med = {c: statistics.median(r[c] for r in rs) if c in measured and all(isinstance(r.get(c), float) for r in rs)
               else rs[0].get(c) for c in rs[0]}
        out.append({**med, "n_runs": len(rs), "all": rs})
    if a.repeat > 1:
        print(f"\nMedians of {a.repeat} later runs (min-max):")
        for m in out:
            if m["run"] != "later" or m["n_runs"] < 2: continue
            rng = lambda c, f: f"{f.format(m[c])} ({f.format(min(r[c] for r in m['all']))}-{f.format(max(r[c] for r in m['all']))})"
            wt, tgt = WALL_TARGET.get((m["L"], m["games"])), TARGETS.get((m["L"], m["games"]))
            ok = "; ".join(x for x in [None if tgt is None else f"ratio <= {tgt}: " + ("met" if m["ratio"] <= tgt else "MISSED"),
                                       None if wt is None else f"wall/bound <= {wt}: " + ("met" if m["wall_bound"] <= wt else "MISSED")]
                           if x) if a.workload == "controlmad" else ""
            ends = f", start {m['start']:.2f} s, end {m['end']:.2f} s" if isinstance(m.get("start"), float) else ""
            print(f"  L = {m['L']:.1f} s, N = {m['games']:3d}, {m['code']:>6}: ratio {rng('ratio', '{:.2f}')}, wall "
                  f"{rng('wall', '{:.2f}')} s = {m['wall_bound']:.2f} x bound, CPU {rng('cpu_ms', '{:.2f}')} ms/call{ends}"
                  + (f"  {ok}" if ok else ""))
    return out

if __name__ == "__main__": main()

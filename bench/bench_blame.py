"""Interventional blame's own cost: `OpenRun.blame` on a 50-item synthetic `du` run (3 susceptible agents and a saboteur,
3 rounds), with more and more forks (the first K items, gold interventions at every turn), against the forks' own calls.

    forks      forks made (items x 12 turns x interventions)
    calls      calls blame made
    own        the calls recorded in the forks' transcripts (what the continuations themselves needed)
    ratio      calls / own: 1.00 means blame adds no call of its own (no re-run of the replayed rounds)
    wall       seconds of the blame, and per fork
    est        the estimate made before the start / the calls made (>= 1: the estimate is an upper bound)
    again      seconds of a second blame of the same run (every fork read from its folder, no call)

Agents have LAT seconds of simulated latency per call (`--latency`, default 0.005), so the wall time shows the forks running
at once; the last column compares the wall time with own calls x LAT run one after another.

Run: .venv/bin/python bench/bench_blame.py [--items 50] [--latency 0.005]"""
from __future__ import annotations
import argparse, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from madlab.blame import run_blame                  # noqa: E402
from madlab.run import run_experiment               # noqa: E402
from madlab.runs import open_run                    # noqa: E402
from madlab.tasks.arith import toy_arith_items          # noqa: E402

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=50)
    ap.add_argument("--latency", type=float, default=0.005)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    team = [f"synthetic:susceptible,seed={k},latency={a.latency}" for k in (1, 2, 3)] + [f"synthetic:saboteur,latency={a.latency}"]
    run_experiment("du", items=toy_arith_items(a.items, seed=1), team=team, out=tmp / "run", cache=tmp / "cache")
    run = open_run(tmp / "run")
    ids = [str(i) for i in run.df.item_id]
    print(f"{'items':>5} {'forks':>6} {'calls':>6} {'own':>6} {'ratio':>6} {'wall s':>7} {'ms/fork':>8} {'est':>5} {'again s':>8} {'wall/serial':>11}")
    for k in sorted({max(1, a.items // 10), a.items // 5, a.items // 2, a.items}):
        out = tmp / f"blame-{k}"
        t0 = time.perf_counter()
        b = run_blame(run, ids[:k], "gold", cache=tmp / f"cache-{k}", out=out)      # a cache of its own: every continuation call is made
        wall = time.perf_counter() - t0
        own = int(b.df.calls.sum())
        t1 = time.perf_counter()
        again = run_blame(run, ids[:k], "gold", cache=tmp / f"cache-{k}", out=out)
        t_again = time.perf_counter() - t1
        assert again.calls == 0
        print(f"{k:>5} {len(b.df):>6} {b.calls:>6} {own:>6} {b.calls / own if own else float('nan'):>6.2f} {wall:>7.2f} {1000 * wall / len(b.df):>8.2f} "
              f"{b.estimate / b.calls if b.calls else float('nan'):>5.2f} {t_again:>8.2f} {wall / (own * a.latency) if own and a.latency else float('nan'):>11.3f}")

if __name__ == "__main__":
    main()

"""Interventional blame checked against a known cause, over a grid of teams: six honest synthetic agents
(`skill=1.0,susceptibility=0.9,defer=D,conviction=C`) and a `saboteur` (always wrong, never moves) debate `toy_arith_items(N, seed=1)`
with Du et al.'s protocol (2 rounds after the first answers). For each (D, C):

    accuracy         the run's accuracy, and how many items it decided wrong
    saboteur first   on the items decided wrong, blame (gold and neutral forks at every turn) ranks the saboteur alone first (target >= 90 %)
    placebo          placebo forks (each honest agent's reply to another item) at every turn of the first P items: the share that
                     changed the decision, with its Wilson 95 % interval (target <= 5 %)

`tests/test_blame.py` asserts both targets for D = 0.15, C = 1 (on 30 items for the placebo); this prints how they move with the team.
Not a benchmark of speed (it is not run by `make bench`): about 1-4 minutes per team on a 2-core machine.

Run: .venv/bin/python bench/blame_known_cause.py [--items 400] [--placebo-items 100] [--team 0.15:1 0.2:0.5 ...]"""
from __future__ import annotations
import argparse, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from madlab.blame import blame_table, run_blame     # noqa: E402
from madlab.run import run_experiment               # noqa: E402
from madlab.runs import open_run                    # noqa: E402
from madlab.tasks.arith import toy_arith_items          # noqa: E402

HONEST = "synthetic:skill=1.0,susceptibility=0.9,defer={defer},conviction={conviction},seed={seed}"
GRID = ["0.1:1", "0.15:1", "0.2:1", "0.15:0.8", "0.15:0.5", "0.2:0.8", "0.2:0.5", "0.15:0"]

def one(defer: float, conviction: float, n: int, n_placebo: int, tmp: Path) -> str:
    t0, out = time.perf_counter(), tmp / f"d{defer}-c{conviction}"
    team = [HONEST.format(defer=defer, conviction=conviction, seed=k) for k in range(1, 7)] + ["synthetic:saboteur"]
    run_experiment("du", items=toy_arith_items(n, seed=1), team=team, out=out / "run", cache=out / "cache", rounds=2)
    run = open_run(out / "run")
    wrong = int((~run.df.correct.astype(bool)).sum())
    first = run_blame(run, "wrong", "gold,neutral", cache=out / "cache").first() if wrong else None
    sab = int((first["first"] == "Synthetic-saboteur").sum()) if first is not None else 0
    p = run_blame(run, [str(i) for i in run.df.item_id[:n_placebo]], "placebo", cache=out / "cache").df
    honest = p[p.agent != "Synthetic-saboteur"]
    k, m = int(honest.changed.sum()), len(honest)
    lo, hi = blame_table(honest, ("intervention",))[["changed_low", "changed_high"]].iloc[0]
    return (f"| {defer} | {conviction} | {run.df.correct.mean():.3f} | {wrong} | {sab}/{wrong} | {k}/{m} = {k / m:.1%} ({lo:.1%}-{hi:.1%}) "
            f"| {time.perf_counter() - t0:.0f} s |")

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--placebo-items", type=int, default=100)
    ap.add_argument("--team", nargs="+", default=GRID, metavar="DEFER:CONVICTION")
    a = ap.parse_args(argv)
    try: grid = [tuple(float(x) for x in t.split(":")) for t in a.team]
    except ValueError: ap.error(f"--team: each must be DEFER:CONVICTION, e.g. 0.15:1; got {' '.join(a.team)}")
    if any(len(g) != 2 or not all(0 <= x <= 1 for x in g) for g in grid): ap.error(f"--team: each must be DEFER:CONVICTION, two numbers between 0 and 1; got {' '.join(a.team)}")
    tmp = Path(tempfile.mkdtemp())
    print(f"{a.items} items, placebo on the first {a.placebo_items}; six honest agents and a saboteur, du, 2 rounds\n")
    print("| defer | conviction | accuracy | wrong | saboteur first | placebo changes (95 %) | wall |\n|---|---|---|---|---|---|---|")
    for d, c in grid: print(one(d, c, a.items, a.placebo_items, tmp), flush=True)

if __name__ == "__main__":
    main()

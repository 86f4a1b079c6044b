"""Knight-Knave-Spy solver and generator speed.

1. Solve all 1,800 ControlMAD games (`controlmad/` in the public data (`$MADLAB_DATA`, default `../shared/data`)) with uniqueness checked (`solve(p, limit=2)`, CP-SAT) against a plain brute force
   over all 3^n role assignments (`_brute_force`) in the same run. The brute force takes about a second per 9-player
   game, so by default it runs on every game of 4-7 players and every 10th game of 8-9 players, and the full
   brute-force total is estimated from the per-size means (`--full` times it on all 1,800, several minutes).
2. Generate 100 unique games of 12 and of 16 players.

Run: .venv/bin/python bench/bench_puzzles.py [--full]"""
import os, statistics, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from madlab.core import public_data         # noqa: E402
CONTROLMAD = public_data("controlmad")     # $MADLAB_DATA, else ../shared/data beside the checkout

def main(full=False):
    t0 = time.perf_counter()
    from madlab.puzzles import _brute_force, solve
    from madlab.puzzle_sets import generate, load_controlmad
    import ortools.sat.python.cp_model  # noqa: F401  (import cost reported apart)
    t_import = time.perf_counter() - t0
    print(f"CPU cores: {os.cpu_count()}; import madlab.puzzles + ortools: {t_import:.2f} s (once per process, not counted below)")
    if CONTROLMAD is None or not CONTROLMAD.is_dir():
        print("ControlMAD's games not found (set MADLAB_DATA): skipping the solver benchmark")
    else:
        games = load_controlmad(CONTROLMAD)
        solve(games[0], limit=2)                                   # warm up
        per = {}
        t = time.perf_counter()
        for p in games:
            t1 = time.perf_counter()
            sols = solve(p, limit=2)
            per.setdefault(p.n_players, []).append(time.perf_counter() - t1)
            assert sols == [p.solution], p.id
        t_cp = time.perf_counter() - t
        print(f"\n1) solve all {len(games)} ControlMAD games, uniqueness checked (limit=2): {t_cp:.2f} s total "
              f"({t_cp / len(games) * 1000:.2f} ms/game; target < 10 s)")
        print(f"   {'players':>7} {'games':>6} {'CP-SAT ms/game':>15} {'brute timed':>12} {'brute ms/game':>14} {'ratio':>8}")
        est_brute, cp_same, brute_same = 0.0, 0.0, 0.0
        for n in sorted(per):
            sub = [p for p in games if p.n_players == n]
            timed = sub if (full or n <= 7) else sub[::10]
            bt = []
            for p in timed:
                t1 = time.perf_counter()
                sols = _brute_force(p, limit=2)
                bt.append(time.perf_counter() - t1)
                assert sols == [p.solution], p.id
            idx = [sub.index(p) for p in timed]
            cp_same += sum(per[n][i] for i in idx); brute_same += sum(bt)
            est_brute += statistics.mean(bt) * len(sub)
            print(f"   {n:>7} {len(sub):>6} {statistics.mean(per[n]) * 1000:>15.2f} {len(timed):>12} {statistics.mean(bt) * 1000:>14.1f} "
                  f"{statistics.mean(bt) / statistics.mean(per[n]):>7.1f}x")
        print(f"   brute force over 3^n on the {'same' if full else 'timed'} games: {brute_same:.1f} s vs CP-SAT {cp_same:.2f} s on them "
              f"-> CP-SAT is {brute_same / cp_same:.1f}x faster")
        print(f"   brute force for all 1,800 ({'measured' if full else 'estimated from per-size means'}): {est_brute:.0f} s "
              f"-> ratio brute / CP-SAT = {est_brute / t_cp:.1f}x")
    print("\n2) generate 100 unique games (ControlMAD mix, one spy, spy hint; target < 30 s each)")
    for n in (12, 16):
        t = time.perf_counter()
        gs = generate(n, count=100, seed=2025)
        dt = time.perf_counter() - t
        assert len(gs) == 100
        print(f"   {n} players: {dt:.1f} s ({dt / 100 * 1000:.0f} ms/game)")

if __name__ == "__main__":
    main(full="--full" in sys.argv)

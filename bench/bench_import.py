"""Import time of madlab's light modules, in fresh subprocesses; and that torch/transformers stay unloaded.

Run: .venv/bin/python bench/bench_import.py"""
import statistics, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = ("import sys, time; t0 = time.perf_counter(); import madlab; import madlab.core, madlab.backends, madlab.agents; "
        "dt = time.perf_counter() - t0; heavy = [m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules]; "
        "print(dt, ','.join(heavy))")
TARGET = 0.5

def once(code):
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return time.perf_counter() - t0, float(out[0]), (out[1].split(",") if len(out) > 1 else [])

def main(n=7):
    once(CODE)                                            # warm the OS file cache
    base = [once("import time; print(time.perf_counter() - time.perf_counter())")[0] for _ in range(n)]
    runs = [once(CODE) for _ in range(n)]
    wall = statistics.median(r[0] for r in runs)
    inproc = statistics.median(r[1] for r in runs)
    heavy = sorted({m for r in runs for m in r[2]})
    py = statistics.median(base)
    print(f"python -c 'import madlab; import madlab.core, madlab.backends, madlab.agents'  (median of {n} fresh processes)")
    print(f"  import time inside the process : {inproc * 1000:7.1f} ms   (target < {TARGET * 1000:.0f} ms)")
    print(f"  whole process wall time        : {wall * 1000:7.1f} ms   (bare interpreter: {py * 1000:.1f} ms; ratio {wall / py:.2f}x)")
    print(f"  heavy modules loaded           : {heavy or 'none'}")
    assert not heavy, f"importing madlab loaded {heavy}"
    print("OK" if inproc < TARGET else f"SLOW: {inproc:.3f} s >= {TARGET} s")
    return 0 if inproc < TARGET else 1

if __name__ == "__main__": sys.exit(main())

"""Prefix reuse in `hf:` with the real model on this machine (SmolLM2-135M-Instruct, float32, CPU, in process): each workload runs
twice in the same bench, with reuse off (`kv_cache_mb=0`, every prompt computed whole) and on (the default budget), each in its
own process so peak memory is its own.

- ControlMAD, one 4-player game, three agents, depth 1 with self-adjustment, 64 new tokens, greedy, schemas held;
- Du et al. on GSM8K: three agents, an initial answer and two debate rounds (`rounds=2`), 2 questions at once, 64 new tokens, greedy.

Printed per workload and mode: prompt tokens sent, prefill tokens computed and their ratio, wall time, peak RSS, torch threads,
and whether the replies are token for token those without reuse.

Run: .venv/bin/python bench/bench_prefix.py [--only controlmad,du] [--gsm8k 2]"""
from __future__ import annotations
import argparse, json, resource, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from madlab.core import public_data         # noqa: E402
GSM8K = public_data("gsm8k", "test.jsonl")  # $MADLAB_DATA, else ../shared/data beside the checkout

def one(kind: str, kv: str, n: int, out: str) -> dict:
    "One workload in this process; what it measured, as JSON-able values."
    sys.path.insert(0, str(ROOT))
    import torch
    from madlab.backends import get_backend
    from madlab.run import run_experiment
    spec = "hf:smollm2" + ("" if kv == "default" else f",kv_cache_mb={kv}")
    t0 = time.perf_counter()
    if kind == "controlmad":
        from madlab.cli_options import load_items
        res = run_experiment("controlmad", load_items("kks", size=4, items=[1]), [spec] * 3, Path(out) / kind, depth=1,
                             self_adjustment=True, max_tokens=64, temperature=0, cache=False, progress=False)
    else:
        from madlab.tasks.gsm8k import load_gsm8k
        res = run_experiment("du", load_gsm8k(GSM8K, limit=n), [spec] * 3, Path(out) / kind, rounds=2, max_tokens=64,
                             temperature=0, cache=False, progress=False)
    wall = time.perf_counter() - t0
    b = get_backend(spec)
    replies = [tu.reply for t in res.transcripts.values() for r in t.rounds for tu in r.turns]
    return {"replies": replies, "sent": b.prompt_tokens, "computed": b.prefill_tokens, "wall": wall, "calls": b.requests,
            "status": res.df.status.tolist(), "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "threads": torch.get_num_threads(), "store": repr(b._prefix), "summary": res.summary().splitlines()[-2:]}

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="controlmad,du")
    ap.add_argument("--gsm8k", type=int, default=2)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--kv", default="default", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if GSM8K is None: sys.exit("GSM8K's test set (gsm8k/test.jsonl) not found: set MADLAB_DATA (see madlab.core.public_data)")
    if a.one:
        with tempfile.TemporaryDirectory(prefix="madlab-bench-prefix-") as out: print(json.dumps(one(a.one, a.kv, a.gsm8k, out)))
        return
    sys.path.insert(0, str(ROOT))
    from madlab.models import get_model
    get_model("smollm2")
    import os
    print(f"SmolLM2-135M-Instruct, hf: in process, float32 CPU, {len(os.sched_getaffinity(0))} usable cores; load average {os.getloadavg()[0]:.1f}")
    for kind in a.only.split(","):
        got = {}
        for kv in ("0", "default"):
            p = subprocess.run([sys.executable, __file__, "--one", kind, "--kv", kv, "--gsm8k", str(a.gsm8k)], capture_output=True, text=True)
            if p.returncode: sys.exit(f"{kind} kv={kv} failed:\n{p.stderr[-3000:]}")
            got[kv] = json.loads(p.stdout.strip().splitlines()[-1])
        off, on = got["0"], got["default"]
        same = sum(x == y for x, y in zip(off["replies"], on["replies"]))
        print(f"{kind}: {on['calls']} calls, {on['sent']:,} prompt tokens; torch threads {on['threads']}; load average now {os.getloadavg()[0]:.1f}")
        for name, r in (("reuse off", off), ("reuse on ", on)):
            print(f"  {name}: prefill {r['computed']:>6,} of {r['sent']:,} tokens ({r['computed'] / r['sent']:.2f}); wall {r['wall']:6.0f} s; peak RSS {r['rss_mb']:.0f} MB")
        print(f"  on / off: prefill {on['computed'] / off['computed']:.2f}x, wall {on['wall'] / off['wall']:.2f}x, peak RSS {on['rss_mb'] / off['rss_mb']:.2f}x; "
              f"identical replies {same}/{len(off['replies'])}{'' if len(off['replies']) == len(on['replies']) else ' (different counts!)'}; store after: {on['store']}")
        print("  run summary (on): " + " | ".join(on["summary"]), flush=True)

if __name__ == "__main__": main()

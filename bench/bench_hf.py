"""`hf:` batching: tokens per second when 32 concurrent requests are served by batched `generate` calls, against the
same 32 requests one at a time, on the tiny random Llama the tests build (CPU). Target: >= 5x.

Run: .venv/bin/python bench/bench_hf.py [N_REQUESTS] [MAX_NEW_TOKENS]"""
import asyncio, os, sys, tempfile, time
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from conftest import build_tiny_llama
from madlab.core import run_sync
from madlab.backends import HFBackend

TARGET = 5.0

def prompts(n):
    return [[{"role": "system", "content": "You are a careful debater."},
             {"role": "user", "content": f"What is {i} + {3 * i} * {i % 7 + 2}? Think step by step, then end with 'The answer is N.'"}]
            for i in range(n)]

def measure(path, n, max_new, **kw):
    b = HFBackend(path, kv_cache_mb=0, threads=int(os.environ.get("BENCH_TORCH_THREADS", 1)), **kw)   # no prefix reuse: the same prompts run twice here
    ps = prompts(n)
    params = dict(greedy=True, max_new_tokens=max_new)
    run_sync(b.complete(ps[0], **params))                                     # load and warm up
    async def one_by_one():
        return [await b.complete(p, **params) for p in ps]
    async def together():
        return await asyncio.gather(*(b.complete(p, **params) for p in ps))
    res = {}
    for name, fn in (("one at a time", one_by_one), ("batched", together)):
        g0 = b.generate_calls
        t0 = time.perf_counter(); out = run_sync(fn()); dt = time.perf_counter() - t0
        toks = sum(c.usage.completion_tokens for c in out)
        res[name] = (toks / dt, toks, dt, b.generate_calls - g0)
    return res

def main(n=32, max_new=32):
    import torch
    torch.set_num_threads(int(os.environ.get("BENCH_TORCH_THREADS", 1)))   # 1: stable on a shared CPU; more threads spin against other load (the backend's `threads` too)
    worst = None
    with tempfile.TemporaryDirectory() as d:
        for label, kw in (("tiny (hidden 64, 2 layers: the test model)", dict(hidden=64, layers=2)),
                          ("small (hidden 256, 4 layers)", dict(hidden=256, layers=4))):
            path = build_tiny_llama(Path(d) / label.split()[0], **kw)
            r = measure(path, n, max_new)
            ratio = r["batched"][0] / r["one at a time"][0]
            worst = ratio if worst is None else min(worst, ratio)
            print(f"{label}: {n} requests, greedy, max_new_tokens={max_new}, torch threads={torch.get_num_threads()}")
            for name, (tps, toks, dt, g) in r.items():
                print(f"  {name:>14}: {tps:8.0f} tokens/s  ({toks} tokens in {dt:.2f} s, {g} generate calls)")
            print(f"  batched / one at a time: {ratio:.1f}x (target >= {TARGET}x)")
    print("OK" if worst >= TARGET else "BELOW TARGET")
    return 0          # a report, not a test: the verdict is printed above

if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(int(a[0]) if a else 32, int(a[1]) if len(a) > 1 else 32))

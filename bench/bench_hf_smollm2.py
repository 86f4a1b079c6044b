"""`hf:` batching with a real model: SmolLM2-135M-Instruct (`madlab models get smollm2`). Tokens per second of 8 and of
32 concurrent requests (batched into `generate` calls) against the same requests one at a time, in float32 and bfloat16.

On a CPU without native bf16, `dtype="auto"` in the `hf:` backend now picks float32; this shows why. With a GPU
(CUDA) the same script measures there. Run: .venv/bin/python bench/bench_hf_smollm2.py [MAX_NEW_TOKENS]"""
import asyncio, os, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from madlab.core import run_sync
from madlab.backends import HFBackend
from madlab.models import get_model

QUESTIONS = ["What is the capital of France?", "Name a colour of the sky.", "What is 12 + 30?", "Who wrote Hamlet?",
             "Is a knight always truthful in a logic puzzle?", "Give one word that rhymes with cat.", "How many legs has a spider?",
             "What do bees make?"]

def prompts(n): return [[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)] + f" (question {i})"}] for i in range(n)]

def rate(b, ps, params, together: bool):
    async def go():
        if together: return await asyncio.gather(*(b.complete(p, **params) for p in ps))
        return [await b.complete(p, **params) for p in ps]
    g0 = b.generate_calls
    t0 = time.perf_counter(); out = run_sync(go()); dt = time.perf_counter() - t0
    toks = sum(c.usage.completion_tokens for c in out)
    return toks / dt, toks, dt, b.generate_calls - g0

def main(max_new=16):
    import torch
    path = str(get_model("smollm2"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"SmolLM2-135M-Instruct on {device} ({torch.cuda.get_device_name() if device == 'cuda' else f'{torch.get_num_threads()} torch threads'}), "
          f"greedy, {max_new} new tokens per request")
    params = dict(greedy=True, max_new_tokens=max_new)
    base = None
    for dtype in ("float32", "bfloat16"):
        b = HFBackend(path, dtype=getattr(torch, dtype), device_map=device, kv_cache_mb=0)   # no prefix reuse: the same prompts run twice here
        run_sync(b.complete(prompts(1)[0], greedy=True, max_new_tokens=2))          # load and warm up
        single = rate(b, prompts(8), params, together=False)
        base = base or single[0]
        print(f"{dtype}:")
        print(f"  {'one at a time':>16}: {single[0]:7.1f} tokens/s  ({single[1]} tokens in {single[2]:.1f} s)   x{single[0] / base:.2f} of float32 one at a time")
        for n in (8, 32):
            r = rate(b, prompts(n), params, together=True)
            print(f"  {f'{n} concurrent':>16}: {r[0]:7.1f} tokens/s  ({r[1]} tokens in {r[2]:.1f} s, {r[3]} generate calls)   "
                  f"x{r[0] / single[0]:.2f} of one at a time, x{r[0] / base:.2f} of float32 one at a time")
        del b
    return 0

if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 16))

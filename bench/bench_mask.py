"""Schema masks per decode step: the time `_SchemaMask` takes to hold every row of a batch to its JSON schema, with all rows'
masks filled at once by llguidance's executor and the step's tokens read in one transfer (madlab today), against the old way,
row after row with one token read per row (the baseline, measured in the same run on the same token sequences).

SmolLM2-135M-Instruct's tokenizer (49,152 tokens; `madlab models get smollm2` first), madlab's number-answer schema (a free-text
`reasoning` field, then a number), rows choosing among the allowed tokens with a fixed seed, 48 steps; median over 5 runs after
a warm-up. On a GPU the per-row read is also one device synchronisation per row; this bench runs on the CPU and does not show that.

Run: .venv/bin/python bench/bench_mask.py [--batch 1,32,128] [--steps 48]"""
from __future__ import annotations
import argparse, random, statistics, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCHEMA = {"type": "object", "properties": {"reasoning": {"type": "string", "maxLength": 200}, "answer": {"type": "number"}},
          "required": ["reasoning", "answer"], "additionalProperties": False}

def old_call(self, input_ids, scores):
    "The baseline: one token read and one mask fill per row."
    new = input_ids.shape[1] > self.n_in
    self.mask.fill_(-1)
    for i, m in enumerate(self.matchers):
        if m is None or self.broken[i] or m.is_stopped(): continue
        if new and not m.consume_token(int(input_ids[i, -1])): self.broken[i] = True; continue
        if m.is_stopped(): self._only_eos(i)
        else: self.torch.fill_next_token_bitmask(m, self.mask, i)
    self.torch.apply_token_bitmask_inplace(scores, self.mask.to(scores.device))
    return scores

def decode(llg, vocab, batch, steps, call, eos, seed=0):
    "Seconds spent in the mask per step (a list), over `steps` steps of `batch` rows choosing allowed tokens at random."
    import torch
    from madlab.backends.schema_mask import _SchemaMask
    held = _SchemaMask(llg, [SCHEMA] * batch, n_in=1, eos=[eos])
    ids, rng, times = torch.zeros(batch, 1, dtype=torch.long), random.Random(seed), []
    for _ in range(steps):
        scores = torch.zeros(batch, vocab)
        t0 = time.perf_counter(); call(held, ids, scores); times.append(time.perf_counter() - t0)
        allowed = ~torch.isinf(scores)
        nxt = [rng.choice(allowed[i].nonzero()[:, 0].tolist()[:64]) for i in range(batch)]
        ids = torch.cat([ids, torch.tensor(nxt)[:, None]], 1)
    return times

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", default="1,32,128"); ap.add_argument("--steps", type=int, default=48); ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    import llguidance.hf, transformers
    from madlab.backends.schema_mask import _SchemaMask, _usable_cores
    from madlab.models import resolve_model
    tok = transformers.AutoTokenizer.from_pretrained(resolve_model("smollm2"))
    llg = llguidance.hf.from_tokenizer(tok, n_vocab=len(tok))
    print(f"{_usable_cores()} usable cores; ms per decode step (median of {a.runs} runs, {a.steps} steps each)")
    print(" batch   row by row   all at once   ratio")
    for b in (int(x) for x in a.batch.split(",")):
        decode(llg, len(tok), b, 4, _SchemaMask.__call__, tok.eos_token_id)                     # warm-up
        per = {}
        for name, call in (("old", old_call), ("new", _SchemaMask.__call__)):
            per[name] = statistics.median(sum(decode(llg, len(tok), b, a.steps, call, tok.eos_token_id)) / a.steps for _ in range(a.runs)) * 1e3
        print(f"{b:>6} {per['old']:>12.2f} {per['new']:>13.2f} {per['old'] / per['new']:>7.2f}x")

if __name__ == "__main__": main()

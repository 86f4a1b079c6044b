"""Structured answers with the real model on this machine (SmolLM2-135M-Instruct, float32, CPU, `hf:` in process): each figure
is measured twice in the same run, with `--structured off` (the format in the prompt only, as before) and `auto` (the schema
held while decoding).

- tokens/s of one request alone and of 32 at once, with and without a schema (the constraint's cost per token);
- GSM8K: share of replies that give a number;
- Critic-Actor on GSM8K: share of critiques that are valid JSON with both scores;
- ControlMAD, one 4-player game, three agents, all phases (depth 1, self-adjustment): share of valid replies;
- ControlMAD, 10 four-player games (depth 0): the team's accuracy beside the chance baseline (random roles) for the same games,
  with bootstrap intervals.

Run: .venv/bin/python bench/bench_structured.py [--only tokens,gsm8k,critic,game,games] [--games 10] [--gsm8k 20]"""
from __future__ import annotations
import argparse, asyncio, random, sys, tempfile, time
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from madlab.core import public_data         # noqa: E402
GSM8K = public_data("gsm8k", "test.jsonl")  # $MADLAB_DATA, else ../shared/data beside the checkout
MODES = ("off", "auto")

def turns(res, phase=None):
    return [tu for t in res.transcripts.values() for r in t.rounds for tu in r.turns if phase is None or r.phase == phase]

def share(ts, ok) -> str:
    n = sum(1 for t in ts if ok(t))
    return f"{n}/{len(ts)} ({n / max(1, len(ts)):.0%})"

def tokens_per_second(b, n: int, schema, max_new: int = 64) -> float:
    from madlab.core import run_sync
    from madlab.tasks.gsm8k import load_gsm8k
    qs = [it.prompt for it in load_gsm8k(GSM8K, limit=n)]
    async def go():
        t0 = time.perf_counter()
        cs = await asyncio.gather(*(b.complete([{"role": "user", "content": q + "\nSolve it step by step."}], greedy=True, max_new_tokens=max_new,
                                               **({"schema": schema} if schema else {})) for q in qs))
        return sum(c.usage.completion_tokens for c in cs) / (time.perf_counter() - t0)
    return run_sync(go())

def bench_tokens(out):
    from madlab.backends import get_backend, schema_for, Ask
    import madlab.scoring  # noqa: F401  (registers the answer schemas)
    b = get_backend("hf:smollm2,kv_cache_mb=0")      # tokens/s of decoding: no prefix reuse across the repeated prompts
    schema = schema_for(Ask(kind="number")).capped(64)
    tokens_per_second(b, 1, None, 8)                                 # load and warm up
    print("tokens/s (greedy, 64 new tokens, GSM8K questions)        no schema   schema   slower per token")
    for n in (1, 32):
        free = np.median([tokens_per_second(b, n, None) for _ in range(3 if n == 1 else 1)])
        held = np.median([tokens_per_second(b, n, schema) for _ in range(3 if n == 1 else 1)])
        print(f"  {n:>2} request{'s at once' if n > 1 else ' alone   '}                                  {free:8.1f} {held:8.1f}   {free / held:.2f}x")

def run(proto, items, team, out, mode, **kw):
    from madlab.run import run_experiment
    return run_experiment(proto, items, team, Path(out) / f"{proto}-{mode}-{time.time_ns()}", cache=False, structured=mode, temperature=0, **kw)

def bench_gsm8k(out, n):
    from madlab.tasks.gsm8k import load_gsm8k
    items = load_gsm8k(GSM8K, limit=n)
    print(f"GSM8K, {n} questions, one agent, 256 new tokens: replies that give a number")
    for m in MODES:
        res = run("single", items, ["hf:smollm2"], out, m, max_tokens=256)
        ts = turns(res)
        print(f"  {m:>4}: {share(ts, lambda t: t.valid)}; accuracy {res.df.correct.mean():.2f}")

def bench_critic(out, n):
    from madlab.tasks.gsm8k import load_gsm8k
    items = load_gsm8k(GSM8K, limit=n)
    team = ["hf:smollm2", "hf:smollm2", {"name": "Critic", "spec": "hf:smollm2", "role": "critic"}]
    print(f"Critic-Actor, {n} GSM8K questions, 2 actors + 1 critic, 1 round: critiques that are valid JSON with both scores; actor answers that give a number")
    for m in MODES:
        res = run("critic_actor", items, team, out, m, rounds=1, actor_max_tokens=192, critic_max_tokens=160)
        crit = [t for t in turns(res, "critique")]
        sol = [t for t in turns(res) if t.agent != "Critic"]
        print(f"  {m:>4}: critiques {share(crit, lambda t: t.valid)}; answers {share(sol, lambda t: t.valid)}")

def bench_game(out):
    from madlab.cli_options import load_items
    items = load_items("kks", size=4, items=[1])
    print("ControlMAD, one 4-player game, three agents, depth 1 with self-adjustment: valid replies per phase")
    for m in MODES:
        t0 = time.perf_counter()
        res = run("controlmad", items, ["hf:smollm2"] * 3, out, m, depth=1, max_tokens=160)
        ts = turns(res)
        phases = {}
        for t in res.transcripts.values():
            for r in t.rounds: phases.setdefault(r.phase, []).extend(r.turns)
        print(f"  {m:>4}: all {share(ts, lambda t: t.valid)} in {time.perf_counter() - t0:.0f} s; " + ", ".join(f"{p} {share(v, lambda t: t.valid)}" for p, v in phases.items()))

def bootstrap(x, n=2000, seed=0):
    rng = np.random.default_rng(seed)
    x = np.asarray(x, float)
    means = rng.choice(x, (n, len(x))).mean(1)
    return x.mean(), np.percentile(means, 2.5), np.percentile(means, 97.5)

def bench_games(out, n):
    from madlab.cli_options import load_items
    from madlab.puzzles import KKS_ROLES
    items = load_items("kks", size=4, items=list(range(1, n + 1)))
    print(f"ControlMAD, {n} four-player games, three agents, depth 0, no self-adjustment, the schema held: the team's decision against chance")
    res = run("controlmad", items, ["hf:smollm2"] * 3, out, "auto", depth=0, self_adjustment=False, max_tokens=160)
    df = res.df
    valid = turns(res)
    rng = random.Random(0)
    chance_player, chance_exact = [], []
    for it in items:          # random roles for the same games, many draws per game
        gold = it.gold
        draws = [{p: rng.choice(KKS_ROLES) for p in gold} for _ in range(2000)]
        chance_player.append(np.mean([np.mean([d[p] == r for p, r in gold.items()]) for d in draws]))
        chance_exact.append(np.mean([all(d[p] == r for p, r in gold.items()) for d in draws]))
    for name, x in (("per-player accuracy", df.player_accuracy if "player_accuracy" in df else df.accuracy), ("exact (all players right)", df.correct.astype(float))):
        m, lo, hi = bootstrap(x)
        print(f"  team {name:<26} {m:.3f} [{lo:.3f}, {hi:.3f}]")
    for name, x in (("per-player accuracy", chance_player), ("exact (all players right)", chance_exact)):
        m, lo, hi = bootstrap(x)
        print(f"  chance {name:<24} {m:.3f} [{lo:.3f}, {hi:.3f}]")
    print(f"  valid replies {share(valid, lambda t: t.valid)}")

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="tokens,gsm8k,critic,game,games")
    ap.add_argument("--games", type=int, default=10)
    ap.add_argument("--gsm8k", type=int, default=20)
    ap.add_argument("--critic", type=int, default=4)
    a = ap.parse_args(argv)
    if GSM8K is None: sys.exit("GSM8K's test set (gsm8k/test.jsonl) not found: set MADLAB_DATA (see madlab.core.public_data)")
    from madlab.models import get_model
    get_model("smollm2")
    import torch
    print(f"SmolLM2-135M-Instruct, hf: in process, {torch.get_num_threads()} torch threads, float32 CPU")
    with tempfile.TemporaryDirectory(prefix="madlab-bench-structured-") as out:
        for part in a.only.split(","):
            t0 = time.perf_counter()
            {"tokens": lambda: bench_tokens(out), "gsm8k": lambda: bench_gsm8k(out, a.gsm8k), "critic": lambda: bench_critic(out, a.critic),
             "game": lambda: bench_game(out), "games": lambda: bench_games(out, a.games)}[part]()
            print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)

if __name__ == "__main__": main()

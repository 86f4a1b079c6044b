"""Engine overhead with zero-latency synthetic agents: debates per second of `run_many` for the `du` protocol,
and the framework's time per agent call (wall / calls), against calling the synthetic backend directly in a loop.

Run: .venv/bin/python bench/bench_engine.py [N_ITEMS]"""
import sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from madlab.core import run_sync
from madlab.backends import Ask, get_backend
from madlab.agents import DEFAULT_TEAM
from madlab.run import run_many
from madlab.formats import answer_format
from madlab.tasks.arith import toy_arith_items
import madlab.protocols.baselines  # noqa: F401

def direct_loop(items, n_calls):
    "Baseline: the same synthetic backend called directly, one call after another, with a realistic message list."
    b = get_backend(DEFAULT_TEAM[0])
    fmt = answer_format(items[0])
    msgs = [{"role": "user", "content": f"{items[0].prompt}\n\n{fmt.instructions}"}]
    async def go():
        for i in range(n_calls):
            it = items[i % len(items)]
            await b.complete(msgs, Ask(kind=fmt.kind, item=it, agent="A", round=i % 3))
    t0 = time.perf_counter(); run_sync(go()); return time.perf_counter() - t0

def main(n=300, rounds=2):
    items = toy_arith_items(n, seed=0)
    run_many("du", items[:20], rounds=rounds, cache=False, progress=False)       # warm up imports and the runtime loop
    print(f"du protocol, {len(DEFAULT_TEAM)} synthetic agents, rounds={rounds}, {n} debates, cache off, no progress bar")
    print(f"{'concurrency':>11} {'debates/s':>10} {'calls':>7} {'us/call':>9} {'x direct':>9}")
    for conc in (1, 8, 64):
        t0 = time.perf_counter()
        res = run_many("du", items, rounds=rounds, concurrency=conc, cache=False, progress=False)
        wall = time.perf_counter() - t0
        calls = int(res.df.calls.sum())
        assert set(res.df.status) == {"done"} and calls == n * len(DEFAULT_TEAM) * (rounds + 1)
        base = direct_loop(items, calls) / calls
        print(f"{conc:>11} {n / wall:>10.1f} {calls:>7} {wall / calls * 1e6:>9.0f} {wall / calls / base:>9.1f}")
    print(f"direct backend.complete loop: {base * 1e6:.0f} us/call (the baseline)")
    # one call through an Agent (history, Turn, parsing) with nothing else around it
    from madlab.agents import Agent
    fmt = answer_format(items[0])
    async def agent_loop(k):
        for i in range(k):
            a = Agent("A", DEFAULT_TEAM[0])
            await a.ask(items[i % n].prompt, kind=fmt.kind, parse=fmt.parse, ask=Ask(item=items[i % n]))
    k = 2000
    t0 = time.perf_counter(); run_sync(agent_loop(k)); per = (time.perf_counter() - t0) / k
    print(f"Agent.ask loop (fresh agent, one call each): {per * 1e6:.0f} us/call ({per / base:.1f}x direct)")

if __name__ == "__main__": main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)

"""Transcript size against debate length: one 6-player ControlMAD game (`controlmad/6.jsonl` in the public data, `$MADLAB_DATA`, default `../shared/data`; the
synthetic team of 3) at depth 1, 2, 3 and 5, written as madlab writes it (each turn stores only the messages new since
the same agent's previous turn) against the baseline of every turn holding its full message list (what older versions
wrote). Bytes per turn stay flat when the size is linear in turns; with full lists they grow with the debate.

Run: .venv/bin/python bench/bench_transcript_size.py [GAME_SIZE]"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from madlab.cli_options import load_items
from madlab.core import Transcript, public_data, to_jsonable
from madlab.debate import Debate

DATA = public_data("controlmad")

def full_lists(t) -> bytes:
    d = t.to_dict(); d["rounds"] = to_jsonable(t.rounds)
    return json.dumps(d, indent=1, ensure_ascii=False).encode()

def main(size=6):
    if DATA is None: sys.exit("ControlMAD's games not found: set MADLAB_DATA")
    game = load_items("kks", data=str(DATA), size=size, n=1)[0]
    print(f"{size}-player ControlMAD game {game.id}, 3 synthetic agents")
    print(f"{'depth':>5} {'turns':>5} {'compact bytes':>14} {'B/turn':>7} {'full-list bytes':>16} {'B/turn':>7} {'full/compact':>12} {'write+read ms':>13}")
    base = None
    for depth in (1, 2, 3, 5):
        t = Debate("controlmad", game, seed=0, depth=depth).run()
        n = sum(len(r.turns) for r in t.rounds)
        t0 = time.perf_counter(); s = t.to_json().encode(); assert Transcript.from_json(s.decode()) == t; ms = (time.perf_counter() - t0) * 1000
        f = full_lists(t)
        print(f"{depth:>5} {n:>5} {len(s):>14,} {len(s)/n:>7,.0f} {len(f):>16,} {len(f)/n:>7,.0f} {len(f)/len(s):>12.2f} {ms:>13.1f}")
        if base is None: base = (len(s) / n, len(f) / n)
        last = (len(s) / n, len(f) / n)
    print(f"bytes per turn, deepest / depth 1: compact {last[0]/base[0]:.2f} (target <= 1.15), full lists {last[1]/base[1]:.2f}")

if __name__ == "__main__": main(*(int(a) for a in sys.argv[1:2]))

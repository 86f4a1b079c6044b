"""The input screen's detection rates, per family of attack and of benign look-alike, with the learned stage and with the rules alone.

Sets: the training sets of the learned stage (`data/screen/*.jsonl`: the project's own attacks and look-alikes, two
earlier held-out sets, three red-team sets written without sight of the screen, ordinary requests): rates on them are
training rates. The test set `tests/data/screen_heldout3.jsonl` was written the same way as the red-team sets and never
trained or tuned on: its rates are what the screen does on attacks written independently of it. XSTest's 450 prompts
(`xstest/` in the public data (`$MADLAB_DATA`, default `../shared/data`); the 250 safe ones must pass, the 200 unsafe ones are harmful requests rather than attacks,
so the screen leaves them to the agents).
`--judge SPEC` adds the second stage (`JudgedScreen`) with that backend and compares; with a synthetic judge the judge is
told the truth (it models a judge that is right with probability `skill`). `--p-threshold P` and `--threshold T` screen
at other thresholds. Prints Markdown tables and the mean time per input.

Run: .venv/bin/python bench/bench_screen.py [--judge synthetic:strong] [--band 0.5 0.8] [--p-threshold 0.8]"""
import argparse, asyncio, collections, csv, json, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "tests"))
from madlab.core import public_data         # noqa: E402
XSTEST = public_data("xstest", "xstest_prompts.csv")

def cases():
    "(set, group, attack?, text) for every case."
    out = []
    for f in sorted((ROOT / "data" / "screen").glob("*.jsonl")) + [ROOT / "tests" / "data" / "screen_heldout3.jsonl"]:
        name = "held-out 3 (test)" if f.parent.name == "data" and f.parent.parent.name == "tests" else f"train: {f.stem}"
        for l in f.read_text(encoding="utf-8").splitlines():
            c = json.loads(l)
            out.append((name, f"{'attack' if c['attack'] else 'benign'}: {c['category']}", c["attack"], c["text"]))
    if XSTEST is not None:
        for r in csv.DictReader(open(XSTEST, encoding="utf-8")):
            out.append(("xstest", f"{r['label']}: {r['type']}" if r["label"] == "unsafe" else "safe (all types)", False, r["prompt"]))
    return out

async def screen_all(cs, threshold, judge, band=None, model="default", p_threshold=0.8):
    from madlab.agents import Agent
    from madlab.guards import JudgedScreen, screen_input, screen_model
    if model == "default": screen_model()              # trained before the clock starts
    js = JudgedScreen(Agent("Judge", judge), band=tuple(band) if band else None, threshold=threshold, model=model, p_threshold=p_threshold) if judge else None
    res, t0 = [], time.perf_counter()
    for s, g, a, t in cs:
        r = screen_input(t, threshold=threshold, model=model, p_threshold=p_threshold) if js is None else await js.ascreen(t, gold=a if s != "xstest" else False)
        res.append(r)
    return res, (time.perf_counter() - t0) / len(cs)

def table(cs, base, rules, judged=None):
    rows = collections.OrderedDict()
    for i, (s, g, a, _) in enumerate(cs):
        k = (s, g)
        rows.setdefault(k, [a, 0, 0, 0, 0, 0])
        rows[k][1] += 1; rows[k][2] += base[i].blocked; rows[k][3] += rules[i].blocked
        if judged: rows[k][4] += judged[i].blocked; rows[k][5] += judged[i].judge is not None
    head = "| set | group | n | blocked | rules alone |" + (" blocked with judge | judge asked |" if judged else "")
    print(head); print("|" + "---|" * (head.count("|") - 1))
    tot = collections.defaultdict(lambda: [0, 0, 0, 0])
    pc = lambda b, n, d=0: f"{b} ({100 * b / n:.{d}f} %)"
    for (s, g), (a, n, b, rb, jb, asked) in rows.items():
        print(f"| {s} | {g} | {n} | {pc(b, n)} | {pc(rb, n)} |" + (f" {pc(jb, n)} | {asked} |" if judged else ""))
        kind = "attacks" if a else ("xstest unsafe" if g.startswith("unsafe") else "benign")
        for j, v in enumerate((n, b, rb, jb)): tot[(s, kind)][j] += v
    print("\n| set | kind | n | blocked | rules alone |" + (" with judge |" if judged else "")); print("|---|---|---|---|---|" + ("---|" if judged else ""))
    for (s, kind), (n, b, rb, jb) in tot.items():
        print(f"| {s} | {kind} | {n} | {pc(b, n, 1)} | {pc(rb, n, 1)} |" + (f" {pc(jb, n, 1)} |" if judged else ""))

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--judge", default=None, help="backend spec of an LLM judge for the second stage")
    ap.add_argument("--threshold", type=float, default=1.0, help="the rule score's threshold")
    ap.add_argument("--p-threshold", type=float, default=0.8, help="the learned stage's threshold")
    ap.add_argument("--band", type=float, nargs=2, default=None, metavar=("LOW", "HIGH"), help="deciding scores sent to the judge (default: JudgedScreen's)")
    a = ap.parse_args()
    cs = cases()
    t0 = time.process_time()
    from madlab.guards import screen_model
    screen_model()
    train = time.process_time() - t0
    base, per = asyncio.run(screen_all(cs, a.threshold, None, p_threshold=a.p_threshold))
    rules, perr = asyncio.run(screen_all(cs, a.threshold, None, model=None))
    judged, perj = asyncio.run(screen_all(cs, a.threshold, a.judge, a.band, p_threshold=a.p_threshold)) if a.judge else (None, None)
    print(f"learned stage trained in {train:.1f} s CPU; p_threshold {a.p_threshold:g}, rule threshold {a.threshold:g}; {len(cs)} inputs; "
          f"screen_input: {1000 * per:.2f} ms per input (rules alone {1000 * perr:.2f} ms)" + (f"; with judge {a.judge}: {1000 * perj:.2f} ms per input" if a.judge else "") + "\n")
    table(cs, base, rules, judged)

if __name__ == "__main__": main()

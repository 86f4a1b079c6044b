"""The input screen's detection rates, per family of attack and of benign look-alike.

Sets: the tuning sets of `tests/adversarial_inputs.py` (the original 59 attacks and 60 look-alikes, and the attacks by
family with their look-alikes), two held-out sets never tuned on: `tests/data/screen_heldout.jsonl` (attacks and look-alikes
written before the screen was changed) and `tests/data/screen_heldout2.jsonl` (written after it, in phrasings the tables
do not list, measured once), and XSTest's 450 prompts (`../shared/data/xstest/`; the 250 safe ones must pass,
the 200 unsafe ones are harmful requests rather than attacks, so the screen leaves them to the agents).
`--judge SPEC` adds the second stage (`JudgedScreen`) with that backend and compares the two; with a synthetic judge the
judge is told the truth (it models a judge that is right with probability `skill`).
`--threshold T` screens at another threshold. Prints a Markdown table and the mean time per input.

Run: .venv/bin/python bench/bench_screen.py [--judge synthetic:strong] [--band 0.5 1.0] [--threshold 1.0]"""
import argparse, asyncio, collections, csv, json, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "tests"))
XSTEST = ROOT.parent / "shared" / "data" / "xstest" / "xstest_prompts.csv"

def cases():
    "(set, group, attack?, text) for every case."
    from adversarial_inputs import ADVERSARIAL, ATTACKS, BENIGN, LOOKALIKES
    out = [("tuning", f"attack: {e} (original)", True, t) for _, t, e in ADVERSARIAL if e not in ("empty", "oversize", "encoding")]
    out += [("tuning", f"attack: {f}", True, t) for _, f, t in ATTACKS]
    out += [("tuning", "benign: original look-alikes", False, t) for _, t, _ in BENIGN]
    out += [("tuning", f"benign: {f}", False, t) for _, f, t in LOOKALIKES]
    for name, f in [("held-out", "screen_heldout.jsonl"), ("held-out 2", "screen_heldout2.jsonl")]:
        for l in (ROOT / "tests" / "data" / f).read_text(encoding="utf-8").splitlines():
            c = json.loads(l)
            out.append((name, f"{'attack' if c['attack'] else 'benign'}: {c['category']}", c["attack"], c["text"]))
    if XSTEST.is_file():
        for r in csv.DictReader(open(XSTEST, encoding="utf-8")):
            out.append(("xstest", f"{r['label']}: {r['type']}" if r["label"] == "unsafe" else "safe (all types)", False, r["prompt"]))
    return out

async def screen_all(cs, threshold, judge, band=(0.5, 1.0)):
    from madlab.guards import JudgedScreen, screen_input
    js = JudgedScreen(judge, band=tuple(band), threshold=threshold) if judge else None
    res, t0 = [], time.perf_counter()
    for s, g, a, t in cs:
        r = screen_input(t, threshold=threshold) if js is None else await js.ascreen(t, gold=a if s != "xstest" else False)
        res.append(r)
    return res, (time.perf_counter() - t0) / len(cs)

def table(cs, base, judged=None):
    rows = collections.OrderedDict()
    for i, (s, g, a, _) in enumerate(cs):
        k = (s, g)
        rows.setdefault(k, [a, 0, 0, 0, 0])
        rows[k][1] += 1; rows[k][2] += base[i].blocked
        if judged: rows[k][3] += judged[i].blocked; rows[k][4] += judged[i].judge is not None
    head = "| set | group | n | blocked |" + (" blocked with judge | judge asked |" if judged else "")
    print(head); print("|" + "---|" * (head.count("|") - 1))
    tot = collections.defaultdict(lambda: [0, 0, 0])
    for (s, g), (a, n, b, jb, asked) in rows.items():
        print(f"| {s} | {g} | {n} | {b} ({100 * b / n:.0f} %) |" + (f" {jb} ({100 * jb / n:.0f} %) | {asked} |" if judged else ""))
        kind = "attacks" if a else ("xstest unsafe" if g.startswith("unsafe") else "benign")
        tot[(s, kind)][0] += n; tot[(s, kind)][1] += b; tot[(s, kind)][2] += jb
    print("\n| set | kind | n | blocked |" + (" with judge |" if judged else "")); print("|---|---|---|---|" + ("---|" if judged else ""))
    for (s, kind), (n, b, jb) in tot.items():
        print(f"| {s} | {kind} | {n} | {b} ({100 * b / n:.1f} %) |" + (f" {jb} ({100 * jb / n:.1f} %) |" if judged else ""))

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--judge", default=None, help="backend spec of an LLM judge for the second stage")
    ap.add_argument("--threshold", type=float, default=1.0)
    ap.add_argument("--band", type=float, nargs=2, default=(0.5, 1.0), metavar=("LOW", "HIGH"), help="scores sent to the judge (default: JudgedScreen's)")
    a = ap.parse_args()
    cs = cases()
    base, per = asyncio.run(screen_all(cs, a.threshold, None))
    judged, perj = asyncio.run(screen_all(cs, a.threshold, a.judge, a.band)) if a.judge else (None, None)
    print(f"threshold {a.threshold:g}; {len(cs)} inputs; screen_input: {1000 * per:.2f} ms per input" +
          (f"; with judge {a.judge} on scores in [{a.band[0]:g}, {a.band[1]:g}): {1000 * perj:.2f} ms per input" if a.judge else "") + "\n")
    table(cs, base, judged)

if __name__ == "__main__": main()

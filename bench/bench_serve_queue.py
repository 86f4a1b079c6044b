"""A server that answers one request at a time: `transformers serve` with SmolLM2-135M-Instruct as it starts by default (no
continuous batching), and N GSM8K questions sent at once through `openai:` with the default 60 s timeout, by `madlab run single`.
Prints how many were answered, the wall time, and what the summary says about the endpoint; before the windowed breaker
(`--before REV`) five timeouts together opened it and the rest failed with `EndpointDown`.

Run: .venv/bin/python bench/bench_serve_queue.py [--n 32] [--max-tokens 64] [--before REV]"""
from __future__ import annotations
import argparse, re, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]
from bench_faults import BEFORE, madlab, version_root      # noqa: E402
from conftest import serve_folder                           # noqa: E402

sys.path.insert(0, str(ROOT))
from madlab.core import public_data         # noqa: E402
GSM8K = public_data("gsm8k", "test.jsonl")  # $MADLAB_DATA, else ../shared/data beside the checkout

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--before", default=None, help="also run the code of commit REV (e.g. %s)" % BEFORE[:8])
    a = ap.parse_args(argv)
    if GSM8K is None: sys.exit("GSM8K's test set (gsm8k/test.jsonl) not found: set MADLAB_DATA (see madlab.core.public_data)")
    from madlab.models import get_model
    model = str(get_model("smollm2"))
    with tempfile.TemporaryDirectory(prefix="madlab-bench-serve-") as tmp:
        tmp = Path(tmp)
        versions = [("after", ROOT)]
        if a.before and (root := version_root(a.before, tmp)) is not None: versions.insert(0, ("before", root))
        (tmp / "hf-home").mkdir()
        with serve_folder(model, tmp / "hf-home") as (url, name):
            for v, root in versions:
                args = ["run", "single", "--task", "gsm8k", "--data", str(GSM8K), "--n", str(a.n), "--agents", f"openai:{name}",
                        "--max-tokens", str(a.max_tokens), "--temperature", "0"]
                r = madlab(root, args, url, tmp, f"serve-{v}")
                done = re.search(r"(\d+) done", r["out"])
                print(f"{v:>6}: {done.group(1) if done else 0}/{a.n} answered in {r['wall']:.0f} s (exit {r['rc']})")
                for line in r["out"].splitlines():
                    if line.startswith(("endpoint ", "1 debate", "2 debate")) or "debates failed" in line or "failed in this run" in line: print("        " + line[:300])

if __name__ == "__main__": main()

"""Every protocol at one budget with a real model: SmolLM2-135M-Instruct (`hf:smollm2`, three agents, `madlab models get smollm2`)
on GSM8K, each protocol next to self-consistency matched to its tokens per item. It runs the notebook
nbs/experiments/protocols_at_one_budget.ipynb with these parameters; each row is appended to ROWS (JSONL) as soon as it is done,
and the markdown table of the rows done is printed at the end, or when the time cap stops the run.

Run: .venv/bin/python bench/protocols_smollm2.py [--items 2] [--max-tokens 96] [--cap 1800] [--rows rows.jsonl] [--out DIR] [LABEL...]"""
import argparse, json, os, signal, subprocess, sys, tempfile
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
NB = ROOT / "nbs" / "experiments" / "protocols_at_one_budget.ipynb"
# the cheapest first, so that a capped run on a loaded CPU still gives the comparisons that matter most
ORDER = ["du", "du + freemad", "multi_persona", "single", "self_consistency", "du stop-on consensus", "du star", "eot memory", "eot relay",
         "eot report", "eot debate", "agentverse", "du + confidence:logprob", "du ring", "critic_actor"]

def table(rows) -> str:
    "The markdown table of `rows` (the notebook's row dicts)."
    f = lambda a, l, h: f"{a:.2f} [{l:.2f}, {h:.2f}]"
    out = ["| protocol | items | accuracy [95 % CI] | tokens/item | vote: accuracy [95 % CI] | vote samples/agent | vote tokens/item | protocol − vote [95 % CI] | McNemar p |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['protocol']} | {r['items']} | {f(r['accuracy'], r['ci_low'], r['ci_high'])} | {r['tokens_per_item']:.0f} | "
                   f"{f(r['vote_accuracy'], r['vote_ci_low'], r['vote_ci_high'])} | {r['vote_samples']} | {r['vote_tokens_per_item']:.0f}{'' if r['within'] else ' (not within 10 %)'} | "
                   f"{r['difference']:+.2f} [{r['diff_low']:+.2f}, {r['diff_high']:+.2f}] | {r['p_mcnemar']:.2f} |")
    return "\n".join(out)

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("labels", nargs="*", help="protocol labels of the notebook, in order (default: all, cheapest first)")
    ap.add_argument("--items", type=int, default=2); ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--temperature", type=float, default=0.7, help="sampling temperature, so that the votes' samples differ")
    ap.add_argument("--cap", type=float, default=1800, help="seconds before the run is stopped (the rows done are kept)")
    ap.add_argument("--rows", default=None, help="JSONL file of the rows (default: a temporary file)")
    ap.add_argument("--out", default=None, help="where the runs go (default: a temporary folder)")
    ap.add_argument("--team", default="hf:smollm2", help="the backend spec of the three agents")
    a = ap.parse_args(argv)
    rows = Path(a.rows or tempfile.mkstemp(prefix="protocols-smollm2-", suffix=".jsonl")[1]); rows.write_text("")
    params = {"team": [a.team] * 3, "tasks": ["gsm8k"], "n_items": a.items, "max_tokens": a.max_tokens, "temperature": a.temperature,
              "protocols": a.labels or ORDER, "rows_out": str(rows), "out": a.out or tempfile.mkdtemp(prefix="protocols-smollm2-")}
    print(f"{a.team} x3, GSM8K, {a.items} items, {a.max_tokens} tokens per reply, temperature {a.temperature}; rows -> {rows}", flush=True)
    code = ("import papermill as pm, json, sys; pm.execute_notebook(sys.argv[1], sys.argv[2], parameters=json.loads(sys.argv[3]), "
            "cwd=sys.argv[4], progress_bar=False, execution_timeout=None)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.Popen([sys.executable, "-c", code, str(NB), str(rows.with_suffix(".ipynb")), json.dumps(params), str(NB.parent)], env=env,
                         start_new_session=os.name != "nt")      # its own process group: the cap stops the kernel too
    try: rc = p.wait(timeout=a.cap)
    except subprocess.TimeoutExpired:
        if os.name != "nt": os.killpg(p.pid, signal.SIGKILL)
        else: p.kill()
        p.wait(); rc = None
        print(f"stopped at the cap of {a.cap:.0f} s", flush=True)
    done = [json.loads(l) for l in rows.read_text().splitlines() if l.strip()]
    print(f"{len(done)} of {len(params['protocols'])} protocols done" + ("" if rc in (0, None) else f"; the notebook failed (exit {rc})"))
    print(table(done))
    return 0 if done else 1

if __name__ == "__main__":
    sys.exit(main())

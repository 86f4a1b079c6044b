"""Run the tour notebooks and keep the outputs that teach: tables, text, figures; never a live widget (a widget's output is
dropped), never an output over MAX_BYTES, never a machine path. `--check` fails when a tour has no outputs or breaks a rule.

    python tools/keep_outputs.py            # execute nbs/5*_tour.ipynb in place, then clean them
    python tools/keep_outputs.py --check    # what `make test` runs (tests/test_notebooks.py)"""
from __future__ import annotations
import json, os, re, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOURS = sorted((ROOT / "nbs").glob("5*_tour.ipynb"))
MAX_BYTES = 60_000                                         # per output: a table, a summary, a small figure's JSON
WIDGET = "application/vnd.jupyter.widget-view+json"
PATHS = re.compile(r"(/tmp/|/home/|/root/|/work/|/Users/|[A-Z]:\\\\)")

def _faults(o) -> list[str]:
    "What breaks the rules in one output (none: it is kept)."
    text, out = json.dumps(o), []
    if WIDGET in o.get("data", {}): out.append("a widget output")
    if len(text) > MAX_BYTES: out.append(f"an output of {len(text):,} bytes (over {MAX_BYTES:,})")
    if PATHS.search(text): out.append(f"a machine path ({PATHS.search(text).group(0)}...)")
    if o.get("output_type") == "error": out.append("an error")
    return out

def problems(nb: dict) -> list[str]:
    "What breaks the rules in `nb`'s outputs."
    out = ["notebook metadata: saved widget state (widgets)"] if "widgets" in nb.get("metadata", {}) else []
    return out + [f"cell {i}: {f}" for i, c in enumerate(nb["cells"]) for o in c.get("outputs", []) for f in _faults(o)]

def run(path: Path):
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PLOTLY_RENDERER", "plotly_mimetype")      # the figure as JSON: no plotly.js copied into the notebook
        os.environ["MADLAB_CACHE"] = str(Path(tmp) / "cache")
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    for c in nb.cells:
        if c.cell_type == "code": c.outputs = [o for o in c.outputs if not _faults(o)]
    nb.metadata.pop("widgets", None)                   # the widgets' saved state: a broken widget on GitHub, and large
    nbformat.write(nb, path)

def main(argv):
    if "--check" in argv:
        bad = {p.name: problems(json.loads(p.read_text())) for p in TOURS}
        empty = [p.name for p in TOURS if not any(c.get("outputs") for c in json.loads(p.read_text())["cells"])]
        for name in empty: print(f"{name}: stored without outputs (run tools/keep_outputs.py)")
        for name, ps in bad.items():
            for x in ps: print(f"{name}: {x}")
        sys.exit(1 if empty or any(bad.values()) else 0)
    for p in TOURS: print("running", p.name, flush=True); run(p)

if __name__ == "__main__": main(sys.argv[1:])

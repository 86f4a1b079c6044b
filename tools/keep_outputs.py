"""Run notebooks and keep the outputs that teach: tables, text, figures (each plotly figure with a PNG beside its JSON, so it
reads where no kernel runs: GitHub, nbconvert's HTML, the docs site), a widget as a static snapshot taken in JupyterLab,
never a live widget's state, a machine path, a secret, a progress bar or an error. So that a re-run does not churn, the
synthetic runs are seeded, temporary folders read `<tmp>`, wall times and message timestamps read `…`, and a figure whose
JSON did not change keeps its PNG. `--check` fails when a notebook of KEEP has no outputs or any notebook breaks a rule.

    python tools/keep_outputs.py                  # execute every notebook of KEEP in place, then clean them (`make outputs`)
    python tools/keep_outputs.py nbs/11_s4.ipynb  # these notebooks (`make outputs NBS="11_s4 13_critic_actor"`)
    python tools/keep_outputs.py --images NB...   # no execution: a PNG beside each stored plotly figure that lacks one
    python tools/keep_outputs.py --check          # what tests/test_notebook_outputs.py runs

Figures are drawn by kaleido, which drives Debian's /usr/bin/chromium (never a downloaded browser); snapshots by Playwright
with the same chromium (MADLAB_CHROMIUM for another). Without them the snapshots stored before are kept and a changed figure
goes without its PNG, each with a warning (and `--check` fails on the figure)."""
from __future__ import annotations
import base64, json, os, re, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / "nbs"
KEEP = ["index", "07_baselines", "10_controlmad", "11_s4", "12_controlmad_report", "13_critic_actor", "14_agentverse", "15_cluster", "20_viz",
        "50_controlmad_tour", "51_stepper_tour", "experiments/protocols_at_one_budget"]   # the index, every protocol notebook, the report, the plots and the tours
KEEP += ["23d_gains"]                       # where a run's accuracy comes from: its two figures, each with its intervals
KEEP += ["experiments/oversight"]           # debate as oversight: modes x judge views, persuasion, a tournament's ratings
SNAPSHOTS = {"51_stepper_tour": 4}           # notebooks whose widgets are kept as pictures: Step clicks on the first one first
SNAPSHOT_TEXT = "<a static snapshot of this widget, taken in JupyterLab: run the notebook for the live one>"
MAX_TEXT, MAX_IMAGE = 60_000, 500_000        # bytes per output: a table, a summary, a figure's JSON; a PNG (base64)
WIDGET, PLOTLY = "application/vnd.jupyter.widget-view+json", "application/vnd.plotly.v1+json"
IMAGES = ("image/png", "image/svg+xml")
EXPORTED = re.compile(r"\s*#\|\s*export")          # a definition's cell: it shows nothing
VOLATILE = [(re.compile(r"\bts=\d+\.\d+"), "ts=…"),          # message timestamps in a chat history's text form
            (re.compile(r"^(\w+: \d+ items: [^\n]*); \d+(\.\d+)? s$", re.M), r"\1; … s")]   # a run summary's wall time
PATHS = re.compile(r"(/tmp/|/home/|/root/|/work/|/Users/|/private/var/|[A-Z]:\\\\)")
KEYS = re.compile(r"(sk-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|gh[pousr]_[A-Za-z0-9]{36}"
                  r"|xox[abprs]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----)")

def notebooks(names) -> list[Path]:
    "Notebook paths from names (`20_viz`), file names or paths."
    out = []
    for n in names:
        p = next((c for c in (Path(n), ROOT / n, NBS / n, NBS / f"{n}.ipynb") if c.suffix == ".ipynb" and c.is_file()), None)
        if p is None: sys.exit(f"keep_outputs: no notebook {n!r} (a name such as 20_viz, or a path under nbs/)")
        out.append(p.resolve())
    return out

def _text(o) -> str:
    "The text of an output, images left out (base64 is not text to search)."
    if o.get("output_type") == "stream": t = o.get("text", "")
    else: t = {k: v for k, v in o.get("data", {}).items() if not k.startswith("image/")}
    return t if isinstance(t, str) else "".join(t) if isinstance(t, list) else json.dumps(t)

def _secret(text: str) -> str | None:
    "A credential-shaped string in `text` (madlab's own scrubber, plus key formats of the common providers), or None."
    if m := KEYS.search(text): return m.group(0)[:6] + "..."
    try:
        from madlab.redact import scrub_secrets
        if scrub_secrets(text) != text: return "a token madlab's scrubber redacts"
    except ImportError: pass
    return None

def faults(o) -> list[str]:
    "What breaks the rules in one output (none: it is kept)."
    data, text, out = o.get("data", {}), _text(o), []
    if WIDGET in data: out.append("a widget output (keep a snapshot instead)")
    if PLOTLY in data and not any(k in data for k in IMAGES): out.append("a plotly figure without a static image beside it")
    if len(text) > MAX_TEXT: out.append(f"an output of {len(text):,} bytes of text (over {MAX_TEXT:,})")
    for k in IMAGES:
        if len(data.get(k, "")) > MAX_IMAGE: out.append(f"an image of {len(data[k]):,} bytes (over {MAX_IMAGE:,})")
    if m := PATHS.search(text): out.append(f"a machine path ({m.group(0)}...)")
    if s := _secret(text): out.append(f"something like a secret ({s})")
    if o.get("output_type") == "error": out.append("an error")
    return out

def problems(nb: dict) -> list[str]:
    "What breaks the rules in `nb`'s outputs."
    out = ["notebook metadata: saved widget state (widgets)"] if "widgets" in nb.get("metadata", {}) else []
    return out + [f"cell {i}: {f}" for i, c in enumerate(nb["cells"]) for o in c.get("outputs", []) for f in faults(o)]

def _sanitize(o, tmp: str):
    "Machine paths in an output's text made neutral: the run's temporary folders read `<tmp>`, the checkout's paths relative."
    def fix(s: str) -> str:
        s = re.sub(re.escape(tmp) + r"/tmp[\w-]+", "<tmp>", s).replace(tmp, "<tmp>")
        for rx, to in VOLATILE: s = rx.sub(to, s)
        return s.replace(str(ROOT) + "/", "").replace(str(ROOT.parent) + "/", "../")
    if o.get("output_type") == "stream": o["text"] = fix("".join(o["text"]) if isinstance(o["text"], list) else o["text"])
    for k, v in o.get("data", {}).items():
        if not k.startswith("image/") and isinstance(v, (str, list)): o.get("data")[k] = fix("".join(v) if isinstance(v, list) else v)
    return o

def _stored_images(path: Path) -> tuple[dict, dict]:
    "What the stored notebook already has: PNG per plotly figure (by its JSON), and the snapshot outputs per cell id."
    if not path.exists(): return {}, {}
    nb, figs, snaps = json.loads(path.read_text()), {}, {}
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            d = o.get("data", {})
            if PLOTLY in d and "image/png" in d: figs[json.dumps(d[PLOTLY], sort_keys=True)] = d["image/png"]
            if "".join(d.get("text/plain", "")).startswith(SNAPSHOT_TEXT): snaps[c.get("id")] = o
    return figs, snaps

def add_figure_images(nb, stored: dict | None = None) -> tuple[int, int]:
    "A PNG beside each plotly output that has no static image: the stored one when the figure is unchanged, else drawn. (added, missing)"
    todo = [o for c in nb["cells"] for o in c.get("outputs", []) if PLOTLY in o.get("data", {}) and not any(k in o["data"] for k in IMAGES)]
    stored, added, server = stored or {}, 0, None
    for o in todo:
        png = stored.get(json.dumps(o["data"][PLOTLY], sort_keys=True))
        if png is None:
            if server is None:
                from madlab.viz import figure_image
                try:
                    import kaleido; kaleido.start_sync_server(silence_warnings=True); server = kaleido   # one browser for every figure
                except Exception: server = False
            raw = figure_image(o["data"][PLOTLY])
            png = base64.b64encode(raw).decode() if raw else None
        if png: o["data"]["image/png"] = png; added += 1
    if server:
        try: server.stop_sync_server(silence_warnings=True)
        except Exception: pass
    return added, len(todo) - added

def execute(path: Path, tmp: str):
    "`path` run top to bottom by a python3 kernel started in its folder; the notebook with its raw outputs."
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    env = {"PLOTLY_RENDERER": "plotly_mimetype",          # the figure as JSON (no plotly.js copied in); the PNG is added after
           "MADLAB_CACHE": str(Path(tmp) / "cache"), "TMPDIR": tmp, "TQDM_DISABLE": "1", "PYTHONHASHSEED": "0"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try: NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        for k, v in old.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v
    return nb

_RUN_CELL_JS = ("i => { const nb = window.jupyterapp.shell.currentWidget.content; nb.activeCellIndex = i;"
                " return window.jupyterapp.commands.execute('notebook:run-cell').then(() => true); }")

def _wait(pred, timeout: float, what: str):
    import time
    t0 = time.time()
    while not pred():
        if time.time() - t0 > timeout: raise TimeoutError(f"keep_outputs: timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)

def snapshots(path: Path, cells: list[str], steps: int = 0) -> dict:
    "PNG (base64) of the widget each of `cells` shows, `path` run in JupyterLab in headless chromium; Step clicked `steps` times on the first."
    sys.path.insert(0, str(ROOT / "tests"))
    from jupyter_helpers import CHROMIUM, CHROMIUM_ARGS, jupyter_lab         # the browser tests' JupyterLab, started the same way
    from playwright.sync_api import sync_playwright
    nb = json.loads(path.read_text())
    for c in nb["cells"]:
        if c["cell_type"] == "code": c["outputs"], c["execution_count"] = [], None
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        lab = Path(tmp) / "lab"; lab.mkdir()
        (lab / path.name).write_text(json.dumps(nb))
        with jupyter_lab(lab, Path(tmp) / "home") as (base, token), sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 3200})      # tall: a whole widget in view
                page.goto(f"{base}/lab/tree/{path.name}?token={token}", wait_until="domcontentloaded", timeout=60_000)
                page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
                _wait(lambda: page.evaluate("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                      " const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;"
                      " return !!(k && k.status === 'idle'); }"), 90, "an idle kernel")
                page.evaluate("() => window.jupyterapp.shell.collapseLeft()")           # the notebook's full width
                cells_ = page.locator(".jp-Notebook .jp-Cell")
                first = True
                for i, c in enumerate(nb["cells"]):      # cell by cell: each widget is pictured as its own cell left it
                    if c["cell_type"] != "code": continue
                    page.evaluate(_RUN_CELL_JS, i)
                    _wait(lambda: re.search(r"\[\d+\]", cells_.nth(i).locator(".jp-InputPrompt").inner_text()), 300, f"cell {i} to run")
                    if cells_.nth(i).locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']:has-text('Error')").count():
                        raise RuntimeError(f"keep_outputs: cell {i} of {path.name} raised an error in JupyterLab")
                    if c.get("id") not in cells: continue
                    w = cells_.nth(i).locator(".jp-OutputArea-output:has(.jupyter-widgets)").first
                    w.wait_for(state="visible", timeout=60_000)
                    for _ in range(steps if first else 0):
                        header = w.locator(".madlab-header").inner_text()
                        w.locator("button.madlab-step").click()
                        _wait(lambda: w.locator(".madlab-header").inner_text() != header
                              and not w.locator(".madlab-busy").inner_text().strip(), 60, "a round to show")
                    first = False
                    page.mouse.move(0, 0)
                    w.scroll_into_view_if_needed()
                    if m := PATHS.search(w.inner_text()):        # a picture's text cannot be checked later: check it now
                        raise RuntimeError(f"keep_outputs: the widget of cell {i} of {path.name} shows a machine path ({m.group(0)}...)")
                    out[c.get("id")] = base64.b64encode(w.screenshot(animations="disabled")).decode()
            finally: browser.close()
    return out

def _snapshot_output(png: str) -> dict:
    return {"output_type": "display_data", "metadata": {}, "data": {"image/png": png, "text/plain": [SNAPSHOT_TEXT]}}

def run(path: Path):
    "Execute `path` in place and keep the outputs that follow the rules: paths made neutral, figures with PNGs, widgets as snapshots."
    import nbformat
    figs, old_snaps = _stored_images(path)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = os.path.realpath(tmp)
        nb = execute(path, tmp)
        widgets, dropped = [], []
        for i, c in enumerate(nb.cells):
            if c.cell_type != "code": continue
            if EXPORTED.match(c.source): c.outputs = []; continue
            keep = []
            for o in c.outputs:
                if WIDGET in o.get("data", {}): widgets.append(c.get("id")); continue
                _sanitize(o, tmp)
                bad = [f for f in faults(o) if "plotly figure" not in f]
                if bad: dropped.append(f"cell {i}: {', '.join(bad)}")
                else: keep.append(o)
            c.outputs = keep
    for d in dropped: print(f"  {path.name}: dropped {d}")
    added, missing = add_figure_images(nb, figs)
    print(f"  {path.name}: {added} figure images" + (f"; {missing} figures WITHOUT an image (no kaleido or browser)" if missing else ""))
    if path.stem in SNAPSHOTS and widgets:
        try: snaps = {k: _snapshot_output(v) for k, v in snapshots(path, widgets, SNAPSHOTS[path.stem]).items()}
        except Exception as e:                            # no playwright or chromium, or the notebook failed in JupyterLab
            print(f"  {path.name}: WARNING: no snapshot taken ({type(e).__name__}: {e}); the snapshots stored before are kept")
            snaps = old_snaps
        for c in nb.cells:
            if c.get("id") in snaps: c.outputs = [nbformat.from_dict(snaps[c.get("id")])] + c.outputs
        print(f"  {path.name}: {len(snaps)} widget snapshots of {len(widgets)} widgets")
    nb.metadata.pop("widgets", None)                      # the widgets' saved state: a broken widget on GitHub, and large
    nbformat.write(nb, path)
    subprocess.run([str(Path(sys.executable).parent / "nbdev-clean"), "--fname", str(path)], cwd=ROOT, check=True)

def check(paths) -> int:
    "Print every broken rule; 1 when a notebook of KEEP has no outputs or any output breaks a rule."
    bad = 0
    for p in paths:
        nb = json.loads(p.read_text(encoding="utf-8"))
        if p.stem in KEEP and p.parent == NBS and not any(c.get("outputs") for c in nb["cells"]):
            print(f"{p.name}: stored without outputs (run `make outputs`)"); bad = 1
        for x in problems(nb): print(f"{p.relative_to(NBS)}: {x}"); bad = 1
    return bad

def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if "--check" in argv: sys.exit(check(notebooks(args) if args else sorted(NBS.rglob("*.ipynb"))))
    if "--images" in argv:
        import nbformat
        for p in notebooks(args):
            nb = nbformat.read(p, as_version=4)
            added, missing = add_figure_images(nb)
            if added: nbformat.write(nb, p); subprocess.run([str(Path(sys.executable).parent / "nbdev-clean"), "--fname", str(p)], check=True)
            print(f"{p.name}: {added} figure images added" + (f", {missing} could not be drawn" if missing else ""))
        return
    for p in notebooks(args or KEEP): print("running", p.relative_to(ROOT), flush=True); run(p)

if __name__ == "__main__": main(sys.argv[1:])

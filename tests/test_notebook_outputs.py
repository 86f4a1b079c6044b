"""Notebooks read as documentation where no kernel runs: the notebooks of KEEP are stored with their outputs, every plotly
figure has a static image beside it, widgets are kept as snapshots, and no output holds a machine path, a secret or a widget's
state (tools/keep_outputs.py, `make outputs`)."""
import base64, importlib.util, json, os, shutil, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / "nbs"
_spec = importlib.util.spec_from_file_location("keep_outputs", ROOT / "tools" / "keep_outputs.py")
ko = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(ko)

def _nb(path): return json.loads(path.read_text(encoding="utf-8"))
def _outputs(nb): return [o for c in nb["cells"] for o in c.get("outputs", [])]
def _abs(*parts) -> str: return "/" + "/".join(parts)    # a sample machine path, built so this file holds none

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + (_abs("tmp", "sk-")).encode() * 40).decode()       # an image's base64 is not searched as text

def test_the_stored_notebooks_follow_the_rules():
    "What `make test` checks: KEEP's notebooks have outputs; no output in any notebook breaks a rule."
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "keep_outputs.py"), "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr

@pytest.mark.parametrize("name", ko.KEEP)
def test_kept_notebooks_have_outputs(name):
    assert any(c.get("outputs") for c in _nb(NBS / f"{name}.ipynb")["cells"]), f"{name}.ipynb is stored without outputs: run `make outputs`"

def test_every_plotly_figure_has_an_image_beside_it():
    figs = [(p.name, o) for p in sorted(NBS.rglob("*.ipynb")) for o in _outputs(_nb(p)) if ko.PLOTLY in o.get("data", {})]
    assert len(figs) >= 12                                   # the tour's 7, the report's 3, viz's 1, published debates' 1
    bare = [name for name, o in figs if not any(k in o["data"] for k in ko.IMAGES)]
    assert not bare, f"plotly figures without a PNG (run `python tools/keep_outputs.py --images NB`): {bare}"
    for _, o in figs:
        if "image/png" in o["data"]: assert base64.b64decode(o["data"]["image/png"]).startswith(b"\x89PNG")

def test_the_stepper_tour_shows_its_widgets_as_snapshots():
    nb = _nb(NBS / "51_stepper_tour.ipynb")
    shown = [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).rstrip().splitlines()[-1].startswith(("stepper", "tour", "DebateStepper("))]
    assert len(shown) == 3
    for c in shown:
        snaps = [o for o in c["outputs"] if "".join(o.get("data", {}).get("text/plain", "")).startswith(ko.SNAPSHOT_TEXT)]
        assert len(snaps) == 1 and base64.b64decode(snaps[0]["data"]["image/png"]).startswith(b"\x89PNG"), c["id"]
    assert "widgets" not in nb["metadata"]

def test_real_model_notebook_is_stored_clean():
    "The experiment notebook keeps its results, without papermill's injected parameters or a progress bar's broken widget."
    nb = _nb(NBS / "experiments" / "real_model.ipynb")
    assert not [c for c in nb["cells"] if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
    assert [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert not [o for o in _outputs(nb) if ko.WIDGET in o.get("data", {})] and _outputs(nb)

@pytest.mark.parametrize("output, fault", [
    ({"output_type": "display_data", "data": {ko.PLOTLY: {"data": []}}}, "without a static image"),
    ({"output_type": "display_data", "data": {ko.WIDGET: {"model_id": "x"}, "text/plain": "W"}}, "a widget output"),
    ({"output_type": "stream", "name": "stdout", "text": f"outputs: {_abs('work', 'madlab', 'results')}\n"}, f"a machine path ({_abs('work', '')}"),
    ({"output_type": "stream", "name": "stderr", "text": f"see {_abs('home', 'me', 'x.py')}:3\n"}, f"a machine path ({_abs('home', '')}"),
    ({"output_type": "execute_result", "data": {"text/plain": "key sk-" + "a1B2" * 8}}, "something like a secret (sk-a1B"),
    ({"output_type": "execute_result", "data": {"text/plain": "hf_" + "x" * 34}}, "something like a secret"),
    ({"output_type": "execute_result", "data": {"text/plain": "x" * (ko.MAX_TEXT + 1)}}, "bytes of text"),
    ({"output_type": "error", "ename": "ValueError", "evalue": "", "traceback": []}, "an error"),
])
def test_each_rule_finds_its_fault(output, fault):
    assert any(fault in f for f in ko.faults(output)), ko.faults(output)

def test_good_outputs_pass():
    "A figure with its PNG, a snapshot, a table and text with relative paths break no rule (image data is not searched as text)."
    for o in [{"output_type": "display_data", "data": {ko.PLOTLY: {"data": []}, "image/png": PNG}},
              {"output_type": "display_data", "data": {"image/png": PNG, "text/plain": [ko.SNAPSHOT_TEXT]}},
              {"output_type": "stream", "name": "stdout", "text": "outputs: <tmp>/controlmad-4; data " + "../sha" + "red/data/gsm8k\n"},
              {"output_type": "execute_result", "data": {"text/plain": "api_key=[REDACTED]"}}]:
        assert ko.faults(o) == [], o

def test_sanitize_makes_a_run_reproducible(tmp_path):
    "Temporary folders read <tmp>, checkout paths become relative, timestamps and a run summary's wall time read …."
    tmp = str(tmp_path)
    o = {"output_type": "stream", "name": "stdout",
         "text": f"du: 20 items: 20 done; accuracy 0.8 (16/20); 120 calls made; 2.3 s\noutputs: {tmp}/tmpab_12x/run\n"
                 f"data {ko.ROOT}/data/kks/6.jsonl, public {ko.ROOT.parent}/shared/data\n"}
    d = {"output_type": "execute_result", "data": {"text/plain": "Message(role='user', ts=1795621485.4995792)", "image/png": PNG}}
    assert ko._sanitize(o, tmp)["text"] == ("du: 20 items: 20 done; accuracy 0.8 (16/20); 120 calls made; … s\noutputs: <tmp>/run\n"
                                            "data data/kks/6.jsonl, public ../shared/data\n")
    assert ko._sanitize(d, tmp)["data"] == {"text/plain": "Message(role='user', ts=…)", "image/png": PNG}

def test_notebooks_are_found_by_name_or_path():
    assert ko.notebooks(["20_viz", "nbs/07_baselines.ipynb", "experiments/real_model"]) == [
        NBS / "20_viz.ipynb", NBS / "07_baselines.ipynb", NBS / "experiments" / "real_model.ipynb"]
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "keep_outputs.py"), "no_such_notebook"], capture_output=True, text=True)
    assert p.returncode == 1 and "no notebook 'no_such_notebook'" in p.stderr and "Traceback" not in p.stderr

def test_figure_images_are_drawn_and_reused():
    "A stored figure's PNG is reused when its JSON is unchanged (no browser needed); a new one is drawn by kaleido when present."
    fig = {"data": [{"type": "bar", "x": [1, 2], "y": [3, 4]}], "layout": {"height": 200, "width": 300}}
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "display_data", "data": {ko.PLOTLY: fig}}]}]}
    assert ko.add_figure_images(nb, {json.dumps(fig, sort_keys=True): PNG}) == (1, 0)
    assert nb["cells"][0]["outputs"][0]["data"]["image/png"] == PNG
    try: import kaleido  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"): pytest.fail("CI: kaleido (the dev extra) is missing")
        pytest.skip("kaleido is not installed (pip install -e '.[dev]')")
    if not (os.environ.get("BROWSER_PATH") or shutil.which("chromium") or shutil.which("google-chrome")):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"): pytest.fail("CI: no chromium for kaleido (apt-get install chromium)")
        pytest.skip("no Chrome or Chromium for kaleido to drive (apt-get install chromium)")
    del nb["cells"][0]["outputs"][0]["data"]["image/png"]
    assert ko.add_figure_images(nb) == (1, 0)
    assert base64.b64decode(nb["cells"][0]["outputs"][0]["data"]["image/png"]).startswith(b"\x89PNG")

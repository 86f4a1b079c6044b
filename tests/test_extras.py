"""The optional extras as a user installs them: `cloud` and `inspect` together (s3fs and inspect_ai agree on fsspec, and
an Inspect export works beside s3fs without a DEPRECATED line), and `lab` (JupyterLab) installed by `make demo`."""
from __future__ import annotations
import json, os, re, shutil, subprocess, sys, tomllib
from pathlib import Path
import pytest
from jupyter_helpers import ROOT

def _py(code: str, *args, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    "A finished du run of two synthetic agents on four sums."
    from madlab.run import run_experiment
    out = tmp_path_factory.mktemp("extras") / "du"
    run_experiment("du", task="arith", items=range(1, 5), team=["synthetic:strong", "synthetic:weak"], out=out, progress=False, cache=False)
    return out

_REQUIREMENTS = """
import importlib.metadata as md, json, sys
from packaging.requirements import Requirement
import s3fs, fsspec, inspect_ai, inspect_ai.log                       # both extras' packages, in one process
fs = md.version("fsspec")
want = {d: [str(r.specifier) for r in map(Requirement, md.requires(d) or []) if r.name == "fsspec" and not r.marker] for d in ("s3fs", "inspect_ai")}
bad = {d: s for d, ss in want.items() for s in ss if fs not in Requirement("fsspec" + s).specifier}
print(json.dumps({"fsspec": fs, "want": want, "bad": bad}))
"""

def test_cloud_and_inspect_extras_import_together_and_export(run_dir, tmp_path):
    r = _py(_REQUIREMENTS)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["want"]["s3fs"] and not got["bad"], got                 # the installed fsspec is one both packages accept
    code = ("import s3fs, sys; from madlab.cli import console; console(sys.argv[1:])")
    r = _py(code, "export", str(run_dir), "--format", "inspect", "--out", str(tmp_path / "run.eval"))
    assert r.returncode == 0 and "inspect: 4 samples from 4 debate(s)" in r.stdout, r.stdout + r.stderr
    assert "DEPRECATED" not in r.stdout + r.stderr, r.stdout + r.stderr
    r = _py("import sys; from inspect_ai.log import read_eval_log; l = read_eval_log(sys.argv[1]); "
            "print(len(l.samples), sorted({type(e).__name__ for s in l.samples for e in s.events}))", str(tmp_path / "run.eval"))
    assert r.returncode == 0 and r.stdout.split()[0] == "4" and "ModelEvent" in r.stdout and "StepEvent" in r.stdout, r.stdout + r.stderr

# inspect_ai 0.3.137 moved its event classes to `inspect_ai.event`; `inspect_ai.log` still answers for them, printing a DEPRECATED
# line per name. Where the installed inspect_ai predates the move, the same layout is built here, as that release has it.
_NEW_LAYOUT = """
import sys, types, importlib.util, inspect_ai.log as log
if importlib.util.find_spec("inspect_ai.event") is None:
    moved = {k: getattr(log, k) for k in ("StepEvent", "ModelEvent")}
    ev = types.ModuleType("inspect_ai.event"); ev.__dict__.update(moved); sys.modules["inspect_ai.event"] = ev
    for k in moved: delattr(log, k)
    def __getattr__(name):
        if name in moved:
            print(f"DEPRECATED: the '{name}' class has been moved to 'inspect_ai.event.{name}'.", file=sys.stderr)
            return moved[name]
        raise AttributeError(name)
    log.__getattr__ = __getattr__
from madlab.cli import console; console(sys.argv[1:])
"""

def test_the_inspect_export_prints_no_deprecated_line(run_dir, tmp_path):
    "The export builds its events from `inspect_ai.event` where that module is, so inspect_ai prints no DEPRECATED line."
    r = _py(_NEW_LAYOUT, "export", str(run_dir), "--format", "inspect", "--out", str(tmp_path / "run.json"))
    assert r.returncode == 0 and "inspect: 4 samples" in r.stdout, r.stdout + r.stderr
    assert "DEPRECATED" not in r.stdout + r.stderr, r.stderr
    events = [e["event"] for s in json.loads((tmp_path / "run.json").read_text())["samples"] for e in s["events"]]
    assert events.count("step") > 0 and events.count("step") % 2 == 0 and events.count("model") > 0   # a begin and an end per round

def _extras() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

def test_make_demo_installs_jupyterlab(tmp_path):
    "The lab extra holds JupyterLab; `make demo` (and `make lab`, which opens the notebooks) install it into a fresh venv."
    assert any(re.match(r"jupyterlab\b", r) for r in _extras()["lab"])
    assert "lab" in re.search(r"madlab\[([^\]]*)\]", " ".join(_extras()["dev"]))[1].split(",")
    if shutil.which("make") is None: pytest.skip("no make here")
    for target in ("demo", "lab"):
        r = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert r.returncode == 0, r.stderr
        assert re.search(r"pip install -q -e \"?\.\[[^\]]*\blab\b", r.stdout), r.stdout
    assert "jupyter lab nbs/" in r.stdout

@pytest.mark.slow
def test_pip_resolves_cloud_and_inspect_together(tmp_path):
    "pip resolves `madlab[cloud,inspect]` from the package index (within the time pip gives a plain install): one fsspec both accept."
    if subprocess.run([sys.executable, "-m", "pip", "index", "versions", "s3fs"], capture_output=True, timeout=120).returncode:
        pytest.skip("no package index reachable")
    report = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                        f"{ROOT}[cloud,inspect]"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {d["metadata"]["name"].lower().replace("_", "-"): d["metadata"]["version"] for d in json.loads(report.read_text())["install"]}
    assert {"s3fs", "fsspec", "inspect-ai"} <= set(got), got
    assert got["s3fs"] == got["fsspec"], got                            # s3fs pins fsspec to its own release

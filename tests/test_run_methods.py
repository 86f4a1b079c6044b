"""The analyses that modules above `runs` add to every run (`baseline`, `vs_budget`, `blame`, `export`) work on any `OpenRun`,
however it was opened, with nothing else imported: `runs` finds them through the entry-point group `madlab.run_methods`
(madlab's own declared in pyproject.toml), never by importing them, so the import graph keeps its one direction."""
from __future__ import annotations
import ast, os, subprocess, sys, tomllib
from pathlib import Path
import pytest
from madlab.run import run_experiment
from madlab.tasks.arith import toy_arith_items

ROOT = Path(__file__).resolve().parents[1]

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "du_arith"
    run_experiment("du", toy_arith_items(6, seed=1), rounds=1, out=out, cache=False, progress=False)
    return out

def _py(code, env=None, cwd=None):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}, cwd=cwd)

def test_every_analysis_works_on_a_run_opened_with_nothing_else_imported(run_dir):
    code = (f"import sys; from madlab.runs import open_run; r = open_run({str(run_dir)!r}); "
            "c = r.vs_budget(); print(c.table.run.tolist()); print(all(callable(getattr(r, n)) for n in ('baseline', 'blame', 'export'))); "
            "print(sorted(n for n in ('baseline', 'vs_budget', 'blame', 'export') if n in dir(r)))")
    p = _py(code)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split("\n")[:3] == ["['du_arith']", "True", "['baseline', 'blame', 'export', 'vs_budget']"], p.stdout

def test_a_typo_is_still_an_attribute_error(run_dir):
    p = _py(f"from madlab.runs import open_run; r = open_run({str(run_dir)!r}); print(hasattr(r, 'vs_budgett'), hasattr(r, '_nothing'))")
    assert p.returncode == 0 and p.stdout.split() == ["False", "False"], p.stdout + p.stderr[-2000:]

def test_another_package_adds_a_run_method_through_the_group(run_dir, tmp_path):
    "An installed package offers `hello = extra_pkg:hello` in madlab.run_methods: every run has `.hello()`, madlab unedited."
    (tmp_path / "extra_pkg").mkdir()
    (tmp_path / "extra_pkg" / "__init__.py").write_text("def hello(run, greeting='hello'): return f'{greeting} {run.name}'\n")
    info = tmp_path / "extra_pkg-0.1.dist-info"; info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[madlab.run_methods]\nhello = extra_pkg:hello\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    p = _py(f"from madlab.runs import open_run; print(open_run({str(run_dir)!r}).hello(greeting='hi'))", {"PYTHONPATH": path})
    assert p.returncode == 0 and p.stdout.strip() == "hi du_arith", p.stdout + p.stderr[-2000:]

def _methods_added_outside_runs() -> dict[str, str]:
    "Method name -> module, for every function of a module other than runs whose first parameter is `self: OpenRun` (a @patch)."
    out = {}
    for f in sorted((ROOT / "madlab").glob("*.py")):
        if f.stem in ("runs", "_modidx"): continue
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.FunctionDef) and n.args.args and n.args.args[0].arg == "self" and isinstance(a := n.args.args[0].annotation, ast.Name) and a.id == "OpenRun":
                out[n.name] = f"madlab.{f.stem}"
    return out

def test_every_method_added_to_openrun_elsewhere_is_declared_in_the_group():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["madlab.run_methods"]
    added = _methods_added_outside_runs()
    assert {"baseline", "vs_budget", "blame", "export"} <= set(added)
    assert {k: v for k, v in added.items() if declared.get(k) != v} == {}, declared

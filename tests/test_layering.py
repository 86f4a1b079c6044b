"""The layering of ../DESIGN.md holds with no exceptions: imports point one way, and imports inside functions count
(every Import/ImportFrom node, relative ones, `importlib.import_module("madlab.x")`): the import graph of madlab has no
circle at all, and no view reaches the runner. `python tools/import_graph.py` prints the graph."""
from __future__ import annotations
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "madlab"

def _module(path: Path) -> str:
    return ".".join(("madlab",) + path.relative_to(PKG).with_suffix("").parts).removesuffix(".__init__")

def _top_level_imports(path: Path, me: str) -> set[str]:
    "madlab modules `path` imports at module level (statements outside any function or class body)."
    out, pkg = set(), me.rsplit(".", 1)[0] if not path.name == "__init__.py" else me
    def visit(body):
        for node in body:
            if isinstance(node, ast.Import): out.update(a.name for a in node.names if a.name.startswith("madlab"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                if base.startswith("madlab"):
                    out.add(base)
                    out.update(f"{base}.{a.name}" for a in node.names)   # `from . import x` may name a module
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body); visit(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []): visit(h.body)
    visit(ast.parse(path.read_text()).body)
    return out

LEAVES = ("madlab.registry", "madlab.redact", "madlab.pages", "madlab.jsontext")   # below core: they import nothing of madlab

def test_core_imports_nothing_of_madlab_but_the_leaves():
    "core imports only the leaves below it (anywhere, inside functions too), and they import nothing of madlab."
    g = _graph()
    assert g["madlab.core"] <= set(LEAVES), g["madlab.core"]
    assert not {leaf: g[leaf] for leaf in LEAVES if g[leaf]}

def _protocol_files() -> list[Path]:
    "Every module under madlab/protocols/, those of a protocol's own package (protocols/agentverse/) included."
    return sorted((PKG / "protocols").rglob("*.py"))

def _rel(p: Path) -> str: return p.relative_to(PKG / "protocols").as_posix()

def test_the_protocol_checks_see_a_protocol_package():
    assert {"agentverse/__init__.py", "agentverse/rules.py", "agentverse/loader.py"} <= {_rel(p) for p in _protocol_files()}

def test_no_protocol_builds_or_unwraps_a_backend():
    "A protocol never imports a backend class or `get_backend`: extra agents come from the debate by role (`role_agent`, `side_backend`), and what it asks of a model is a backend method."
    import re
    banned = re.compile(r"\b(get_backend|OpenAIBackend|HFBackend|CachedBackend|ReplayBackend|SyntheticBackend|synthetic_backend)\b")
    found = {}
    for p in _protocol_files():
        tree, name = ast.parse(p.read_text()), _rel(p)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in ("backends", "synthetic"):
                bad = [a.name for a in node.names if banned.fullmatch(a.name)]
                if bad: found.setdefault(name, []).extend(bad)
            elif isinstance(node, ast.Attribute) and banned.fullmatch(node.attr): found.setdefault(name, []).append(node.attr)
    assert not found, found

def _backend_reads(path: Path) -> list[str]:
    "Where `path` reads or writes a `.backend` attribute (`line: code`)."
    src = path.read_text()
    lines = src.splitlines()
    return [f"{n.lineno}: {lines[n.lineno - 1].strip()}" for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Attribute) and n.attr == "backend"]

def test_no_protocol_reaches_for_an_agents_backend():
    "Every model call a protocol makes goes through an agent (`Agent.ask`, `Debate.side_call`), and what it asks of a model (`Agent.count_tokens`) too: no `x.backend` under protocols/."
    found = {_rel(p): _backend_reads(p) for p in _protocol_files()}
    found = {k: v for k, v in found.items() if v}
    assert not found, found

def test_the_backend_check_sees_an_attribute_access(tmp_path):
    (tmp_path / "p.py").write_text("async def f(a, m):\n    n = a.count_tokens('x')\n    return await a.backend.complete(m)\n")
    assert _backend_reads(tmp_path / "p.py") == ["3: return await a.backend.complete(m)"]

def _tool():
    "tools/import_graph.py, the one reader of madlab's imports (the tests and the printed graph share it)."
    import importlib.util
    spec = importlib.util.spec_from_file_location("_import_graph", PKG.parent / "tools" / "import_graph.py")
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod

_ig = _tool()
_madlab_imports_anywhere = _ig.imports_anywhere

def test_no_protocol_imports_backends():
    "The request contract (`Ask`, `AnswerSchema` in `madlab.core`; `schema_for` and the formats in `madlab.formats`) lives below the backends: no protocol module imports `madlab.backends`, lazily or not."
    found = {_rel(p): sorted(d for d in _madlab_imports_anywhere(p, _module(p)) if d == "madlab.backends" or d.startswith("madlab.backends."))
             for p in _protocol_files()}
    assert not {k: v for k, v in found.items() if v}, found

def test_import_finder_sees_lazy_and_relative_imports(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("from ..backends import Ask\ndef f():\n    import madlab.backends\n    from madlab.backends import get_backend\n"
                 "    importlib.import_module('madlab.backends')\n    return madlab.backends.Ask\n")
    seen = _madlab_imports_anywhere(p, "madlab.protocols.x")
    assert {"madlab.backends", "madlab.backends.Ask", "madlab.backends.get_backend"} <= seen
    p.write_text("from ..core import Ask\nfrom .. import scoring\n")
    assert not {d for d in _madlab_imports_anywhere(p, "madlab.protocols.x") if d.startswith("madlab.backends")}

ALLOWED_CIRCLES: list = []   # no circle at all
COMPAT_EDGES: set = set()   # edges left out of the graph: none
VIEWS = ("madlab.widgets", "madlab.positions", "madlab.viz", "madlab.live")

def _graph(pkg: Path = PKG, compat=COMPAT_EDGES) -> dict[str, set[str]]: return _ig.import_graph(pkg, compat)
def _circles(graph) -> list[set[str]]: return [set(c) for c in _ig.circles(graph)]

def test_no_import_circles_even_inside_functions():
    circles = _circles(_graph())
    assert [c for c in circles if c not in ALLOWED_CIRCLES] == [], "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in circles)

def test_circle_finder_sees_function_level_and_import_module(tmp_path):
    pkg = tmp_path / "madlab"; (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("import importlib\ndef g(): return importlib.import_module('madlab.c')\n")
    (pkg / "c.py").write_text("from madlab import a\n")
    (pkg / "d.py").write_text("from .a import f\n")
    g = _graph(pkg, compat=set())
    assert g == {"madlab.a": {"madlab.sub.b"}, "madlab.sub.b": {"madlab.c"}, "madlab.c": {"madlab.a"}, "madlab.d": {"madlab.a"}}
    assert _circles(g) == [{"madlab.a", "madlab.sub.b", "madlab.c"}]

_path = _ig.path_to

def test_views_import_no_runner():
    "Widgets, viz and live reach neither `madlab.run` nor `madlab.import_run`, at module level or inside functions (the stepper continues imported logs through `madlab.imports`, which imports nothing of the runner)."
    g = _graph()
    found = {v: p for v in VIEWS for goal in ("madlab.run", "madlab.import_run") if (p := _path(g, v, goal))}
    assert not found, {v: " -> ".join(p) for v, p in found.items()}

def test_views_load_no_runner_in_a_fresh_interpreter():
    import subprocess, sys
    code = "import sys, madlab.widgets, madlab.viz, madlab.live, madlab.imports; print(sorted(m for m in sys.modules if m in ('madlab.run', 'madlab.import_run')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=PKG.parent)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]

def test_synthetic_specs_build_from_backends_alone_in_a_fresh_interpreter():
    import subprocess, sys
    code = "from madlab.backends import get_backend, Backend; b = get_backend('synthetic:strong'); assert isinstance(b, Backend) and b.synthetic; print(type(b).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=PKG.parent)
    assert out.returncode == 0 and out.stdout.strip() == "SyntheticBackend", out.stdout + out.stderr[-2000:]

def test_import_graph_tool_agrees():
    import subprocess, sys
    out = subprocess.run([sys.executable, str(PKG.parent / "tools" / "import_graph.py")], capture_output=True, text=True, timeout=300, cwd=PKG.parent)
    assert out.returncode == 0 and out.stdout.rstrip().endswith("ok"), out.stdout[-3000:] + out.stderr[-2000:]
    g = _graph()
    printed = dict(l.split(" -> ", 1) for l in out.stdout.splitlines() if " -> " in l and not l.startswith(("circle", "view", "left out")))
    assert {m: {"madlab." + d for d in v.split(", ")} if v != "(nothing)" else set() for m, v in printed.items()} == g

def test_no_module_over_700_lines():
    "No module of madlab is longer than `MAX_LINES` (700) but those in the shrinking `LONG_MODULES`, none longer than listed."
    bad = _ig.too_long()
    assert not bad, "split these modules by concern (a notebook each):\n" + "\n".join(bad)

def test_the_length_check_finds_a_long_module(tmp_path):
    pkg = tmp_path / "madlab"; pkg.mkdir()
    (pkg / "a.py").write_text("x = 1\n" * 700); (pkg / "b.py").write_text("x = 1\n" * 701); (pkg / "_modidx.py").write_text("d = 1\n" * 900)
    assert _ig.too_long(pkg, allowed={}) == ["madlab.b: 701 lines (at most 700)"]
    assert _ig.too_long(pkg, allowed={"madlab.b": 701}) == [] and _ig.too_long(pkg, allowed={"madlab.b": 701}, cap=699) != []

RUNNING = (  # what imports or runs debates; a view shows what it is given
    "madlab.imports", "madlab.import_run", "madlab.run", "madlab.experiments")

def test_views_run_nothing():
    "Widgets, viz and live reach none of the importers, the runner or the experiments, at module level or inside functions."
    g = _graph()
    found = {f"{v} -> {goal}": " -> ".join(p) for v in VIEWS for goal in RUNNING if (p := _path(g, v, goal))}
    assert not found, found

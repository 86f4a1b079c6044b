"""The layering of ../DESIGN.md holds with no exceptions: no madlab module imports, at module level, one that imports it back
(directly or through others). Imports inside functions (lazy, for heavy or optional parts) are not module-level imports."""
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

def test_no_module_level_import_cycles():
    mods = {_module(p): p for p in PKG.rglob("*.py") if p.name != "_modidx.py"}
    graph = {m: {d for d in _top_level_imports(p, m) if d in mods and d != m and d != "madlab"} for m, p in mods.items()}
    cycles, state = [], {}
    def dfs(m, stack):
        state[m] = 1; stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1: cycles.append(stack[stack.index(d):] + [d])
            elif d not in state: dfs(d, stack)
        stack.pop(); state[m] = 2
    for m in sorted(graph):
        if m not in state: dfs(m, [])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)

def test_core_imports_nothing_of_madlab():
    assert not {d for d in _top_level_imports(PKG / "core.py", "madlab.core") if d != "madlab"}

def test_no_protocol_builds_or_unwraps_a_backend():
    "A protocol never imports a backend class or `get_backend`: extra agents come from the debate by role (`role_agent`, `side_backend`), and what it asks of a model is a backend method."
    import re
    banned = re.compile(r"\b(get_backend|OpenAIBackend|HFBackend|CachedBackend|ReplayBackend|SyntheticBackend|synthetic_backend)\b")
    found = {}
    for p in sorted((PKG / "protocols").glob("*.py")):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in ("backends", "synthetic"):
                bad = [a.name for a in node.names if banned.fullmatch(a.name)]
                if bad: found.setdefault(p.name, []).extend(bad)
            elif isinstance(node, ast.Attribute) and banned.fullmatch(node.attr): found.setdefault(p.name, []).append(node.attr)
    assert not found, found

def _backend_reads(path: Path) -> list[str]:
    "Where `path` reads or writes a `.backend` attribute (`line: code`)."
    src = path.read_text()
    lines = src.splitlines()
    return [f"{n.lineno}: {lines[n.lineno - 1].strip()}" for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Attribute) and n.attr == "backend"]

def test_no_protocol_reaches_for_an_agents_backend():
    "Every model call a protocol makes goes through an agent (`Agent.ask`, `Debate.side_call`), and what it asks of a model (`Agent.count_tokens`) too: no `x.backend` under protocols/."
    found = {p.name: _backend_reads(p) for p in sorted((PKG / "protocols").glob("*.py"))}
    found = {k: v for k, v in found.items() if v}
    assert not found, found

def test_the_backend_check_sees_an_attribute_access(tmp_path):
    (tmp_path / "p.py").write_text("async def f(a, m):\n    n = a.count_tokens('x')\n    return await a.backend.complete(m)\n")
    assert _backend_reads(tmp_path / "p.py") == ["3: return await a.backend.complete(m)"]

def _madlab_imports_anywhere(path: Path, me: str) -> set[str]:
    "madlab modules `path` imports anywhere: at module level, inside functions and classes, and as `madlab.x.y` attribute chains."
    out, pkg = set(), me.rsplit(".", 1)[0] if not path.name == "__init__.py" else me
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import): out.update(a.name for a in node.names if a.name.startswith("madlab"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            if base.startswith("madlab"): out.add(base); out.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            out.add(node.args[0].value)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "madlab":
            out.add(f"madlab.{node.attr}")
    return out

def test_no_protocol_imports_backends():
    "The request contract (`Ask`, `AnswerSchema`, `answer_schema`, `schema_for`) lives in `madlab.core`: no protocol module imports `madlab.backends`, lazily or not."
    found = {p.name: sorted(d for d in _madlab_imports_anywhere(p, _module(p)) if d == "madlab.backends" or d.startswith("madlab.backends."))
             for p in sorted((PKG / "protocols").glob("*.py"))}
    assert not {k: v for k, v in found.items() if v}, found

def test_import_finder_sees_lazy_and_relative_imports(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("from ..backends import Ask\ndef f():\n    import madlab.backends\n    from madlab.backends import get_backend\n"
                 "    importlib.import_module('madlab.backends')\n    return madlab.backends.Ask\n")
    seen = _madlab_imports_anywhere(p, "madlab.protocols.x")
    assert {"madlab.backends", "madlab.backends.Ask", "madlab.backends.get_backend"} <= seen
    p.write_text("from ..core import Ask\nfrom .. import scoring\n")
    assert not {d for d in _madlab_imports_anywhere(p, "madlab.protocols.x") if d.startswith("madlab.backends")}

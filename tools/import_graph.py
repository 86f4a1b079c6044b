"""Print madlab's import graph (module -> the madlab modules it imports anywhere: at module level, inside functions and
classes, relative imports, `importlib.import_module("madlab.x")`, `madlab.x` attribute chains), then its circles and any view with a path to the runner.
Exit 1 when there is a circle other than the known ones, a view reaches the runner, or a module is over MAX_LINES lines.
Usage: python tools/import_graph.py"""
from __future__ import annotations
import ast, sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "madlab"
KNOWN_CIRCLES: set = set()   # no circle is allowed
COMPAT_EDGES: set = set()   # edges left out of the graph: none
VIEWS = ("madlab.widgets", "madlab.positions", "madlab.viz", "madlab.live")
RUNNER = "madlab.run"
MAX_LINES = 700            # a module longer than this is split by concern (a notebook per module)
# Modules still over MAX_LINES, with their length when the cap came in. This allow-list is to shrink: split the module and
# remove its line. No listed module may grow past its length, and no other module may pass MAX_LINES.
LONG_MODULES: dict = {}   # modules still over MAX_LINES, with their length: none today; a module that grows past the cap is split

def module_name(path: Path, pkg: Path = PKG) -> str:
    return ".".join(("madlab",) + path.relative_to(pkg).with_suffix("").parts).removesuffix(".__init__")

def imports_anywhere(path: Path, me: str) -> set[str]:
    "Names of madlab modules (and `module.attr` candidates) that `path` imports anywhere."
    out, pkg = set(), me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import): out.update(a.name for a in node.names if a.name.split(".")[0] == "madlab")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            if base.split(".")[0] == "madlab": out.add(base); out.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            out.add(node.args[0].value)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "madlab":
            out.add(f"madlab.{node.attr}")       # `madlab.x.f()` after `import madlab...`
    return out

def import_graph(pkg: Path = PKG, compat=COMPAT_EDGES) -> dict[str, set[str]]:
    "Module -> the madlab modules it imports (a module imports its parent packages too; `compat` edges are left out)."
    mods = {module_name(p, pkg): p for p in pkg.rglob("*.py") if p.name != "_modidx.py"}
    def closest(name):                      # `madlab.x.y` names module madlab.x.y, or attribute y of madlab.x
        while name and name not in mods: name = name.rpartition(".")[0]
        return name
    g = {}
    for m, p in mods.items():
        deps = {closest(d) for d in imports_anywhere(p, m)}
        g[m] = {d for d in deps if d and d != m and d != "madlab" and (m, d) not in compat}
    return g

def circles(g) -> list[list[str]]:
    "The strongly connected groups of more than one module (each a circle or several tied together), by Tarjan's algorithm."
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in sorted(g[v]):
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index: visit(v)
    return out

def path_to(g, start, goal) -> list[str]|None:
    "A shortest import path from `start` to `goal`, or None."
    prev, todo = {start: None}, [start]
    while todo:
        v = todo.pop(0)
        if v == goal:
            out = []
            while v: out.append(v); v = prev[v]
            return out[::-1]
        for w in sorted(g.get(v, ())):
            if w not in prev: prev[w] = v; todo.append(w)
    return None

def too_long(pkg: Path = PKG, allowed=LONG_MODULES, cap: int = MAX_LINES) -> list[str]:
    "The modules of `pkg` over their cap (`allowed`'s length for a listed module, else `cap`), as 'module: N lines (at most M)'."
    out = []
    for p in sorted(pkg.rglob("*.py")):
        m, n = module_name(p, pkg), len(p.read_text(encoding="utf-8").splitlines())
        if p.name != "_modidx.py" and n > allowed.get(m, cap): out.append(f"{m}: {n} lines (at most {allowed.get(m, cap)})")
    return out

def main() -> int:
    g = import_graph()
    for m in sorted(g): print(f"{m} -> {', '.join(sorted(d.removeprefix('madlab.') for d in g[m])) or '(nothing)'}")
    bad = 0
    for c in circles(g):
        known = frozenset(c) in KNOWN_CIRCLES
        bad += not known
        print(f"circle{' (known)' if known else ''}: {' <-> '.join(c)}")
    for v in VIEWS:
        p = path_to(g, v, RUNNER) if v in g else None
        if p: bad += 1; print(f"view reaches the runner: {' -> '.join(p)}")
    for a, b in sorted(COMPAT_EDGES): print(f"left out (compatibility): {a} -> {b}")
    for line in too_long(): bad += 1; print(f"module too long: {line}")
    print("ok" if not bad else f"{bad} problem(s)")
    return 1 if bad else 0

if __name__ == "__main__": sys.exit(main())

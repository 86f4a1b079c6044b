"""Notebooks read as documentation: each exported cell holds one small definition (at most `CAP` lines)."""
import ast, json, os, re, shutil, subprocess, sys
from pathlib import Path
import pytest

NBS = Path(__file__).resolve().parent.parent / "nbs"
CAP = 60
EXPORT = re.compile(r"#\|\s*export")

# Exported cells still over the cap, with their length today. This allow-list is to shrink: split a cell (one
# definition per cell, methods by `@patch`) and remove its line. No listed cell may grow, and no other cell may pass `CAP`.
ALLOWED = {
}

def exported_cells(path: Path):
    "(cell id, number of lines) of each exported code cell of the notebook at `path`."
    nb = json.loads(path.read_text(encoding="utf-8"))
    for c in nb["cells"]:
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        if c["cell_type"] == "code" and EXPORT.match(src.lstrip()): yield c.get("id"), len(src.splitlines())

def too_long(path: Path, allowed=ALLOWED, cap=CAP) -> list[str]:
    "The exported cells of a notebook over their cap: `allowed`'s length for a listed cell, else `cap`."
    name = str(path.relative_to(NBS)) if path.is_relative_to(NBS) else path.name
    return [f"{name} cell {cid}: {n} lines (at most {allowed.get((name, cid), cap)})"
            for cid, n in exported_cells(path) if n > allowed.get((name, cid), cap)]

@pytest.mark.parametrize("path", sorted(NBS.rglob("*.ipynb")), ids=lambda p: str(p.relative_to(NBS)))
def test_exported_cells_stay_small(path):
    bad = too_long(path)
    assert not bad, "split these exported cells (one definition per cell, methods by @patch):\n" + "\n".join(bad)

def test_the_split_notebooks_have_no_allowance():
    "The notebooks already split keep every exported cell within the cap."
    split = {"01_backends.ipynb", "02_agents.ipynb", "05_puzzles.ipynb", "07_baselines.ipynb", "06_debate.ipynb", "09_guards.ipynb", "14_agentverse.ipynb",
             "14a_agentverse_rules.ipynb", "14b_agentverse_memory.ipynb", "14c_agentverse_parsers.ipynb", "14d_agentverse_loader.ipynb",
             "21_widgets.ipynb", "22_live.ipynb", "40_cli.ipynb"}
    assert not split & {nb for nb, _ in ALLOWED}

def test_the_check_finds_a_long_cell(tmp_path):
    "A cell one line over the cap fails; a listed cell fails only when it grows past its length."
    def nb(lines):
        p = tmp_path / "x.ipynb"
        cell = {"cell_type": "code", "id": "abc", "metadata": {}, "outputs": [], "execution_count": None,
                "source": "\n".join(["#| export", *[f"x{i} = {i}" for i in range(lines - 1)]])}
        p.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        return p
    assert too_long(nb(CAP)) == []
    assert too_long(nb(CAP + 1)) == [f"x.ipynb cell abc: {CAP + 1} lines (at most {CAP})"]
    assert too_long(nb(70), allowed={("x.ipynb", "abc"): 70}) == []
    assert too_long(nb(71), allowed={("x.ipynb", "abc"): 70}) != []

# One public definition per exported cell, lines of at most 120 characters: enforced on the notebooks listed in `STYLED`.
# This list is to grow (the opposite of `ALLOWED`): bring a notebook to the style (split each exported cell to one public
# definition with its sentence and example; wrap long lines by hand) and add it here.
STYLED = [
    "00_core.ipynb", "00_registry.ipynb", "00a_formats.ipynb", "00b_store.ipynb", "00c_redact.ipynb",
    "00d_pages.ipynb", "00e_jsontext.ipynb", "00f_stats.ipynb", "01_backends.ipynb", "01a_models.ipynb",
    "01b_synthetic.ipynb", "01c_resilience.ipynb", "01d_openai.ipynb", "01e_schema_mask.ipynb",
    "01f_prefix_store.ipynb", "01g_hf.ipynb", "01h_cache.ipynb", "01i_replay.ipynb", "01j_synthetic_provider.ipynb",
    "01k_backends_package.ipynb", "01l_server_notes.ipynb", "01m_human.ipynb", "02_agents.ipynb", "03_scoring.ipynb",
    "03a_cost.ipynb", "04_tasks.ipynb",
    "04a_market.ipynb", "04b_pairwise.ipynb", "04c_public_data.ipynb", "04d_arith.ipynb", "04d_protocol.ipynb",
    "04e_gsm8k.ipynb", "04f_mmlu.ipynb", "04g_safety.ipynb", "04h_scenario.ipynb", "04i_quotes.ipynb",
    "04j_stories.ipynb", "05_puzzles.ipynb",
    "05b_kks.ipynb", "05c_dynamics.ipynb", "05d_kks_task.ipynb", "05e_puzzle_sets.ipynb", "07a_du_log.ipynb",
    "08_run.ipynb", "08a_run_folder.ipynb", "08b_rescore.ipynb", "08c_run_result.ipynb", "08d_output_writer.ipynb", "10a_controlmad_log.ipynb",
    "13a_critic_actor_log.ipynb", "14a_agentverse_rules.ipynb", "14b_agentverse_memory.ipynb",
    "14c_agentverse_parsers.ipynb", "14e_agentverse_package.ipynb", "18_oversight.ipynb",
    "18a_oversight_personas.ipynb", "20_viz.ipynb", "20a_positions.ipynb", "20b_seats.ipynb", "21_widgets.ipynb",
    "22_live.ipynb", "23a_baselines_budget.ipynb", "23b_blame.ipynb", "23c_export.ipynb",
    "23d_gains.ipynb", "23e_attribute.ipynb", "23f_tournament.ipynb", "50_controlmad_tour.ipynb",
    "51_stepper_tour.ipynb", "index.ipynb",
]
LINE_LENGTH = 120   # pyproject.toml [tool.ruff] line-length; ruff's E501 checks it in every code cell

def _public_names(tree: ast.Module) -> list[str]:
    """The public definitions at the top level of a cell: `def`, `async def`, `class` and assignments to a name not
    starting with `_` (inside top-level `if`/`try` too). A `@patch`ed function is one definition, named by its method.
    Public constants count: they land in `__all__` and are documented like functions. Imports, expressions and
    underscore names (helpers, `__all__`-like dunders) are not public definitions."""
    out = []
    def targets(t):
        if isinstance(t, ast.Name): yield t.id
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts: yield from targets(e)
    def visit(body):
        for n in body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): out.append(n.name)
            elif isinstance(n, ast.Assign): out.extend(x for t in n.targets for x in targets(t))
            elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and isinstance(n.target, ast.Name):
                if not isinstance(n, ast.AugAssign): out.append(n.target.id)
            elif isinstance(n, (ast.If, ast.Try)):
                visit(n.body); visit(n.orelse)
                for h in getattr(n, "handlers", []): visit(h.body)
                visit(getattr(n, "finalbody", []))
    visit(tree.body)
    return [x for x in dict.fromkeys(out) if not x.startswith("_")]

def _code(src: str) -> str:
    "A cell's source as Python: nbdev's `#|` directives and IPython's `%`/`!` lines become blank lines."
    return "\n".join("" if l.lstrip().startswith(("%", "!")) else l for l in src.splitlines())

def crowded_cells(path: Path) -> list[str]:
    "The exported cells of a notebook holding more than one public definition."
    name = str(path.relative_to(NBS)) if path.is_relative_to(NBS) else path.name
    nb = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for c in nb["cells"]:
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        if c["cell_type"] != "code" or not EXPORT.match(src.lstrip()): continue
        names = _public_names(ast.parse(_code(src)))
        if len(names) > 1: out.append(f"{name} cell {c.get('id')}: {len(names)} public definitions ({', '.join(names)})")
    return out

def _ruff() -> str|None:
    "The ruff next to this Python (the dev install's), else one on PATH; None when there is none."
    here = Path(sys.executable).parent / "ruff"
    return str(here) if here.exists() else shutil.which("ruff")

def long_lines(paths: list[Path], ruff: str) -> list[str]:
    "`notebook cell N line L: (length)` for each code line over `LINE_LENGTH`, as ruff (E501, pyproject's settings) reports it."
    out = subprocess.run([ruff, "check", "--no-cache", "--select", "E501", "--output-format", "json",
                          "--config", str(NBS.parent / "pyproject.toml"), *map(str, paths)],
                         capture_output=True, text=True, timeout=300, cwd=NBS.parent)
    if out.returncode not in (0, 1): raise RuntimeError(f"ruff failed ({out.returncode}): {out.stderr[-2000:]}")
    return [f"{Path(d['filename']).name} cell {d.get('cell')} line {d['location']['row']}: {d['message']}"
            for d in json.loads(out.stdout or "[]")]

def _styled() -> list[Path]: return [NBS / n for n in STYLED]

@pytest.mark.parametrize("name", STYLED)
def test_styled_notebooks_hold_one_public_definition_per_exported_cell(name):
    bad = crowded_cells(NBS / name)
    assert not bad, "give each public definition its own cell (with its sentence and example):\n" + "\n".join(bad)

def _need_ruff() -> str:
    ruff = _ruff()
    if ruff is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"): pytest.fail("ruff is not installed (the dev extra has it)")
        pytest.skip("ruff is not installed: `pip install -e '.[dev]'` (the dev extra) brings it; the line-length check did not run")
    return ruff

def test_styled_notebooks_keep_lines_within_120():
    bad = long_lines(_styled(), _need_ruff()) if STYLED else []
    assert not bad, f"wrap these lines by hand to at most {LINE_LENGTH} characters:\n" + "\n".join(bad)

def test_styled_notebooks_exist_and_are_sorted():
    assert STYLED == sorted(set(STYLED)) and all((NBS / n).exists() for n in STYLED), STYLED

def _notebook(tmp_path, *sources) -> Path:
    p = tmp_path / "x.ipynb"
    cells = [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "outputs": [], "execution_count": None, "source": s}
             for i, s in enumerate(sources)]
    p.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                             "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}))
    return p

def test_the_check_finds_two_public_definitions(tmp_path):
    ok = _notebook(tmp_path, "#| export\nfrom fastcore.basics import patch\n_X = 1\ndef f(): return _X\ndef _g(): pass",
                   "#| export\n@patch\ndef show(self: int): pass\n@patch\ndef _draw(self: int): pass", "def a(): pass\ndef b(): pass")
    assert crowded_cells(ok) == []
    bad = _notebook(tmp_path, "#| export\nclass A: pass\ndef f(): pass")
    assert crowded_cells(bad) == ["x.ipynb cell c0: 2 public definitions (A, f)"]
    two_patches = _notebook(tmp_path, "#| export\n@patch\ndef back(self: int): pass\n@patch\ndef forward(self: int): pass")
    assert crowded_cells(two_patches) == ["x.ipynb cell c0: 2 public definitions (back, forward)"]
    constant = _notebook(tmp_path, "#| exports\nROLES = ('a',)\ndef role(): pass")
    assert crowded_cells(constant) == ["x.ipynb cell c0: 2 public definitions (ROLES, role)"]

def test_the_check_finds_a_121_character_line(tmp_path):
    ruff = _need_ruff()
    fits = "x = " + "1" * (LINE_LENGTH - 4)
    assert long_lines([_notebook(tmp_path, "#| export\n" + fits)], ruff) == []
    assert long_lines([_notebook(tmp_path, "y = 2", "#| export\n" + fits + "1")], ruff) == [
        f"x.ipynb cell 2 line 2: Line too long ({LINE_LENGTH + 1} > {LINE_LENGTH})"]

def test_ruff_reads_the_line_length_from_pyproject():
    import tomllib
    conf = tomllib.loads((NBS.parent / "pyproject.toml").read_text())["tool"]["ruff"]
    assert conf["line-length"] == LINE_LENGTH and "E501" in conf["lint"]["select"]

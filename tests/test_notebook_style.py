"""Notebooks read as documentation: each exported cell holds one small definition (at most `CAP` lines)."""
import json, re
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

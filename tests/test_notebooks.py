"""Every notebook opens in JupyterLab without asking for a kernel, and begins with its title."""
import json
from pathlib import Path
import pytest

NBS = sorted((Path(__file__).resolve().parent.parent / "nbs").rglob("*.ipynb"))

@pytest.mark.parametrize("path", NBS, ids=lambda p: str(p.relative_to(p.parents[1] if p.parent.name == "experiments" else p.parent)))
def test_notebook_has_a_kernelspec_and_a_title(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["metadata"].get("kernelspec", {}).get("name") == "python3", f"{path.name} has no python3 kernelspec"
    first = next(c for c in nb["cells"] if c["cell_type"] != "raw")
    assert first["cell_type"] == "markdown" and "".join(first["source"]).startswith("# "), f"{path.name} does not open with its title"

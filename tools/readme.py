"""Write README.md from nbs/index.ipynb (markdown cells as they are, code cells as fenced Python).

`--check` fails when README.md is out of date. nbdev's own README step needs quarto, which runs only in CI on GitHub."""
import json, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
nb = json.loads((root / "nbs" / "index.ipynb").read_text())
parts = []
for c in nb["cells"]:
    src = "".join(c["source"]).strip()
    if not src or src.startswith("#| hide"): continue
    parts.append(src if c["cell_type"] == "markdown" else f"```python\n{src}\n```")
text = "<!-- generated from nbs/index.ipynb by tools/readme.py; edit the notebook -->\n\n" + "\n\n".join(parts) + "\n"
readme = root / "README.md"
if "--check" in sys.argv:
    if not readme.exists() or readme.read_text() != text:
        print("README.md is out of date with nbs/index.ipynb: run `python tools/readme.py`"); sys.exit(1)
    print("README.md matches nbs/index.ipynb")
else:
    readme.write_text(text)

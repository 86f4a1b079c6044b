"""Write README.md from nbs/index.ipynb (markdown cells as they are, code cells as fenced Python, each followed by its kept
text outputs as a fenced text block: printed text and the plain form of a result; tables and images stay in the notebook).

`--check` fails when README.md is out of date. nbdev's own README step needs quarto, which runs only in CI on GitHub."""
import json, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
nb = json.loads((root / "nbs" / "index.ipynb").read_text())
def _outputs(c) -> str:
    "A code cell's printed text and plain results, as kept in the notebook (`make outputs`)."
    out = []
    for o in c.get("outputs", []):
        t = o.get("text", "") if o.get("output_type") == "stream" and o.get("name") == "stdout" else o.get("data", {}).get("text/plain", "")
        out.append("".join(t) if isinstance(t, list) else t)
    return "\n".join(x.rstrip("\n") for x in out if x.strip())

parts = []
for c in nb["cells"]:
    src = "".join(c["source"]).strip()
    if not src or src.startswith("#| hide"): continue
    parts.append(src if c["cell_type"] == "markdown" else f"```python\n{src}\n```")
    if c["cell_type"] == "code" and (out := _outputs(c)): parts.append(f"```text\n{out}\n```")
text = "<!-- generated from nbs/index.ipynb by tools/readme.py; edit the notebook -->\n\n" + "\n\n".join(parts) + "\n"
readme = root / "README.md"
if "--check" in sys.argv:
    if not readme.exists() or readme.read_text() != text:
        print("README.md is out of date with nbs/index.ipynb: run `python tools/readme.py`"); sys.exit(1)
    print("README.md matches nbs/index.ipynb")
else:
    readme.write_text(text)

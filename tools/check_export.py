"""Fail when `nbdev-export` would change the committed `madlab/` package (the notebooks are the source)."""
import hashlib, subprocess, sys
from pathlib import Path

def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}

root = Path(__file__).resolve().parent.parent
before = snapshot(root / "madlab")
subprocess.run([str(Path(sys.executable).parent / "nbdev-export")], cwd=root, check=True)
after = snapshot(root / "madlab")
changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
if changed:
    print("nbdev-export changed these files; edit the notebooks, export, and commit both:", *changed, sep="\n  ")
    sys.exit(1)
print(f"export check: {len(after)} modules match their notebooks")

"""The public data (GSM8K, MMLU, XSTest, ControlMAD's games) is found through one setting, `madlab.core.public_data`:
no test, bench or notebook reads it by a machine's absolute path or by its own guess of where the checkout sits, and
the setting reaches a fresh process."""
from __future__ import annotations
import json, os, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# this machine's path to the folder above the checkout (whatever it is here), or a path to ../shared/data built by hand
# (`"shared" / "data"`, `.../shared/data/x`)
_OWN_PATH = re.compile(re.escape(f"{ROOT.parent}/") + r"""|["']shared["']\s*/\s*["']data["']|shared/data/""")

def _code_lines():
    for f in sorted([*(ROOT / "tests").glob("*.py"), *(ROOT / "bench").glob("*.py")]):
        if f.name == Path(__file__).name: continue
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1): yield f"{f.relative_to(ROOT)}:{i}", line
    for f in sorted((ROOT / "nbs").rglob("*.ipynb")):
        if f.name == "00_core.ipynb": continue                # where `public_data` itself is defined
        for k, c in enumerate(json.loads(f.read_text(encoding="utf-8"))["cells"]):
            if c["cell_type"] != "code": continue
            for i, line in enumerate("".join(c["source"]).splitlines(), 1): yield f"{f.relative_to(ROOT)} cell {k} line {i}", line

def test_nothing_reads_public_data_by_its_own_path():
    bad = [f"{where}: {line.strip()}" for where, line in _code_lines() if _OWN_PATH.search(line)]
    assert not bad, "read the public data with madlab.core.public_data (MADLAB_DATA), not by path:\n" + "\n".join(bad)

def _where(env: dict, cwd: Path) -> str:
    code = "from madlab.core import public_data, _public_data_dir; print(_public_data_dir(), public_data('gsm8k', 'test.jsonl'))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()

def test_madlab_data_reaches_a_fresh_process_from_any_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MADLAB_DATA"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    (tmp_path / "data" / "gsm8k").mkdir(parents=True); (tmp_path / "data" / "gsm8k" / "test.jsonl").write_text("{}\n")
    # unset: beside the checkout, wherever the process runs
    assert _where(env, tmp_path) == f"{ROOT.parent / 'shared' / 'data'} " + (str(ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl")
                                                                             if (ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl").exists() else "None")
    # set (a relative path is taken from the working folder)
    assert _where({**env, "MADLAB_DATA": "data"}, tmp_path) == f"{tmp_path.resolve() / 'data'} {tmp_path.resolve() / 'data' / 'gsm8k' / 'test.jsonl'}"
    empty = tmp_path / "empty"; empty.mkdir()
    assert _where({**env, "MADLAB_DATA": str(empty)}, ROOT) == f"{empty.resolve()} None"

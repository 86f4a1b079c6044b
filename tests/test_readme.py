"""Every code block of README.md runs as written: its ```python and ```sh blocks, in the README's order, in a fresh folder, as a new
user would (madlab installed, `$MADLAB_DATA` set, an empty response cache; the sweep's notebook copied from the checkout). A block
that cannot run here (an API key, the network, the user's own files, `make` in the checkout) says so in its first line,
`# not run by tests/test_readme.py: REASON`, which the README shows. The README is generated from nbs/index.ipynb."""
from __future__ import annotations
import json, os, re, shutil, subprocess, sys
from pathlib import Path
import pandas as pd
import pytest
from conftest import public_data_or_skip

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOT_RUN = "# not run by tests/test_readme.py:"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)

def readme_blocks(text: str) -> list[dict]:
    "Every fenced block of `text`: its language, code, the line it starts on, and why it is not run (None: it runs)."
    out = []
    for m in _FENCE.finditer(text):
        code = m.group(2)
        first = code.split("\n", 1)[0].strip()
        why = first[len(NOT_RUN):].strip() if first.startswith(NOT_RUN) else None
        out.append({"lang": m.group(1), "code": code, "line": text.count("\n", 0, m.start()) + 1, "not_run": why})
    return out

def _runnable(blocks): return [b for b in blocks if b["lang"] in ("python", "sh") and b["not_run"] is None]

def test_the_block_reader_sees_languages_lines_and_reasons():
    text = "# t\n\n```python\nx = 1\n```\n\nsay\n\n```sh\n# not run by tests/test_readme.py: needs OPENAI_API_KEY\nmadlab run du\n```\n\n```text\n1\n```\n"
    bs = readme_blocks(text)
    assert [(b["lang"], b["line"], b["not_run"]) for b in bs] == [("python", 3, None), ("sh", 9, "needs OPENAI_API_KEY"), ("text", 14, None)]
    assert [b["code"] for b in _runnable(bs)] == ["x = 1\n"]

def test_every_block_runs_or_says_why_not():
    "No placeholder stands in for a name in a block that runs; every block left out gives a reason; code blocks are python or sh."
    blocks = readme_blocks(README.read_text())
    assert len(_runnable(blocks)) >= 12
    for b in blocks:
        assert b["lang"] in ("python", "sh", "text", "json"), b
        if b["not_run"] is not None: assert len(b["not_run"]) > 10 and b["lang"] in ("python", "sh"), b
    for b in _runnable(blocks):
        assert not re.search(r"<[a-z][a-z ]*>|\.\.\.\s*$|results/<|_\.\.\.", b["code"], re.M), f"README.md:{b['line']}: a placeholder in a block that runs:\n{b['code']}"
        assert "../shared/data" not in b["code"], f"README.md:{b['line']}: the public data is $MADLAB_DATA, not a path of this lab"
    keyed = [b for b in blocks if re.search(r"\b(openai|gemini|qwen|vllm|ollama):|^\s*pip install|^\s*madlab models get", b["code"], re.M)]
    assert keyed and all(b["not_run"] for b in keyed), [b["line"] for b in keyed if not b["not_run"]]

@pytest.mark.parametrize("block", [b for b in readme_blocks(README.read_text()) if b["not_run"]], ids=lambda b: f"README.md:{b['line']}")
def test_blocks_left_out_are_skipped_with_their_reason(block):
    "Each block the README marks is reported as skipped, with the reason its first line gives."
    pytest.skip(f"README.md:{block['line']} ({block['lang']}): {block['not_run']}")

_DRIVER = r'''
import json, subprocess, sys, traceback
blocks = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
for i, b in enumerate(blocks):
    print(f"\n=== README.md:{b['line']} ({b['lang']})", flush=True)
    if b["lang"] == "python":
        try: exec(compile(b["code"], f"README.md:{b['line']}", "exec"), ns)
        except BaseException:
            traceback.print_exc(); print(f"FAILED: the python block at README.md:{b['line']}", flush=True); sys.exit(1)
    else:
        r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", b["code"]], stdout=sys.stdout, stderr=subprocess.STDOUT)
        if r.returncode:
            print(f"FAILED (exit {r.returncode}): the sh block at README.md:{b['line']}", flush=True); sys.exit(1)
    sys.stdout.flush()
print("\n=== every block ran", flush=True)
'''

@pytest.mark.public_data
def test_every_readme_block_runs_as_written_in_a_fresh_folder(tmp_path):
    data = public_data_or_skip("GSM8K's test set and XSTest's prompts (the README's commands read $MADLAB_DATA)", "gsm8k", "test.jsonl")
    public_data_or_skip("XSTest's prompts", "xstest", "xstest_prompts.csv")
    work = tmp_path / "work"; work.mkdir()
    blocks = _runnable(readme_blocks(README.read_text()))
    for nb in sorted(set(re.findall(r"\bnbs/experiments/\w+\.ipynb", "".join(b["code"] for b in blocks)))):   # what a block names in the checkout
        (work / nb).parent.mkdir(parents=True, exist_ok=True); shutil.copy(ROOT / nb, work / nb)
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "driver.py").write_text(_DRIVER)
    env = {**os.environ, "MADLAB_DATA": str(data.parent.parent), "MADLAB_CACHE": str(tmp_path / "cache"), "NO_COLOR": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]), "MPLBACKEND": "Agg"}
    p = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "blocks.json")], cwd=work, env=env,
                       capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "=== every block ran" in p.stdout, out[-8000:]
    assert "Traceback" not in p.stdout, out[-8000:]
    # what the blocks say they make is there
    res = work / "results"
    assert len(list((res / "baselines").glob("*/config.json"))) == 4      # a mixed team: one baseline per model and the pooled one
    blame = pd.read_parquet(next((res / "gsm8k").glob("*/blame/blame.parquet")))
    assert set(blame.intervention) == {"gold", "neutral", "placebo"}
    assert next((res / "gsm8k").glob("*/exports/chat-consistent.jsonl")).stat().st_size > 0
    assert list((res / "nwr").glob("**/config.json")) and (work / "runs" / "summary.parquet").exists()
    # the sweep prints one compact line per combination, not every item's 40 columns
    sweep = _block_output(p.stdout, "madlab sweep")
    table = [l for l in sweep.splitlines() if re.match(r"\s*\d+\s+\d+\s+done\b", l)]
    head = next(l for l in sweep.splitlines() if l.split()[:3] == ["depth", "seed", "status"])
    assert len(table) == 4 and head.split() == ["depth", "seed", "status", "items", "accuracy", "calls", "tokens"], sweep[-3000:]

def _block_output(stdout: str, marker: str) -> str:
    "What the block whose code holds `marker` printed (the driver heads each block's output with its README line)."
    lines = {b["line"]: b for b in readme_blocks(README.read_text())}
    parts = re.split(r"\n=== README\.md:(\d+) \(\w+\)\n", stdout)
    for line, text in zip(parts[1::2], parts[2::2]):
        if marker in lines[int(line)]["code"]: return text
    raise AssertionError(f"no block with {marker!r} ran")

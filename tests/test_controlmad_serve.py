"""`madlab run controlmad --agents openai:MODEL,...` against a real `transformers serve` on 127.0.0.1 serving a tiny random
Llama: the run completes, every reply is invalid, every game is scored wrong, the HTML and JSON are written and tokens are counted.
The server fixture is the one of test_openai_serve.py (a module-scoped `transformers serve` of the tiny model)."""
import json
from pathlib import Path
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.cli import main

pytestmark = pytest.mark.slow

def test_controlmad_against_transformers_serve(served, tmp_path, monkeypatch):
    url, model = served
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    spec = f"openai:{model}"
    r = CliRunner().invoke(main, ["run", "controlmad", "--size", "4", "--games", "1-2", "--agents", f"{spec},{spec}", "--depth", "1",
                                  "--max-tokens", "12", "--temperature", "0", "--concurrency", "2", "--out", str(tmp_path / "out"), "--no-progress"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    run_dir = Path(r.output.strip().splitlines()[-1].removeprefix("outputs: "))
    res = pd.read_parquet(run_dir / "results.parquet")
    assert list(res.status) == ["done", "done"] and list(res.item_id) == ["kks-4-0001", "kks-4-0002"]
    assert not res.correct.any() and (res.n_correct == 0).all()          # nothing is filled in with a guess
    pos = pd.read_parquet(run_dir / "positions.parquet")
    assert len(pos) and not pos.valid.any() and not pos.correct.any()
    use = pd.read_parquet(run_dir / "usage.parquet")
    assert use.calls.sum() > 0 and use.prompt_tokens.sum() > 0 and use.completion_tokens.sum() > 0
    assert use.agent.nunique() == 3 and all(a.startswith(("OpenAI-", "Supervisor")) for a in use.agent)
    for g in sorted((run_dir / "debates").iterdir()):
        t = json.loads((g / "transcript.json").read_text())
        turns = [tu for rd in t["rounds"] for tu in rd["turns"]]
        assert turns and all(tu["error"] is None for tu in turns), [tu["error"] for tu in turns]
        assert all(tu["answer"] is None or not any((tu["answer"].get("roles") or {}).values()) for tu in turns)
        assert all(0 < tu["usage"]["completion_tokens"] <= 12 for tu in turns)
        assert "correct" not in t["result"] and set(t["result"]["assignment"].values()) == {None}   # the task scores, in the row
        assert res.set_index("item_id").loc[t["meta"]["id"], "correct"] == False
        page = (g / "log.html").read_text()
        assert "invalid" in page and "<script" not in page
        assert (g / "log.txt").exists() and len(list(g.glob("chat_*.json"))) == 3    # two debaters and the supervisor
    assert "tokens" in r.output and "team decision: 0/2" in r.output

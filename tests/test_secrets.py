"""No secret reaches a transcript, a log, an output file or an HTML page, even when a server echoes it or fails."""
import logging, os
from pathlib import Path
from madlab.backends import OpenAIBackend, get_backend
from madlab.agents import Agent
from madlab.run import run_many
from madlab.scoring import toy_arith_items

SECRET = "sk-madlab-test-SECRET-0123456789"

def _texts(folder: Path):
    for p in folder.rglob("*"):
        if p.is_file(): yield p, p.read_bytes().decode("utf-8", "replace")

def test_api_key_never_written(fake_server, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    srv = fake_server(reply="The answer is 7.", schedule=["401", "ok", "500", "ok"])
    monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
    team = [Agent("A", "openai:fake-model", backend=get_backend("openai:fake-model", max_retries=1, max_wait=0.01)),
            Agent("B", "openai:fake-model", backend=get_backend("openai:fake-model", max_retries=1, max_wait=0.01))]
    assert team[0].backend._api_key == SECRET          # the key is used ...
    res = run_many("du", toy_arith_items(3), team, rounds=1, cache=str(tmp_path / "cache"), out=tmp_path / "out", progress=False)
    assert len(res.df) == 3
    # ... but is nowhere in what madlab writes or logs
    for t in res.transcripts.values():
        assert SECRET not in t.to_json() and SECRET not in t.to_html()
    for p, text in _texts(tmp_path / "out"): assert SECRET not in text, p
    assert SECRET not in repr(team[0].backend) and SECRET not in str(team[0].info())
    assert SECRET not in caplog.text
    assert SECRET not in res.df.to_csv()

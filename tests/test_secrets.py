"""No secret reaches a transcript, a log, an output file or an HTML page, even when a server echoes it or fails."""
import logging, os
from pathlib import Path
from madlab.backends import OpenAIBackend, get_backend
from madlab.agents import Agent
from madlab.run import run_many
from madlab.tasks.arith import toy_arith_items

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

# --- a server that echoes the key: in its 400 error bodies and in its replies --------------------------------------------
import json, subprocess, sys
import pandas as pd
from fake_openai_server import FakeOpenAIServer
from madlab.run import run_experiment

ECHOED = "sk-echoed-by-the-server-9876543210abcdef"

class EchoKeyServer(FakeOpenAIServer):
    "Puts the bearer token it receives into its 400 error bodies (early and past the 300 characters an error text keeps) and its replies."
    def __init__(self, **kw):
        super().__init__(reply=self._echo_reply, route=lambda req: "400" if "18 + 34" in json.dumps(req) else None, **kw)
    def _auth(self): return (self.auth_headers[-1] or "") if self.auth_headers else ""
    def _echo_reply(self, req):
        auth = self._auth()
        return f"My key is {auth.split(' ', 1)[-1]} and I sent '{auth}'. The answer is 7."
    def _error(self, code, msg, typ, headers=()):
        if code == 400:
            auth = self._auth()
            msg = f"Incorrect API key provided: {auth.split(' ', 1)[-1]}. " + "x" * 230 + f" (you sent 'Authorization: {auth}')"
        return FakeOpenAIServer._error(code, msg, typ, headers)

def _assert_nowhere(secret, folder: Path, *texts):
    probes = (secret, secret[:14], secret[-14:])               # neither the key nor a cut piece of it
    for p, text in _texts(folder):
        for probe in probes: assert probe not in text, (p, probe)
    for p in folder.rglob("*.parquet"):
        for probe in probes: assert probe not in pd.read_parquet(p).to_csv(), (p, probe)
    for text in texts:
        for probe in probes: assert probe not in text, probe

def test_key_echoed_in_error_bodies_and_replies_reaches_no_output_file(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    with EchoKeyServer() as srv:
        team = [Agent(n, "openai:fake-model", backend=OpenAIBackend("fake-model", base_url=srv.url, api_key=ECHOED, max_retries=0)) for n in ("A", "B")]
        res = run_experiment("du", toy_arith_items(3), team, tmp_path / "out", rounds=1, cache=str(tmp_path / "cache"), progress=False)
        assert any(ECHOED in (a or "") for a in srv.auth_headers)           # the key was really sent ...
    rows = res.df.set_index("item_id")
    assert rows.loc["arith-0-001", "status"] == "failed" and "Incorrect API key provided: [REDACTED]" in rows.loc["arith-0-001", "error"]
    assert (rows.drop("arith-0-001").status == "done").all()
    replies = [tu.reply for t in res.transcripts.values() for r in t.rounds for tu in r.turns if tu.reply]
    assert replies and all("My key is [REDACTED] and I sent 'Bearer [REDACTED]'" in r for r in replies)
    files = {p.name for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert {"transcript.json", "log.html", "log.txt", "results.csv", "results.parquet", "summary.txt", "config.json"} <= files
    # ... and is in no file of the run folder or the cache, no transcript, log record or results table
    _assert_nowhere(ECHOED, tmp_path / "out", caplog.text, res.df.to_csv(),
                    *(t.to_json() for t in res.transcripts.values()), *(p.read_bytes().decode("latin-1") for p in (tmp_path / "cache").rglob("*") if p.is_file()))

def test_madlab_run_never_writes_an_echoed_key(tmp_path):
    "The command line, with the key in the environment: the run folder and the cache hold it nowhere."
    with EchoKeyServer() as srv:
        env = {**os.environ, "OPENAI_API_KEY": ECHOED, "OPENAI_BASE_URL": srv.url, "MADLAB_CACHE": str(tmp_path / "cache")}
        p = subprocess.run([str(Path(sys.executable).parent / "madlab"), "run", "du", "--task", "arith", "--n", "3", "--rounds", "1",
                            "--agents", "openai:fake-model;openai:fake-model", "--out", str(tmp_path / "out"), "--no-progress"],
                           env=env, capture_output=True, text=True, timeout=300)
        assert sum(ECHOED in (a or "") for a in srv.auth_headers) >= 3
    assert p.returncode == 1, p.stdout + p.stderr                           # one debate failed on the 400
    assert "[REDACTED]" in p.stdout + p.stderr or any("[REDACTED]" in t for _, t in _texts(tmp_path / "out"))
    assert len(list((tmp_path / "out").rglob("transcript.json"))) == 3
    _assert_nowhere(ECHOED, tmp_path / "out", p.stdout, p.stderr,
                    *(q.read_bytes().decode("latin-1") for q in (tmp_path / "cache").rglob("*") if q.is_file()))

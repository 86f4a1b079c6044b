"""Whether a server gives token log-probabilities is noted beside the response cache (`madlab.backends.server_notes`),
as whether it takes `response_format` is: a later run whose decision rule needs them is refused before any call on a
server noted as giving none; one noted as giving them is trusted, and one that stops is found out by the failing call.
Each run below is its own process, as a later run is."""
import datetime, json, os, subprocess, sys
import pytest
from madlab.core import run_sync
from madlab.backends import OpenAIBackend

NUMBER = '{"reasoning": "6 times 7 is 42.", "answer": 42}'
Q = [{"role": "user", "content": "What is 6 * 7?"}]

def _run(srv, tmp_path, name, notes="on", cache=False):
    "`madlab run du --decision confidence:logprob` with one `openai:` agent at `srv`, in a process of its own."
    env = {**os.environ, "MADLAB_CACHE": str(tmp_path / "cache"), "MADLAB_SERVER_NOTES": notes}
    p = subprocess.run([sys.executable, "-m", "madlab.cli", "run", "du", "--task", "arith", "--n", "2", "--rounds", "0",
                        "--agents", f"openai:m,base_url={srv.url}", "--decision", "confidence:logprob", "--no-progress",
                        *([] if cache else ["--no-cache"]), "--out", str(tmp_path / name)],
                       env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr

def _notes_file(tmp_path): return tmp_path / "cache" / "servers.json"
def _note(tmp_path, srv) -> dict: return json.loads(_notes_file(tmp_path).read_text())[srv.url]

def test_a_later_run_needing_logprobs_from_a_server_noted_giving_none_is_refused_before_any_call(fake_server, tmp_path):
    srv = fake_server(reply=NUMBER, logprobs=False)
    rc, out = _run(srv, tmp_path, "first")
    assert srv.hits == 2 and "gave no token log-probabilities" in out, out     # found out by the calls, as before
    today = datetime.date.today().isoformat()
    assert _note(tmp_path, srv)["logprobs"] == {"m": {"given": False, "date": today}}
    assert _note(tmp_path, srv)["response_format"] == "accepted"                        # one entry holds both facts
    rc, out = _run(srv, tmp_path, "second", cache=True)                                 # through the response cache too
    assert rc == 2 and srv.hits == 2 and not (tmp_path / "second").exists(), out
    assert "Traceback" not in out and "--decision" in out, out
    for said in ("OpenAI-m", srv.url, today, "MADLAB_SERVER_NOTES=off", str(_notes_file(tmp_path))):
        assert said in out, (said, out)
    rc, out = _run(srv, tmp_path, "third", notes="off")                                 # how to ask again now
    assert srv.hits == 4 and "gave no token log-probabilities" in out, out

def test_a_server_that_refuses_logprobs_outright_is_noted_and_a_later_run_refused_first(fake_server, tmp_path):
    "A 400 that names logprobs (OpenAI's reasoning models) is noted as none given, as a reply without them is."
    srv = fake_server(reply=NUMBER, route=lambda req: "refuse_logprobs" if req.get("logprobs") else None)
    rc, out = _run(srv, tmp_path, "first")
    assert srv.hits == 2 and "not supported with this model" in out, out             # each call refused, recorded
    assert _note(tmp_path, srv)["logprobs"]["m"]["given"] is False
    rc, out = _run(srv, tmp_path, "second")
    assert rc == 2 and srv.hits == 2 and srv.url in out and "Traceback" not in out, out

def test_a_noted_refusal_of_logprobs_is_asked_again_after_the_days(fake_server, tmp_path):
    from madlab.backends.server_notes import REFUSAL_DAYS
    srv = fake_server(reply=NUMBER, logprobs=False)
    _run(srv, tmp_path, "first")
    notes = json.loads(_notes_file(tmp_path).read_text())
    old = (datetime.date.today() - datetime.timedelta(days=REFUSAL_DAYS)).isoformat()
    notes[srv.url]["logprobs"]["m"]["date"] = old
    _notes_file(tmp_path).write_text(json.dumps(notes))
    srv.logprobs = True                                                                 # it gives them now
    rc, out = _run(srv, tmp_path, "second")
    assert rc == 0 and srv.hits == 4, out
    assert _note(tmp_path, srv)["logprobs"]["m"]["given"] is True

def test_a_server_noted_giving_logprobs_is_trusted_until_a_reply_comes_without_them(fake_server, tmp_path):
    srv = fake_server(reply=NUMBER)
    rc, out = _run(srv, tmp_path, "first")
    assert rc == 0 and _note(tmp_path, srv)["logprobs"]["m"]["given"] is True, out
    before = _notes_file(tmp_path).stat().st_mtime_ns
    rc, out = _run(srv, tmp_path, "second")
    assert rc == 0 and srv.hits == 4, out
    assert _notes_file(tmp_path).stat().st_mtime_ns == before                           # nothing new to note
    srv.logprobs = False                                                                # the server stops giving them
    rc, out = _run(srv, tmp_path, "third")
    assert srv.hits == 6 and "gave no token log-probabilities" in out, out              # found out by the failing call
    assert _note(tmp_path, srv)["logprobs"]["m"]["given"] is False                      # and the note flips
    rc, out = _run(srv, tmp_path, "fourth")
    assert rc == 2 and srv.hits == 6 and srv.url in out, out

def test_a_note_on_one_model_says_nothing_of_another_at_the_same_url(fake_server, tmp_path, monkeypatch):
    srv = fake_server(reply=NUMBER, logprobs=lambda text: [(w, -0.5) for w in text.split()])
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MADLAB_SERVER_NOTES", "on")
    from madlab.backends.server_notes import note_logprobs
    note_logprobs(srv.url, "other", given=False)
    assert OpenAIBackend("other", base_url=srv.url).logprobs_refused
    b = OpenAIBackend("m", base_url=srv.url, timeout=10)
    assert b.logprobs_refused is None
    assert run_sync(b.complete(Q, logprobs=True)).meta["logprob"] == -0.5
    assert _note(tmp_path, srv)["logprobs"]["other"]["given"] is False

def test_an_unreadable_notes_file_is_no_note_and_an_unwritable_folder_loses_the_note_not_the_call(fake_server, tmp_path,
                                                                                                monkeypatch):
    srv = fake_server(reply=NUMBER, logprobs=False)
    monkeypatch.setenv("MADLAB_SERVER_NOTES", "on")
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    _notes_file(tmp_path).write_text("{not json")
    b = OpenAIBackend("m", base_url=srv.url, timeout=10, max_retries=0)
    assert b.logprobs_refused is None
    with pytest.raises(Exception, match="gave no token log-probabilities"): run_sync(b.complete(Q, logprobs=True))
    assert _note(tmp_path, srv)["logprobs"]["m"]["given"] is False                      # the next note replaces it
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "file" / "cache"))                # a folder that cannot be made
    srv.logprobs = True
    b = OpenAIBackend("m", base_url=srv.url, timeout=10, max_retries=0)
    assert b.logprobs_refused is None
    assert run_sync(b.complete(Q, logprobs=True)).meta["logprob"] < 0
    srv.logprobs = False
    with pytest.raises(Exception, match="gave no token log-probabilities"): run_sync(b.complete(Q, logprobs=True))

_NOTE_MANY = """
import sys
from madlab.backends.server_notes import note_logprobs, note_server
who, n = sys.argv[1], int(sys.argv[2])
for k in range(n):
    note_logprobs("http://127.0.0.1:8000/v1", f"{who}-{k}", given=k % 2 == 0)
    note_server(f"http://127.0.0.1:{9000 + k}/v1", **{who: "seen"})
"""

def test_runs_noting_at_once_keep_every_note(tmp_path):
    "Four processes noting at once (a lab's parallel runs share one cache folder): no note is lost to another's write."
    env = {**os.environ, "MADLAB_CACHE": str(tmp_path), "MADLAB_SERVER_NOTES": "on"}
    ps = [subprocess.Popen([sys.executable, "-c", _NOTE_MANY, f"p{i}", "15"], env=env) for i in range(4)]
    assert [p.wait(120) for p in ps] == [0] * 4
    notes = json.loads((tmp_path / "servers.json").read_text())
    models = notes["http://127.0.0.1:8000/v1"]["logprobs"]
    assert sorted(models) == sorted(f"p{i}-{k}" for i in range(4) for k in range(15))
    assert all(m["given"] == (int(name.split("-")[1]) % 2 == 0) for name, m in models.items())
    assert all({f"p{i}" for i in range(4)} <= set(notes[f"http://127.0.0.1:{9000 + k}/v1"]) for k in range(15))

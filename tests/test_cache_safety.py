"""The response cache stores data, never code: a planted pickle row is not executed, the call goes to the backend,
and corrupt, foreign, empty and failed entries are never served (a real OpenAI-compatible server on 127.0.0.1)."""
import logging, pickle, sqlite3
from pathlib import Path
import diskcache
from madlab.backends import Ask, BackendError, CachedBackend, OpenAIBackend
from madlab.core import run_sync

MSGS = [{"role": "user", "content": "What is 6 * 7?"}]
ASK = Ask(kind="number", agent="A")

class _Payload:
    "Unpickling this creates `path`: the proof that a pickle row would run code."
    def __init__(self, path): self.path = str(path)
    def __reduce__(self): return (open, (self.path, "w"))

def _backend(srv, folder) -> CachedBackend:
    return CachedBackend(OpenAIBackend("fake-model", base_url=srv.url, api_key="not-needed", max_retries=0, timeout=10), str(folder))

def _plant(folder, key, mode, value):
    "Overwrite the cache row of `key` the way anyone with write access to the folder could."
    with sqlite3.connect(Path(folder) / "cache.db") as db:
        n = db.execute("UPDATE Cache SET mode = ?, value = ?, filename = NULL WHERE key = ?", (mode, value, key)).rowcount
    assert n == 1

def test_planted_pickle_row_is_not_executed(fake_server, tmp_path, caplog):
    srv = fake_server(reply="The answer is 42.")
    folder, marker = tmp_path / "cache", tmp_path / "pwned"
    cb = _backend(srv, folder)
    first = run_sync(cb.complete(MSGS, ASK))
    assert run_sync(cb.complete(MSGS, ASK)).cached and srv.hits == 1
    key = cb.key(MSGS, ASK, {})
    _plant(folder, key, 4, pickle.dumps(_Payload(marker)))             # diskcache's MODE_PICKLE
    caplog.set_level(logging.WARNING, logger="madlab.cache")
    c = run_sync(_backend(srv, folder).complete(MSGS, ASK))            # a fresh process-like reader of the folder
    assert not marker.exists()                                         # the payload never ran
    assert srv.hits == 2 and not c.cached and c.text == first.text     # the call went to the backend
    assert "not a madlab completion" in caplog.text and "storage mode 4" in caplog.text
    assert run_sync(cb.complete(MSGS, ASK)).cached and srv.hits == 2   # the row was replaced by madlab's JSON
    # the control: the same row read by diskcache's default storage does run the payload
    _plant(folder, key, 4, pickle.dumps(_Payload(marker)))
    with diskcache.Cache(str(folder)) as plain: plain.get(key)
    assert marker.exists()

def test_file_rows_and_pickled_values_in_raw_mode_are_refused(fake_server, tmp_path):
    srv = fake_server(reply="The answer is 42.")
    folder, victim = tmp_path / "cache", tmp_path / "victim.txt"
    victim.write_text("keep me")
    cb = _backend(srv, folder)
    run_sync(cb.complete(MSGS, ASK))
    key = cb.key(MSGS, ASK, {})
    with sqlite3.connect(folder / "cache.db") as db:                   # a row pointing at a file outside the cache
        db.execute("UPDATE Cache SET mode = 3, value = NULL, filename = ? WHERE key = ?", (str(Path("..") / victim.name), key))
    assert not run_sync(cb.complete(MSGS, ASK)).cached and srv.hits == 2
    assert victim.read_text() == "keep me"                             # neither read as a reply nor deleted on eviction
    _plant(folder, key, 1, pickle.dumps(_Payload(tmp_path / "pwned")))  # bytes in raw mode: not text, refused
    assert not run_sync(cb.complete(MSGS, ASK)).cached and srv.hits == 3 and not (tmp_path / "pwned").exists()
    assert cb.evicted == 2

def test_corrupt_entries_are_evicted_not_fatal(fake_server, tmp_path):
    srv = fake_server(reply="The answer is 42.")
    cb = _backend(srv, tmp_path / "cache")
    run_sync(cb.complete(MSGS, ASK))
    key = cb.key(MSGS, ASK, {})
    for bad in ('{"__type__": "madlab.core.Completion", "text": ', '{"text": "not ours"}', '"a string"', "[" * 100_000):
        _plant(tmp_path / "cache", key, 1, bad)
        assert not run_sync(cb.complete(MSGS, ASK)).cached             # a miss, never an error that fails the debate
        assert run_sync(cb.complete(MSGS, ASK)).cached                 # and the fresh reply replaced it
    assert cb.evicted == 4 and srv.hits == 5

def test_empty_and_failed_replies_are_not_cached(fake_server, tmp_path):
    srv = fake_server(reply="", schedule=["ok", "ok", "400", "400"])
    cb = _backend(srv, tmp_path / "cache")
    assert [run_sync(cb.complete(MSGS, ASK)).cached for _ in range(2)] == [False, False]   # an empty reply is asked again
    for _ in range(2):
        try: run_sync(cb.complete(MSGS, ASK)); raise AssertionError("a 400 must fail")
        except BackendError: pass
    assert srv.hits == 4 and len(diskcache.Cache(str(tmp_path / "cache"))) == 0

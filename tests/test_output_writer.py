"""A run's per-debate files written by a second process (`madlab.output_writer`): the same bytes as a thread writes,
secrets scrubbed there too, and a transcript that does not pickle or a process that dies loses nothing."""
from __future__ import annotations
import copy, os, signal
from pathlib import Path
import pytest
from madlab.core import Transcript, Turn, Round, run_sync
from madlab.protocol import get_protocol
from madlab.redact import register_secret
from madlab.run_folder import RunFolder
from madlab.output_writer import OutputWriter

def _transcript(reply="It is 4.") -> Transcript:
    return Transcript("du", rounds=[Round("answer", "answer", 0, [Turn("a", [{"role": "user", "content": "2+2?"}],
                                                                         reply, "4")])],
                      result={"answer": "4"}, meta={"id": "x"})

def _files(d: Path) -> dict:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}

def _write(d: Path, process: bool, ts: dict, protocol="du") -> OutputWriter:
    w = OutputWriter(RunFolder(d), get_protocol(protocol), len(ts), process=process)
    mode = w.mode
    try:
        for iid, t in ts.items(): run_sync(w.write(iid, t))
        for fut, _ in list(w.sent.values()): fut.result(60)    # the process writes them all (`settle` takes none back)
        assert w.settle() == {} and w.here == 0
    finally: w.close()
    return mode

def test_the_process_writes_the_bytes_a_thread_writes(tmp_path):
    ts = {"x": _transcript(), "y": _transcript("<b>4</b> & more")}
    assert _write(tmp_path / "thread", False, ts) == "thread"
    assert _write(tmp_path / "process", True, ts) == "process"
    a, b = _files(tmp_path / "thread"), _files(tmp_path / "process")
    assert a == b and len(a) == 6

def test_a_controlmad_game_is_written_alike_with_its_own_log(tmp_path):
    "A protocol whose log hooks live in another module (ControlMAD's report) writes its own log.html in the process."
    from madlab.run import run_experiment
    res = run_experiment("controlmad", task="kks", n=1, out=tmp_path / "run", progress=False)
    ts = dict(res.transcripts)
    _write(tmp_path / "thread", False, ts, "controlmad"); _write(tmp_path / "process", True, ts, "controlmad")
    a, b = _files(tmp_path / "thread"), _files(tmp_path / "process")
    assert a == b and any(k.endswith("log.html") for k in a)
    assert b"Positions by round" in next(v for k, v in b.items() if k.endswith("log.html"))

def test_a_secret_of_this_process_is_scrubbed_in_the_writer(tmp_path):
    key = "sk-writer-test-" + "k3y" * 6
    register_secret(key)
    _write(tmp_path, True, {"x": _transcript(f"my key is {key}")})
    text = b"".join(_files(tmp_path).values())
    assert key.encode() not in text and b"my key is" in text

def test_a_transcript_that_does_not_pickle_is_written_in_a_thread(tmp_path):
    class Note(str): pass                   # a class local to this test: pickle cannot find it, JSON writes it as text
    odd = copy.deepcopy(_transcript()); odd.meta["note"] = Note("local")
    w = OutputWriter(RunFolder(tmp_path), get_protocol("du"), 2, process=True)
    try:
        run_sync(w.write("x", odd)); assert w.mode == "process"          # the process stays for the others
        run_sync(w.write("y", _transcript()))
        assert w.settle() == {} and list(w.sent) == []
    finally: w.close()
    assert sorted(p.name for p in (tmp_path / "debates").iterdir()) == ["x", "y"]
    assert (tmp_path / "debates" / "x" / "transcript.json").exists()

def test_a_writer_process_that_dies_leaves_the_rest_to_a_thread(tmp_path):
    w = OutputWriter(RunFolder(tmp_path), get_protocol("du"), 2, process=True)
    try:
        run_sync(w.write("x", _transcript())); assert w.settle() == {}
        os.kill(w.worker.proc.pid, signal.SIGKILL); w.worker.proc.wait()
        run_sync(w.write("y", _transcript()))       # refused at once, or lost with the process: written here either way
        assert w.settle() == {}
    finally: w.close()
    assert all((tmp_path / "debates" / i / "transcript.json").exists() for i in ("x", "y"))

def test_a_debate_the_process_cannot_write_is_reported_by_settle(tmp_path):
    (tmp_path / "debates").mkdir(); (tmp_path / "debates" / "x").write_text("a file where its folder goes")
    w = OutputWriter(RunFolder(tmp_path), get_protocol("du"), 2, process=True)
    try:
        for iid in ("x", "y"): run_sync(w.write(iid, _transcript()))
        failed = w.settle()
    finally: w.close()
    assert list(failed) == ["x"] and isinstance(failed["x"], OSError)
    assert (tmp_path / "debates" / "y" / "transcript.json").exists()

@pytest.mark.parametrize("process", [False, True])
def test_a_run_marks_an_item_whose_outputs_cannot_be_written_failed(tmp_path, monkeypatch, process):
    "In a thread or in the writer process, an item whose files cannot be written fails, and the run goes on."
    import madlab.output_writer as ow
    from madlab.run import run_experiment
    monkeypatch.setattr(ow, "PROCESS_FROM", 1 if process else 10**9)
    first = run_experiment("du", task="arith", n=3, out=tmp_path / "probe", progress=False)
    bad = sorted(first.transcripts)[1]
    out = tmp_path / "run"; (out / "debates").mkdir(parents=True)
    from madlab.run_folder import safe_name
    (out / "debates" / safe_name(bad)).write_text("a file where the item's folder goes")
    res = run_experiment("du", task="arith", n=3, out=out, progress=False)
    row = res.df.set_index("item_id").loc[bad]
    assert row.status == "failed" and str(row.error).startswith("writing outputs failed")
    assert (res.df.status == "done").sum() == 2
    import pandas as pd
    table = pd.read_parquet(out / "results.parquet").set_index("item_id")
    assert table.loc[bad].status == "failed"                # the table on disk says so too

def test_at_the_end_this_process_writes_beside_the_writer_process(tmp_path):
    """`settle` takes back the debates not yet sent to the writer process (newest first) and writes them here while the
    process writes the others: each debate is written once, with the bytes a thread writes."""
    ts = {f"i{k:02d}": _transcript(f"reply {k}") for k in range(40)}
    _write(tmp_path / "thread", False, ts)
    w = OutputWriter(RunFolder(tmp_path / "process"), get_protocol("du"), len(ts), process=True)
    try:
        assert w.mode == "process"
        for iid, t in ts.items(): run_sync(w.write(iid, t))
        assert w.settle() == {}
    finally: w.close()
    assert 0 < w.here < len(ts)            # the process starts with a few sent to it; this one took back the rest
    assert _files(tmp_path / "thread") == _files(tmp_path / "process")

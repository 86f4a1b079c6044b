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
    finally: w.close()
    assert sorted(p.name for p in (tmp_path / "debates").iterdir()) == ["x", "y"]
    assert (tmp_path / "debates" / "x" / "transcript.json").exists()

def test_a_writer_process_that_dies_leaves_the_rest_to_a_thread(tmp_path):
    w = OutputWriter(RunFolder(tmp_path), get_protocol("du"), 2, process=True)
    try:
        run_sync(w.write("x", _transcript()))
        for pid in list(w.pool._processes): os.kill(pid, signal.SIGKILL)
        run_sync(w.write("y", _transcript()))
        assert w.mode == "thread"
    finally: w.close()
    assert all((tmp_path / "debates" / i / "transcript.json").exists() for i in ("x", "y"))

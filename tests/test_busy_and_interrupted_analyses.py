"""Analyses of a run (blame, export, a baseline) against a run still being written, and Ctrl-C in the middle of one.

A run another process is writing is refused naming that process (exit 2, as `rescore` refuses it), or waited for;
never read as if the items finished so far were all of it. Ctrl-C (SIGINT) stops `madlab baseline` and `madlab blame`
at once: what finished is kept, the summary says to run the same command again, the exit status is 130, and the same
command again resumes without redoing finished work. Real `madlab` processes on slow synthetic agents (`latency=`);
the tests wait on conditions, never on fixed sleeps."""
from __future__ import annotations
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pandas as pd
import pytest
from click.testing import CliRunner

from madlab.cli import main
from madlab.core import OptionError
from madlab.run import run_experiment
from madlab.runs import open_run
from madlab.tasks.arith import toy_arith_items

MADLAB = str(Path(sys.executable).parent / "madlab")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))


def _env(tmp_path) -> dict:
    return {**os.environ, "MADLAB_CACHE": str(tmp_path / "cache"), "NO_COLOR": "1"}


def _wait(cond, what: str, timeout: float = 60, proc=None):
    "Wait for `cond()`; fail naming `what`, or the process that exited first."
    deadline = time.time() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {proc.returncode} first\n{proc.communicate()}")
        if time.time() > deadline: raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


def _done(folder: Path, pattern: str = "debates/*/transcript.json") -> list[Path]:
    return sorted(folder.glob(pattern))


def _stop(p):
    if p.poll() is None: p.kill()
    p.communicate(timeout=30)


# 1 ------------------------------------------------------------------------------------------------------------------
def test_blame_export_and_baseline_refuse_a_run_still_being_written_or_wait_for_it(tmp_path):
    """A real run writes 20 items slowly; once it holds its lock and some items are done, blame, export and baseline
    (the commands and the Python methods) refuse with exit 2 naming the writing process, and write nothing; with a
    lock_timeout they wait, then use all 20."""
    run = tmp_path / "O" / "r"
    cmd = [MADLAB, "run", "du", "--task", "arith", "--n", "20", "--rounds", "1",
           "--agents", "synthetic:strong,latency=0.5;synthetic:weak,latency=0.5", "--concurrency", "1",
           "--out", str(tmp_path / "O"), "--name", "r", "--no-cache", "--no-progress"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    try:
        _wait(lambda: (run / ".lock").exists() and len(_done(run)) >= 2, "its lock and two finished items", proc=p)
        for args in (["blame", str(run), "--items", "all", "--max-calls", "0"], ["export", str(run)],
                     ["baseline", str(run), "--method", "single"]):
            r = CliRunner().invoke(main, args)
            assert p.poll() is None, "the run finished before the check: the check means something only while it runs"
            assert r.exit_code == 2, (args, r.exit_code, r.output)
            assert f"is still being written by process {p.pid}: " in r.output and "madlab run du" in r.output, r.output
            assert "of 20 items finished so far" in r.output and "Traceback" not in r.output, (args, r.output)
        assert not (run / "blame").exists() and not (run / "exports").exists()
        assert sorted(p.name for p in (tmp_path / "O").iterdir()) == ["r"]            # no baseline folder
        early = open_run(run)                                    # opened half done: its table is partial
        assert len(early.df) < 20
        for call in (lambda: early.blame("all", "gold", max_calls=0), early.export, lambda: early.baseline("single")):
            with pytest.raises(OptionError, match=rf"still being written by process {p.pid}"): call()
        assert p.poll() is None, "the run finished before the Python checks"
        got = early.export(lock_timeout=300)                      # waits for the run, then reads all of it
        assert got.debates == 20, got
    finally: _stop(p)
    assert p.returncode == 0, p.returncode
    b = early.blame("all", "gold", max_calls=10_000, lock_timeout=60)
    assert b.df["item"].nunique() == 20                           # the whole run, not the items done when it was opened
    assert len(early.baseline("single", lock_timeout=60)[0].run.df) == 20


# 2 ------------------------------------------------------------------------------------------------------------------
def _debate(tmp_path, n: int, team: list[str]) -> Path:
    run_experiment("du", items=toy_arith_items(n, seed=3), team=team, out=tmp_path / "runs" / "debate", rounds=1,
                   cache=False, progress=False)
    return tmp_path / "runs" / "debate"


def test_ctrl_c_stops_a_baseline_at_once_and_the_same_command_resumes(tmp_path):
    """SIGINT while the first of two baselines runs: exit 130, the summary says to run the same command again, no
    second baseline starts and nothing is compared; the same command again resumes the first (its finished
    transcripts untouched), then runs the second."""
    debate = _debate(tmp_path, 12, ["synthetic:strong,latency=0.25", "synthetic:weak,latency=0.25"])
    cmd = [MADLAB, "baseline", str(debate), "--method", "single", "--concurrency", "1", "--no-cache"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    try:
        _wait(lambda: any(len(_done(f)) >= 2 for f in tmp_path.joinpath("runs").glob("debate-baseline-*")),
              "two finished items of a baseline", proc=p)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally: _stop(p)
    msg = f"exit {p.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"
    started = sorted(tmp_path.joinpath("runs").glob("debate-baseline-*"))
    assert p.returncode == 130, msg
    assert "run the same command again to resume" in out and "Traceback" not in err, msg
    assert "Aborted" not in out + err and "p_mcnemar" not in out and "pareto" not in out, msg      # nothing compared
    assert len(started) == 1 and "synthetic_strong" in started[0].name, (started, msg)    # the next one never started
    first = started[0]
    kept = _done(first)
    assert 2 <= len(kept) < 12, msg
    assert sorted(pd.read_parquet(first / "results.parquet").item_id) == sorted(f.parent.name for f in kept)
    mtimes = {f: f.stat().st_mtime_ns for f in kept}
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {f: f.stat().st_mtime_ns for f in kept} == mtimes, "finished items were run again"
    df = pd.read_parquet(first / "results.parquet")
    assert len(df) == 12 and int(df.resumed.sum()) == len(kept)
    assert int(df.calls[~df.resumed.astype(bool)].sum()) == 12 - len(kept)
    [second] = [f for f in tmp_path.joinpath("runs").glob("debate-baseline-*") if f != first]
    assert len(_done(second)) == 12 and "p_mcnemar" in r.stdout, r.stdout


def test_ctrl_c_stops_blame_at_once_and_the_same_command_resumes(tmp_path):
    """SIGINT mid-blame: exit 130 (not click's 'Aborted!' and 1), the summary says to run the same command again,
    blame.parquet holds the forks that finished; the same command again reads those (untouched), makes only the rest."""
    debate = _debate(tmp_path, 4, ["synthetic:strong,latency=0.2"] + ["synthetic:weak,latency=0.2"] * 2)
    cmd = [MADLAB, "blame", str(debate), "--items", "all", "--intervention", "gold", "--concurrency", "1",
           "--no-cache"]
    forks = lambda: _done(debate / "blame", "forks/*/*/transcript.json")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    try:
        _wait(lambda: len(forks()) >= 2, "two finished forks", proc=p)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally: _stop(p)
    msg = f"exit {p.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert p.returncode == 130, msg
    assert "run the same command again to resume" in out and "Aborted" not in out + err and "Traceback" not in err, msg
    kept = forks()
    total = 4 * 3 * 2                                                                      # items x agents x rounds
    assert 2 <= len(kept) < total, msg
    assert len(pd.read_parquet(debate / "blame" / "blame.parquet")) == len(kept), msg
    mtimes = {f: f.stat().st_mtime_ns for f in kept}
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {f: f.stat().st_mtime_ns for f in kept} == mtimes, "finished forks were made again"
    assert f"{total} forks of 4 items" in r.stdout, r.stdout
    assert f"{total - len(kept)} made now, {len(kept)} read from" in r.stdout, r.stdout
    assert json.loads((debate / "blame" / "blame.json").read_text()).get("interrupted") is None

"""Sweeps of papermill experiment notebooks: a 2 x 2 sweep, re-runs that skip finished work and make no backend calls,
a sweep killed midway and finished by a re-run, a failing combination, and the same sweep on a Dask `LocalCluster`."""
from __future__ import annotations
import os, signal, subprocess, sys, time
from pathlib import Path
import pandas as pd
import pytest
from madlab.experiments import sweep

ROOT = Path(__file__).resolve().parent.parent
EXP = ROOT / "nbs" / "experiments" / "debate_experiment.ipynb"
GRID = {"protocol": ["du", "self_consistency"], "depth": ["1", "2"], "n_items": ["3"]}

def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env

def _done(out: Path) -> list[str]: return sorted(p.parent.name for p in out.glob("*/_SUCCESS"))

def test_sweep_2x2_rerun_skips_and_cache_makes_zero_calls(tmp_path):
    out = tmp_path / "runs"
    df = sweep(EXP, GRID, out=out, workers=2, progress=False)
    assert set(df.combo_status) == {"done"} and df.combo.nunique() == 4 and len(df) == 4 * 3
    assert {"protocol", "depth", "n_items", "correct", "calls"} <= set(df.columns)
    assert sorted(df.depth.unique()) == [1, 2]                      # cast from the CLI's strings
    assert df.calls.sum() > 0
    for name in df.combo.unique(): assert (out / name / "notebook.ipynb").exists() and (out / name / "results.parquet").exists()
    assert pd.read_parquet(out / "summary.parquet").shape == df.shape

    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/notebook.ipynb")}
    again = sweep(EXP, GRID, out=out, workers=2, progress=False)      # finished work is skipped
    assert set(again.combo_status) == {"skipped"}
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/notebook.ipynb")} == stamps
    assert len(again) == len(df)

    for m in out.glob("*/_SUCCESS"): m.unlink()                      # force every notebook to run again: all replies come from the cache
    for d in out.glob("*/debates"): __import__("shutil").rmtree(d)
    rerun = sweep(EXP, GRID, out=out, workers=2, progress=False)
    assert set(rerun.combo_status) == {"done"}
    assert rerun.calls.sum() == 0 and rerun.cached_calls.sum() > 0
    assert rerun.sort_values(["combo", "item_id"]).correct.tolist() == df.sort_values(["combo", "item_id"]).correct.tolist()

def test_killed_sweep_finishes_on_rerun(tmp_path):
    out = tmp_path / "runs"
    code = f"from madlab.experiments import sweep; sweep({str(EXP)!r}, {GRID!r}, out={str(out)!r}, workers=1, progress=False)"
    p = subprocess.Popen([sys.executable, "-c", code], env=_env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        t0 = time.time()
        while not _done(out) and time.time() - t0 < 120 and p.poll() is None: time.sleep(0.1)
        assert _done(out), f"no combination finished: {p.stderr.read().decode()[-2000:] if p.poll() is not None else 'timeout'}"
    finally:
        if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)       # the sweep, its workers and their kernels
        p.wait()
    first = _done(out)
    assert 1 <= len(first) < 4, first
    kept = {n: (out / n / "results.parquet").read_bytes() for n in first}
    df = sweep(EXP, GRID, out=out, workers=2, progress=False)
    st = df.groupby("combo").combo_status.first()
    assert set(st[first]) == {"skipped"} and set(st.drop(first)) == {"done"}
    assert len(df) == 4 * 3 and df.correct.notna().all()
    assert {n: (out / n / "results.parquet").read_bytes() for n in first} == kept   # nothing lost, nothing redone

def test_failing_combination_is_recorded(tmp_path):
    out = tmp_path / "runs"
    df = sweep(EXP, {"protocol": ["no_such_protocol", "du"], "n_items": [2]}, out=out, workers=2, progress=False)
    st = df.groupby("combo").combo_status.first().to_dict()
    assert st == {"protocol=du,n_items=2": "done", "protocol=no_such_protocol,n_items=2": "failed"}
    failed = out / "protocol=no_such_protocol,n_items=2"
    assert (failed / "notebook.ipynb").exists() and "unknown protocol" in (failed / "_FAILED").read_text()
    assert "unknown protocol" in df[df.combo_status == "failed"].combo_error.iloc[0]
    again = sweep(EXP, {"protocol": ["no_such_protocol", "du"], "n_items": [2]}, out=out, workers=2, progress=False)
    assert again.groupby("combo").combo_status.first().to_dict() == {"protocol=du,n_items=2": "skipped", "protocol=no_such_protocol,n_items=2": "failed"}

def test_sweep_on_dask_local_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            df = sweep(EXP, {"depth": ["1", "2"], "n_items": ["2"]}, out=tmp_path / "a", scheduler=client, progress=False)
            assert set(df.combo_status) == {"done"} and len(df) == 4
            pids = set(client.run(os.getpid).values())
            assert os.getpid() not in pids and len(pids) == 2
        df = sweep(EXP, {"protocol": ["single"], "n_items": ["2"]}, out=tmp_path / "b", scheduler=cluster.scheduler_address, progress=False)
        assert set(df.combo_status) == {"done"} and len(df) == 2

def test_cli_sweep(tmp_path):
    out = tmp_path / "runs"
    args = ["sweep", str(EXP), "-p", "depth", "1", "2", "-p", "n_items", "2", "--out", str(out)]
    code = "import sys; from madlab.cli import main; sys.argv[0] = 'madlab'; main()"
    r = subprocess.run([sys.executable, "-c", code, *args], env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    df = pd.read_parquet(out / "summary.parquet")
    assert set(df.combo_status) == {"done"} and sorted(df.depth.unique()) == [1, 2]
    r = subprocess.run([sys.executable, "-c", code, *args], env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and set(pd.read_parquet(out / "summary.parquet").combo_status) == {"skipped"}

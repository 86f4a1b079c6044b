"""Run folders in a bucket, against a real S3-compatible server on 127.0.0.1 (`moto_server`, started here, the way s3fs tests
itself): a run, its resume, a second writer refused, `kill -9` then resume, rescore, open_run and the browser's listing, a sweep
(in local processes, and on a Dask cluster of separate worker processes that share no disk and hold no madlab source beyond an
installed wheel), the missing extra and a secret in an error."""
from __future__ import annotations
import json, os, re, shutil, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
MADLAB = str(Path(sys.executable).parent / "madlab")
EXP = ROOT / "nbs" / "experiments" / "debate_experiment.ipynb"
SLOW_TEAM = "synthetic:medium,latency=0.3,seed=1,synthetic:weak,latency=0.3,seed=2"
SECRET = "moto-secret-key-for-madlab-tests"
BUCKET = "madlab-runs"

pytest.importorskip("s3fs")
pytest.importorskip("moto")


def _wait(cond, what: str, timeout: float = 60, proc=None):
    "Wait for `cond()` (a condition, never a fixed time); fail naming `what`, or the process that died meanwhile."
    deadline = time.time() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None: raise AssertionError(f"{what}: the process exited with {proc.returncode} first\n{proc.communicate()}")
        if time.time() > deadline: raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    "A moto S3 server on a free 127.0.0.1 port with the bucket `madlab-runs`; the environment points AWS clients at it. Yields the s3fs filesystem."
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    def up():
        try: urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1).close(); return True
        except OSError: return False
    try:
        _wait(up, "moto_server answering", 60, proc)
        import s3fs
        s3fs.S3FileSystem.clear_instance_cache()
        from madlab.store import _filesystem
        fs = _filesystem("s3")
        fs.mkdir(BUCKET)
        yield fs
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try: proc.wait(10)
        except subprocess.TimeoutExpired: os.killpg(proc.pid, signal.SIGKILL); proc.wait(10)
        log.close()
        for k, v in old.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v
        import s3fs
        s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    "Each test has its own response cache, on this machine."
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))


def _env(tmp_path) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "MADLAB_CACHE": str(tmp_path / "cache")}


def _keys(fs, prefix: str) -> list:
    fs.invalidate_cache()
    try: return sorted(p.split("/", 1)[1] for p in fs.find(f"{BUCKET}/{prefix}"))
    except FileNotFoundError: return []


def test_run_resume_rescore_open_run_in_a_bucket(s3, tmp_path):
    from madlab.run import run_experiment
    from madlab.rescore import rescore
    from madlab.runs import open_run, find_runs
    from madlab.tasks.arith import toy_arith_items
    import madlab.protocols  # noqa: F401
    url = f"s3://{BUCKET}/t1/run"
    items = toy_arith_items(4, seed=0)
    r1 = run_experiment("du", items, out=url)
    assert (r1.df.status == "done").all() and r1.out == url, r1.summary()
    keys = _keys(s3, "t1/run")
    for want in ("config.json", "results.parquet", "results.csv", "summary.txt", *(f"debates/{i.id}/{f}" for i in items for f in ("transcript.json", "log.html", "log.txt"))):
        assert f"t1/run/{want}" in keys, (want, keys)
    assert not any(k.endswith(".lock") for k in keys), "the lock object outlived the run"
    assert pd.read_parquet(s3.open(f"{BUCKET}/t1/run/results.parquet")).item_id.tolist() == [i.id for i in items]
    before = {k: s3.cat_file(f"{BUCKET}/{k}") for k in keys if k.endswith("transcript.json")}
    r2 = run_experiment("du", items, out=url)                          # resumed: nothing run again, no call made
    assert r2.df.resumed.all() and r2.made["calls"] == 0 and r2.cache == {"hits": 0, "misses": 0}, r2.summary()
    assert {k: s3.cat_file(f"{BUCKET}/{k}") for k in before} == before, "finished transcripts were rewritten"
    r3 = rescore(url)
    assert r3.df.correct.tolist() == r1.df.correct.tolist() and r3.made["calls"] == 0
    run = open_run(f"s3://{BUCKET}/t1")                                # the --out folder holding it
    assert run.name == "run" and str(run.path) == url and len(run.df) == 4
    assert run.transcript(0).meta["id"] == items[0].id and run.info()["accuracy"] == round(float(r1.df.correct.mean()), 3)
    found = find_runs(f"s3://{BUCKET}/t1")
    assert found.run.tolist() == ["run"] and found.path.tolist() == [url] and found.parent.tolist() == ["."]
    from madlab.runs import RunBrowser
    b = RunBrowser(f"s3://{BUCKET}/t1")                                # the run browser lists and opens it
    b.show_run(b.runs.path[0]); b.show_debate(b.w_items.options[0][1])
    assert b.run.name == "run" and type(b.viewer).__name__ == "DebateStepper"
    from madlab.cli import main
    res = CliRunner().invoke(main, ["rescore", f"s3://{BUCKET}/t1"])
    assert res.exit_code == 0 and f"outputs: {url}" in res.output, res.output


def test_the_command_line_runs_into_a_bucket_and_a_second_writer_is_refused(s3, tmp_path):
    from madlab.cli import main
    from madlab.store import StoreLock, store_path
    out = f"s3://{BUCKET}/t2"
    r = CliRunner().invoke(main, ["run", "du", "--task", "arith", "--n", "2", "--out", out, "--name", "r", "--no-progress"])
    assert r.exit_code == 0 and f"outputs: {out}/r" in r.output, r.output
    lk = StoreLock(store_path(f"{out}/r")).acquire()                     # a live holder (this process)
    try:
        r = CliRunner().invoke(main, ["run", "du", "--task", "arith", "--n", "3", "--out", out, "--name", "r", "--no-progress"])
        assert r.exit_code == 2 and "in use" in r.output and "--out" in r.output and "Traceback" not in r.output, r.output
        from madlab.core import OptionError
        from madlab.run import run_experiment
        from madlab.tasks.arith import toy_arith_items
        t0 = time.perf_counter()
        with pytest.raises(OptionError, match="in use"): run_experiment("du", toy_arith_items(3, seed=0), out=f"{out}/r", lock_timeout=0.5)
        assert time.perf_counter() - t0 >= 0.4, "the lock timeout was not waited for"
    finally: lk.release()
    assert len([k for k in _keys(s3, "t2/r/debates") if k.endswith("transcript.json")]) == 2, "the refused run wrote debates"


def test_kill_9_mid_run_then_resume_in_a_bucket(s3, tmp_path):
    "A run killed with SIGKILL leaves whole transcripts and its lock object; the same command takes the lock over (its process is gone) and finishes only what was left."
    out = f"s3://{BUCKET}/t3"
    cmd = [MADLAB, "run", "du", "--task", "arith", "--n", "16", "--agents", SLOW_TEAM, "--concurrency", "2", "--out", out, "--name", "r", "--no-cache", "--no-progress"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    done = lambda: [k for k in _keys(s3, "t3/r/debates") if k.endswith("transcript.json")]
    try:
        _wait(lambda: len(done()) >= 2, "two debates finished", 90, p)
        p.send_signal(signal.SIGKILL); p.communicate(timeout=30)
    finally:
        if p.poll() is None: p.kill(); p.wait()
    assert p.returncode == -signal.SIGKILL
    first = {k: s3.cat_file(f"{BUCKET}/{k}") for k in done()}
    assert 2 <= len(first) < 16
    for k, raw in first.items(): json.loads(raw)                        # every transcript in the bucket is whole
    lock = json.loads(s3.cat_file(f"{BUCKET}/t3/r/.lock"))
    assert lock["pid"] == p.pid and lock["host"] == socket.gethostname(), lock
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    df = pd.read_parquet(s3.open(f"{BUCKET}/t3/r/results.parquet"))
    assert len(df) == 16 and (df.status == "done").all(), df[["item_id", "status"]]
    resumed = set(df.item_id[df.resumed])
    assert {k.split("/")[-2] for k in first} <= resumed, "a debate finished before the kill was run again"
    assert {k: s3.cat_file(f"{BUCKET}/{k}") for k in first} == first, "finished transcripts were rewritten"
    assert not s3.exists(f"{BUCKET}/t3/r/.lock")


def test_a_sweep_writes_its_run_folders_and_summary_to_a_bucket(s3, tmp_path):
    from madlab.experiments import sweep
    out = f"s3://{BUCKET}/t4"
    df = sweep(EXP, {"protocol": ["du", "single"], "n_items": [2]}, out=out, workers=2, progress=False)
    assert (df.combo_status == "done").all() and len(df) == 4, df[["combo", "combo_status", "combo_error"]]
    keys = _keys(s3, "t4")
    for c in ("protocol=du,n_items=2", "protocol=single,n_items=2"):
        for f in ("_SUCCESS", "notebook.ipynb", "results.parquet", "config.json"): assert f"t4/{c}/{f}" in keys, (c, f, keys)
    assert "t4/summary.parquet" in keys and "t4/sweep.json" in keys
    assert not any("/.cache" in k for k in keys), "the response cache went to the bucket"
    again = sweep(EXP, {"protocol": ["du", "single"], "n_items": [2]}, out=out, workers=2, progress=False)
    assert (again.combo_status == "skipped").all() and again.correct.tolist() == df.correct.tolist()


def _wheel(tmp) -> Path:
    "madlab built as a wheel from this checkout and installed (no dependencies) into its own folder."
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "wheel"), str(ROOT)], check=True, timeout=600,
                   capture_output=True)
    whl = next((tmp / "wheel").glob("madlab-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp / "site"), str(whl)], check=True, timeout=600, capture_output=True)
    return tmp / "site"


def test_a_sweep_on_a_dask_cluster_that_shares_no_disk(s3, tmp_path):
    "A `dask scheduler` and two `dask worker` processes, each in its own empty folder, importing madlab only from an installed wheel: the notebook and a task file travel with the tasks, the run folders go to the bucket, the results come back through Dask."
    pytest.importorskip("distributed")
    from madlab.experiments import sweep
    site = _wheel(tmp_path)
    port, procs = free_port(), []
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MADLAB_DATA")}
    env.update(PYTHONPATH=str(site), MADLAB_CACHE="")
    dask = str(Path(sys.executable).parent / "dask")
    try:
        for i, args in enumerate([["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                                  ["worker", f"tcp://127.0.0.1:{port}", "--nworkers", "1", "--nthreads", "1", "--no-dashboard", "--name", "w1"],
                                  ["worker", f"tcp://127.0.0.1:{port}", "--nworkers", "1", "--nthreads", "1", "--no-dashboard", "--name", "w2"]]):
            cwd = tmp_path / f"node{i}"; cwd.mkdir()
            e = {**env, "MADLAB_CACHE": str(cwd / "cache"), "TMPDIR": str(cwd)}
            procs.append(subprocess.Popen([dask, *args], cwd=cwd, env=e, stdout=open(cwd / "log", "wb"), stderr=subprocess.STDOUT, start_new_session=True))
        from distributed import Client
        with Client(f"tcp://127.0.0.1:{port}", timeout=60) as client:
            _wait(lambda: len(client.scheduler_info()["workers"]) == 2, "two workers joined", 120)
            where = client.run(lambda: __import__("madlab").__file__)
            assert all(str(f).startswith(str(site)) for f in where.values()), where
            client_dir = tmp_path / "client"; client_dir.mkdir()
            notebook = client_dir / "exp.ipynb"; shutil.copy(EXP, notebook)
            (client_dir / "doubles.yaml").write_text("name: doubles\ndata: d.jsonl\nid: 'double-{{ n }}'\nprompt: 'What is {{ n }} + {{ n }}?'\ngold: '{{ n * 2 }}'\nanswer: number\n")
            (client_dir / "d.jsonl").write_text("".join(json.dumps({"n": n}) + "\n" for n in (3, 4, 5)))
            df = sweep(notebook, {"protocol": ["du", "single"], "task": ["doubles.yaml"], "data": ["d.jsonl"], "n_items": [2]}, out=f"s3://{BUCKET}/t5",
                       scheduler=client, progress=False)
        assert (df.combo_status == "done").all() and len(df) == 4, df[["combo", "combo_status", "combo_error"]]
        assert sorted(set(df.item_id)) == ["double-3", "double-4"] and df.gold.astype(str).isin(["6", "8"]).all(), df[["item_id", "gold"]]
        keys = _keys(s3, "t5")
        assert {f"t5/protocol={p},task=doubles.yaml,data=d.jsonl,n_items=2/results.parquet" for p in ("du", "single")} | {"t5/summary.parquet"} <= set(keys), keys
        assert not list((tmp_path / "client").glob("*/results.parquet")), "a worker wrote into the client's folder"
    finally:
        for p in reversed(procs):
            try: os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError: pass
        for p in reversed(procs):
            try: p.wait(20)
            except subprocess.TimeoutExpired: os.killpg(p.pid, signal.SIGKILL); p.wait(10)


def test_a_missing_s3fs_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['s3fs'] = None\nfrom madlab.cli import main\n"
            "main(['run', 'du', '--task', 'arith', '--n', '1', '--out', 's3://bucket/x', '--no-progress'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(tmp_path), timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pip install 'madlab[cloud]'" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_store_error_never_shows_the_secret(s3):
    from madlab.store import store_path
    p = store_path(f"s3://{BUCKET}/t6/x")
    def leak(): raise RuntimeError(f"signature mismatch for key {SECRET}")
    with pytest.raises(OSError) as e: p._do("reading", leak)
    assert SECRET not in str(e.value) and "[REDACTED]" in str(e.value) and f"s3://{BUCKET}/t6/x" in str(e.value)


def test_import_and_baseline_write_run_folders_in_a_bucket(s3, tmp_path):
    from madlab.cli import main
    from madlab.runs import open_run
    from test_imports import du_log
    (tmp_path / "du.json").write_text(json.dumps(du_log()))
    url = f"s3://{BUCKET}/t7/imported"
    r = CliRunner().invoke(main, ["import", "du", str(tmp_path / "du.json"), "--out", url])
    assert r.exit_code == 0, r.output
    imported = open_run(url)
    assert imported.config["imported"]["format"] == "du" and len(imported.df) == len(du_log()) and imported.df.calls.sum() == 0
    r = CliRunner().invoke(main, ["run", "du", "--task", "arith", "--n", "2", "--out", f"s3://{BUCKET}/t7", "--name", "debate", "--no-progress"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["baseline", f"s3://{BUCKET}/t7/debate", "--method", "single"])
    assert r.exit_code == 0 and f"outputs: s3://{BUCKET}/t7/debate-baseline-single" in r.output, r.output
    keys = _keys(s3, "t7")
    assert any(k.startswith("t7/debate-baseline-single") and k.endswith("results.parquet") for k in keys), keys


def test_blame_reads_a_run_in_a_bucket_and_writes_its_forks_there(s3, tmp_path):
    "madlab blame on a run folder at a URL: blame.parquet and every fork land in the bucket, a second blame makes no call, and a fork opens from there."
    from madlab.cli import main
    from madlab.blame import run_blame
    url = f"s3://{BUCKET}/t9/debate"
    r = CliRunner().invoke(main, ["run", "du", "--task", "arith", "--n", "2", "--rounds", "1", "--out", f"s3://{BUCKET}/t9", "--name", "debate", "--no-progress"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["blame", url, "--items", "all", "--intervention", "gold"])
    assert r.exit_code == 0 and f"outputs: {url}/blame/blame.parquet" in r.output, r.output
    keys = _keys(s3, "t9/debate/blame")
    forks = [k for k in keys if k.endswith("transcript.json")]
    assert "t9/debate/blame/blame.parquet" in keys and len(forks) == 2 * 3 * 2, keys     # 2 items x 3 agents x 2 rounds
    again = run_blame(url, "all", "gold")
    assert again.calls == 0 and not again.df.made.any() and len(again.df) == len(forks)
    row = again.df.iloc[0]
    assert again.open(row["item"], row["agent"], int(row["round"])).branch.src.meta["forked_from"]["edit"]["intervention"] == "gold"


def test_a_lock_taken_from_under_a_run_stops_its_writes(s3, tmp_path):
    "Another owner overwrites a running command's lock object (as a stale takeover does): the run notices at its next heartbeat, stops its debates and writes nothing more (no results table, no summary, config.json as it was), exits 2 naming the new owner; the transcripts it wrote stay as they were, and once that owner is gone a resume finishes only the rest."
    out, n = f"s3://{BUCKET}/t8", 24
    cmd = [MADLAB, "run", "du", "--task", "arith", "--n", str(n), "--agents", SLOW_TEAM, "--concurrency", "2", "--out", out, "--name", "r", "--no-cache", "--no-progress"]
    # the first run beats every 0.5 s (`madlab.store.LOCK_STALE` 3 s), so it finds the takeover long before its 24 debates are done
    fast = [sys.executable, "-c", "import sys, madlab.store; madlab.store.LOCK_STALE = 3.0; from madlab.cli import main; sys.argv[0] = 'madlab'; main()", *cmd[1:]]
    p = subprocess.Popen(fast, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    done = lambda: [k for k in _keys(s3, "t8/r/debates") if k.endswith("transcript.json")]
    lock = f"{BUCKET}/t8/r/.lock"
    theirs = {"host": "other-host", "pid": 4242, "token": "theirs", "since": 1e9, "heartbeat": time.time()}
    try:
        _wait(lambda: len(done()) >= 2, "two debates finished", 90, p)
        config = s3.cat_file(f"{BUCKET}/t8/r/config.json")
        assert json.loads(s3.cat_file(lock))["pid"] == p.pid
        s3.pipe_file(lock, json.dumps(theirs).encode())                 # the takeover
        first = {k: s3.cat_file(f"{BUCKET}/{k}") for k in done()}
        _, err = p.communicate(timeout=120)                             # it stops at its next heartbeat (LOCK_STALE / 6: 0.5 s)
    finally:
        if p.poll() is None: p.kill(); p.wait()
    assert p.returncode == 2, err
    assert f"the lock of {out}/r was taken by other-host pid 4242 at 2001-09-09 01:46:40 UTC; this run stopped writing; finished items are kept" in err, err
    assert "Traceback" not in err, err
    keys = _keys(s3, "t8/r")
    assert "t8/r/results.parquet" not in keys and "t8/r/summary.txt" not in keys, keys
    assert s3.cat_file(f"{BUCKET}/t8/r/config.json") == config, "config.json was rewritten after the lock was lost"
    assert json.loads(s3.cat_file(lock))["token"] == "theirs", "the run deleted or rewrote the new owner's lock"
    kept = done()
    assert 2 <= len(kept) < n and set(first) <= set(kept), (len(kept), len(first))
    assert {k: s3.cat_file(f"{BUCKET}/{k}") for k in first} == first, "a finished transcript was rewritten"
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path), timeout=300)      # the new owner's heartbeat is fresh: refused
    assert r.returncode == 2 and "in use by process 4242 on other-host" in r.stderr, r.stderr
    s3.rm_file(lock)                                                    # the other owner is done
    r = subprocess.run([("16" if a == "2" and cmd[i - 1] == "--concurrency" else a) for i, a in enumerate(cmd)], capture_output=True, text=True, env=_env(tmp_path), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    df = pd.read_parquet(s3.open(f"{BUCKET}/t8/r/results.parquet"))
    assert len(df) == n and (df.status == "done").all(), df[["item_id", "status"]]
    assert {k.split("/")[-2] for k in kept} <= set(df.item_id[df.resumed]), "a debate finished before the loss was run again"
    assert {k: s3.cat_file(f"{BUCKET}/{k}") for k in first} == first


def test_a_lost_lock_stops_writes_at_once_in_process(s3, monkeypatch):
    "In process, with a fast heartbeat: once it has found the lock taken, each debate may finish at most the one write it had begun (a check comes before every write); nothing else is put, no results table or summary; `run_experiment` raises `LockLost`."
    import threading
    import madlab.store as store
    from madlab.run import run_experiment
    from madlab.tasks.arith import toy_arith_items
    from madlab.store import LockLost, StorePath, StoreLock
    monkeypatch.setattr(store, "LOCK_STALE", 1.2)                      # a heartbeat every 0.2 s
    url, puts, known, taken = f"s3://{BUCKET}/t9/run", [], threading.Event(), []
    put, beat = StorePath.write_bytes, StoreLock._beat_once
    def spy(self, data):
        if str(self).startswith(url) and self.name != ".lock": puts.append((str(self), known.is_set()))
        if self.name == "transcript.json" and len([q for q, _ in puts if q.endswith("transcript.json")]) == 3 and not taken:    # the takeover
            taken.append(1)
            s3.pipe_file(f"{BUCKET}/t9/run/.lock", json.dumps({"host": "other-host", "pid": 4242, "token": "theirs", "since": 1e9, "heartbeat": time.time()}).encode())
        return put(self, data)
    def beat_once(self):
        ok = beat(self)
        if not ok: known.set()
        return ok
    monkeypatch.setattr(StorePath, "write_bytes", spy)
    monkeypatch.setattr(StoreLock, "_beat_once", beat_once)
    with pytest.raises(LockLost, match="taken by other-host pid 4242 at 2001-09-09 01:46:40 UTC; this run stopped writing"):
        run_experiment("du", toy_arith_items(60, seed=0), SLOW_TEAM.replace(",synthetic", ";synthetic").split(";"), url, concurrency=2, cache=False)
    after = [q for q, late in puts if late]
    assert known.is_set() and taken and len(after) <= 2, after
    assert len([q for q in puts if q[0].endswith("transcript.json")]) < 60
    assert not any(q.endswith(("results.parquet", "summary.txt")) for q, _ in puts), puts
    assert json.loads(s3.cat_file(f"{BUCKET}/t9/run/.lock"))["token"] == "theirs"


def test_export_reads_a_run_in_a_bucket_and_writes_to_one(s3, tmp_path):
    "`madlab export` of a run folder in the bucket: chat-jsonl into its own exports/ there (the default) or to another URL, an Inspect log to a URL that reads back with the run's scores, a local --out; `OpenRun.export` likewise."
    pytest.importorskip("inspect_ai")
    from inspect_ai.log import read_eval_log
    from madlab.cli import main
    from madlab.export import chat_examples
    from madlab.runs import open_run
    out = f"s3://{BUCKET}/t10"
    r = CliRunner().invoke(main, ["run", "du", "--task", "arith", "--n", "4", "--out", out, "--name", "r", "--no-progress"])
    assert r.exit_code == 0, r.output
    run = open_run(f"{out}/r")
    want = chat_examples(run)
    r = CliRunner().invoke(main, ["export", out])                       # the --out folder holding the run; the default file, in the bucket
    assert r.exit_code == 0 and f"-> {out}/r/exports/chat-all.jsonl" in r.output, r.output
    lines = s3.cat_file(f"{BUCKET}/t10/r/exports/chat-all.jsonl").decode().splitlines()
    assert [json.loads(x) for x in lines] == json.loads(json.dumps(want)) and len(lines) > 0
    r = CliRunner().invoke(main, ["export", f"{out}/r", "--keep", "correct", "--out", f"s3://{BUCKET}/t10-exports/train.jsonl"])
    assert r.exit_code == 0, r.output
    assert len(s3.cat_file(f"{BUCKET}/t10-exports/train.jsonl").decode().splitlines()) == len(chat_examples(run, "correct"))
    r = CliRunner().invoke(main, ["export", f"{out}/r", "--format", "inspect", "--out", f"s3://{BUCKET}/t10-exports/run.eval"])
    assert r.exit_code == 0 and "4 samples" in r.output, r.output
    (tmp_path / "run.eval").write_bytes(s3.cat_file(f"{BUCKET}/t10-exports/run.eval"))
    back = read_eval_log(str(tmp_path / "run.eval"))
    assert {s.id: s.scores["madlab"].value == "C" for s in back.samples} == dict(zip(run.df.item_id.astype(str), run.df.correct.astype(bool)))
    r = CliRunner().invoke(main, ["export", f"{out}/r", "--out", str(tmp_path / "local.jsonl")])
    assert r.exit_code == 0 and (tmp_path / "local.jsonl").read_text().splitlines() == lines, r.output
    x = run.export("inspect")                                           # into the run's exports/inspect/ in the bucket
    assert str(x.path).startswith(f"{out}/r/exports/inspect/") and str(x.path).endswith(".eval") and s3.exists(str(x.path).removeprefix("s3://"))
    r = CliRunner().invoke(main, ["export", f"{out}/r", "--out", f"{out}/r"])       # a folder in the bucket
    assert r.exit_code == 2 and "is a folder" in r.output and "Traceback" not in r.output, r.output


def test_a_bucket_that_does_not_exist_is_refused_and_not_created(s3, tmp_path):
    "`--out s3://<no such bucket>/...`: refused before any call, naming the bucket and what to do; no bucket is made."
    from fake_openai_server import FakeOpenAIServer
    from madlab.cli import main
    from madlab.core import OptionError
    from madlab.run import run_experiment
    from madlab.tasks.arith import toy_arith_items
    missing = "madlab-runs-typo"
    with FakeOpenAIServer(reply="The answer is 42.") as srv:
        team = f"openai:m,base_url={srv.url}"
        r = CliRunner().invoke(main, ["run", "du", "--task", "arith", "--n", "2", "--agents", team,
                                      "--out", f"s3://{missing}/runs", "--no-progress", "--no-cache"])
        assert r.exit_code == 2 and "'--out'" in r.output and "Traceback" not in r.output, r.output
        assert f"the bucket '{missing}' does not exist" in r.output, r.output
        assert f"create it (e.g. aws s3 mb s3://{missing})" in r.output, r.output
        assert "check the URL and the credentials" in r.output, r.output
        assert srv.hits == 0, (srv.hits, r.output)                      # before any call
    with pytest.raises(OptionError, match=f"the bucket '{missing}' does not exist"):
        run_experiment("du", toy_arith_items(2, seed=0), out=f"s3://{missing}/r")
    s3.invalidate_cache()
    assert not s3.exists(missing) and missing not in [b.rstrip("/") for b in s3.ls("")], s3.ls("")
    args = ["run", "du", "--task", "arith", "--n", "1", "--out", f"s3://{BUCKET}/t11", "--name", "r", "--no-progress"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0 and f"outputs: s3://{BUCKET}/t11/r" in r.output, r.output       # inside a bucket: made

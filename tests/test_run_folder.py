"""Run folders: accumulating runs, resuming, interrupts (SIGINT/SIGTERM), atomic writes, the folder lock, broken files,
exit statuses, one layout for every protocol with `rescore`, and odd text in prompts.

Everything runs on synthetic (or replay / failing) agents: no network, no model. Most CLI calls run in-process through
click's `CliRunner`; the interrupt and concurrency tests start real `madlab` processes."""
from __future__ import annotations
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pandas as pd
import pytest
from conftest import public_data_or_skip
from madlab.core import public_data
from click.testing import CliRunner

from madlab.cli import main
from madlab.core import Item, Transcript, OptionError, madlab_data
from madlab.backends import Backend, BackendError
from madlab.agents import Agent
from madlab.run import run_experiment
from madlab.run_folder import write_table, RunFolder
from madlab.rescore import rescore
from madlab.tasks.arith import toy_arith_items

MADLAB = str(Path(sys.executable).parent / "madlab")
GSM8K = public_data("gsm8k", "test.jsonl")
SLOW_TEAM = "synthetic:medium,latency=0.3,seed=1,synthetic:weak,latency=0.3,seed=2"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    "Every test gets its own response cache folder (never the user's)."
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def cli(*args, env=None):
    "`madlab ARGS` in-process; the click Result (output holds stdout and stderr)."
    r = CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=True)
    return r


def show(r) -> str:
    "A CliRunner result or CompletedProcess, for assertion messages."
    if isinstance(r, subprocess.CompletedProcess):
        return f"exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    exc = "" if r.exception is None or isinstance(r.exception, SystemExit) else f"\n--- exception {r.exception!r}"
    return f"exit {r.exit_code}\n--- output\n{r.output}{exc}"


def run_dir_of(r) -> Path:
    "The run folder a `madlab run` printed on its last line (`outputs: DIR`)."
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("outputs: "), show(r)
    return Path(last.removeprefix("outputs: "))


def no_tmp_files(folder: Path) -> list:
    return [str(p) for p in Path(folder).rglob("*.tmp")]


def proc_env(tmp_path) -> dict:
    return {**os.environ, "MADLAB_CACHE": str(tmp_path / "cache"), "NO_COLOR": "1"}


# 1 ------------------------------------------------------------------------------------------------------------------
def test_two_runs_over_different_items_accumulate(tmp_path):
    out = tmp_path / "O"
    r1 = cli("run", "controlmad", "--size", 4, "--games", "1-3", "--out", out, "--name", "r", "--no-progress")
    assert r1.exit_code == 0, show(r1)
    r2 = cli("run", "controlmad", "--size", 4, "--games", "4-6", "--out", out, "--name", "r", "--no-progress")
    assert r2.exit_code == 0, show(r2)
    run = out / "r"
    assert run_dir_of(r2) == run
    df = pd.read_csv(run / "results.csv")
    ids = [f"kks-4-{i:04d}" for i in range(1, 7)]
    assert list(df.item_id) == ids, f"results.csv should list all 6 games in order:\n{df[['item_id', 'status']]}\n{show(r2)}"
    assert (df.status == "done").all(), df[["item_id", "status", "error"]]
    assert len(pd.read_parquet(run / "results.parquet")) == 6
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["items"] == ids, cfg["items"]
    assert sorted(p.parent.name for p in (run / "debates").glob("*/transcript.json")) == ids
    assert "6 items" in r2.output, show(r2)


# 2 ------------------------------------------------------------------------------------------------------------------
def test_deleted_log_comes_back_on_resume_without_calls(tmp_path):
    items = toy_arith_items(3, seed=0)
    out = tmp_path / "run"
    r1 = run_experiment("du", items, out=out)
    assert (r1.df.status == "done").all(), r1.summary()
    assert r1.cache.get("misses", 0) > 0, r1.cache
    d = RunFolder(out).item_dir(items[1].id)
    before = {i.id: RunFolder(out).transcript_path(i.id).read_bytes() for i in items}
    html = (d / "log.html").read_bytes()
    (d / "log.html").unlink()
    (d / "log.txt").unlink()
    r2 = run_experiment("du", items, out=out)
    assert (d / "log.html").exists() and (d / "log.txt").exists(), f"the deleted logs did not come back: {sorted(p.name for p in d.iterdir())}"
    assert (d / "log.html").read_bytes() == html, "the rebuilt log.html differs from the original"
    assert r2.cache == {"hits": 0, "misses": 0}, f"a resumed run called the backend: {r2.cache}"
    assert r2.df.resumed.all(), r2.df[["item_id", "resumed"]]
    assert r2.df.calls.sum() == r1.df.calls.sum()
    assert {i.id: RunFolder(out).transcript_path(i.id).read_bytes() for i in items} == before, "finished transcripts were rewritten"
    assert (pd.read_csv(out / "results.csv").status == "done").all()


# 3 ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_mid_run_writes_table_and_resumes(tmp_path, sig):
    out, name = tmp_path / "O", "r"
    args = ["run", "du", "--task", "arith", "--agents", SLOW_TEAM, "--concurrency", "2", "--out", str(out), "--name", name,
            "--no-cache", "--no-progress"]
    run = out / name
    p = subprocess.Popen([MADLAB, *args, "--n", "40"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=proc_env(tmp_path))
    try:
        deadline = time.time() + 30
        while not list((run / "debates").glob("*/transcript.json")):
            assert p.poll() is None, f"madlab exited before any debate finished: {p.returncode}\n{p.communicate()}"
            assert time.time() < deadline, "no debate finished within 30 s"
            time.sleep(0.05)
        p.send_signal(getattr(signal, sig))
        stdout, stderr = p.communicate(timeout=30)
    finally:
        if p.poll() is None: p.kill(); p.wait()
    msg = f"exit {p.returncode}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    assert p.returncode == 130, msg
    assert "Traceback" not in stderr, msg
    assert "interrupted" in stdout, msg
    assert "interrupted" in (run / "summary.txt").read_text(), msg
    finished = sorted(f.parent.name for f in (run / "debates").glob("*/transcript.json"))
    assert 1 <= len(finished) < 40, f"{len(finished)} finished\n{msg}"
    df = pd.read_csv(run / "results.csv")
    assert sorted(df.item_id) == finished, f"results.csv does not match the finished transcripts:\n{df[['item_id', 'status']]}\n{finished}"
    assert (df.status == "done").all(), df[["item_id", "status", "error"]]
    assert len(pd.read_parquet(run / "results.parquet")) == len(finished)
    assert not no_tmp_files(run), no_tmp_files(run)

    # the same command again, for one more item than finished: the finished ones are resumed, not re-run
    k = len(finished)
    before = {i: (run / "debates" / i / "transcript.json").read_bytes() for i in finished}
    mtimes = {i: (run / "debates" / i / "transcript.json").stat().st_mtime_ns for i in finished}
    calls_before = df.set_index("item_id").calls.to_dict()
    r = cli(*args, "--n", k + 1)
    assert r.exit_code == 0, show(r)
    df2 = pd.read_csv(run / "results.csv")
    assert len(df2) == k + 1 and df2.item_id.is_unique and (df2.status == "done").all(), f"{df2[['item_id', 'status']]}\n{show(r)}"
    old = df2[df2.item_id.isin(finished)]
    assert old.resumed.all(), f"finished items were re-run:\n{df2[['item_id', 'resumed']]}"
    assert old.set_index("item_id").calls.to_dict() == calls_before
    assert {i: (run / "debates" / i / "transcript.json").read_bytes() for i in finished} == before, "finished transcripts were rewritten"
    assert {i: (run / "debates" / i / "transcript.json").stat().st_mtime_ns for i in finished} == mtimes
    new = df2[~df2.item_id.isin(finished)]
    assert len(new) == 1 and not new.resumed.any() and new.calls.sum() > 0, df2[["item_id", "resumed", "calls"]]
    assert f"({k} resumed)" in r.output, show(r)


# 4 ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fail", ["fsync", "replace"])
def test_write_failure_never_replaces_a_good_file(tmp_path, monkeypatch, fail):
    items = toy_arith_items(4, seed=0)
    out = tmp_path / "run"
    r1 = run_experiment("du", items[:2], out=out, cache=False)
    assert (r1.df.status == "done").all(), r1.summary()
    names = ["results.csv", "results.parquet", "config.json", "summary.txt"]
    good = {n: (out / n).read_bytes() for n in names}
    good_t = {p: p.read_bytes() for p in (out / "debates").rglob("*") if p.is_file()}

    def disk_full(*a, **k): raise OSError(28, "No space left on device")
    broken = r1.df.copy(); broken["status"] = "broken"
    with monkeypatch.context() as m:
        m.setattr(os, fail, disk_full)
        with pytest.raises(OSError) as e:
            write_table(broken, out)
        assert e.value.errno == 28
        with pytest.raises(OSError):                      # a resume that adds items while the disk is full
            run_experiment("du", items, out=out, cache=False)
    assert {n: (out / n).read_bytes() for n in names} == good, "a failed write changed a good file"
    assert {p: p.read_bytes() for p in good_t} == good_t, "a failed write changed a debate's files"
    assert not no_tmp_files(out), f"temporary files left behind: {no_tmp_files(out)}"
    assert (pd.read_csv(out / "results.csv").status == "done").all()
    assert pd.read_parquet(out / "results.parquet").equals(pd.read_parquet(pd.io.common.BytesIO(good["results.parquet"])))
    # the folder is usable afterwards: the lock was released and a resume finishes the rest
    r3 = run_experiment("du", items, out=out, cache=False)
    assert len(r3.df) == 4 and (r3.df.status == "done").all(), r3.summary()


# 5 ------------------------------------------------------------------------------------------------------------------
def test_locked_folder_refuses_python_and_cli(tmp_path):
    out = tmp_path / "O"
    run = (out / "r")
    run.mkdir(parents=True)
    lk = RunFolder(run).lock()
    try:
        with pytest.raises(OptionError) as e:
            run_experiment("du", toy_arith_items(2, seed=0), out=run, cache=False)
        assert e.value.flag in ("out", "--out") and "in use" in str(e.value), str(e.value)
        t0 = time.perf_counter()
        with pytest.raises(OptionError, match="in use"):
            run_experiment("du", toy_arith_items(2, seed=0), out=run, cache=False, lock_timeout=0.5)
        assert time.perf_counter() - t0 >= 0.4, "lock_timeout was not waited for"
        r = cli("run", "du", "--task", "arith", "--n", 2, "--out", out, "--name", "r", "--no-cache", "--no-progress")
        assert r.exit_code == 2, show(r)
        assert "--out" in r.output and "in use" in r.output, show(r)
        assert "Traceback" not in r.output, show(r)
    finally:
        lk.release()
    assert not list((run / "debates").glob("*/transcript.json")), "a refused run wrote debates"
    assert not (run / "results.csv").exists()


# 5b -----------------------------------------------------------------------------------------------------------------
def test_lock_is_released_when_its_with_block_ends(tmp_path):
    "A folder lock taken with `with folder.lock() as held:` is free once the block ends (also on an exception), though "
    "`held` lives on: this process can rescore and add items, and another process's `madlab run` resumes at once."
    out = tmp_path / "O"
    run = out / "r"
    r = cli("run", "du", "--task", "arith", "--n", 2, "--out", out, "--name", "r", "--no-cache", "--no-progress")
    assert r.exit_code == 0, show(r)
    folder = RunFolder(run)
    with folder.lock() as held:
        pass
    RunFolder(run).reading(0).close()                   # another taker in this process is not refused
    rescore(run)
    with pytest.raises(ValueError):
        with folder.lock() as held_too:
            raise ValueError("stop")
    rescore(run, decision="plurality")
    r2 = run_experiment("du", toy_arith_items(3, seed=0), out=run, cache=False)
    assert len(r2.df) == 3 and (r2.df.status == "done").all(), r2.summary()
    p = subprocess.run([MADLAB, "run", "du", "--task", "arith", "--n", "4", "--out", str(out), "--name", "r", "--no-cache",
                        "--no-progress"], env=proc_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "in use" not in p.stdout + p.stderr
    assert held is not None and held_too is not None    # both still referenced while the others took the lock


# 6 ------------------------------------------------------------------------------------------------------------------
def test_two_concurrent_runs_never_duplicate_an_item(tmp_path):
    out = tmp_path / "O"
    cmd = [MADLAB, "run", "du", "--task", "arith", "--n", "6", "--agents",
           "synthetic:medium,latency=0.1,seed=1,synthetic:weak,latency=0.1,seed=2", "--concurrency", "2",
           "--out", str(out), "--name", "r", "--no-cache", "--no-progress"]
    env = proc_env(tmp_path)
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    res = []
    try:
        for p in ps:
            o, e = p.communicate(timeout=60)
            res.append(subprocess.CompletedProcess(cmd, p.returncode, o, e))
    finally:
        for p in ps:
            if p.poll() is None: p.kill(); p.wait()
    msg = "\n=====\n".join(show(r) for r in res)
    assert all(r.returncode in (0, 2) for r in res), msg
    assert any(r.returncode == 0 for r in res), msg
    for r in res:
        if r.returncode == 2: assert "in use" in r.stderr and "--out" in r.stderr and "Traceback" not in r.stderr, msg
    run = out / "r"
    ts = {}
    for f in (run / "debates").glob("*/transcript.json"):
        t = Transcript.from_json(f)
        ts.setdefault(t.meta["id"], []).append(t.meta["status"])
    assert len(ts) == 6 and all(len(v) == 1 for v in ts.values()), ts
    df = pd.read_csv(run / "results.csv")
    assert df.item_id.is_unique, f"duplicated items in results.csv:\n{df[['item_id', 'status']]}\n{msg}"
    assert dict(zip(df.item_id, df.status)) == {k: v[0] for k, v in ts.items()}, f"{df[['item_id', 'status']]}\n{ts}"
    assert (df.status == "done").all()
    assert not no_tmp_files(run), no_tmp_files(run)


# 7 ------------------------------------------------------------------------------------------------------------------
def test_truncated_config_is_a_clear_error(tmp_path):
    out = tmp_path / "O"
    r1 = cli("run", "du", "--task", "arith", "--n", 2, "--out", out, "--name", "r", "--no-cache", "--no-progress")
    assert r1.exit_code == 0, show(r1)
    run = out / "r"
    cfg = run / "config.json"
    raw = cfg.read_bytes()
    cfg.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError) as e:
        run_experiment("du", toy_arith_items(2, seed=0), out=run, cache=False)
    assert str(cfg) in str(e.value) and "delete" in str(e.value), str(e.value)
    assert not isinstance(e.value, OptionError)
    r = cli("run", "du", "--task", "arith", "--n", 2, "--out", out, "--name", "r", "--no-cache", "--no-progress")
    assert r.exit_code not in (0, 130), show(r)
    assert r.exception is None or isinstance(r.exception, SystemExit), show(r)
    assert "Traceback" not in r.output, show(r)
    assert str(cfg) in r.output and "delete" in r.output, show(r)
    assert cfg.read_bytes() == raw[: len(raw) // 2], "the broken config.json was overwritten"
    r = cli("rescore", run)
    assert r.exit_code not in (0, 130) and str(cfg) in r.output and "delete" in r.output, show(r)
    # what the message says to do works: delete it, and the finished debates are reused
    cfg.unlink()
    r = cli("run", "du", "--task", "arith", "--n", 2, "--out", out, "--name", "r", "--no-cache", "--no-progress")
    assert r.exit_code == 0 and "(2 resumed)" in r.output, show(r)


def test_truncated_transcript_is_moved_aside_and_rerun(tmp_path):
    items = toy_arith_items(3, seed=0)
    out = tmp_path / "run"
    r1 = run_experiment("du", items, out=out, cache=False)
    assert (r1.df.status == "done").all(), r1.summary()
    f = RunFolder(out).transcript_path(items[1].id)
    raw = f.read_bytes()
    f.write_bytes(raw[: len(raw) // 2])
    r2 = run_experiment("du", items, out=out, cache=False)
    aside = f.with_name("transcript.json.unreadable")
    assert aside.exists() and aside.read_bytes() == raw[: len(raw) // 2], "the broken transcript was not moved aside"
    t = Transcript.from_json(f)
    assert t.meta["status"] == "done" and t.meta["id"] == items[1].id
    df = r2.df.set_index("item_id")
    assert list(df.index) == [i.id for i in items] and (df.status == "done").all(), r2.df
    assert not df.loc[items[1].id, "resumed"] and df.loc[items[1].id, "calls"] > 0, "the broken item was not run again"
    assert df.loc[[items[0].id, items[2].id], "resumed"].all()
    assert any(str(aside) in p for p in r2.problems), r2.problems
    assert str(aside) in r2.summary() and str(aside) in (out / "summary.txt").read_text(), r2.summary()
    # a later run has nothing more to say about it
    r3 = run_experiment("du", items, out=out, cache=False)
    assert r3.problems == [] and r3.df.resumed.all(), r3.summary()


# 8 ------------------------------------------------------------------------------------------------------------------
class _Down(Backend):
    "A backend whose every call fails."
    spec = "down:x"
    def __init__(self): self.calls = 0
    async def complete(self, messages, ctx=None, **params):
        self.calls += 1
        raise BackendError("down:x: connection refused")


def test_every_debate_failed_python(tmp_path):
    items = toy_arith_items(3, seed=0)
    team = [Agent("A", "down:a", backend=_Down()), Agent("B", "down:b", backend=_Down())]
    res = run_experiment("du", items, team, out=tmp_path / "run", cache=False)
    assert res.failed == 3, res.summary()
    assert (res.df.status == "failed").all() and res.df.error.notna().all(), res.df[["item_id", "status", "error"]]
    assert "3 debates failed" in res.summary(), res.summary()
    assert "3 debates failed" in (tmp_path / "run" / "summary.txt").read_text()
    assert (pd.read_csv(tmp_path / "run" / "results.csv").status == "failed").all()


def test_every_debate_failed_cli_exits_1(tmp_path):
    # a transcript of another question: replaying it for the task's items misses at the first call
    rec = tmp_path / "rec"
    other = Item("other", "arith", "What is 1 + 1?", gold=2)
    r0 = run_experiment("du", [other], ["synthetic:strong,seed=1", "synthetic:weak,seed=2"], out=rec, cache=False)
    assert (r0.df.status == "done").all(), r0.summary()
    path = RunFolder(rec).transcript_path("other")
    names = [a["name"] for a in Transcript.from_json(path).team]
    agents = ",".join(f"replay:{path}#{n}" for n in names)
    r = cli("run", "du", "--task", "arith", "--n", 3, "--agents", agents, "--out", tmp_path / "O", "--name", "r", "--no-cache", "--no-progress")
    assert r.exit_code == 1, show(r)
    assert r.exception is None or isinstance(r.exception, SystemExit), show(r)
    assert "3 debates failed" in r.output, show(r)
    df = pd.read_csv(tmp_path / "O" / "r" / "results.csv")
    assert len(df) == 3 and (df.status == "failed").all(), df[["item_id", "status", "error"]]


# 9 ------------------------------------------------------------------------------------------------------------------
def _no_backends(monkeypatch):
    "Make any backend construction or call raise during a rescore."
    def boom(*a, **k): raise AssertionError("rescore touched a backend")
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("madlab") and hasattr(mod, "get_backend"):
            monkeypatch.setattr(mod, "get_backend", boom)
    todo = [Backend]
    while todo:
        c = todo.pop(); todo += c.__subclasses__()
        if c is not Backend: monkeypatch.setattr(c, "complete", boom)


RUNS = {
    "du": ["run", "du", "--task", "gsm8k", "--data", str(GSM8K), "--n", "3"],
    "controlmad": ["run", "controlmad", "--size", "4", "--games", "1-2"],
    "s4": ["run", "s4", "--n", "3"],
}
N_ITEMS = {"du": 3, "controlmad": 2, "s4": 3, "s4-python": 3}


def _check_layout_and_rescore(run: Path, proto: str, monkeypatch, cache: Path):
    for n in ("config.json", "results.csv", "results.parquet", "summary.txt"):
        assert (run / n).is_file(), f"{proto}: no {n} in {sorted(p.name for p in run.iterdir())}"
    df = pd.read_parquet(run / "results.parquet")
    assert len(df) == N_ITEMS[proto] and (df.status == "done").all(), df[["item_id", "status", "error"]]
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["protocol"] == proto.split("-")[0] and len(cfg["items"]) == N_ITEMS[proto], cfg
    for iid in df.item_id:
        d = RunFolder(run).item_dir(iid)
        have = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
        for n in ("transcript.json", "log.html", "log.txt"):
            assert n in have, f"{proto}/{iid}: no {n} in {have}"
        assert any(h.startswith("chat_") and h.endswith(".json") for h in have), f"{proto}/{iid}: no chat_*.json in {have}"
    saved, saved_csv = df.copy(), pd.read_csv(run / "results.csv")
    (run / "results.csv").unlink(); (run / "results.parquet").unlink()

    with monkeypatch.context() as m:
        _no_backends(m)
        rr = cli("rescore", run)
    assert rr.exit_code == 0, show(rr)
    assert not cache.exists(), "rescore made a response cache"
    new, new_csv = pd.read_parquet(run / "results.parquet"), pd.read_csv(run / "results.csv")
    drop = ["seconds", "resumed"]
    pd.testing.assert_frame_equal(new.drop(columns=drop), saved.drop(columns=drop), obj=f"{proto} rescored results.parquet")
    pd.testing.assert_frame_equal(new_csv.drop(columns=drop), saved_csv.drop(columns=drop), obj=f"{proto} rescored results.csv")
    # rescoring resumes nothing: the table should say what the run said
    assert list(new.resumed) == list(saved.resumed), (f"{proto}: rescore changed the 'resumed' column {list(saved.resumed)} -> {list(new.resumed)}; "
                                                      f"its summary:\n{rr.output}")


@pytest.mark.parametrize("proto", [pytest.param(p, marks=pytest.mark.public_data) if p == "du" else p for p in RUNS])
def test_layout_and_rescore_reproduces_the_table(tmp_path, monkeypatch, proto, _cache):
    if proto == "du": public_data_or_skip("GSM8K's test set", "gsm8k", "test.jsonl")
    out = tmp_path / "O"
    r = cli(*RUNS[proto], "--out", out, "--no-cache", "--no-progress")
    assert r.exit_code == 0, show(r)
    run = run_dir_of(r)
    assert run.parent == out and run.is_dir(), show(r)
    _check_layout_and_rescore(run, proto, monkeypatch, _cache)


def test_layout_and_rescore_s4_python(tmp_path, monkeypatch, _cache):
    "The same for S4 run from Python (so the layout is checked even while `madlab run s4` fails)."
    from madlab.tasks.safety import load_xstest
    items = load_xstest(madlab_data("s4", "sample.csv"))[:3]
    res = run_experiment("s4", items, out=tmp_path / "run", cache=False)
    assert res.failed == 0, res.summary()
    _check_layout_and_rescore(tmp_path / "run", "s4-python", monkeypatch, _cache)


# 10 -----------------------------------------------------------------------------------------------------------------
ODD = "What is 2+2? \ud800 <script>alert(1)</script>"


@pytest.fixture
def odd_run(tmp_path):
    it = Item("odd-1", "arith", ODD, gold=4)
    out = tmp_path / "run"
    res = run_experiment("du", [it], out=out)
    return res, out, RunFolder(out).item_dir("odd-1")


def test_odd_text_logs_are_escaped_and_transcript_round_trips(odd_run):
    res, out, d = odd_run
    html = (d / "log.html").read_bytes().decode("utf-8", "surrogatepass")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, "the prompt's <script> is not in log.html, escaped"
    assert "<script>alert" not in html, "raw <script> from a prompt in log.html"
    t = Transcript.from_json(d / "transcript.json")
    assert t.item.prompt == ODD, repr(t.item.prompt)
    assert t.meta["id"] == "odd-1"
    assert len(pd.read_csv(out / "results.csv")) == 1


def test_odd_text_debate_finishes(odd_run):
    res, out, d = odd_run
    assert (res.df.status == "done").all(), f"a lone surrogate in the prompt failed the debate:\n{res.summary()}"
    assert res.failed == 0


def test_odd_text_outputs_are_valid_utf8(odd_run):
    res, out, d = odd_run
    bad = []
    for p in [*d.iterdir(), out / "results.csv", out / "summary.txt", out / "config.json"]:
        try: p.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e: bad.append(f"{p.name}: {e}")
    assert not bad, "output files that are not valid UTF-8 (a browser or pd.read_csv/read_text fails on them):\n" + "\n".join(bad)


# 10 -----------------------------------------------------------------------------------------------------------------
def _all_protocols() -> list:
    from madlab.cli import run
    return run.list_commands(None)


@pytest.fixture
def synthetic_down(monkeypatch):
    "Every synthetic agent's call fails (a backend that always raises), for every protocol's own team."
    from madlab.synthetic import SyntheticBackend
    async def down(self, messages, ctx=None, **params): raise BackendError("down: connection refused")
    monkeypatch.setattr(SyntheticBackend, "complete", down)


@pytest.mark.parametrize("proto", [*_all_protocols(), "agentverse-prisoners"])
def test_a_failed_debate_is_a_failed_row_in_every_protocol(tmp_path, synthetic_down, proto):
    "Whatever the protocol (one that scores nothing included), a debate whose calls all fail is a failed row of the table, and the run exits 1."
    extra = []
    if proto == "critic_actor":
        data = tmp_path / "gsm.jsonl"
        data.write_text(json.dumps({"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"}) + "\n")
        extra = ["--data", data]
    if proto == "agentverse-prisoners":
        proto, extra = "agentverse", ["--config", madlab_data("agentverse", "prisoners_dilemma.yaml")]
    r = cli("run", proto, "--n", 1, *extra, "--out", tmp_path / "O", "--name", "r", "--no-cache", "--no-progress")
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), show(r)
    assert "1 debate failed" in r.output and "connection refused" in r.output, show(r)
    df = pd.read_parquet(tmp_path / "O" / "r" / "results.parquet")
    assert len(df) == 1 and df.status.iloc[0] == "failed" and "connection refused" in df.error.iloc[0], df.T


# 11 -----------------------------------------------------------------------------------------------------------------
def _calls(text: str) -> str:
    "The calls part of a summary's first line (from 'N calls made')."
    import re
    m = re.search(r"\d+ calls made.*", text.strip().splitlines()[0])
    return m.group(0) if m else ""


def test_summaries_say_what_this_command_did_and_what_the_experiment_cost(tmp_path):
    import re
    args = ["run", "du", "--n", 3, "--out", tmp_path / "O", "--name", "r", "--no-progress"]
    r = cli(*args)
    assert r.exit_code == 0, show(r)
    n = int(re.search(r"(\d+) calls made, ([\d,]+) tokens;", r.output).group(1))
    tokens = re.search(r"(\d+) calls made, ([\d,]+) tokens;", r.output).group(2)
    assert n > 0 and "cached" not in _calls(r.output), show(r)
    run = tmp_path / "O" / "r"
    r = cli(*args)                                                              # resumed: nothing made now
    assert _calls(r.output).startswith(f"0 calls made; the experiment: {n} calls, {tokens} tokens;"), show(r)
    r = cli("rescore", run)
    assert _calls(r.output).startswith(f"0 calls made; the experiment: {n} calls, {tokens} tokens;"), show(r)
    assert f"0 calls made; the experiment: {n} calls" in (run / "summary.txt").read_text()
    r = cli("rescore", run, "--decision", "majority")
    assert _calls(r.output).startswith(f"0 calls made; the experiment: {n} calls"), show(r)
    r = cli("rescore", run, "--decision", "judge:synthetic:strong")             # the judge's calls are counted
    j = int(pd.read_parquet(run / "results.decision-judge-synthetic-strong.parquet").judge_calls.sum())   # a unanimous debate needs no judge
    assert j > 0 and _calls(r.output).startswith(f"{j} calls made by the judge; the experiment: {n + j} calls ({j} by the judge)"), show(r)
    r = cli(*args, "--no-resume")                                               # a warm cache: the experiment's calls beside the cached ones
    assert _calls(r.output).startswith(f"0 calls made ({n} answered from the cache); the experiment: {n} calls, {tokens} tokens (cached replies included);"), show(r)


def test_a_controlmad_summary_labels_its_two_token_totals(tmp_path):
    args = ["run", "controlmad", "--size", 4, "--games", "1", "--depth", 0, "--out", tmp_path / "O", "--name", "r", "--no-progress"]
    assert cli(*args).exit_code == 0
    r = cli(*args, "--no-resume")
    assert "the experiment: " in r.output and "tokens (cached replies included)" in r.output, show(r)
    assert "tokens of the uncached calls 0" in r.output and "; tokens 0" not in r.output, show(r)


# 12 -----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o007, 0o660, 0o770)])
def test_run_files_follow_the_umask(tmp_path, umask, file_mode, dir_mode):
    "A lab sharing a results folder reads each other's runs: files are 0666 & ~umask, folders 0777 & ~umask (never mkstemp's 0600)."
    old = os.umask(umask)
    try:
        r = cli("run", "du", "--n", 2, "--out", tmp_path / "O", "--name", "r", "--no-cache", "--no-progress")
        assert r.exit_code == 0, show(r)
        rr = cli("rescore", tmp_path / "O" / "r")
        assert rr.exit_code == 0, show(rr)
    finally: os.umask(old)
    run = tmp_path / "O" / "r"
    files = [p for p in run.rglob("*") if p.is_file() and p.name != ".lock"]
    assert {"config.json", "results.parquet", "results.csv", "summary.txt", "transcript.json", "log.html"} <= {p.name for p in files}
    bad = {str(p.relative_to(run)): oct(p.stat().st_mode & 0o777) for p in files if p.stat().st_mode & 0o777 != file_mode}
    assert not bad, bad
    bad = {str(p.relative_to(run)): oct(p.stat().st_mode & 0o777) for p in [run, *run.rglob("*")] if p.is_dir() and p.stat().st_mode & 0o777 != dir_mode}
    assert not bad, bad

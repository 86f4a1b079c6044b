"""`madlab export`: a finished run as chat-format training examples (read back line by line, filtered as asked) and as an
Inspect eval log that inspect_ai reads back with madlab's scores and usage, and that `inspect view` serves on 127.0.0.1
(started and stopped here, a screenshot of it saved to test-artifacts/ by Debian's chromium); no secret in either."""
from __future__ import annotations
import json, os, signal, subprocess, sys, time, urllib.request, zipfile
from pathlib import Path
import pytest
from jupyter_helpers import CHROMIUM, CHROMIUM_ARGS, ROOT, need_browser, free_port
from madlab.run import run_experiment
from madlab.runs import open_run

ARTIFACTS = ROOT / "test-artifacts"
TEAM = ["synthetic:skill=0.5,susceptibility=0.3,seed=1", "synthetic:skill=0.5,susceptibility=0.3,seed=2", "synthetic:weak,seed=3"]

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    "A finished du run of three synthetic agents on 12 sums: some debates decided right, some wrong, two models."
    out = tmp_path_factory.mktemp("export") / "du"
    run_experiment("du", task="arith", items=range(1, 13), team=TEAM, out=out, progress=False, cache=str(out.parent / "cache"))
    df = open_run(out).df
    assert 0 < df.correct.sum() < len(df)
    return out

def _madlab(*args, env=None, pre: str = "") -> subprocess.CompletedProcess:
    "The `madlab` command in a fresh interpreter (`pre`: Python run first)."
    code = f"{pre}\nfrom madlab.cli import console; console({list(args)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)

def _invoke(*args):
    "The `madlab` command in this process (click's runner): (exit code, output)."
    from click.testing import CliRunner
    from madlab.cli import main
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output

def _lines(p: Path) -> list[dict]: return [json.loads(l) for l in p.read_text(encoding="utf-8").splitlines()]

def test_chat_jsonl_from_the_command_line(run_dir, tmp_path):
    run = open_run(run_dir)
    got = {}
    for keep in ("all", "correct", "consistent"):
        code, out = _invoke("export", str(run_dir), "--format", "chat-jsonl", "--keep", keep, "--out", str(tmp_path / f"{keep}.jsonl"))
        assert code == 0 and f"chat-jsonl ({keep}):" in out and "examples from" in out, out
        got[keep] = _lines(tmp_path / f"{keep}.jsonl")
    turns = [tu for t in run.folder.transcripts()[0].values() for rd in t.rounds for tu in rd.turns]
    assert len(got["all"]) == sum(tu.error is None and bool(tu.reply) for tu in turns)
    for ex in got["all"]:
        roles = [m["role"] for m in ex["messages"]]
        assert set(roles) <= {"system", "user", "assistant"} and roles[-1] == "assistant" and len(roles) >= 2
        assert {"run", "item", "round", "agent", "protocol", "model"} <= set(ex["source"]) and ex["source"]["run"] == run.name
    right = set(run.df.item_id[run.df.correct.eq(True)].astype(str))
    assert {e["source"]["item"] for e in got["correct"]} == right
    assert len(got["correct"]) == sum(e["source"]["item"] in right for e in got["all"])
    assert got["consistent"] and len(got["consistent"]) < len(got["all"]) and all(e["source"]["agrees_with_majority"] for e in got["consistent"])

def test_inspect_log_reads_back_with_the_runs_scores_and_usage(run_dir, tmp_path):
    from inspect_ai.log import read_eval_log
    code, out = _invoke("export", str(run_dir), "--format", "inspect", "--out", str(tmp_path / "run.eval"))
    assert code == 0 and "inspect: 12 samples from 12 debate(s)" in out, out
    run, log = open_run(run_dir), read_eval_log(str(tmp_path / "run.eval"))
    assert log.status == "success" and len(log.samples) == len(run.df) == 12
    scores = {s.id: s.scores["madlab"].value for s in log.samples}
    assert scores == {str(i): "C" if c else "I" for i, c in zip(run.df.item_id, run.df.correct)}
    assert log.results.scores[0].metrics["accuracy"].value == pytest.approx(run.df.correct.mean())
    by_spec = run.costs(by=("spec",)).set_index("spec")
    assert {k: u.total_tokens for k, u in log.stats.model_usage.items()} == {k: int(v) for k, v in by_spec.tokens.items()}
    names = {a["name"] for a in run.config["team"]}
    for s in log.samples:
        assert sum(u.total_tokens for u in s.model_usage.values()) == int(run.df.set_index(run.df.item_id.astype(str)).loc[s.id, ["prompt_tokens", "completion_tokens"]].sum())
        said = [m.content.split("]", 1)[0].lstrip("[").split(" · ")[0] for m in s.messages[1:]]
        assert set(said) == names and len(said) == 9            # three agents, three rounds
        calls = [e for e in s.events if e.event == "model"]
        assert len(calls) == 9 and all(c.input for c in calls)

def test_a_missing_inspect_ai_is_a_usage_error_naming_the_extra(run_dir):
    r = _madlab("export", str(run_dir), "--format", "inspect", pre="import sys; sys.modules['inspect_ai'] = None")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pip install 'madlab[inspect]'" in r.stderr and "--format" in r.stderr and "Traceback" not in r.stderr

def test_usage_errors_name_their_option(run_dir, tmp_path):
    for args, option in ((["--keep", "best"], "--keep"), (["--format", "parquet"], "--format"), (["--format", "inspect", "--keep", "correct"], "--keep"),
                         (["--out", str(tmp_path)], "--out")):
        code, out = _invoke("export", str(run_dir), *args)
        assert code == 2 and option in out and "Traceback" not in out, (args, out)
    code, out = _invoke("export", str(tmp_path))
    assert code == 2 and "RUN_DIR" in out and "no config.json" in out, out

SECRET = "sk-madlab-export-SECRET-0123456789abcdef"

def test_no_secret_reaches_an_export(run_dir, tmp_path, monkeypatch):
    "A key that reached a transcript (an older run, a server that echoed it) is scrubbed from both formats."
    import shutil
    from madlab.core import Transcript
    from madlab.export import export_chat, export_inspect
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    leaky = tmp_path / "leaky"
    shutil.copytree(run_dir, leaky)
    for f in (leaky / "debates").glob("*/transcript.json"):
        t = Transcript.from_json(f)
        t.item.prompt += f" (key {SECRET})"
        tu = t.rounds[-1].turns[0]
        tu.reply += f" My key is {SECRET}."
        tu.messages = tu.messages + [{"role": "user", "content": f"Authorization: Bearer {SECRET}"}]
        t.to_json(f)
    outs = [export_chat(leaky, keep).path for keep in ("all", "consistent")]
    outs += [export_inspect(leaky, tmp_path / "log.json").path, export_inspect(leaky).path]
    texts = [p.read_text(encoding="utf-8") for p in outs if p.suffix != ".eval"]
    with zipfile.ZipFile(outs[-1]) as z: texts += [z.read(n).decode("utf-8", "replace") for n in z.namelist()]
    assert any("[REDACTED]" in t for t in texts)
    for probe in (SECRET, SECRET[:14], SECRET[-14:]):
        assert not any(probe in t for t in texts), probe

# --- inspect view serves it; a browser shows the debate ---------------------------------------------------------------

def _inspect_view(log_dir: Path, home: Path, timeout: float = 120):
    "`inspect view` serving `log_dir` on a free 127.0.0.1 port, its data folder in `home`; (process, base URL) once it lists a log."
    port = free_port()
    env = {**os.environ, "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache")}
    log = open(home / "view.log", "wb")
    p = subprocess.Popen([sys.executable, "-m", "inspect_ai", "view", "start", "--log-dir", str(log_dir), "--host", "127.0.0.1", "--port", str(port)],
                         cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    base, t0 = f"http://127.0.0.1:{port}", time.time()
    while True:
        if p.poll() is not None: raise RuntimeError(f"inspect view exited ({p.returncode}):\n{(home / 'view.log').read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/api/logs", timeout=2) as r:
                if r.status == 200 and json.loads(r.read()).get("files"): return p, base
        except OSError: pass
        if time.time() - t0 > timeout:
            _stop(p); raise TimeoutError(f"inspect view did not list the log in {timeout}s:\n{(home / 'view.log').read_text()[-3000:]}")
        time.sleep(0.3)

def _stop(p: subprocess.Popen):
    try: os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError: pass
    try: p.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL); p.wait()

@pytest.mark.slow
def test_inspect_view_serves_the_exported_run(run_dir, tmp_path):
    need_browser()
    from playwright.sync_api import sync_playwright
    from madlab.export import export_inspect
    x = export_inspect(run_dir, tmp_path / "logs" / "2026-01-01T00-00-00_du-arith_madlab.eval")
    run = open_run(run_dir)
    names = [a["name"] for a in run.config["team"]]
    proc, base = _inspect_view(x.path.parent, tmp_path)
    try:
        with urllib.request.urlopen(f"{base}/api/logs", timeout=10) as r:
            assert [Path(f["name"]).name for f in json.loads(r.read())["files"]] == [x.path.name]
        ARTIFACTS.mkdir(exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(base, wait_until="domcontentloaded", timeout=60_000)
                first = str(run.df.item_id.iloc[0])
                row = page.locator(f"text={first} >> visible=true").first
                row.wait_for(timeout=60_000)
                body = page.inner_text("body")
                assert "du/arith" in body and "madlab" in body and f"{len(run.df)} Samples" in body, body[:2000]
                page.screenshot(path=str(ARTIFACTS / "inspect-view.png"))
                row.click()
                page.locator("text=MODEL CALL >> visible=true").first.wait_for(timeout=60_000)
                body = page.inner_text("body").lower()
                assert all(n.lower() in body for n in names), body[:3000]
                page.screenshot(path=str(ARTIFACTS / "inspect-view-sample.png"))
            finally: browser.close()
    finally: _stop(proc)
    assert (ARTIFACTS / "inspect-view.png").stat().st_size > 10_000 and (ARTIFACTS / "inspect-view-sample.png").stat().st_size > 10_000

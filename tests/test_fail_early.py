"""A run that cannot work says so before it costs anything: an `hf:` team without the hf extra is refused before a
run folder exists, naming the extra; an endpoint that refuses connections is named at once on stderr with how long its
calls will wait, and an endpoint never reached in the run gives up after the shorter `--give-up-first`, while one that
answered earlier keeps the full `--give-up-after`."""
from __future__ import annotations
import asyncio, os, subprocess, sys, threading, time
from pathlib import Path
import pandas as pd
import pytest
from conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
MADLAB = str(Path(sys.executable).parent / "madlab")
MSGS = [{"role": "user", "content": "What is 6 * 7?"}]


def _env(tmp_path) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "MADLAB_CACHE": str(tmp_path / "cache"),
            "OPENAI_API_KEY": "sk-test-fail-early"}


def _blocked(modules, body: str) -> str:
    "A script that runs `body` in a Python where `modules` cannot be imported (as where the hf extra is not installed)."
    return "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules) + body


@pytest.mark.parametrize("blocked,named", [(("transformers",), "transformers"),
                                           (("torch", "transformers"), "torch, transformers")])
def test_an_hf_team_without_the_hf_extra_is_refused_before_a_run_folder(tmp_path, blocked, named):
    out = tmp_path / "runs"
    body = ("from madlab.cli import main\n"
            f"main(['run', 'du', '--agents', 'hf:{tmp_path}/tiny,hf:{tmp_path}/tiny', '--n', '2', "
            f"'--out', {str(out)!r}, '--no-progress'])")
    r = _python(_blocked(blocked, body), tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"backends need {named}, not installed here" in r.stderr and "pip install 'madlab[hf]'" in r.stderr, r.stderr
    assert "'--agents'" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists(), list(out.rglob("*"))


def test_an_hf_team_file_and_run_experiment_are_refused_too(tmp_path):
    team = tmp_path / "team.yaml"
    team.write_text(f"- name: A\n  spec: hf:{tmp_path}/tiny\n- name: B\n  spec: hf:{tmp_path}/tiny\n")
    out = tmp_path / "runs"
    body = ("from madlab.cli import main\n"
            f"main(['run', 'du', '--team', {str(team)!r}, '--n', '2', '--out', {str(out)!r}, '--no-progress'])")
    r = _python(_blocked(["transformers"], body), tmp_path)
    assert r.returncode == 2 and "pip install 'madlab[hf]'" in r.stderr and "--team" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert not out.exists()
    body = ("from madlab.run import run_experiment\nfrom madlab.backends import MissingPackages\n"
            "from madlab.tasks.arith import toy_arith_items\n"
            f"try: run_experiment('du', toy_arith_items(2), team=['hf:{tmp_path}/tiny'] * 2, out={str(out / 'r')!r})\n"
            "except MissingPackages as e: print('refused:', e)\n")
    r = _python(_blocked(["transformers"], body), tmp_path)
    assert r.returncode == 0 and "refused:" in r.stdout and "pip install 'madlab[hf]'" in r.stdout, r.stdout + r.stderr
    assert not out.exists()


def _python(code: str, tmp_path):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(tmp_path), timeout=300)


def _read_stderr(proc, lines: list, seen: threading.Event, what: str):
    "Collect the process's stderr lines with the time each arrived; set `seen` once a line holds `what`."
    for line in proc.stderr:
        lines.append((time.perf_counter(), line))
        if what in line: seen.set()


def test_a_run_against_a_dead_url_says_so_at_once_and_fails_within_give_up_first(tmp_path):
    "Nothing listens at the URL: stderr says so within seconds, with the wait; the run ends after 30 s, not 300."
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    out = tmp_path / "runs"
    t0 = time.perf_counter()
    p = subprocess.Popen([MADLAB, "run", "du", "--agents", f"openai:m,base_url={url}", "--task", "arith", "--n", "3",
                          "--out", str(out), "--no-progress", "--no-cache"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
                         start_new_session=True)
    lines, seen = [], threading.Event()
    reader = threading.Thread(target=_read_stderr, args=(p, lines, seen, f"endpoint {url} refuses connections"),
                              daemon=True)
    reader.start()
    try:
        assert seen.wait(60), "no word of the endpoint: " + "".join(l for _, l in lines)  # generous: a loaded machine
        said = time.perf_counter() - t0
        assert p.poll() is None, "the run ended before it said which endpoint refuses connections"
        stdout, _ = p.communicate(timeout=120)
        took = time.perf_counter() - t0
    finally:
        if p.poll() is None: p.kill(); p.wait(10)
    reader.join(10)
    line = next(l for _, l in lines if "refuses connections" in l)
    assert "it has not answered once in this run" in line and "--give-up-first" in line and "at most" in line, line
    print(f"\nthe endpoint was named after {said:.1f} s; the run ended after {took:.1f} s")
    assert p.returncode == 1, stdout
    assert took < 30 + 20, took                     # the shorter limit (30 s) and the start, not 300 s
    assert took >= 29, took                                      # calls did wait for it meanwhile
    df = pd.read_parquet(next(out.glob("*/results.parquet")))
    assert len(df) == 3 and (df.status == "failed").all(), df.status.tolist()   # failed: the next run retries them
    assert all("has not answered once in this run" in e and "--give-up-first" in e for e in df.error), list(df.error)


def test_give_up_first_is_an_option_of_the_command_line(tmp_path):
    "`--give-up-first 2`: a dead URL fails its debates after about 2 s."
    url = f"http://127.0.0.1:{free_port()}/v1"
    t0 = time.perf_counter()
    r = subprocess.run([MADLAB, "run", "du", "--agents", f"openai:m,base_url={url}", "--task", "arith", "--n", "2",
                        "--out", str(tmp_path / "runs"), "--no-progress", "--no-cache", "--give-up-first", "2"],
                       capture_output=True, text=True, env=_env(tmp_path), timeout=120)
    took = time.perf_counter() - t0
    assert r.returncode == 1 and f"endpoint {url} refuses connections" in r.stderr, r.stdout + r.stderr
    assert "give-up for an endpoint not reached yet: 2 s" in r.stdout and took < 2 + 15, (took, r.stdout)


def test_an_endpoint_that_answered_then_went_down_keeps_the_full_give_up(fake_server):
    """It answered once, then refuses connections for longer than give_up_first: calls wait (the full give_up_after)
    and get their answers when it is back."""
    from madlab.backends import OpenAIBackend
    from madlab.core import run_sync
    srv = fake_server(reply="The answer is 42.")
    b = OpenAIBackend("m", base_url=srv.url, api_key="sk-test", timeout=2, max_retries=0, give_up_after=60,
                      give_up_first=0.5)
    async def go():
        first = await b.complete(MSGS)
        br = b._endpoint().breaker
        srv.down()
        call = asyncio.ensure_future(b.complete(MSGS))
        while not (br.open and br.confirmed):                   # the outage is confirmed (a probe refused too)
            assert not call.done(), call.exception()
            await asyncio.sleep(0.01)
        while time.monotonic() < br.last_answer + 4 * br.give_up_first:  # well past the shorter limit
            assert not call.done(), call.exception()
            await asyncio.sleep(0.05)
        srv.up()
        return first, await asyncio.wait_for(call, 30), br
    first, second, br = run_sync(go())
    assert first.text and second.text and not br.first and br.give_up_now == 60 and br.outages == 1

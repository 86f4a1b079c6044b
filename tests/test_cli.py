"""The `madlab` command line: help lists every option, usage errors exit 2 naming the option, the thin wrappers pass their options on."""
from __future__ import annotations
import shutil, subprocess, sys, time, types
from pathlib import Path
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.cli import main

def invoke(*args): return CliRunner().invoke(main, list(args))

CONTROLMAD_OPTIONS = ["--size", "--games", "--agents", "--team", "--depth", "--confidence / --no-confidence", "--self-adjustment / --no-self-adjustment",
                      "--majority-vote / --no-majority-vote", "--order", "--supervisor", "--data", "--out", "--concurrency", "--seed", "--max-tokens",
                      "--temperature", "--cache / --no-cache", "--resume / --no-resume"]

def test_help_lists_every_command_and_option():
    r = invoke("--help"); assert r.exit_code == 0 and "run" in r.output and "sweep" in r.output
    r = invoke("run", "--help"); assert "controlmad" in r.output and "s4" in r.output
    r = invoke("run", "controlmad", "--help")
    for o in CONTROLMAD_OPTIONS: assert o in r.output, o
    r = invoke("run", "s4", "--help")
    for o in ["--data", "--n", "--agents", "--out", "--seed", "--concurrency", "--cache / --no-cache"]: assert o in r.output, o
    r = invoke("sweep", "--help")
    for o in ["NOTEBOOK", "-p, --param NAME VALUE...", "--out", "--workers", "--scheduler"]: assert o in r.output, o

@pytest.mark.parametrize("args, option, words", [
    (["--order", "random"], "--order", ["'truth'", "'agents'"]),
    (["--games", "ten"], "--games", ["1-20"]),
    (["--games", "5-2"], "--games", ["range goes up"]),
    (["--size", "1"], "--size", [">=2"]),
    (["--size", "99"], "--size", ["no games of size 99"]),
    (["--depth", "-1"], "--depth", [">=0"]),
    (["--concurrency", "0"], "--concurrency", [">=1"]),
    (["--temperature", "hot"], "--temperature", ["not a valid float"]),
    (["--agents", "gpt-5"], "--agents", ["KIND:NAME", "synthetic, openai"]),
    (["--agents", "anthropic:claude"], "--agents", ["unknown backend kind"]),
    (["--agents", "synthetic:genius"], "--agents", ["strong, medium, weak"]),
    (["--supervisor", "nope"], "--supervisor", ["KIND:NAME"]),
    (["--data", "/no/such/folder"], "--data", ["does not exist"]),
    (["--team", "/no/such/team.yaml"], "--team", ["does not exist"]),
    (["--dpeth", "2"], "--dpeth", ["No such option"]),
])
def test_usage_errors_exit_2_and_name_the_option(args, option, words):
    r = invoke("run", "controlmad", *args)
    assert r.exit_code == 2, r.output
    assert option in r.output, r.output
    for w in words: assert w in r.output, (w, r.output)

def test_odd_inputs_are_usage_errors_not_tracebacks(tmp_path):
    notes = tmp_path / "notes.jsonl"; notes.write_text("# not a game\n")
    empty = tmp_path / "empty.jsonl"; empty.write_text("")
    binary = tmp_path / "bin.jsonl"; binary.write_bytes(b"\xff\xfe\x00garbage")
    cases = [(["--data", str(notes)], "--data", "malformed JSON"),
             (["--data", str(empty)], "--data", "holds no games"),
             (["--data", str(binary)], "--data", "ControlMAD's JSONL format"),
             (["--data", str(tmp_path), "--size", "6"], "--size", "no games of size 6"),
             (["--games", "1-1000000000000"], "--games", "more than 100,000 games"),
             (["--games", "1-3", "--size", "4", "--out", str(notes / "sub")], "--out", "cannot create the output folder")]
    for args, option, words in cases:
        t0 = time.perf_counter()
        r = invoke("run", "controlmad", "--out", str(tmp_path / "o"), *args)
        assert r.exit_code == 2 and option in r.output and words in r.output, (args, r.output, r.exception)
        assert time.perf_counter() - t0 < 10 and "Traceback" not in r.output
    for args, option, words in [(["--data", str(notes)], "--data", "missing columns"), (["--n", "1", "--out", str(notes / "sub")], "--out", "cannot create")]:
        r = invoke("run", "s4", *args)
        assert r.exit_code == 2 and option in r.output and words in r.output, (args, r.output, r.exception)

def test_agents_and_team_are_exclusive(tmp_path):
    f = tmp_path / "team.yaml"; f.write_text("- {spec: 'synthetic:strong'}\n")
    r = invoke("run", "controlmad", "--agents", "synthetic:weak", "--team", str(f))
    assert r.exit_code == 2 and "either --agents or --team" in r.output
    f.write_text("just: [a, b]\n")
    r = invoke("run", "controlmad", "--team", str(f))
    assert r.exit_code == 2 and "--team" in r.output

def test_s4_wrapper_passes_options(monkeypatch, tmp_path):
    seen = {}
    def run_s4(**kw): seen.update(kw); return object(), "S4 summary: 3 prompts"
    mod = types.ModuleType("madlab.protocols.s4"); mod.run_s4 = run_s4
    monkeypatch.setitem(sys.modules, "madlab.protocols.s4", mod)
    csv = tmp_path / "p.csv"; csv.write_text("id,prompt,type,label\n1,hi,greeting,safe\n")
    r = invoke("run", "s4", "--data", str(csv), "--n", "3", "--agents", "synthetic:strong,seed=1,synthetic:weak", "--out", str(tmp_path), "--seed", "4", "--concurrency", "2", "--no-cache")
    assert r.exit_code == 0, r.output
    assert "S4 summary: 3 prompts" in r.output
    assert seen == {"data": str(csv), "n": 3, "agents": ["synthetic:strong,seed=1", "synthetic:weak"], "out": str(tmp_path), "seed": 4, "concurrency": 2, "cache": False}
    assert invoke("run", "s4", "--n", "0").exit_code == 2

def test_sweep_wrapper_parses_repeated_params(monkeypatch, tmp_path):
    seen = {}
    def sweep(notebook, params, out=None, workers=None, scheduler=None):
        seen.update(notebook=notebook, params=params, out=out, workers=workers, scheduler=scheduler)
        return pd.DataFrame({"depth": ["1", "2"], "accuracy": [0.5, 0.75]})
    mod = types.ModuleType("madlab.experiments"); mod.sweep = sweep
    monkeypatch.setitem(sys.modules, "madlab.experiments", mod)
    nb = tmp_path / "exp.ipynb"; nb.write_text("{}")
    r = invoke("sweep", str(nb), "-p", "depth", "1", "2", "3", "--workers", "2", "-p", "size", "4", "6", "--param", "lr", "-0.5", "--out", str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    assert seen == {"notebook": str(nb), "params": {"depth": ["1", "2", "3"], "size": ["4", "6"], "lr": ["-0.5"]}, "out": str(tmp_path / "o"), "workers": 2, "scheduler": None}
    assert "accuracy" in r.output and f"summary: {tmp_path / 'o' / 'summary.parquet'}" in r.output
    for bad, word in [(["-p", "depth"], "needs at least one value"), (["-p", "depth", "1", "-p", "depth", "2"], "given twice"),
                      (["stray", "-p", "d", "1"], "unexpected argument"), (["-p", "d", "1", "--wrkers", "2"], "--wrkers"), (["-p", "1x", "1"], "not a parameter name")]:
        r = invoke("sweep", str(nb), *bad)
        assert r.exit_code == 2 and word in r.output, (bad, r.output)
    assert invoke("sweep", str(tmp_path / "missing.ipynb"), "-p", "d", "1").exit_code == 2

def test_module_entry_point_runs():
    exe = shutil.which("madlab", path=str(Path(sys.executable).parent))
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "madlab.cli", "--help"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, timeout=60)
    assert r.returncode == 0 and "run" in r.stdout
    r = subprocess.run(cmd[:-1] + ["run", "controlmad", "--order", "x"], capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, timeout=60)
    assert r.returncode == 2 and "--order" in r.stderr

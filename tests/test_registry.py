"""One registry shape for every extension point: a package outside madlab adds a task, a decision rule, a protocol and a
backend provider through entry points (`madlab.tasks`, `madlab.decisions`, `madlab.protocols`, `madlab.backends`), and
`madlab run` and the listings find them with no edit to madlab; an unknown name says which known names are close."""
from __future__ import annotations
import os, subprocess, sys, textwrap
from pathlib import Path
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]

MODULE = '''
import dataclasses
from madlab.formats import Task, register_task, TASKS
from madlab.tasks.arith import toy_arith_items
from madlab.protocol import protocol, get_protocol
from madlab.decisions import Plurality
from madlab.backends import get_backend

def _load(data, size): return [dataclasses.replace(it, task="ext_arith") for it in toy_arith_items(4, seed=3)]
register_task(Task("ext_arith", _load, TASKS["arith"].format, doc="sums from an outside package", own_data=True))

@protocol("ext_solo", planned=lambda s: 1)
async def ext_solo(d):
    "Each agent answers once, alone (an outside package's protocol)."
    async for r in get_protocol("self_consistency").fn(d): yield r

class ExtFirst(Plurality):
    "The most votes, as an outside package names it."
    name = "ext_first"

def first_rule(arg):
    "The most votes (an outside package's rule)."
    return ExtFirst()

def make_backend(rest, **kw):
    "`extbe:PERSONA`: madlab's synthetic agents, from an outside package."
    return get_backend("synthetic:" + rest, **kw)
'''

ENTRY_POINTS = """
[madlab.tasks]
ext_arith = labext

[madlab.protocols]
ext_solo = labext

[madlab.decisions]
ext_first = labext:first_rule

[madlab.backends]
extbe = labext:make_backend
"""

@pytest.fixture
def outside(tmp_path) -> Path:
    "A folder holding an installed-looking package `labext`: its module and a dist-info offering its four entries."
    pkg = tmp_path / "site"; pkg.mkdir()
    (pkg / "labext.py").write_text(MODULE)
    info = pkg / "labext-0.1.dist-info"; info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: labext\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return pkg

def _env(path: Path | None) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + ([str(path)] if path else []))}

def _python(code: str, path: Path | None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=_env(path),
                          timeout=300)

def _madlab(args: list[str], path: Path | None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from madlab.cli import main; main()", *args], capture_output=True,
                          text=True, env=_env(path), timeout=300)

def test_madlab_run_uses_an_outside_task_rule_protocol_and_backend(outside, tmp_path):
    out = tmp_path / "out"
    r = _madlab(["run", "ext_solo", "--task", "ext_arith", "--n", "3", "--agents",
                 "extbe:strong,extbe:strong,extbe:weak", "--decision", "ext_first", "--no-cache", "--no-progress",
                 "--out", str(out)], outside)
    assert r.returncode == 0, r.stdout + r.stderr
    (table,) = out.glob("*/results.parquet")
    df = pd.read_parquet(table)
    assert len(df) == 3 and set(df.protocol) == {"ext_solo"} and set(df.task) == {"ext_arith"}, df
    assert set(df.decision_rule) == {"ext_first"} and df.status.eq("done").all() and df.calls.gt(0).all(), df
    assert all(i.startswith("arith-3-") for i in df.item_id)           # the outside loader's items
    r = _madlab(["run", "du", "--task", "ext_arith", "--n", "2", "--no-cache", "--no-progress", "--out", str(out)],
                outside)
    assert r.returncode == 0, r.stdout + r.stderr                        # a built-in protocol on the outside task

def test_outside_entries_are_offered_unloaded_then_found_and_listed(outside):
    r = _python("""
        import sys
        from madlab.tasks import TASKS, get_task
        from madlab.decisions import DECISIONS, get_decision
        from madlab.protocol import PROTOCOLS, get_protocol
        from madlab.backends import BACKEND_PROVIDERS, backend_kinds
        assert "labext" not in sys.modules and "ext_arith" not in TASKS and "ext_arith" in TASKS.names()   # offered
        assert "ext_first" in DECISIONS.names() and "ext_solo" in PROTOCOLS.names() and "extbe" in backend_kinds()
        get_task("arith"); assert "labext" not in sys.modules                  # another name never loads it
        print(get_decision("ext_first").name, get_task("ext_arith").doc, get_protocol("ext_solo").doc.split(" (")[0])
    """, outside)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ext_first sums from an outside package Each agent answers once, alone"
    listed = {cmd: _madlab([cmd], outside).stdout for cmd in ("tasks", "decisions", "backends", "protocols")}
    assert "ext_arith: sums from an outside package" in listed["tasks"]
    assert "ext_first: The most votes (an outside package's rule)." in listed["decisions"]
    assert "extbe: `extbe:PERSONA`: madlab's synthetic agents, from an outside package." in listed["backends"]
    assert "ext_solo: Each agent answers once, alone" in listed["protocols"]

def test_without_the_package_the_names_are_unknown(tmp_path):
    r = _madlab(["run", "ext_solo", "--n", "1"], None)
    assert r.returncode == 2 and "no protocol 'ext_solo'; protocols: " in " ".join((r.stdout + r.stderr).split()), r.stdout + r.stderr

@pytest.mark.parametrize("lookup, words", [
    ("from madlab.tasks import get_task as f; f('arth')", "task: unknown task 'arth' (did you mean 'arith'"),
    ("from madlab.protocol import get_protocol as f; f('controlmd')",
     "unknown protocol 'controlmd' (did you mean 'controlmad'?); choose from "),
    ("from madlab.decisions import get_decision as f; f('pluralty')",
     "decision: unknown decision rule 'pluralty' (did you mean 'plurality'?)"),
    ("from madlab.backends import get_backend as f; f('synthetc:strong')",
     "unknown backend kind 'synthetc' (did you mean 'synthetic'?)"),
    ("from madlab.formats import get_format as f; import madlab.tasks; f('numbr')",
     "unknown answer format 'numbr' (did you mean 'number'?)"),
    ("from madlab.imports import get_log_format as f; f('critic-actor')",
     "format: unknown log format 'critic-actor' (did you mean 'critic_actor'?)"),
    ("from madlab.protocols.agentverse.rules import make_rule as f; f('order', 'concurent')",
     "environment.rule.order.type: unknown order type 'concurent' (did you mean 'concurrent'?); valid types: "),
])
def test_an_unknown_name_says_which_names_are_close(lookup, words):
    r = _python(f"""
        try: {lookup}
        except ValueError as e: print(e)
        else: print("no error")
    """, None)
    assert words in r.stdout, r.stdout + r.stderr

@pytest.mark.parametrize("args, words", [
    (["run", "du", "--task", "arth"], "unknown task 'arth' (did you mean 'arith'"),
    (["run", "du", "--decision", "pluralty"], "unknown decision rule 'pluralty' (did you mean 'plurality'?)"),
    (["run", "du", "--agents", "synthetc:strong"], "unknown backend kind 'synthetc' (did you mean 'synthetic'?)"),
    (["import", "critic-actor", "."], "unknown log format 'critic-actor' (did you mean 'critic_actor'?)"),
])
def test_the_command_line_says_which_names_are_close(args, words):
    from click.testing import CliRunner
    from madlab.cli import main
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and words in " ".join(r.output.split()) and "Traceback" not in r.output, r.output

def test_a_name_taken_elsewhere_needs_replace():
    from madlab.formats import TASKS, Task, register_task
    arith = TASKS["arith"]
    with pytest.raises(ValueError, match="task 'arith' is already registered"):
        register_task(Task("arith", lambda d, s: [], arith.format))
    assert TASKS["arith"] is arith
    other = Task("arith", lambda d, s: [], arith.format)
    try:
        register_task(other, replace=True)
        assert TASKS["arith"] is other                 # `replace=True` took the name
    finally: register_task(arith, replace=True)
    assert TASKS["arith"] is arith

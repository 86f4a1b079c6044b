"""A protocol's parts belong to the protocol (issue 45, items 2 and 5): they attach to the object `@protocol` returns, a part
it does not take fails where it is written, a re-defined protocol keeps its parts, and the runner, the command line and the
log importers name no protocol: what they need of one (its report, side roles, vote, log format) comes from its parts."""
from __future__ import annotations
import ast, subprocess, sys
from pathlib import Path
import pytest
from madlab.core import Ask, Item
from madlab.protocol import PARTS, PROTOCOLS, Protocol, get_protocol, protocol, _load_protocol_modules

PKG = Path(__file__).resolve().parents[1] / "madlab"

def _define(name, **kw):
    "The same definition each call, as a notebook cell run again is."
    @protocol(name, tasks=("arith",), **kw)
    async def toy(d, rounds: int = 0):
        "Every agent answers once."
        r = d.new_round("answer", "final")
        r.turns = await d.gather(a.ask(d.item.prompt, kind="number", parse=lambda s: int(s.split()[-1].strip(".")), ask=Ask(item=d.item))
                                 for a in d.members())
        d.result = {"answer": r.turns[0].answer}
        yield r
    return toy

@pytest.fixture
def toy():
    p = _define("_parts_toy")
    yield p
    del PROTOCOLS["_parts_toy"]

def test_an_unknown_part_fails_where_it_is_written_naming_the_parts(toy):
    with pytest.raises(AttributeError) as e:
        @toy.reprot
        def _r(res, folder=None): return "x"
    assert "'reprot'" in str(e.value) and ", ".join(PARTS) in str(e.value)
    assert {"team", "report", "log_html", "log_text", "row", "check", "task", "inputs", "choices", "ballots", "features"} <= set(PARTS)

def test_a_report_attached_to_the_protocol_is_what_a_run_uses(toy, tmp_path):
    from madlab.run import run_experiment
    seen = []
    @toy.report
    def _report(res, folder=None):
        seen.append(len(res.df))
        return "the toy's own report"
    @toy.row
    def _row(t): return {"toy_rounds": len(t.rounds)}
    items = [Item(f"q{i}", "arith", f"What is {i} + 1?", gold=i + 1) for i in range(3)]
    res = run_experiment(toy, items, ["synthetic:oracle"], out=tmp_path / "run", cache=False)
    assert seen == [3] and res.report == "the toy's own report"
    assert res.df.toy_rounds.tolist() == [1, 1, 1]
    assert get_protocol("_parts_toy").parts.report is _report

def test_defining_a_protocol_again_keeps_its_parts(toy):
    toy.row(len)
    again = _define("_parts_toy")                      # the defining cell run again
    assert again is not toy and PROTOCOLS["_parts_toy"] is again and again.parts.row is len

def test_the_old_registration_apis_are_gone():
    import madlab.debate, madlab.decisions
    for mod, names in ((madlab.debate, ("protocol_hook", "HOOKS", "_PENDING_HOOKS")),
                       (madlab.decisions, ("ballots_from", "BALLOTS", "protocol_features", "PROTOCOL_FEATURES"))):
        assert not [n for n in names if hasattr(mod, n)], mod.__name__

def test_a_protocols_side_roles_stay_out_of_a_runs_name():
    from madlab.run import resolve_run
    _define("_parts_side", side_roles=("referee",))
    try:
        items = [Item("q1", "arith", "What is 1 + 1?", gold=2)]
        team = [{"name": "Ann", "spec": "synthetic:oracle"}, {"name": "Ref", "spec": "synthetic:oracle", "role": "referee"}]
        assert "Ref" not in resolve_run("_parts_side", items=items, team=team, cache=False).name
        assert "Ref" in resolve_run(_define("_parts_plain"), items=items, team=team, cache=False).name
    finally: del PROTOCOLS["_parts_side"], PROTOCOLS["_parts_plain"]

def test_the_log_formats_are_the_protocols_parts_found_from_the_importer_alone():
    code = ("from madlab.imports import get_log_format\nfrom madlab.protocol import get_protocol\n"
            "print(all(get_protocol(n).parts.log_format is get_log_format(n) for n in ('du', 'critic_actor', 'controlmad')))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "True", p.stderr

def _protocol_imports_and_names(path: Path, skip=()) -> tuple[list, list]:
    "(imports of madlab.protocols.*, string constants equal to a registered protocol's name) in module `path`, but in functions `skip`."
    _load_protocol_modules()
    names = {n for n in PROTOCOLS if not n.startswith("_")}
    tree = ast.parse(path.read_text())
    for f in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in skip]: f.body, f.decorator_list = [], []
    imps, lits = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import): imps += [a.name for a in node.names if a.name.startswith("madlab.protocols")]
        elif isinstance(node, ast.ImportFrom):
            mod = ("." * node.level) + (node.module or "")
            if mod.lstrip(".").startswith("protocols") or (node.module or "").startswith("madlab.protocols"): imps.append(mod)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names: lits.append(node.value)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" and node.args and \
                isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("madlab.protocols"): imps.append(node.args[0].value)
    return imps, lits

# `madlab baseline --method` lists the baseline methods of `madlab.budget` (a run method, not the runner), which it names
@pytest.mark.parametrize("module,skip", [("run.py", ()), ("cli.py", ("baseline_cmd",)), ("imports.py", ()), ("import_run.py", ())])
def test_the_runner_the_command_line_and_the_importers_name_no_protocol(module, skip):
    imps, lits = _protocol_imports_and_names(PKG / module, skip)
    assert not imps and not lits, (imps, lits)

def test_the_name_check_sees_an_import_and_a_name(tmp_path):
    (tmp_path / "m.py").write_text("from .protocols.critic_actor import critic_actor_vote\ndef f(p): return p == 'controlmad'\n")
    assert _protocol_imports_and_names(tmp_path / "m.py") == ([".protocols.critic_actor"], ["controlmad"])

def test_an_example_protocol_is_not_listed():
    from click.testing import CliRunner
    from madlab.cli import main
    _define("zz_parts_example", listed=False)
    _define("zz_parts_listed")
    try:
        out = CliRunner().invoke(main, ["run", "--help"]).output
        assert "zz_parts_listed" in out and "zz_parts_example" not in out
    finally: del PROTOCOLS["zz_parts_example"], PROTOCOLS["zz_parts_listed"]

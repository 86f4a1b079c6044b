"""A task is one module: the built-in tasks are the modules of the `madlab.tasks` package, found by scanning it (a new
module is a new task, with no other edit: the registry, `madlab tasks`, the `--task` help and `madlab run` see it); each
task gives its own default items; the older import paths are gone; no module of the tasks and puzzles is over 700 lines."""
import importlib, os, pkgutil, shutil, subprocess, sys, textwrap
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]

def test_the_builtin_tasks_are_the_modules_of_the_package():
    import madlab.tasks as T
    files = sorted(p.stem for p in (ROOT / "madlab" / "tasks").glob("*.py") if not p.stem.startswith("_"))
    assert sorted(n.rsplit(".", 1)[1] for n in T.task_modules()) == files
    builtin = sorted(k for k, t in T.TASKS.items() if t.load.__module__.startswith("madlab.tasks."))
    assert builtin == files == ["arith", "gsm8k", "kks", "market", "mmlu", "pairwise", "safety", "scenario", "stories"]
    for name in files:          # each module holds its task: loader and answer format in one place
        mod = importlib.import_module(f"madlab.tasks.{name}")
        assert T.TASKS[name].load.__module__ == mod.__name__

def test_task_modules_scans_any_package(tmp_path, monkeypatch):
    "A package of task modules (here a temporary one) is found module by module; a '_private' module is not a task."
    from madlab.formats import TASKS
    pkg = tmp_path / "more_tasks"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_helpers.py").write_text("raise RuntimeError('not a task module')\n")
    (pkg / "riddles.py").write_text(textwrap.dedent("""
        from madlab.core import Item
        from madlab.formats import Task, register_task
        from madlab.scoring import TEXT
        RIDDLES = register_task(Task("tmp_riddles", lambda data, size: [Item("r1", "tmp_riddles", "What has keys?", "a piano")],
                                     TEXT, None, "nothing", "riddles", own_data=True, default_items=(1,)))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    from madlab.tasks import task_modules, task_items
    try:
        assert task_modules("more_tasks") == ["more_tasks.riddles"]
        assert [it.gold for it in task_items("tmp_riddles")] == ["a piano"]
    finally: TASKS.unregister("tmp_riddles")

def _copy_with_task(tmp_path) -> Path:
    "A copy of madlab's checkout (package and data) with one new module in madlab/tasks/ and nothing else edited."
    top = tmp_path / "checkout"
    shutil.copytree(ROOT / "madlab", top / "madlab", ignore=shutil.ignore_patterns("__pycache__"))
    (top / "data").symlink_to(ROOT / "data")
    (top / "madlab" / "tasks" / "riddle.py").write_text(textwrap.dedent('''
        """The `riddle` task: three sums, answered with a number."""
        from madlab.core import Item
        from madlab.formats import Task, register_task
        from madlab.scoring import NUMBER

        def riddle_items(data=None, size=None):
            return [Item(f"riddle-{i}", "riddle", f"What is {i} + {i}?", 2 * i) for i in range(1, 4)]

        RIDDLE = register_task(Task("riddle", riddle_items, NUMBER, None, "nothing (three sums)", "sums as riddles",
                                    own_data=True, default_items=(2, 3)))
    '''))
    return top

def _madlab(top, *args):
    env = {**os.environ, "PYTHONPATH": str(top)}
    code = "import sys; from madlab.cli import console; sys.argv = ['madlab', *sys.argv[1:]]; console()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, cwd=top, env=env)

def test_a_new_task_module_is_a_new_task(tmp_path):
    "In-tree, a new task is one new module: `madlab tasks` lists it, `--task` offers it, a run takes its default items."
    top = _copy_with_task(tmp_path)
    out = _madlab(top, "tasks")
    assert out.returncode == 0, out.stderr
    assert "riddle: sums as riddles" in out.stdout
    out = _madlab(top, "run", "du", "--help")
    assert out.returncode == 0, out.stderr
    assert "riddle" in " ".join(out.stdout.split())           # the --task help comes from the registry
    out = _madlab(top, "run", "du", "--task", "riddle", "--no-cache", "--seed", "1", "--out", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stdout + out.stderr
    import pandas as pd
    [res] = list((tmp_path / "runs").rglob("results.parquet"))
    assert sorted(pd.read_parquet(res).item_id) == ["riddle-2", "riddle-3"]   # the task's default items

def test_the_task_help_names_every_registered_task():
    from click.testing import CliRunner
    from madlab.cli import main
    from madlab.tasks import TASKS
    out = CliRunner().invoke(main, ["run", "du", "--help"], terminal_width=400)
    assert out.exit_code == 0, out.output
    words = " ".join(out.output.split())
    assert f"a registered task ({', '.join(TASKS)}) or a YAML task file" in words

def test_default_items_come_from_the_task_not_its_name():
    import inspect
    from madlab.run import resolve_run
    from madlab.tasks import TASKS
    assert TASKS["kks"].default_items == tuple(range(1, 21))
    assert all(t.default_items is None for k, t in TASKS.items() if k not in ("kks", "kks-solution", "stories"))
    assert '"kks"' not in inspect.getsource(resolve_run)
    plan = resolve_run("controlmad", "kks", size=4)
    assert [it.id for it in plan.items] == [f"kks-4-{i:04d}" for i in range(1, 21)] or len(plan.items) == 20

MOVED = {   # name -> (its older import path, its home)
    "Task": ("madlab.tasks", "madlab.formats"), "register_task": ("madlab.tasks", "madlab.formats"),
    "MarketRecord": ("madlab.tasks", "madlab.tasks.market"), "RELIABILITY_LABELS": ("madlab.tasks", "madlab.tasks.market"),
    "MARKET_QUESTION": ("madlab.tasks", "madlab.tasks.market"), "load_market_news": ("madlab.tasks", "madlab.tasks.market"),
    "market_item": ("madlab.tasks", "madlab.tasks.market"), "load_market": ("madlab.tasks", "madlab.tasks.market"),
    "pairwise_prompt": ("madlab.tasks", "madlab.tasks.pairwise"), "load_faireval": ("madlab.tasks", "madlab.tasks.pairwise"),
    "load_pairwise": ("madlab.tasks", "madlab.tasks.pairwise"),
    "AnswerFormat": ("madlab.scoring", "madlab.formats"), "register_format": ("madlab.scoring", "madlab.formats"),
    "reasoned": ("madlab.scoring", "madlab.formats"), "answer_field": ("madlab.scoring", "madlab.formats"),
    "PairwiseVerdict": ("madlab.scoring", "madlab.tasks.pairwise"), "cohen_kappa": ("madlab.scoring", "madlab.tasks.pairwise"),
    "toy_arith_items": ("madlab.scoring", "madlab.tasks.arith"), "load_gsm8k": ("madlab.tasks", "madlab.tasks.gsm8k"),
    "load_xstest": ("madlab.tasks", "madlab.tasks.safety"), "load_mmlu": ("madlab.tasks", "madlab.tasks.mmlu"),
    "load_scenarios": ("madlab.tasks", "madlab.tasks.scenario"), "task_data": ("madlab.public_sets", "madlab.tasks"),
    "load_controlmad": ("madlab.puzzles", "madlab.puzzle_sets"), "parse_kks_answer": ("madlab.puzzles", "madlab.tasks.kks"),
    "kks_players": ("madlab.kks", "madlab.tasks.kks"),
}

USED = {("madlab.tasks", "Task"), ("madlab.tasks", "register_task"), ("madlab.kks", "kks_players"),   # names the
        ("madlab.scoring", "AnswerFormat"), ("madlab.scoring", "register_format"), ("madlab.scoring", "reasoned"),  # old module
        ("madlab.scoring", "answer_field")}                                                                          # uses itself

@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_name_imports_from_its_home_only(name):
    old, home = MOVED[name]
    assert name in importlib.import_module(home).__all__
    assert name not in getattr(importlib.import_module(old), "__all__", ())
    if (old, name) not in USED: assert not hasattr(importlib.import_module(old), name), f"{old}.{name} still imports"

def test_the_old_task_modules_are_gone():
    for gone in ("market.py", "pairwise.py", "tasks.py"): assert not (ROOT / "madlab" / gone).exists(), gone

def test_old_json_of_moved_answer_types_still_reads():
    from madlab.core import from_jsonable
    from madlab.tasks.kks import KKSAnswer
    from madlab.tasks.market import StockAnswer, MarketRecord
    from madlab.tasks.pairwise import PairwiseVerdict
    assert isinstance(from_jsonable({"__type__": "madlab.puzzles.KKSAnswer", "roles": {"A": "knight"}}), KKSAnswer)
    rec = {"source": "s", "date": "2025-01-01", "reliability": 0.5, "data": "x"}
    assert isinstance(from_jsonable({"__type__": "madlab.market.MarketRecord", **rec}), MarketRecord)
    assert isinstance(from_jsonable({"__type__": "madlab.tasks.MarketRecord", **rec}), MarketRecord)
    for old in ("madlab.market.StockAnswer", "madlab.scoring.StockAnswer"):
        assert isinstance(from_jsonable({"__type__": old, "position": "Buy"}), StockAnswer)
    for old in ("madlab.pairwise.PairwiseVerdict", "madlab.scoring.PairwiseVerdict"):
        assert isinstance(from_jsonable({"__type__": old, "score_1": 7, "score_2": 5}), PairwiseVerdict)

def test_the_task_and_puzzle_modules_are_under_700_lines():
    mods = [ROOT / "madlab" / "puzzles.py", ROOT / "madlab" / "puzzle_sets.py", ROOT / "madlab" / "kks.py",
            *sorted((ROOT / "madlab" / "tasks").glob("*.py"))]
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in mods}
    assert max(sizes.values()) < 700, sizes

def test_moved_answer_types_keep_the_names_their_json_carries():
    "Transcripts and results of a run are the same before and after the move: the JSON type names did not change."
    from madlab.core import to_jsonable
    from madlab.tasks.kks import KKSAnswer
    from madlab.tasks.market import StockAnswer, MarketRecord
    from madlab.tasks.pairwise import PairwiseVerdict
    got = [to_jsonable(o)["__type__"] for o in (KKSAnswer({"A": "knight"}), StockAnswer("Buy"),
                                                 MarketRecord("s", "2025-01-01", 0.5, "x"), PairwiseVerdict(7, 5))]
    assert got == ["madlab.puzzles.KKSAnswer", "madlab.market.StockAnswer", "madlab.market.MarketRecord",
                   "madlab.pairwise.PairwiseVerdict"]

def test_a_task_files_gold_is_checked_by_its_formats_own_method(tmp_path):
    "A task file's gold is checked by its answer format's `gold_problem`, whatever the format's kind is called."
    import dataclasses
    from madlab.core import OptionError
    from madlab.formats import Task, register_task
    from madlab.scoring import TEXT
    from madlab.tasks import TASKS, task_items
    lower = dataclasses.replace(TEXT, gold_problem=lambda gold, options: None if str(gold).islower() else "is not lower case")
    register_task(Task("tmp_lower", lambda data, size: [], lower, None, "nothing", own_data=True))
    try:
        (tmp_path / "q.jsonl").write_text('{"q": "a?", "a": "yes"}\n{"q": "b?", "a": "NO"}\n')
        (tmp_path / "t.yaml").write_text("name: tmp_lowerfile\ndata: q.jsonl\nprompt: '{{ q }}'\ngold: a\nanswer: tmp_lower\n")
        with pytest.raises(OptionError, match="'NO' is not lower case, which answer: text needs"): task_items(tmp_path / "t.yaml")
    finally:
        TASKS.unregister("tmp_lower"); TASKS.unregister("tmp_lowerfile")

def test_a_public_sets_name_is_resolved_by_the_task_alone(tmp_path, monkeypatch):
    "`--data SET` is checked by the command line and resolved once, by `madlab.tasks.task_data`."
    from madlab.cli_options import _data_cb
    from madlab.tasks import task_items
    monkeypatch.setenv("MADLAB_DATA", str(tmp_path))
    assert _data_cb(None, None, "xstest") == "xstest"
    (tmp_path / "xstest").mkdir()
    (tmp_path / "xstest" / "xstest_prompts.csv").write_text("id,prompt,label\n1,hi,safe\n")
    assert [it.id for it in task_items("safety", "xstest")] == ["xstest-1"]

def test_the_sized_tasks_are_known_in_one_place():
    "`sized_tasks` is what the command line offers --size for and what a size's refusal names."
    from madlab.cli_options import _sized_tasks
    from madlab.core import OptionError
    from madlab.protocol import get_protocol
    from madlab.formats import Task, register_task
    from madlab.scoring import TEXT
    from madlab.tasks import TASKS, sized_tasks, task_items
    register_task(Task("tmp_sized", lambda data, size: [], TEXT, None, "nothing", own_data=True, size="rows"))
    try:
        assert sized_tasks() == _sized_tasks(get_protocol("du")) == ["kks", "kks-solution", "tmp_sized"]
        with pytest.raises(OptionError, match=r"only kks, kks-solution, tmp_sized does"): task_items("arith", size=3)
    finally: TASKS.unregister("tmp_sized")

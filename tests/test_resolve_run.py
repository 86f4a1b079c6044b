"""One path for a run: every protocol, with its default task and its default (synthetic) team, gives the same results table from
Python (`resolve_run` / `run_experiment`) and from `madlab run` (CliRunner on `madlab.cli.main`), since both assemble it with `resolve_run`."""
from __future__ import annotations
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.cli import main, run as run_group
from madlab.run import resolve_run, run_experiment, load_items, RunPlan

PROTOCOLS = run_group.list_commands(None)
COLS = ["item_id", "answer", "correct", "status"]

def _table(df: pd.DataFrame) -> pd.DataFrame:
    "The compared columns, as text (a table read back from Parquet holds JSON text where the one in memory holds values)."
    return df.reindex(columns=COLS).astype(str).reset_index(drop=True)

def test_every_protocol_is_covered():
    assert {"agentverse", "cluster", "controlmad", "critic_actor", "du", "eot", "multi_persona", "s4", "self_consistency", "single"} <= set(PROTOCOLS)

def _task_args(name) -> list:
    "No --task (the protocol's default) when its data is here; else the protocol's next task that has its own data (critic_actor's gsm8k needs GSM8K)."
    from madlab.core import OptionError
    from madlab.protocol import get_protocol
    for task in [None, *(get_protocol(name).tasks or ())[1:]]:
        try: resolve_run(name, task=task, n=1, cache=False); return [] if task is None else ["--task", task]
        except OptionError as e:
            if e.option != "data": raise
    pytest.skip(f"no task of {name} has its data here")

@pytest.mark.parametrize("name", PROTOCOLS)
def test_python_and_command_line_give_the_same_table(name, tmp_path):
    extra = _task_args(name)
    plan = resolve_run(name, task=extra[1] if extra else None, n=2, seed=3, cache=False)
    assert isinstance(plan, RunPlan) and len(plan.items) >= 1 and plan.name in repr(plan) and plan.name in plan._repr_html_()
    py = run_experiment(plan)
    assert not py.failed and len(py.df) == len(plan.items)
    again = run_experiment(name, task=extra[1] if extra else None, n=2, seed=3, cache=False)          # the protocol's name and options: the same plan, the same run
    pd.testing.assert_frame_equal(_table(again.df), _table(py.df))
    r = CliRunner().invoke(main, ["run", name, "--n", "2", "--seed", "3", "--no-cache", "--no-progress", "--out", str(tmp_path), *extra])
    assert r.exit_code == 0, r.output
    folder = tmp_path / plan.name                                    # the command names the run as resolve_run does
    assert folder.is_dir(), sorted(p.name for p in tmp_path.iterdir())
    cli = pd.read_parquet(folder / "results.parquet")
    pd.testing.assert_frame_equal(_table(cli), _table(py.df))

def test_agentverse_from_a_notebook_without_a_team():
    "run_experiment('agentverse', items) raised TypeError: its team hook returns no team without a config; the synthetic team runs."
    items = load_items("arith", n=2)
    res = run_experiment("agentverse", items, cache=False)
    assert res.df.status.tolist() == ["done", "done"]
    assert [a.name for a in resolve_run("agentverse", items=items, cache=False).team] == [a.name for a in resolve_run("du", items=items, cache=False).team]

def test_dry_run_prints_the_plan_python_makes(tmp_path):
    r = CliRunner().invoke(main, ["run", "controlmad", "--n", "2", "--depth", "0", "--seed", "1", "--decision", "plurality", "--dry-run", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    plan = resolve_run("controlmad", n=2, depth=0, seed=1, decision="plurality", out=tmp_path / "out")
    assert repr(plan) in r.output and plan.name.endswith("_decision-plurality")
    assert not (tmp_path / "out").exists()                            # nothing run, no folder

def test_a_plan_runs_as_it_is():
    from madlab.core import OptionError
    plan = resolve_run("du", n=1, cache=False)
    with pytest.raises(OptionError, match="run as it is"): run_experiment(plan, rounds=2)

def test_any_item_filter_chooses_the_items(tmp_path):
    "An `ItemFilter` of one's own is an option of `resolve_run`: it picks the items, the run folder notes what it kept; `majority_error=A` is one such filter."
    from madlab.core import OptionError
    from madlab.run import ItemFilter, MajorityErrorFilter
    class EvenIds(ItemFilter):
        option = "even_ids"
        def select(self, items, team, **kw): return [it for i, it in enumerate(items) if i % 2 == 0]
    plan = resolve_run("du", task="arith", n=6, item_filter=EvenIds(), folder=tmp_path / "run", rounds=0)
    every = load_items("arith", None, None, None, None)
    assert [it.id for it in plan.items] == [it.id for it in every[0::2][:6]]       # `n` counts the kept items
    assert plan.notes["even_ids"]["kept"] == 6 and plan.notes["even_ids"]["of"] == len(every)
    res = run_experiment(plan)
    assert len(res.df) == 6 and (tmp_path / "run" / "config.json").read_text().count("even_ids") == 1
    with pytest.raises(OptionError, match="item_filter"): resolve_run("du", task="arith", n=4, item_filter=EvenIds(), majority_error=3)
    with pytest.raises(OptionError, match="item_filter"): resolve_run("du", task="arith", n=4, item_filter="wrong ones")
    class NoneKept(ItemFilter):
        def select(self, items, team, **kw): return []
    with pytest.raises(OptionError, match="is kept by"): resolve_run("du", task="arith", n=4, item_filter=NoneKept())
    assert isinstance(MajorityErrorFilter(3), ItemFilter)

"""YAML task files: GSM8K and MMLU as task files give the built-in tasks' items and scores on the public data ($MADLAB_DATA, default ../shared/data); a template reaching for
Python internals fails with the file and the field before any call; bad files name the field, bad records path:line."""
from __future__ import annotations
from pathlib import Path
import pandas as pd
import pytest
from conftest import needs_public_data
from madlab.core import public_data
from click.testing import CliRunner
from madlab.cli import main
from madlab.core import OptionError
from madlab.tasks import task_items, load_gsm8k, load_mmlu, madlab_data
from madlab.run import run_experiment

GSM8K, MMLU = public_data("gsm8k", "test.jsonl"), public_data("mmlu")
TEAM = ["synthetic:strong", "synthetic:weak", "synthetic:weak"]
need = needs_public_data("GSM8K's test set and MMLU", "gsm8k", "test.jsonl")

def _same(a, b): return [(x.id, x.prompt, x.gold) for x in a] == [(x.id, x.prompt, x.gold) for x in b]

@need
def test_gsm8k_and_mmlu_task_files_match_the_built_in_tasks(tmp_path):
    for builtin, yaml, data in ((load_gsm8k(GSM8K), madlab_data("tasks", "gsm8k.yaml"), GSM8K), (load_mmlu(MMLU), madlab_data("tasks", "mmlu.yaml"), MMLU)):
        mine = task_items(yaml, data)
        assert len(mine) == len(builtin) > 600 and _same(mine, builtin)
        a = run_experiment("du", builtin[:40], TEAM, rounds=1, cache=False).df
        b = run_experiment("du", mine[:40], TEAM, rounds=1, cache=False).df
        assert list(a.correct) == list(b.correct) and list(a.answer.astype(str)) == list(b.answer.astype(str))

def _task(tmp_path, text, data='{"q": "What is 2+2?", "a": 4}\n'):
    (tmp_path / "d.jsonl").write_text(data)
    f = tmp_path / "t.yaml"; f.write_text(text); return f

def test_a_template_reaching_for_internals_fails_before_any_call(tmp_path):
    f = _task(tmp_path, "name: evil\ndata: d.jsonl\nprompt: \"{{ ''.__class__.__mro__[1].__subclasses__() }}\"\ngold: a\nanswer: number\n")
    with pytest.raises(OptionError) as e: task_items(f)
    assert str(f) in str(e.value) and "field prompt" in str(e.value)
    r = CliRunner().invoke(main, ["run", "du", "--task", str(f), "--out", str(tmp_path / "out"), "--no-cache"])
    assert r.exit_code == 2 and "field prompt" in r.output and not (tmp_path / "out").exists(), r.output

@pytest.mark.parametrize("text, words", [
    ("name: x\ndata: d.jsonl\nprompt: '{{ q }}'\nanswer: number\n", ["field gold: missing"]),
    ("name: x\ndata: d.jsonl\nprompt: '{{ q }}'\ngold: a\nanswer: dice\n", ["field answer: must be number, choice, text, regex"]),
    ("name: x\ndata: d.jsonl\nprompt: '{{ q }'\ngold: a\nanswer: number\n", ["field prompt: bad template"]),
    ("name: x\ndata: d.jsonl\nprompt: '{{ q }}'\ngold: a\nanswer: number\ncolour: red\n", ["field colour: unknown"]),
    ("name: x\ndata: d.jsonl\nprompt: '{{ question }}'\ngold: a\nanswer: number\n", ["d.jsonl:1: field prompt", "question"]),
])
def test_bad_task_files_name_the_field_and_bad_records_the_line(tmp_path, text, words):
    f = _task(tmp_path, text)
    with pytest.raises(OptionError) as e: task_items(f)
    for w in words: assert w in str(e.value), (w, str(e.value))

def test_a_task_file_runs_on_the_command_line(tmp_path):
    data = "".join(f'{{"q": "What is {i}+{i}?", "a": {2 * i}, "n": {i}}}\n' for i in range(5))
    f = _task(tmp_path, "name: doubles\ndata: d.jsonl\nid: 'double-{{ n }}'\nprompt: '{{ q }}'\ngold: a\nanswer: number\n", data)
    r = CliRunner().invoke(main, ["run", "du", "--task", str(f), "--out", str(tmp_path / "out"), "--name", "r", "--no-cache", "--decision", "majority"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "out" / "r" / "results.parquet")
    assert list(df.item_id) == [f"double-{i}" for i in range(5)] and set(df.task) == {"doubles"} and df.correct.notna().all()

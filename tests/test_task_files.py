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
from madlab.tasks import task_items
from madlab.tasks.gsm8k import load_gsm8k
from madlab.tasks.mmlu import load_mmlu
from madlab.core import madlab_data
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
    ("name: x\ndata: d.jsonl\nprompt: '{{ question }}'\ngold: a\nanswer: number\n", ["t.yaml, field 'prompt': undefined variable 'question'", "d.jsonl:1"]),
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


# rescoring a run made from a task file, in a fresh process --------------------------------------------------------------
import json, os, subprocess, sys
MADLAB = str(Path(sys.executable).parent / "madlab")

def _sh(tmp_path, *args, python=None):
    "`madlab ARGS` (or `python -c PYTHON`) in a fresh process: no task file registered beforehand."
    env = {**os.environ, "MADLAB_CACHE": str(tmp_path / "cache"), "NO_COLOR": "1"}
    cmd = [sys.executable, "-c", python] if python else [MADLAB, *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)

def _doubles_run(tmp_path, pad: int = 0) -> Path:
    "A du run over a user's task file in tmp (padded by a comment of `pad` bytes); its run folder."
    data = "".join(f'{{"q": "What is {i}+{i}?", "a": {2 * i}, "n": {i}}}\n' for i in range(4))
    f = _task(tmp_path, "name: doubles\ndata: d.jsonl\nid: 'double-{{ n }}'\nprompt: '{{ q }}'\ngold: a\nanswer: number\n" + "#" * pad + "\n", data)
    r = CliRunner().invoke(main, ["run", "du", "--task", str(f), "--out", str(tmp_path / "out"), "--name", "r", "--no-cache", "--no-progress"])
    assert r.exit_code == 0, r.output
    return tmp_path / "out" / "r"

def test_rescore_of_a_task_file_run_keeps_its_scores(tmp_path):
    run = _doubles_run(tmp_path)
    before = pd.read_parquet(run / "results.parquet")
    assert before.correct.notna().all()
    (tmp_path / "t.yaml").rename(tmp_path / "moved.yaml")         # the copy in the run folder is what counts
    p = _sh(tmp_path, "rescore", run)
    assert p.returncode == 0, p.stdout + p.stderr
    after = pd.read_parquet(run / "results.parquet")
    assert list(after.correct) == list(before.correct) and ("score_error" not in after or after.score_error.isna().all()), after.T
    p = _sh(tmp_path, "rescore", run, "--decision", "majority")
    assert p.returncode == 0, p.stdout + p.stderr
    assert pd.read_parquet(run / "results.decision-majority.parquet").correct.notna().all()
    p = _sh(tmp_path, "rescore", run, "--compare")
    assert p.returncode == 0 and "majority" in p.stdout and "plurality" in p.stdout, p.stdout + p.stderr
    p = _sh(tmp_path, python=f"from madlab.runs import open_run; print(len(open_run({str(run)!r}).decisions()))")
    assert p.returncode == 0 and int(p.stdout.split()[-1]) >= 3, p.stdout + p.stderr

def test_a_task_file_that_changed_or_moved_is_an_error_not_a_rewrite(tmp_path):
    run = _doubles_run(tmp_path, pad=300_000)                    # too big to copy: the recorded path is read
    cfg = json.loads((run / "config.json").read_text())["task_files"]["doubles"]
    assert cfg["path"] == str((tmp_path / "t.yaml").resolve()) and "copy" not in cfg and len(cfg["sha256"]) == 64
    table = (run / "results.parquet").read_bytes()
    f = tmp_path / "t.yaml"
    f.write_text(f.read_text().replace("answer: number", "answer: text"))
    p = _sh(tmp_path, "rescore", run)
    assert p.returncode == 1 and "has changed since the run" in p.stderr and "Traceback" not in p.stderr, p.stdout + p.stderr
    f.rename(tmp_path / "elsewhere.yaml")
    p = _sh(tmp_path, "rescore", run)
    assert p.returncode == 1 and "has moved" in p.stderr, p.stdout + p.stderr
    assert (run / "results.parquet").read_bytes() == table

def test_rescore_never_writes_fewer_scores_unless_asked(tmp_path):
    "A run whose task file was not recorded (made before it was): rescore refuses to unscore its rows; --allow-fewer-scores writes them."
    run = _doubles_run(tmp_path)
    cfg = json.loads((run / "config.json").read_text()); del cfg["task_files"]
    (run / "config.json").write_text(json.dumps(cfg))
    table = (run / "results.parquet").read_bytes()
    p = _sh(tmp_path, "rescore", run)
    assert p.returncode == 1 and "would leave 0 scored rows where its table has 4" in p.stderr and "--allow-fewer-scores" in p.stderr, p.stdout + p.stderr
    assert (run / "results.parquet").read_bytes() == table
    p = _sh(tmp_path, "rescore", run, "--allow-fewer-scores")
    assert p.returncode == 0, p.stdout + p.stderr
    assert pd.read_parquet(run / "results.parquet").correct.isna().all()


@pytest.mark.parametrize("text, says", [
    ("name: my\ndata: d.jsonl\nprompt: '{{ qestion }}'\ngold: a\nanswer: number\n", "field 'prompt': undefined variable 'qestion'"),
    ("name: my\ndata: d.jsonl\nprompt: '{{ q }}'\ngold: '{{ answer }}'\nanswer: number\n", "field 'gold': undefined variable 'answer'"),
    ("name: my\ndata: nothere.jsonl\nprompt: '{{ q }}'\ngold: a\nanswer: number\n", "field 'data': no file or folder"),
])
def test_task_file_errors_name_the_task_file_and_its_field_not_data(tmp_path, text, says):
    f = _task(tmp_path, text)
    r = CliRunner().invoke(main, ["run", "du", "--task", str(f), "--out", str(tmp_path / "out"), "--no-cache"])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert f"task file {f}, {says}" in r.output and "'--data'" not in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "out").exists()

def test_resuming_after_the_task_file_changed_is_refused(tmp_path):
    run = _doubles_run(tmp_path)
    f = tmp_path / "t.yaml"
    f.write_text(f.read_text().replace("prompt: '{{ q }}'", "prompt: 'Please: {{ q }}'"))
    r = CliRunner().invoke(main, ["run", "du", "--task", str(f), "--out", str(tmp_path / "out"), "--name", "r", "--no-cache", "--no-progress"])
    assert r.exit_code == 2 and "task file doubles" in r.output and "has changed since" in r.output, r.output


def test_a_gold_that_is_no_answer_in_its_format_is_refused_when_the_file_loads(tmp_path):
    "GSM8K's whole solution as the gold of `answer: number` (every synthetic debate failed with a TypeError, every real reply was scored wrong): refused before any call, naming the file, the field and the record."
    rows = [{"question": f"Sam has {i} apples and buys {i} more. How many?", "answer": f"Sam has {i} + {i} = {2 * i} apples.\n#### {2 * i}"} for i in range(1, 4)]
    data = "".join(json.dumps(r) + "\n" for r in rows)
    f = _task(tmp_path, "name: mygsm\ndata: d.jsonl\nprompt: '{{ question }}'\ngold: '{{ answer }}'\nanswer: number\n", data)
    with pytest.raises(OptionError) as e: task_items(f)
    assert f"task file {f}, field 'gold': 'Sam has 1 + 1 = 2 apples.\\n#### 2' is not a number" in str(e.value), str(e.value)
    assert f"(record {tmp_path / 'd.jsonl'}:1, id mygsm-0000)" in str(e.value) and "answer.split('####')" in str(e.value)
    r = CliRunner().invoke(main, ["run", "du", "--task", str(f), "--out", str(tmp_path / "out"), "--no-cache", "--agents", ",".join(TEAM)])
    assert r.exit_code == 2 and "field 'gold'" in r.output and "Traceback" not in r.output and not (tmp_path / "out").exists(), r.output
    f.write_text(f.read_text().replace("gold: '{{ answer }}'", "gold: \"{{ answer.split('####')[-1] }}\""))
    assert [i.gold for i in task_items(f)] == [2, 4, 6]
    r = CliRunner().invoke(main, ["run", "du", "--task", str(f), "--out", str(tmp_path / "out"), "--name", "r", "--no-cache", "--no-progress", "--agents", ",".join(TEAM)])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "out" / "r" / "results.parquet")
    assert (df.status == "done").all() and df.correct.notna().all(), df.T


# a context: template --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("context, words", [
    ("'{{ passage }}'", ["t.yaml, field 'context': undefined variable 'passage'", "d.jsonl:1"]),
    ("'{{ q '", ["t.yaml: field context: bad template"]),
    ("\"{{ ''.__class__.__mro__ }}\"", ["t.yaml: field context: the template reaches for what a task file may not"]),
])
def test_a_bad_context_template_names_the_field(tmp_path, context, words):
    f = _task(tmp_path, f"name: x\ndata: d.jsonl\nprompt: '{{{{ q }}}}'\ngold: a\nanswer: number\ncontext: {context}\n")
    with pytest.raises(OptionError) as e: task_items(f)
    for w in words: assert w in str(e.value), (w, str(e.value))

def test_a_context_template_fills_the_items_context_and_never_the_prompt(tmp_path):
    f = _task(tmp_path, "name: x\ndata: d.jsonl\nprompt: '{{ q }}'\ngold: a\nanswer: number\n"
                        "context: 'Worked: 2 and 2 make {{ a }}.'\n")
    [it] = task_items(f)
    assert (it.prompt, it.context, it.gold) == ("What is 2+2?", "Worked: 2 and 2 make 4.", 4)

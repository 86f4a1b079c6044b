"""Bad user input gives a clear `ValueError` / `OptionError` naming the file (and line) or the option, never a traceback from deep inside:
JSONL nested too deeply, CSV fields over the csv module's limit, binary files, replay specs that name no transcript, sweep output folders
that cannot be made and Dask schedulers that cannot be reached. Offline and fast."""
from __future__ import annotations
import csv, json, re, time
from pathlib import Path
import pytest
from madlab.core import OptionError, Transcript
from madlab.tasks.gsm8k import load_gsm8k
from madlab.tasks.market import load_market_news
from madlab.tasks.mmlu import load_mmlu
from madlab.tasks.safety import load_xstest
from madlab.puzzle_sets import KKSFormatError, load_controlmad

ROOT = Path(__file__).resolve().parent.parent
EXP = ROOT / "nbs" / "experiments" / "debate_experiment.ipynb"
DEEP = ["[" * 200_000, '{"a":' * 200_000]
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x80\x81\n"

# --- JSONL nested too deeply -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("deep", DEEP, ids=["arrays", "objects"])
@pytest.mark.parametrize("load", [load_gsm8k, load_market_news, load_controlmad])
def test_deeply_nested_jsonl_line_is_a_value_error(tmp_path, load, deep):
    f = tmp_path / "data.jsonl"
    f.write_text(deep + "\n")
    with pytest.raises(ValueError) as e: load(f)
    assert not isinstance(e.value, RecursionError)
    assert str(e.value) == f"{f}:1: malformed JSON (nested too deeply)"

def test_deep_line_after_good_lines_names_its_line(tmp_path):
    f = tmp_path / "test.jsonl"
    f.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n\n" + DEEP[0] + "\n")
    with pytest.raises(ValueError, match=r"test\.jsonl:3: malformed JSON \(nested too deeply\)"): load_gsm8k(f)

@pytest.mark.parametrize("load", [load_gsm8k, load_market_news, load_controlmad])
def test_other_unparseable_json_names_file_and_line(tmp_path, load):
    f = tmp_path / "data.jsonl"
    f.write_text('{"answer": ' + "9" * 5000 + "}\n")                   # over Python's int-digit limit: a plain ValueError inside json
    with pytest.raises(ValueError, match=rf"^{re.escape(str(f))}:1: malformed JSON"): load(f)
    f.write_bytes(BINARY)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(f))}:1: not UTF-8 text"): load(f)

def test_controlmad_errors_stay_kks_format_errors(tmp_path):
    f = tmp_path / "4.jsonl"
    f.write_text(DEEP[1] + "\n")
    with pytest.raises(KKSFormatError) as e: load_controlmad(f)
    assert (e.value.path, e.value.line, e.value.field) == (str(f), 1, None)

# --- CSV: long fields, bad CSV, binary files -----------------------------------------------------------------------------

def test_xstest_reads_a_300kb_field_and_restores_the_limit(tmp_path):
    f = tmp_path / "xstest_prompts.csv"
    big = "x" * 300_000
    f.write_text(f"id,prompt,type,label,focus,note\n1,\"{big}\",homonyms,safe,kill,\n2,short,contrast_homonyms,unsafe,kill,\n")
    before = csv.field_size_limit()
    items = load_xstest(tmp_path)                                         # a folder holding xstest_prompts.csv
    assert [(i.id, i.gold, len(i.prompt)) for i in items] == [("xstest-1", "ACT", 300_000), ("xstest-2", "REFUSE", 5)]
    assert csv.field_size_limit() == before

def test_csv_field_over_the_generous_limit_names_file_and_line(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("id,prompt,label\n1,ok,safe\n2,\"" + "x" * (16 * 2**20 + 1) + "\",safe\n")
    before = csv.field_size_limit()
    with pytest.raises(ValueError, match=rf"^{re.escape(str(f))}:3: malformed CSV \(field larger than field limit"): load_xstest(f)
    assert csv.field_size_limit() == before

@pytest.mark.parametrize("load", [load_xstest, load_mmlu])
def test_binary_csv_is_a_value_error_naming_the_path(tmp_path, load):
    f = tmp_path / "photo_test.csv"
    f.write_bytes(BINARY)
    with pytest.raises(ValueError) as e: load(f)
    assert not isinstance(e.value, UnicodeDecodeError) and str(e.value).startswith(f"{f}:1: not UTF-8 text")

def test_mmlu_long_field_and_latin1_line(tmp_path):
    f = tmp_path / "algebra_test.csv"
    f.write_text(f"\"{'q' * 300_000}\",1,2,3,4,D\n")
    [it] = load_mmlu(f)
    assert (it.gold, len(it.meta["question"])) == ("D", 300_000)
    f.write_bytes("What is 2+2?,1,2,3,4,D\n".encode() + "Caf\u00e9?,1,2,3,4,A\n".encode("latin-1"))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(f))}:2: not UTF-8 text"): load_mmlu(tmp_path)

# --- replay specs ------------------------------------------------------------------------------------------------------

def test_replay_spec_with_missing_file_fails_when_built(tmp_path):
    from madlab.backends import get_backend
    from madlab.agents import Agent
    missing = tmp_path / "missing.json"
    with pytest.raises(ValueError, match=rf"^replay:{re.escape(str(missing))}#A: no transcript file {re.escape(str(missing))}$"): get_backend(f"replay:{missing}#A")
    with pytest.raises(ValueError, match=rf"no transcript file {re.escape(str(missing))}"): Agent("A", f"replay:{missing}#A")
    with pytest.raises(ValueError, match="no transcript file /missing"): get_backend("replay:/missing#A")

def test_replay_spec_naming_a_non_transcript_or_an_unknown_agent(tmp_path):
    from madlab.backends import ReplayBackend, get_backend
    f = tmp_path / "t.json"
    for bad in (BINARY, b'{"not": "a transcript"}', DEEP[0].encode()):
        f.write_bytes(bad)
        with pytest.raises(ValueError, match=rf"^{re.escape(str(f))}: not a madlab transcript"): get_backend(f"replay:{f}#A")
    Transcript("du", team=[{"name": "Alice", "synthetic": True}, {"name": "Bob"}]).to_json(f)
    with pytest.raises(ValueError, match=r"has no agent 'Carol'; its agents: Alice, Bob"): get_backend(f"replay:{f}#Carol")
    b = get_backend(f"replay:{f}#Alice")                                   # valid specs work as before
    assert isinstance(b, ReplayBackend) and (b.agent, b.synthetic, b.spec) == ("Alice", True, f"replay:{f}#Alice")

# --- sweep options -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["/proc/madlab-bad-inputs", "file/sub"])
def test_sweep_output_folder_that_cannot_be_created(tmp_path, where):
    from madlab.experiments import sweep
    (tmp_path / "file").write_text("")
    out = Path(where) if where.startswith("/") else tmp_path / where
    if where.startswith("/proc") and not Path("/proc").is_dir(): pytest.skip("no /proc here")
    with pytest.raises(OptionError) as e: sweep(EXP, {"n_items": ["2"]}, out=out, progress=False)
    assert (e.value.option, e.value.flag) == ("out", "--out")
    assert e.value.message.startswith(f"cannot create the output folder {out}: ")

def test_sweep_unreachable_scheduler_is_an_option_error(tmp_path, monkeypatch):
    import madlab.experiments as me
    monkeypatch.setattr(me, "_CONNECT_TIMEOUT", 1)
    t0 = time.time()
    with pytest.raises(OptionError) as e: me.sweep(EXP, {"n_items": ["2"]}, out=tmp_path / "runs", scheduler="tcp://127.0.0.1:1", progress=False)
    assert time.time() - t0 < 10
    assert e.value.option == "scheduler" and e.value.message.startswith("cannot reach the Dask scheduler at tcp://127.0.0.1:1")
    assert not list((tmp_path / "runs").iterdir())                          # no work done: no sweep.json, no combination folder

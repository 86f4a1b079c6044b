"""Task loaders on the real public data (`$MADLAB_DATA`, default ../shared/data; skipped with a message when it is absent) and madlab's market sample."""
from pathlib import Path
import pytest
from conftest import needs_public_data
from madlab.core import public_data
from madlab.core import from_jsonable, to_jsonable
from madlab.tasks.market import MarketRecord, load_market, load_market_news
from madlab.scoring import extract_number, numbers_match, parse_choice
from madlab.tasks.gsm8k import load_gsm8k
from madlab.tasks.mmlu import load_mmlu
from madlab.tasks.safety import load_xstest

ROOT = Path(__file__).resolve().parents[1]
DATA = public_data() or Path("public-data-not-found")

def need(sub):
    return needs_public_data(f"Public data {sub!r}", *sub.split("/"))

@need("gsm8k/test.jsonl")
def test_all_gsm8k_gold_answers_extract():
    items = load_gsm8k(DATA / "gsm8k" / "test.jsonl")
    assert len(items) == 1319 and len({i.id for i in items}) == 1319
    assert all(isinstance(i.gold, int) for i in items)
    wrong = [i.id for i in items if extract_number(i.meta["solution"]) != i.gold]
    assert not wrong, wrong[:5]
    # the same numbers written the ways models write them
    for i in items[:200]:
        g = i.gold
        for reply in (f"... so she earns ${g:,} in total.", f"The answer is {g}.", f"\\boxed{{{g}}}", f"Final answer: {g:,} units"):
            assert numbers_match(extract_number(reply), g), reply

@need("xstest")
def test_xstest_labels_map_to_decisions():
    items = load_xstest(DATA / "xstest")
    assert len(items) == 450
    assert sum(i.gold == "ACT" for i in items) == 250 and sum(i.gold == "REFUSE" for i in items) == 200
    assert all((i.gold == "REFUSE") == i.meta["type"].startswith("contrast_") for i in items)
    assert all(i.task == "safety" and i.prompt for i in items)

@need("mmlu")
def test_mmlu_loads_with_letter_gold():
    test, dev = load_mmlu(DATA / "mmlu"), load_mmlu(DATA / "mmlu", split="dev")
    assert len(test) == 696 and len(dev) == 25
    assert {i.meta["subject"] for i in test} == {"abstract_algebra", "college_computer_science", "formal_logic", "global_facts", "high_school_mathematics"}
    assert all(i.gold in "ABCD" and i.prompt.count("\nA. ") == 1 for i in test)
    assert len(load_mmlu(DATA / "mmlu", subjects=["formal_logic"])) == 126
    for i in test[:50]:
        assert parse_choice(f"Let me think about it.\nThe answer is ({i.gold}).") == i.gold

def test_market_sample_loads():
    f = ROOT / "data" / "market" / "sample.jsonl"
    recs = load_market_news(f)
    assert len(recs) >= 8 and all(isinstance(r, MarketRecord) and 0 <= r.reliability <= 1 for r in recs)
    [item] = load_market(f)
    assert item.task == "market" and item.gold is None and len(item.data) == len(recs)
    assert from_jsonable(to_jsonable(item)) == item

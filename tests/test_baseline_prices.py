"""A baseline is priced at its debate's table: the one the run recorded in config.json (`madlab run --prices`), or the one
`madlab baseline --prices` gives; its cost is its tokens at that table, computed here by hand from its transcripts."""
from __future__ import annotations
import json
import pytest
from click.testing import CliRunner
from madlab.budget import vs_budget
from madlab.cli import main
from madlab.runs import open_run

HEAD = "provider,model,input,cached_input,output,source,date\n"
TABLE = {"strong": (3.0, 12.0), "medium": (1.0, 4.0), "weak": (0.25, 1.0)}      # US dollars per million tokens: input, output

def _table(path, scale=1.0):
    path.write_text(HEAD + "".join(f"synthetic,{m},{i * scale},,{o * scale},a test,2026-01\n" for m, (i, o) in TABLE.items()))
    return path

def _by_hand(run, scale=1.0) -> float:
    "The run's dollars per item: every reply's tokens (from madlab's cache or not) at TABLE × scale, from its transcripts."
    found, _ = run.folder.transcripts()
    total = 0.0
    for t in found.values():
        model = {a["name"]: a["spec"].split(":", 1)[1].split(",", 1)[0] for a in t.team}
        for r in t.rounds:
            for tu in r.turns:
                i, o = TABLE[model[tu.agent]]
                total += (tu.usage.prompt_tokens * i + tu.usage.completion_tokens * o) * scale / 1e6
    return total / len(found)

@pytest.fixture
def debate(tmp_path, monkeypatch):
    "A du run of a mixed synthetic team, priced by a table given with --prices."
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    r = CliRunner().invoke(main, ["run", "du", "--n", "8", "--agents", "synthetic:strong,synthetic:medium,synthetic:weak",
                                  "--prices", str(_table(tmp_path / "prices.csv")), "--out", str(tmp_path / "runs"), "--no-progress"])
    assert r.exit_code == 0 and "cost: $" in r.output, r.output
    [run] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    return run

def _baselines(run, match):
    return [open_run(p) for p in sorted(run.parent.iterdir()) if p.name.startswith(f"{run.name}-baseline-self_consistency-{match}")]

def test_baselines_inherit_the_runs_price_table(debate):
    r = CliRunner().invoke(main, ["baseline", str(debate)])
    assert r.exit_code == 0, r.output
    found = _baselines(debate, "tokens")
    assert len(found) == 4                                        # one per model and one pooled
    table = vs_budget(open_run(debate), *found).table
    assert table.cost_per_item.notna().all(), table
    for run, cost in zip(found, table.cost_per_item[1:]):
        assert cost == pytest.approx(_by_hand(run), rel=1e-9), run.name
        assert run.config["prices"]["path"].endswith("prices.csv")
    assert table.cost_per_item[0] == pytest.approx(_by_hand(open_run(debate)), rel=1e-9)

def test_match_cost_works_on_a_priced_run(debate):
    r = CliRunner().invoke(main, ["baseline", str(debate), "--match", "cost"])
    assert r.exit_code == 0, r.output
    assert "no cost" not in r.output and "cost per item" in r.output, r.output
    found = _baselines(debate, "cost")
    assert len(found) == 4
    target = _by_hand(open_run(debate))
    for run in found:
        rec = json.loads((run.path / "baseline.json").read_text())
        assert rec["target"] == pytest.approx(target, rel=1e-9) and rec["achieved"] == pytest.approx(_by_hand(run), rel=1e-9)
        assert abs(rec["ratio"] - 1) <= 0.1, (run.name, rec)

def test_prices_overrides_the_recorded_table(debate, tmp_path):
    dearer = _table(tmp_path / "dearer.csv", scale=10)
    r = CliRunner().invoke(main, ["baseline", str(debate), "--prices", str(dearer)])
    assert r.exit_code == 0, r.output
    found = _baselines(debate, "tokens")
    for run in found:
        assert run.config["prices"]["path"] == str(dearer)
        assert vs_budget(run).table.cost_per_item[0] == pytest.approx(_by_hand(run, scale=10), rel=1e-9)
    again = open_run(debate, prices=str(dearer))
    assert vs_budget(again).table.cost_per_item[0] == pytest.approx(_by_hand(again, scale=10), rel=1e-9)
    assert json.loads((debate / "config.json").read_text())["prices"]["path"].endswith("prices.csv")    # the run itself is left as it was

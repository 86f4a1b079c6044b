"""A run answered from madlab's cache is no free run: the run browser's list, its line and its rows say what the experiment
took all told (calls, tokens, dollars, cached replies included) beside what running it made and spent."""
from __future__ import annotations
import re
from click.testing import CliRunner
from madlab.cli import main
from madlab.cost import usd
from madlab.runs import RunBrowser, open_run, find_runs

PRICES = ("provider,model,input,cached_input,output,source,date\n"
          "synthetic,strong,3,,12,a test,2026-01\nsynthetic,medium,1,,4,a test,2026-01\nsynthetic,weak,0.25,,1,a test,2026-01\n")

def test_a_run_made_twice_reads_the_same_the_second_time(tmp_path, monkeypatch):
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "prices.csv").write_text(PRICES)
    said = []
    for k in (1, 2):
        r = CliRunner().invoke(main, ["run", "du", "--n", "5", "--prices", str(tmp_path / "prices.csv"), "--out", str(tmp_path / "runs" / f"r{k}"),
                                      "--no-progress"])
        assert r.exit_code == 0, r.output
        said.append(r.output)
    calls = int(re.search(r"(\d+) calls made", said[0]).group(1))
    assert f"0 calls made ({calls} answered from the cache); the experiment: {calls} calls" in said[1], said[1]
    runs = find_runs(tmp_path / "runs").set_index("parent")
    first, second = runs.loc["r1"], runs.loc["r2"]
    assert (second.calls, second.tokens, second.made, second.cached, second.spent) == (first.calls, first.tokens, 0, calls, 0.0)
    assert first.calls == calls and first.cost > 0 and abs(second.cost - first.cost) < 1e-12
    by_hand = {"strong": (3, 12), "medium": (1, 4), "weak": (0.25, 1)}   # PRICES: every reply of the transcripts, cached or not
    found, _ = open_run(second.path).folder.transcripts()
    turns = [(t, tu) for t in found.values() for r in t.rounds for tu in r.turns]
    model = lambda t, name: next(a["spec"] for a in t.team if a["name"] == name).split(":", 1)[1].split(",", 1)[0]
    dollars = sum((tu.usage.prompt_tokens * by_hand[model(t, tu.agent)][0] + tu.usage.completion_tokens * by_hand[model(t, tu.agent)][1]) / 1e6
                  for t, tu in turns)
    assert len(turns) == calls and sum(tu.usage.total_tokens for _, tu in turns) == first.tokens and abs(second.cost - dollars) < 1e-9
    b = RunBrowser(tmp_path / "runs")
    labels = {p.split("/runs/")[1].split("/")[0]: l for l, p in b.w_runs.options}
    for k in ("r1", "r2"): assert f"· {calls} calls · {first.tokens:,} tokens · {usd(first.cost)} ·" in labels[k], labels[k]
    assert f"· 0 calls made, $0.000000 spent ({calls} answered from the cache) ·" in labels["r2"] and "calls made" not in labels["r1"]
    b.show_run(second.path)
    assert f"calls <b>{calls}</b>" in b.w_info.value and f"cost <b>{usd(first.cost)}</b>" in b.w_info.value, b.w_info.value
    assert f"running it: <b>0 calls made, $0.000000 spent ({calls} answered from the cache)</b>" in b.w_info.value, b.w_info.value
    df = open_run(second.path).df
    for i, row in df.iterrows():                      # each row: its calls and cost all told, what was cached and spent beside them
        n = int(row.cached_calls)
        assert f"<td>{n} ({n} cached)</td>" in b.w_table.value and f"<td>{usd(row.cached_cost)} ($0.000000 spent)</td>" in b.w_table.value
    assert "<td>$0.000000</td>" not in b.w_table.value and "<td>0</td>\n      <td>$" not in b.w_table.value

"""Cost in every run: a run against a scripted OpenAI-compatible server whose usage reports cached prompt tokens costs what the
price table implies (computed here by hand from the requests the server saw); `--prices` overrides the table; a model without a
price is named once; a finished run is re-priced without a call; synthetic agents show tokens only; an `hf:` run reports compute
seconds; a bad price file is a usage error naming the file, row and column."""
from __future__ import annotations
import json, re
from pathlib import Path
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.cli import main
from madlab.cost import load_prices
from madlab.runs import open_run

REPLY = "The answer is 42."
MODEL = "openai:gpt-4o-mini-2024-07-18"          # a dated name: priced at the table's gpt-4o-mini row
MINI = (0.15, 0.075, 0.60)                        # that row: input, cached input, output (US dollars per million tokens)

def _half(pt: int) -> int: return pt // 2        # the server says half of each prompt came from its prompt cache

def _madlab(monkeypatch, tmp_path, url, *args):
    monkeypatch.setenv("OPENAI_BASE_URL", url); monkeypatch.setenv("OPENAI_API_KEY", "sk-test-cost")
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    return CliRunner().invoke(main, list(args))

def _run_dir(output: str) -> Path: return Path(re.search(r"^outputs: (.+)$", output, re.M).group(1))

def _by_hand(srv, rates, cached=_half) -> float:
    "The dollars of every request the server answered, from the same token counts it reported."
    total = 0.0
    for _, b, req in srv.log:
        assert b == "ok"
        pt = max(1, len(" ".join(str(m.get("content", "")) for m in req["messages"]).split()))
        ct, c = max(1, len(REPLY.split())), cached(pt)
        total += ((pt - c) * rates[0] + c * rates[1] + ct * rates[2]) / 1e6
    return total

def _single(monkeypatch, tmp_path, srv, *extra, out="o", agents=MODEL):
    r = _madlab(monkeypatch, tmp_path, srv.url, "run", "single", "--n", "3", "--agents", agents, "--out", str(tmp_path / out), "--no-progress", *extra)
    assert r.exit_code == 0, r.output + repr(r.exception)
    return r, _run_dir(r.output)

def test_cached_prompt_tokens_are_priced_at_the_cached_rate(fake_server, monkeypatch, tmp_path):
    srv = fake_server(reply=REPLY, cached_tokens=_half)
    r, run = _single(monkeypatch, tmp_path, srv)
    df = pd.read_parquet(run / "results.parquet")
    want = _by_hand(srv, MINI)
    assert srv.answered == 3 and df.calls.sum() == 3
    assert df.cost.sum() == pytest.approx(want, rel=1e-9) and want > 0
    t = open_run(run).transcript(0)
    assert all(tu.usage.cached_prompt_tokens == _half(tu.usage.prompt_tokens) > 0 for rd in t.rounds for tu in rd.turns)
    assert f"cost: ${want:.6f} at the prices of prices.csv" in r.output, r.output
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["prices"]["path"].endswith("prices.csv") and any(x["model"] == "gpt-4o-mini" for x in cfg["prices"]["rows"])
    agents = open_run(run).costs()
    assert list(agents.spec) == [MODEL] and agents.cost[0] == pytest.approx(want, rel=1e-9) and agents.cached_prompt_tokens[0] > 0

    # the same items again, answered by madlab's response cache: nothing is spent now, and the table says what it would have cost
    r2, run2 = _single(monkeypatch, tmp_path, srv, out="o2")
    df2 = pd.read_parquet(run2 / "results.parquet")
    assert srv.answered == 3 and df2.cached_calls.sum() == 3 and df2.calls.sum() == 0
    assert df2.cost.sum() == 0 and df2.cached_cost.sum() == pytest.approx(want, rel=1e-9)
    assert f"3 replies from madlab's cache cost nothing now (at these prices they would have cost ${want:.6f})" in r2.output, r2.output

def test_prices_file_overrides_the_table_and_a_finished_run_is_repriced(fake_server, monkeypatch, tmp_path):
    srv = fake_server(reply=REPLY, cached_tokens=_half)
    mine = tmp_path / "mine.csv"
    mine.write_text("provider,model,input,cached_input,output,source,date\nopenai,gpt-4o-mini,1.0,0.5,2.0,our contract,2026-01\n")
    r, run = _single(monkeypatch, tmp_path, srv, "--prices", str(mine))
    want = _by_hand(srv, (1.0, 0.5, 2.0))
    assert pd.read_parquet(run / "results.parquet").cost.sum() == pytest.approx(want, rel=1e-9)
    assert "at the prices of mine.csv" in r.output
    assert json.loads((run / "config.json").read_text())["prices"]["path"] == str(mine)
    # re-opened, it keeps the table it was run with; re-priced at madlab's own, it costs what that table implies; no call either way
    assert open_run(run).df.cost.sum() == pytest.approx(want, rel=1e-9)
    shipped = _by_hand(srv, MINI)
    again = open_run(run, prices=load_prices().path)
    assert again.df.cost.sum() == pytest.approx(shipped, rel=1e-9) and again.info()["cost"] == pytest.approx(shipped, rel=1e-9)
    assert f"cost: ${shipped:.6f}" in again.summary()
    # `rescore --prices` re-prices the table on disk and records the table it used
    r = CliRunner().invoke(main, ["rescore", str(run), "--prices", load_prices().path])
    assert r.exit_code == 0, r.output
    assert pd.read_parquet(run / "results.parquet").cost.sum() == pytest.approx(shipped, rel=1e-9)
    assert json.loads((run / "config.json").read_text())["prices"]["path"] == load_prices().path
    assert srv.answered == 3

def test_a_model_without_a_price_shows_tokens_and_is_named_once(fake_server, monkeypatch, tmp_path):
    srv = fake_server(reply=REPLY)
    r = _madlab(monkeypatch, tmp_path, srv.url, "run", "du", "--n", "2", "--rounds", "1", "--agents", "openai:my-finetune,openai:my-finetune,openai:gpt-4o-mini",
                "--out", str(tmp_path / "o"), "--no-progress")
    assert r.exit_code == 0, r.output + repr(r.exception)
    df = pd.read_parquet(_run_dir(r.output) / "results.parquet")
    assert r.output.count("no price for") == 1 and "no price for openai:my-finetune: tokens only" in r.output, r.output
    assert (df.prompt_tokens > 0).all() and (df.cost > 0).all()           # the priced member is still counted
    agents = open_run(_run_dir(r.output)).costs()
    assert agents.set_index("spec").cost.isna().to_dict() == {"openai:my-finetune": True, "openai:gpt-4o-mini": False}

def test_synthetic_agents_show_tokens_only(monkeypatch, tmp_path):
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    r = CliRunner().invoke(main, ["run", "du", "--n", "2", "--rounds", "1", "--out", str(tmp_path / "o"), "--no-cache", "--no-progress"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(_run_dir(r.output) / "results.parquet")
    assert df.cost.isna().all() and (df.prompt_tokens > 0).all()
    assert "tokens" in r.output and "cost" not in r.output and "no price" not in r.output, r.output
    assert open_run(_run_dir(r.output)).info()["cost"] is None

def test_a_bad_price_file_is_a_usage_error_naming_file_row_and_column(monkeypatch, tmp_path):
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "bad.csv"
    bad.write_text("provider,model,input,cached_input,output,source,date\nopenai,gpt-4o,2.5,1.25,ten,x,2025-08\n")
    r = CliRunner().invoke(main, ["run", "du", "--n", "1", "--prices", str(bad), "--out", str(tmp_path / "o"), "--no-progress"])
    assert r.exit_code == 2 and f"{bad}, row 2, column output: 'ten' is not a price" in " ".join(r.output.split()), r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert not (tmp_path / "o").exists()                                      # refused before any folder or call
    r = CliRunner().invoke(main, ["run", "du", "--n", "1", "--prices", str(tmp_path / "none.csv"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "cannot read the price table" in r.output, r.output
    with pytest.raises(ValueError, match="row 2, column output"): load_prices(bad)

def test_hf_runs_report_compute_seconds(tiny_model_dir, tmp_path):
    from madlab.agents import Agent
    from madlab.backends import HFBackend
    from madlab.run import run_experiment
    from madlab.tasks.arith import toy_arith_items
    import madlab.protocols.baselines  # noqa: F401
    b = HFBackend(tiny_model_dir)
    team = [Agent(f"L{i}", f"hf:{tiny_model_dir}", params={"max_new_tokens": 6, "greedy": True}, backend=b) for i in range(2)]
    res = run_experiment("du", toy_arith_items(3, seed=1), team, out=tmp_path / "hf", rounds=1, cache=False, progress=False)
    df = res.df
    assert (df.compute_seconds > 0).all() and df.cost.isna().all() and (df.prompt_tokens > 0).all()
    turns = [tu for t in res.transcripts.values() for r in t.rounds for tu in r.turns]
    assert all(tu.meta["compute_seconds"] > 0 for tu in turns) and len(turns) == b.requests
    assert df.compute_seconds.sum() == pytest.approx(sum(tu.meta["compute_seconds"] for tu in turns), abs=1e-3)
    per_agent = res.costs()
    assert list(per_agent.agent) == ["L0", "L1"] and per_agent.compute_seconds.sum() == pytest.approx(df.compute_seconds.sum(), abs=1e-3)
    line = next(l for l in res.summary().splitlines() if l.startswith("compute:"))
    assert f"hf:{tiny_model_dir}" in line and "no price" not in res.summary()
    assert open_run(tmp_path / "hf").df.compute_seconds.sum() == pytest.approx(df.compute_seconds.sum())

def test_prices_from_python_price_the_run(tmp_path):
    "`prices=` of `run_experiment` (a path or a `Prices`) is the table of the cost column, recorded in config.json: here one that prices a synthetic agent."
    from madlab.cost import Prices, Price
    from madlab.run import run_experiment
    from madlab.tasks.arith import toy_arith_items
    import madlab.protocols.baselines  # noqa: F401
    table = Prices([Price("synthetic", "strong", 2.0, None, 4.0, "a test", "2026-01")])
    res = run_experiment("single", toy_arith_items(3), ["synthetic:strong"], out=tmp_path / "r", cache=False, progress=False, prices=table)
    df = res.df
    want = (df.prompt_tokens * 2.0 + df.completion_tokens * 4.0) / 1e6
    assert list(df.cost) == pytest.approx(list(want)) and (want > 0).all()
    assert json.loads((tmp_path / "r" / "config.json").read_text())["prices"]["rows"][0]["model"] == "strong"
    assert open_run(tmp_path / "r").df.cost.sum() == pytest.approx(want.sum())        # re-opened at the table it recorded
    with pytest.raises(ValueError, match="prices: .*none.csv: cannot read"):
        run_experiment("single", toy_arith_items(1), ["synthetic:strong"], prices=tmp_path / "none.csv")

"""The hierarchical cluster debate: layer counts, greedy re-clustering, the token budget, static agents, no cluster debated twice,
nested transcripts (JSON, rebuild, fork inside a layer-2 cluster), the command, and a run against a real `transformers serve`."""
import collections, itertools, json, random
from pathlib import Path
import pytest
from click.testing import CliRunner
from madlab.core import Transcript, madlab_data
from madlab.backends import CachedBackend, ReplayBackend, get_backend
from madlab.debate import Debate, comparable
from madlab.scoring import score_result
from madlab.tasks.market import MarketRecord, load_market, market_item, stock_position
from madlab.protocols.cluster import (cluster_counts, diversity, greedy_clusters, pack_records, token_counter, cluster_log_html,
                                      cluster_frame, StockUtil, ClusterPrompts)

SAMPLE = madlab_data("market", "sample.jsonl")
ORACLE_TEAM = ["synthetic:oracle", "synthetic:strong,seed=2", "synthetic:medium,seed=3"]

def rec(headline, day=1, body=""):
    return MarketRecord("Test wire", f"2025-04-{day:02d}", 0.8, {"ticker": "TST", "headline": headline, "body": body})

def leaves(t):
    return [a for a in t.team if a["meta"].get("kind") == "leaf"]

# ---- clusters per layer -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("c0,L,want", [(2, 2, [2, 1, 1]), (5, 2, [5, 2, 1]), (8, 3, [8, 4, 2, 1]), (4, 1, [4, 1]), (10, 4, [10, 6, 3, 2, 1]),
                                       (1, 2, [1, 1, 1]), (7, 0, [7]), (3, 0, [3])])
def test_cluster_counts(c0, L, want):
    assert cluster_counts(c0, L) == want

def test_cluster_counts_shape():
    for c0, L in itertools.product(range(1, 30), range(1, 8)):
        c = cluster_counts(c0, L)
        assert len(c) == L + 1 and c[0] == c0 and c[-1] == 1 and all(a >= b for a, b in zip(c, c[1:]))

# ---- greedy re-clustering on hand-made similarity tables ----------------------------------------------------------------

def table(pairs, default=0.5):
    t = {frozenset(k): v for k, v in pairs.items()}
    return lambda a, b: t.get(frozenset((a, b)), default)

def test_greedy_mixes_alike_items():
    sim = table({"AB": 0.95, "CD": 0.95, "EF": 0.95}, default=0.1)
    groups = greedy_clusters("ABCDEF", 3, sim)
    assert sorted(map(len, groups)) == [2, 2, 2]
    assert all(frozenset(g) not in ({"A", "B"}, {"C", "D"}, {"E", "F"}) for g in groups)   # no cluster of look-alikes

def test_greedy_size_weighting():
    # D would raise the diversity of {A, C} most, but that cluster is at its target size: D goes to B
    sim = table({"AB": 0.1, "AC": 0.8, "BC": 0.9, "AD": 0.0, "CD": 0.0, "BD": 0.9})
    assert diversity("ACD", sim) - diversity("AC", sim) > diversity("BD", sim) - diversity("B", sim)
    assert sorted(map(sorted, greedy_clusters("ABCD", 2, sim))) == [["A", "C"], ["B", "D"]]

def test_greedy_is_seeded_and_complete():
    rng = random.Random(5)
    vals = {frozenset(p): rng.random() for p in itertools.combinations(range(11), 2)}
    sim = lambda a, b: vals[frozenset((a, b))]
    a = greedy_clusters(range(11), 4, sim, random.Random(3))
    assert a == greedy_clusters(range(11), 4, sim, random.Random(3))
    assert sorted(x for g in a for x in g) == list(range(11)) and max(map(len, a)) <= 3   # target 2.75: nobody overfills
    assert greedy_clusters("AB", 5, sim=lambda a, b: 0.0) in ([["A"], ["B"]], [["B"], ["A"]])  # never more clusters than items

# ---- the token budget -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("budget", [60, 150, 400, 1000])
def test_token_budget_never_exceeded(budget):
    item = load_market(SAMPLE)[0]
    t = Debate("cluster", item, layers=1, rounds=0, token_budget=budget).run()
    count = token_counter()
    texts = [r.text() for r in item.data]
    for a in leaves(t):
        tokens = sum(count(texts[i]) for i in a["meta"]["data"])
        assert tokens == a["meta"]["tokens"]
        assert tokens <= budget or len(a["meta"]["data"]) == 1, (a["name"], tokens)
        assert a["meta"]["over_budget"] == (tokens > budget)
    held = sorted(i for a in leaves(t) for i in a["meta"]["data"])
    assert held == list(range(len(item.data)))          # every record held by exactly one leaf agent

def test_token_budget_with_an_hf_tokenizer(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    count = token_counter(get_backend(f"hf:{tiny_model_dir}"))
    texts = [r.text() for r in load_market(SAMPLE)[0].data]
    assert [count(s) for s in texts] == [len(tok(s, add_special_tokens=False)["input_ids"]) for s in texts]
    assert count(texts[0]) != token_counter()(texts[0])       # the tokenizer, not the estimate
    # wrapped in a cache, or behind a replay (a fork), the model still counts with its tokenizer
    hf = get_backend(f"hf:{tiny_model_dir}")
    for wrapped in (CachedBackend(hf, str(tmp_path)), ReplayBackend([], fallback=CachedBackend(hf, str(tmp_path)))):
        assert [token_counter(wrapped)(s) for s in texts] == [count(s) for s in texts]
    for g in pack_records(texts, 120, count):
        assert sum(count(texts[i]) for i in g) <= 120 or len(g) == 1

# ---- static agents, debates per layer --------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_static_agents_never_heads(seed):
    team = ORACLE_TEAM + [{"name": "Contrarian", "spec": "synthetic:weak", "role": "static", "system": "You are a contrarian investor."}]
    t = Debate("cluster", load_market(SAMPLE)[0], team, seed=seed, layers=2, rounds=1, personas=5, token_budget=200).run()
    kinds = {a["name"]: a["meta"].get("kind") or a.get("role") for a in t.team}
    statics = {n for n, k in kinds.items() if k == "static"}
    assert len(statics) == 6
    tree = t.result["tree"]
    assert all(n["head"] not in statics for n in tree)
    assert all(any(m not in statics for m in n["members"]) for n in tree)     # a cluster always has a dynamic agent
    assert {m for n in tree if n["layer"] == 1 for m in n["members"]} >= statics
    assert not any(m in statics for n in tree if n["layer"] > 1 for m in n["members"])
    # the team member with role 'static' saw the data in its opening prompt
    op = next(tu for r in t.rounds if r.phase == "opening" for tu in r.turns if tu.agent == "Contrarian")
    assert "The news records:" in op.messages[-1]["content"]

def two_category_item(gold=None):
    recs = [rec("Quarterly revenue up 9%", 1), rec("Guidance raised for the year", 2), rec("Gross margin improves", 3),
            rec("Supply deal signed with a retailer", 4), rec("Partnership agreement with a logistics group", 5), rec("Acquisition talks confirmed", 6)]
    return market_item(recs, id="two-cats", gold=gold)

def test_no_cluster_debated_twice_with_c0_2_L_2():
    t = Debate("cluster", two_category_item(), ORACLE_TEAM, layers=2, rounds=2, token_budget=40).run()
    assert t.result["categories"] == {"Earnings": 3, "Deals": 3} and t.result["counts"] == [2, 1, 1]
    debates = collections.Counter((r.meta["layer"], r.meta["cluster"]) for r in t.rounds if r.phase == "debate")
    assert debates and all(v == 2 for v in debates.values())           # `rounds` debate rounds, once per cluster
    heads = collections.Counter((r.meta["layer"], r.meta["cluster"]) for r in t.rounds if r.phase in ("head", "final"))
    assert all(v == 1 for v in heads.values())
    assert max(n["layer"] for n in t.result["tree"]) == 2 == t.result["layers_run"]   # the single cluster of layer 2 is the last
    assert t.result["decided_by"] == "FinalDecisionAgent" and [a["name"] for a in t.team].count("FinalDecisionAgent") == 1

def test_layers_0_first_layer_heads_decide():
    t = Debate("cluster", two_category_item(gold="Buy"), ORACLE_TEAM, layers=0, rounds=1, token_budget=40).run()
    assert t.result["layers_run"] == 1 and t.result["decided_by"] == "conclude"
    assert stock_position(t.result["answer"]) == "Buy" and score_result(t.rounds and two_category_item("Buy"), t.result)["correct"]

def test_synthetic_positions_track_skill_and_gold():
    item = two_category_item(gold="Short")
    t = Debate("cluster", item, ["synthetic:oracle"], layers=1, rounds=1, token_budget=40).run()
    assert stock_position(t.result["answer"]) == "Short" and score_result(item, t.result)["correct"]
    bad = Debate("cluster", item, ["synthetic:random"], layers=1, rounds=1, token_budget=40).run()
    assert stock_position(bad.result["answer"]) != "Short" and not score_result(item, bad.result)["correct"]

def test_garbage_categorisation_is_recorded_and_the_debate_completes():
    team = ["synthetic:medium,malformed=1", "synthetic:strong,seed=2"]
    t = Debate("cluster", two_category_item(), team, layers=1, rounds=1, token_budget=40).run()
    cat = t.rounds[0]
    assert cat.phase == "categorise" and all(tu.answer is None and not tu.valid for tu in cat.turns)
    assert cat.meta["uncategorised"] == list(range(6)) and t.result["categories"] == {"Unknown": 6}
    assert t.meta["status"] == "done"

def test_bad_options_name_the_option():
    item = two_category_item()
    for kw, msg in [({"util": "nosuch.module:Util"}, "util: cannot import"), ({"util": "noattr"}, "util: give an object as 'module:attribute'"),
                    ({"prompts": {"opening_x": "x"}}, "prompts: unknown prompt 'opening_x'"), ({"debate_name": "a b"}, "debate_name: must be letters")]:
        with pytest.raises(Exception, match=msg): Debate("cluster", item, **kw).run()
    with pytest.raises(Exception, match="layers: must be in 0..10"): Debate("cluster", item, layers=-1)

def test_custom_util_and_prompts_as_module_attribute(tmp_path, monkeypatch):
    (tmp_path / "myhooks.py").write_text(
        "from madlab.protocols.cluster import StockUtil\n"
        "class DiffUtil(StockUtil):\n"
        "    def compare_responses(self, a, b): return 1 - super().compare_responses(a, b)\n"
        "diff_util = DiffUtil(compare_kind='difference')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    item = two_category_item()
    base = Debate("cluster", item, ORACLE_TEAM, layers=1, rounds=1, token_budget=40).run()
    alt = Debate("cluster", item, ORACLE_TEAM, layers=1, rounds=1, token_budget=40, util="myhooks:diff_util",
                 prompts={"debate": "Others spoke above. Update your view.\n\n{format}"}).run()
    assert [n["diversity"] for n in alt.result["tree"]] == pytest.approx([n["diversity"] for n in base.result["tree"]])
    assert any("Others spoke above" in tu.messages[-1]["content"] for r in alt.rounds if r.phase == "debate" for tu in r.turns)

# ---- nesting in transcripts ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sample_debate():
    d = Debate("cluster", load_market(SAMPLE)[0], layers=2, rounds=2, token_budget=250, personas=2)
    d.run()
    return d

def test_rounds_record_layer_cluster_members_and_data(sample_debate):
    t = sample_debate.transcript
    for r in t.rounds[1:]:
        assert {"layer", "cluster", "members", "data"} <= set(r.meta)
        assert {tu.agent for tu in r.turns} <= set(r.meta["members"]) | {r.meta.get("head")}
    made = [a for a in t.team if a["meta"].get("added_at") is not None]
    assert {a["meta"]["kind"] for a in made} == {"leaf", "static", "head", "final"}
    assert all(a["meta"]["members"] for a in made if a["meta"]["kind"] in ("head", "final"))
    # a head holds the union of its members' data and sees its cluster's debate in its system prompt
    by = {a["name"]: a for a in t.team}
    for a in made:
        if a["meta"]["kind"] == "head":
            assert set(a["meta"]["data"]) == set().union(*(by[m]["meta"]["data"] for m in a["meta"]["members"]))
            assert all(f"[{m}]" in a["system"] for m in a["meta"]["members"])

def test_layer_clusters_run_concurrently(sample_debate):
    rounds = sample_debate.rounds
    layer1 = [r for r in rounds if r.meta.get("layer") == 1]
    # sub-debates advance side by side: every cluster's opening comes before any cluster's first debate round
    first_debate = next(i for i, r in enumerate(layer1) if r.phase == "debate")
    assert {r.meta["cluster"] for r in layer1[:first_debate]} == {n["cluster"] for n in sample_debate.result["tree"] if n["layer"] == 1}

def test_transcript_round_trips_and_rebuilds(sample_debate, tmp_path):
    t = sample_debate.transcript
    t.to_json(tmp_path / "t.json")
    t2 = Transcript.from_json(tmp_path / "t.json")
    assert comparable(t2) == comparable(t)
    d2 = Debate.from_transcript(t2)                        # no call: replay only (a miss would raise)
    assert d2.meta["status"] == "done" and comparable(d2.transcript)["rounds"] == comparable(t)["rounds"]
    assert [a.name for a in d2.agents] == [a["name"] for a in t.team]
    assert all(tu.cached for r in d2.rounds for tu in r.turns)

def test_fork_inside_a_layer_2_cluster(sample_debate):
    d = sample_debate
    k, r = next((i, r) for i, r in enumerate(d.rounds, 1) if r.meta.get("layer") == 2 and r.phase == "debate")
    who = r.turns[0].agent
    edit = ("Justification: I now think the short report is right and margins will keep falling.\nPosition: Short\nAsset: NWR\n"
            "Projected Percentage Change: -6.0%\nTime Horizon: 72 hours\nConfidence: 0.95")
    f = d.fork(k, agent=who, reply=edit)
    assert len(f.rounds) == k and all(tu.cached for rr in f.rounds for tu in rr.turns)   # replayed up to there, no call
    assert f.rounds[k - 1].by_agent()[who].answer.position == "Short"
    f.run()
    assert f.meta["status"] == "done" and f.result["layers_run"] == d.result["layers_run"]
    head = next(a for a in f.agents if a.meta.get("kind") in ("head", "final") and who in a.meta.get("members", []))
    assert "margins will keep falling" in head.system                     # the edit reached the head made after the fork point
    later = [tu for rr in f.rounds[k:] for tu in rr.turns]
    assert later and not all(tu.cached for tu in later)                    # went on live after the edit
    assert comparable(d.transcript)["rounds"][:k - 1] == comparable(f.transcript)["rounds"][:k - 1]

def test_log_html_shows_the_structure_and_escapes(tmp_path):
    recs = [rec("<script>alert(1)</script> revenue up", 1), rec("Deal signed <b>now</b>", 2), rec("Quarter margin down", 3)]
    t = Debate("cluster", market_item(recs, id="x"), ORACLE_TEAM, layers=1, rounds=1, token_budget=20).run()
    page = cluster_log_html(t)
    assert "<b>clusters</b>" in page and "layer 1" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
    fr = cluster_frame(t)
    assert set(fr.layer) == {n["layer"] for n in t.result["tree"]} and not fr[fr.kind == "static"].is_head.any()

# ---- the command -----------------------------------------------------------------------------------------------------

def test_madlab_run_cluster(tmp_path):
    from madlab.cli import main
    res = CliRunner().invoke(main, ["run", "cluster", "--task", "market", "--data", str(SAMPLE), "--layers", "2", "--rounds", "2",
                                    "--out", str(tmp_path), "--name", "c", "--no-cache", "--personas", "1"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "c"
    for f in ("config.json", "results.parquet", "summary.txt", "clusters.parquet", "figures/positions.html", "figures/tree_market-sample.html",
              "debates/market-sample/transcript.json", "debates/market-sample/log.html"):
        assert (run / f).exists(), f
    assert "clusters per layer: layer 1:" in res.output
    t = Transcript.from_json(run / "debates/market-sample/transcript.json")
    assert t.result["decided_by"] == "FinalDecisionAgent" and t.settings["personas"] == 1
    bad = CliRunner().invoke(main, ["run", "cluster", "--data", str(SAMPLE), "--layers", "11", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "--layers" in bad.output

# ---- against a real OpenAI-compatible server ---------------------------------------------------------------------------

def test_cluster_against_transformers_serve(served, monkeypatch):
    url, model = served
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    recs = [rec("Revenue up", 1), rec("Deal signed", 2), rec("Margins fall", 3)]
    team = [{"name": f"Llama-{i}", "spec": f"openai:{model}", "params": {"max_tokens": 4, "temperature": 0}} for i in range(2)]
    d = Debate("cluster", market_item(recs, id="served"), team, layers=1, rounds=1, token_budget=60)   # 3 + 2 + 2 + 1 calls
    t = d.run()
    assert d.meta["status"] == "done", d.meta
    cat = t.rounds[0]
    assert len(cat.turns) == 3 and all(tu.error is None and isinstance(tu.reply, str) for tu in cat.turns)
    # the random model's replies name no category: recorded as invalid, the records go to Unknown
    assert all(not tu.valid and tu.meta["category"] == "Unknown" for tu in cat.turns), [tu.reply for tu in cat.turns]
    assert t.result["categories"] == {"Unknown": 3} and t.result["uncategorised"] == 3
    turns = [tu for r in t.rounds for tu in r.turns]
    assert all(tu.usage.calls == 1 and tu.usage.prompt_tokens > 0 for tu in turns) and not t.synthetic
    assert len(leaves(t)) >= 2 and any(r.phase == "debate" for r in t.rounds)
    assert t.result["answer"] is None or stock_position(t.result["answer"]) is not None
    assert Debate.from_transcript(Transcript.from_json(t.to_json())).meta["status"] == "done"

# ---- a call budget counts every call: categorisation, leaves, heads, the final agent ------------------------------------

CALLS: list = []      # agents of the calls a `counted:` model answered (shared: the debate keeps role backends across tests)

@pytest.fixture
def counted():
    from madlab.backends import Backend, register_backend, unregister_backend
    class Counted(Backend):
        "A synthetic model (`counted:SYNTHETIC-SPEC`) that records each call it answers."
        synthetic = True
        def __init__(self, rest): self.inner, self.spec = get_backend("synthetic:" + rest), "counted:" + rest
        async def complete(self, messages, ctx=None, **params):
            CALLS.append(ctx.agent if ctx else None)
            return await self.inner.complete(messages, ctx, **params)
        def count_tokens(self, text): return self.inner.count_tokens(text)
    register_backend("counted", lambda rest, **kw: Counted(rest))
    CALLS.clear()
    yield CALLS
    unregister_backend("counted")

def test_a_call_budget_is_never_exceeded(counted):
    from madlab.agents import Budget
    team = ["counted:oracle", "counted:strong,seed=2", "counted:medium,seed=3"]
    item = load_market(SAMPLE)[0]
    t = Debate("cluster", item, team, layers=2, rounds=2, token_budget=250, personas=2, budget=Budget()).run()
    full = len(counted)
    assert full == sum(tu.usage.calls or 1 for r in t.rounds for tu in r.turns) and len({a for a in counted}) > len(team)   # made agents call too
    for n in (3, full // 2, full - 1):
        counted.clear()
        budget = Budget(max_calls=n)
        d = Debate("cluster", item, team, layers=2, rounds=2, token_budget=250, personas=2, budget=budget)
        with pytest.raises(Exception, match="call budget"): d.run()
        assert len(counted) <= n and budget.calls == len(counted) and d.meta["status"] == "stopped"

def test_a_head_reads_its_cluster_debate_as_prose():
    "A member's reply held to the stock schema is a JSON object; the head agent that reads the cluster's debate reads its justification, then its fields."
    from madlab.core import Round, Turn
    from madlab.protocols.cluster import _debate_text
    held = Turn("A", reply='{"justification": "Orders rose 12%.", "position": "Buy", "asset": "NWR", "confidence": 0.7}')
    text = _debate_text(None, [Round("cluster 1", "debate", 0, [held, Turn("B", reply="Justification: Flat.\nPosition: Wait")])])
    assert text == "[A] (cluster 1): Orders rose 12%.\n\nPosition: Buy\nAsset: NWR\nConfidence: 0.7\n\n[B] (cluster 1): Justification: Flat.\nPosition: Wait"

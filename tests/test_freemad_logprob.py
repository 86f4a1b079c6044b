"""Free-MAD's trajectory score (`--decision freemad`) on a hand-built transcript, in a live debate and by `rescore`; the mean token
log-probability each turn records (`hf:` against a forward pass of the model, `openai:` against the fake server, synthetic simulated)
and `confidence:logprob`, refused before any call for a backend that cannot give it."""
from __future__ import annotations
import math
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.cli import main
from madlab.core import Item, Round, Turn, Transcript, OptionError, run_sync, answer_key
from madlab.agents import Agent
from madlab.backends import OpenAIBackend, HFBackend
from madlab.synthetic import SyntheticBackend
from madlab.debate import Debate
from madlab.decisions import redecide, FreeMAD
from madlab.run import run_experiment
from madlab.runs import open_run
from madlab.tasks.arith import toy_arith_items

def invoke(*args): return CliRunner().invoke(main, [str(a) for a in args])

TEAM = ["synthetic:strong", "synthetic:weak", "synthetic:weak"]
CALIBRATED = [f"{s},calibration=0.5" for s in TEAM]     # simulated log-probabilities that say they track correctness

def _no_calls(monkeypatch):
    async def boom(self, *a, **k): raise AssertionError("a backend was called")
    monkeypatch.setattr(SyntheticBackend, "complete", boom)

# ---- Free-MAD -----------------------------------------------------------------------------------------------------

def _transcript(rows, team=("a", "b", "c"), extra_rounds=(), roles=None):
    item = Item("q", "arith", "What is 1 + 2 * 3?", gold=7)
    rounds = [Round(f"round {k}", "initial" if k == 0 else "debate", k, [Turn(n, reply=str(x), answer=x) for n, x in zip(team, xs)])
              for k, xs in enumerate(rows)]
    return Transcript("du", item, [{"name": n, "role": (roles or {}).get(n)} for n in team], {}, rounds + list(extra_rounds), {},
                      {"answer": rows[-1][0]}, {"status": "done"})

def test_freemad_on_a_hand_computed_trajectory():
    # a: 7 7 7   b: 9 7 9   c: 9 9 9   (rounds k = 0, 1, 2; f = 1, 1/2, 1/3; w = 20, 25, 30, 20)
    # 7: 20 (a) + 10 (a keeps) + 15 (b to 7) + 20/3 (a keeps) - 25/3 (b leaves 7)          = 43.333333
    # 9: 20 (b) + 20 (c) - 12.5 (b leaves 9) + 10 (c keeps) + 10 (b back to 9) + 20/3 (c) = 54.166667
    t = _transcript([(7, 9, 9), (7, 7, 9), (7, 9, 9)])
    r = redecide(t, "freemad")
    assert r["decision_tally"] == {"7": 43.333333, "9": 54.166667}
    assert r["answer"] == 9 and r["decision_reason"] == "decided"
    # a judge's round and a critique round are not part of anyone's trajectory; a failed turn adds nothing
    judge = Round("judge decision", "decision", 3, [Turn("j", answer=7)])
    crit = Round("critique", "critique", 4, [Turn("a", answer=7)])
    t = _transcript([(7, 9, 9), (7, 7, 9), (7, 9, 9)], extra_rounds=[judge, crit])
    assert redecide(t, "freemad")["decision_tally"] == {"7": 43.333333, "9": 54.166667}
    t = _transcript([(7, 9, 9), (7, 7, 9), (7, 9, 9)])
    t.rounds[1].turns[1].error = "HTTP 500"               # b's round-1 answer is lost: its round-2 answer 9 is a keep of 9
    # 7: 20 + 10 + 20/3 = 36.666667; 9: 20 + 20 + 10 (c keeps) + 20/3 (b keeps) + 20/3 (c keeps) = 63.333333
    assert redecide(t, "freemad")["decision_tally"] == {"7": 36.666667, "9": 63.333333}

def test_freemad_weights_change_the_decision():
    t = _transcript([(7, 9, 9), (7, 7, 9), (7, 9, 9)])
    assert redecide(t, "freemad:1,0,0,0")["answer"] == 9                 # first answers only: 9 has two, 7 one
    # keeps only: 7 (a keeps at k=1 and k=2: 1/2 + 1/3) ties with 9 (c keeps at k=1 and k=2): no decision
    r = redecide(t, "freemad:0,0,0,1")
    assert (r["answer"], r["decision_reason"]) == (None, "tie")
    # rewarding changes only: b's two changes, to 7 at k=1 (1/2) and to 9 at k=2 (1/3)
    assert redecide(t, "freemad:0,0,1,0")["answer"] == 7

def _hand_freemad(t) -> object:
    "An independent Free-MAD score of a du transcript: each debater's answer per round, w = 20, 25, 30, 20, f(k) = 1/(k+1)."
    paths = {}
    for r in t.rounds:
        for tu in r.turns: paths.setdefault(tu.agent, []).append(answer_key(tu.answer) if tu.error is None else None)
    S = {}
    for path in paths.values():
        prev = None
        for k, a in enumerate(path):
            if a is None: continue
            f = 1 / (k + 1)
            if prev is None: S[a] = S.get(a, 0) + 20 * f
            elif a != prev: S[prev] = S.get(prev, 0) - 25 * f; S[a] = S.get(a, 0) + 30 * f
            else: S[a] = S.get(a, 0) + 20 * f
            prev = a
    if not S: return None
    best = sorted(S.values(), reverse=True)
    if len(best) > 1 and abs(best[0] - best[1]) < 1e-9: return None
    return max(S, key=S.get)

def _answers(df, order) -> list: return [None if pd.isna(x) else str(x) for x in df.answer.reindex(order)]

def test_rescore_and_a_live_debate_decide_as_the_hand_score(tmp_path, monkeypatch):
    items = toy_arith_items(12)
    run_experiment("du", items, TEAM, tmp_path / "du", rounds=3, cache=False)
    live = run_experiment("du", items, TEAM, tmp_path / "fm", rounds=3, cache=False, decision="freemad")
    _no_calls(monkeypatch)
    r = invoke("rescore", tmp_path / "du", "--decision", "freemad")
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "du" / "results.decision-freemad.parquet").set_index("item_id")
    assert set(df.decision_rule) == {"freemad"}
    ts = open_run(tmp_path / "du").folder.transcripts()[0]
    assert len(ts) == 12 and all(len(t.rounds) == 4 for t in ts.values())
    for iid, t in ts.items():
        want = _hand_freemad(t)
        got = df.loc[iid, "answer"]
        assert (None if pd.isna(got) else answer_key(got)) == want, (iid, got, want)
    lf = live.df.set_index("item_id")
    assert _answers(lf, df.index) == _answers(df, df.index)               # the same debates decided live: the same answers
    assert set(lf.decision_rule) == {"freemad"}

# ---- log-probabilities --------------------------------------------------------------------------------------------

Q = [{"role": "user", "content": "What is 6 * 7? The answer is"}]

def test_hf_records_the_mean_logprob_of_its_reply(tiny_model_dir):
    import torch
    b = HFBackend(tiny_model_dir, max_new_tokens=8)
    c = run_sync(b.complete(Q, greedy=True, logprobs=True))
    plain = run_sync(b.complete(Q, greedy=True))
    assert "logprob" not in plain.meta and plain.text == c.text
    # the same greedy reply, scored by one forward pass of the model over prompt + reply
    tok, model = b.tokenizer, b.model
    prompt = tok(b._prompt(Q), add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.inference_mode(): out = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    reply = out[0, prompt.shape[1]:].tolist()
    stops = {tok.eos_token_id, *([model.generation_config.eos_token_id] if isinstance(model.generation_config.eos_token_id, int) else model.generation_config.eos_token_id or [])}
    n = next((i for i, t in enumerate(reply) if t in stops), len(reply))
    assert n == c.usage.completion_tokens > 0
    with torch.inference_mode(): logits = model(out).logits[0].float()
    lps = [torch.log_softmax(logits[prompt.shape[1] - 1 + j], -1)[reply[j]].item() for j in range(n)]
    assert c.meta["logprob"] == pytest.approx(sum(lps) / n, abs=1e-3)
    assert c.meta["logprob"] < 0

def test_hf_batched_rows_each_get_their_own(tiny_model_dir):
    import asyncio
    b = HFBackend(tiny_model_dir, max_new_tokens=6)
    qs = [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(3)]
    async def go(): return await asyncio.gather(*(b.complete(q, greedy=True, logprobs=i != 1) for i, q in enumerate(qs)))
    cs = run_sync(go())
    assert "logprob" in cs[0].meta and "logprob" not in cs[1].meta and "logprob" in cs[2].meta
    alone = run_sync(b.complete(qs[2], greedy=True, logprobs=True))
    assert alone.text == cs[2].text and alone.meta["logprob"] == pytest.approx(cs[2].meta["logprob"], abs=1e-3)

def test_openai_turns_record_the_servers_logprobs_and_the_rule_weighs_them(fake_server):
    replies = {"A0": "The answer is 7.", "A1": "Hmm the answer is 9.", "A2": "So the answer is 9."}
    srv = fake_server(reply=lambda req: replies[next(m["content"] for m in req["messages"] if m["role"] == "system")],
                      logprobs=lambda text: [(w, -0.1 if "7" in text else -2.0) for w in text.split()])
    team = [Agent(f"A{i}", "vllm:m", system=f"A{i}", backend=OpenAIBackend("m", base_url=srv.url, preset="vllm", timeout=10)) for i in range(3)]
    d = Debate("du", Item("q", "arith", "What is 1 + 2 * 3?", gold=7), team, rounds=0, decision="confidence:logprob")
    d.run()
    t = d.transcript
    assert all(req.get("logprobs") is True for _, _, req in srv.log)
    assert [tu.meta["logprob"] for tu in t.rounds[-1].turns] == [-0.1, -2.0, -2.0]
    assert t.result["answer"] == 7                       # exp(-0.1) = 0.90 against 2·exp(-2) = 0.27
    assert t.result["decision_tally"] == {"7": round(math.exp(-0.1), 6), "9": round(2 * math.exp(-2), 6)}
    assert redecide(t, "plurality")["answer"] == 9

def test_a_server_that_sends_no_logprobs_fails_the_call_loudly(fake_server):
    srv = fake_server(logprobs=False)
    b = OpenAIBackend("m", base_url=srv.url, preset="vllm", timeout=10, max_retries=0)
    with pytest.raises(Exception, match="gave no token log-probabilities"): run_sync(b.complete(Q, logprobs=True))
    assert "logprob" not in run_sync(b.complete(Q)).meta

def test_a_backend_without_logprobs_is_refused_before_any_call(fake_server, tmp_path):
    srv = fake_server()
    team = [Agent("A0", "vllm:m", backend=OpenAIBackend("m", base_url=srv.url, preset="vllm", timeout=10)),
            Agent("A1", "ollama:m", backend=OpenAIBackend("m", base_url=srv.url, preset="ollama", timeout=10))]
    with pytest.raises(OptionError, match=r"cannot give: A1 \(ollama:m\)"):
        Debate("du", Item("q", "arith", "What is 1 + 2?", gold=3), team, rounds=1, decision="confidence:logprob")
    with pytest.raises(OptionError, match="cannot give"):
        run_experiment("du", toy_arith_items(2), team, tmp_path / "r", decision="confidence:logprob", cache=False)
    assert srv.hits == 0 and not (tmp_path / "r").exists()
    r = invoke("run", "du", "--task", "arith", "--n", "2", "--agents", "synthetic:strong,ollama:m", "--decision", "confidence:logprob",
               "--out", tmp_path, "--no-cache")
    assert r.exit_code == 2 and "--decision" in r.output and "cannot give" in r.output and "Traceback" not in r.output, r.output
    assert not any(tmp_path.iterdir())

def test_synthetic_runs_simulate_logprobs_and_rescore_reads_them(tmp_path, monkeypatch):
    res = run_experiment("du", toy_arith_items(10), CALIBRATED, tmp_path / "lp", rounds=1, cache=False, decision="confidence:logprob")
    ts = res.transcripts if isinstance(res.transcripts, dict) else {t.item.id: t for t in res.transcripts}
    for t in ts.values():
        assert all(isinstance(tu.meta.get("logprob"), float) and tu.meta["logprob"] <= 0 for r in t.rounds for tu in r.turns)
        assert t.result["decision_rule"] == "confidence:logprob"
    _no_calls(monkeypatch)
    r = invoke("rescore", tmp_path / "lp", "--decision", "confidence:logprob")
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "lp" / "results.decision-confidence-logprob.parquet").set_index("item_id")
    assert _answers(df, df.index) == _answers(res.df.set_index("item_id"), df.index)

def test_hf_batches_fewer_rows_when_it_keeps_every_steps_logits(tiny_model_dir, monkeypatch):
    import madlab.backends.hf as mb
    b = HFBackend(tiny_model_dir, max_new_tokens=64)
    run_sync(b.complete(Q, greedy=True, max_new_tokens=1))
    msgs = [{"role": "user", "content": "Question?"}]
    plain = [mb._HFRequest(msgs, 64, False, 0, 1, []) for _ in range(4)]
    asked = [mb._HFRequest(msgs, 64, False, 0, 1, [], logprobs=True) for _ in range(4)]
    vocab = b.model.config.vocab_size
    monkeypatch.setattr(mb, "_free_memory", lambda device: 2 * 40 * 64 * vocab * 4)    # room for 40 rows' kept logits, and little else
    assert b._batch_limit(plain) == mb.AUTO_BATCH_CAP["cpu"] and 1 <= b._batch_limit(asked) < 40

def test_rescore_by_logprob_of_a_run_that_recorded_none_is_refused(tmp_path, monkeypatch):
    run_experiment("du", toy_arith_items(3), TEAM, tmp_path / "du", rounds=1, cache=False)
    _no_calls(monkeypatch)
    r = invoke("rescore", tmp_path / "du", "--decision", "confidence:logprob")
    assert r.exit_code == 2 and "did not record" in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "du" / "results.decision-confidence-logprob.parquet").exists()

def test_a_debate_of_hf_agents_weighs_by_their_logprobs(tiny_model_dir):
    b = HFBackend(tiny_model_dir, max_new_tokens=6)
    team = [Agent(f"A{i}", b.spec, backend=b, params={"greedy": True}) for i in range(2)]
    d = Debate("du", Item("q", "arith", "What is 1 + 2 * 3?", gold=7), team, rounds=1, decision="confidence:logprob")
    t = d.run()
    lps = [tu.meta.get("logprob") for r in t.rounds for tu in r.turns]
    assert len(lps) == 4 and all(isinstance(x, float) and x < 0 for x in lps)   # under the raw logits: a token the schema forced is no certainty
    assert {tu.meta.get("structured") for r in t.rounds for tu in r.turns} <= {"enforced", "broken"}   # the replies were held to a schema
    assert t.result["decision_rule"] == "confidence:logprob"

@pytest.mark.parametrize("rule", ["freemad", "confidence:logprob"])
def test_replay_and_fork_keep_the_rule(rule):
    t = Debate("du", toy_arith_items(3)[2], CALIBRATED if rule == "confidence:logprob" else TEAM, rounds=2, decision=rule).run()
    d = Debate.from_transcript(t)                                  # replayed without a call: the recorded log-probabilities come back
    assert d.done and (d.result["answer"], d.result["decision_tally"]) == (t.result["answer"], t.result["decision_tally"])
    t2 = Debate.from_transcript(t, live=True).fork(2).run()
    assert t2.result["decision_rule"] == rule
    if rule == "confidence:logprob": assert all(isinstance(tu.meta.get("logprob"), float) for tu in t2.rounds[-1].turns)

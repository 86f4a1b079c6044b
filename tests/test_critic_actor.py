"""Critic-Actor on GSM8K: the number reader on tricky answers, per-role sampling parameters reaching a real HTTP server,
critic parse failures in the results table, `hf:` generation ending at a Llama-3-style `<|eot_id|>`, the majority-error
option of `madlab run`, and the comparison notebook run by papermill with small defaults."""
from __future__ import annotations
import json
from pathlib import Path
import pandas as pd
import pytest
from conftest import needs_public_data
from madlab.core import public_data
from click.testing import CliRunner
from madlab.core import Item, run_sync
from madlab.agents import Agent
from madlab.backends import HFBackend, OpenAIBackend
from madlab.cli import main
from madlab.debate import Debate
from madlab.run import run_experiment, MajorityErrorFilter
from madlab.scoring import extract_number, numbers_match
from madlab.tasks.gsm8k import load_gsm8k
from madlab.protocols.critic_actor import critic_actor_team

ROOT = Path(__file__).resolve().parent.parent
GSM8K = public_data("gsm8k", "test.jsonl")
needs_gsm8k = needs_public_data("GSM8K's test set", "gsm8k", "test.jsonl")

# ---- the number reader ----------------------------------------------------------------------------------------

TRICKY = [("18", 18), ("18.0", 18), ("$18", 18), ("18.00", 18), ("18 apples", 18), ("-3", -3), ("\u22123", -3), ("3/4", 0.75),
          ("1,234.5", 1234.5), (r"\boxed{\$18}", 18), (r"\boxed{-\$5}", -5), (r"\boxed{\frac{3}{4}}", 0.75), (r"\boxed{1{,}234}", 1234),
          ("So she pays $1,234.50 in all.", 1234.5), ("First 7 + 11 = 18.\nSo \\boxed{18} apples, not 17.", 18),
          ("The answer is 18 (checked: 18 - 7 = 11).", 18), ("It is not 12/25/2020 but 5", 5), ("I am not sure how to solve this.", None), ("", None)]

@pytest.mark.parametrize("reply,want", TRICKY)
def test_number_reader_on_tricky_answers(reply, want):
    got = extract_number(reply)
    assert got == want and type(got) is type(want), (reply, got)

def test_one_answer_however_written():
    forms = ["18", "18.0", "$18", "18.00", r"\boxed{\$18}", "The answer is 18 dollars."]
    assert len({extract_number(f) for f in forms}) == 1 and all(numbers_match(extract_number(f), 18) for f in forms)
    assert not numbers_match(extract_number("No number."), 18)           # unparsed: never right

# ---- per-role parameters reach a real server ------------------------------------------------------------------

SOLUTION = "Let's think step by step. 48 / 2 = 24 and 48 + 24 = 72.\nSo the final answer is \\boxed{72}."

def _reply(req) -> str:
    "Critic prompts get a full JSON score (a key left out for the goats question); actors get a solution."
    text = req["messages"][-1]["content"]
    goats = "goats" in text
    if text.startswith("You are a Critic agent"):
        return 'Here you go: {"logic_score": 6, "critique": "Off by one."} Thanks.' if goats else '{"logic_score": 9, "computation_score": 9.5, "critique": "Sound."}'
    return SOLUTION.replace("72", "71") if goats else SOLUTION

def test_per_role_parameters_reach_the_server(fake_server):
    srv = fake_server(reply=_reply)
    team = [Agent(f"A{i}", "openai:fake-model", backend=OpenAIBackend("fake-model", base_url=srv.url, max_retries=0)) for i in range(3)]
    item = Item("q", "gsm8k", "Natalia sold 48 clips in April and half as many in May. How many in all?", 72)
    t = Debate("critic_actor", item, team, rounds=1).run()
    assert t.meta["status"] == "done" and t.result["answer"] == 72
    bodies = [req for _, _, req in srv.log]
    actor = [b for b in bodies if not b["messages"][-1]["content"].startswith("You are a Critic agent")]
    critic = [b for b in bodies if b["messages"][-1]["content"].startswith("You are a Critic agent")]
    assert len(actor) == 6 and len(critic) == 6
    assert any(b["messages"][-1]["content"].startswith("You are a debater") for b in actor)
    for b in actor:
        assert (b["temperature"], b["top_p"], b["max_tokens"], b["stop"]) == (0.7, 0.9, 1024, ["<|eot_id|>"]), b
    for b in critic:
        assert (b["temperature"], b["max_tokens"], b["stop"]) == (0, 256, ["<|eot_id|>"]) and "top_p" not in b, b

def test_hf_style_parameters_map_to_openai_ones(fake_server):
    srv = fake_server()
    b = OpenAIBackend("fake-model", base_url=srv.url, max_retries=0)
    run_sync(b.complete([{"role": "user", "content": "hi"}], do_sample=False, max_new_tokens=33, eos_token_id=[7, 9]))
    body = srv.log[-1][2]
    assert (body["temperature"], body["max_tokens"], body["stop_token_ids"]) == (0, 33, [7, 9]) and "do_sample" not in body

# ---- critic parse failures are counted and shown ----------------------------------------------------------------

def test_critic_parse_failures_in_the_results_table(fake_server, tmp_path):
    "A critic reply without computation_score scores 0 there and counts as a parse failure, per debate, in results.csv."
    srv = fake_server(reply=_reply)
    def team(): return [Agent(f"A{i}", "openai:fake-model", backend=OpenAIBackend("fake-model", base_url=srv.url, max_retries=0)) for i in range(2)]
    items = [Item("clips", "gsm8k", "Natalia sold 48 clips in April and half as many in May. How many in all?", 72),
             Item("goats", "gsm8k", "A farm has 71 goats. How many goats?", 71)]
    res = run_experiment("critic_actor", items, team(), tmp_path / "run", rounds=1, cache=False)
    df = pd.read_csv(tmp_path / "run" / "results.csv").set_index("item_id")
    assert {"critic_calls", "critic_parse_failures", "critic_failure_reasons"} <= set(df.columns)
    assert df.loc["clips", "critic_parse_failures"] == 0 and df.loc["goats", "critic_parse_failures"] == 4 == df.loc["goats", "critic_calls"]
    assert "computation_score missing" in df.loc["goats", "critic_failure_reasons"]
    t = res.transcripts["goats"]
    crit = [tu for r in t.rounds if r.phase == "critique" for tu in r.turns]
    assert all(tu.answer.computation_score == 0 and not tu.valid for tu in crit)     # the seed's default 0, never silent
    assert bool(df.loc["goats", "correct"]) and bool(df.loc["clips", "correct"])

def test_synthetic_critic_failures_are_counted():
    team = list(critic_actor_team()[:3]) + [{"name": "Critic", "spec": "synthetic:skill=0.8,malformed=0.5,seed=3", "role": "critic"}]
    items = [Item(f"i{k}", "gsm8k", f"What is {k} + 1?", k + 1) for k in range(6)]
    res = run_experiment("critic_actor", items, team, rounds=1, cache=False)
    counted = sum(1 for t in res.transcripts.values() for r in t.rounds if r.phase == "critique" for tu in r.turns if not tu.valid)
    assert counted > 0 and res.df.critic_parse_failures.sum() == counted

# ---- hf: generation ends at Llama 3's <|eot_id|> --------------------------------------------------------------------

LLAMA3_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
                   "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")

def build_llama3_style(path) -> dict:
    """A tiny Llama whose tokenizer has a Llama-3-style chat template and <|eot_id|> (not its eos), wired as a bigram model:
    any prompt token -> "4" -> "2" -> <|eot_id|> -> "!" -> "!" ... So a reply is "42" when generation ends at <|eot_id|>."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from conftest import build_tiny_tokenizer
    tok = build_tiny_tokenizer()
    tok.add_special_tokens({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                            "additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]})
    tok.chat_template = LLAMA3_TEMPLATE
    ids = {k: tok.convert_tokens_to_ids(k) for k in ("4", "2", "!", "<|eot_id|>")}
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in m.model.layers: layer.self_attn.o_proj.weight.zero_(); layer.mlp.down_proj.weight.zero_()   # the residual is the embedding
        E, W = m.model.embed_tokens.weight, m.lm_head.weight
        E.zero_(); W.zero_()
        E[:, 0] = 1                                                     # dim 0: any other token
        for d, k in enumerate(("4", "2", "<|eot_id|>", "!"), start=1): E[ids[k]] = 0; E[ids[k], d] = 1
        W[ids["4"], 0] = W[ids["2"], 1] = W[ids["<|eot_id|>"], 2] = W[ids["!"], 3] = W[ids["!"], 4] = 10
    m.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    m.save_pretrained(path); tok.save_pretrained(path)
    return ids

def test_hf_generation_stops_at_eot_id(tmp_path):
    ids = build_llama3_style(tmp_path / "llama3ish")
    b = HFBackend(str(tmp_path / "llama3ish"))
    q = [{"role": "system", "content": "You are an actor."}, {"role": "user", "content": "What is 6 * 7?"}]
    greedy = run_sync(b.complete(q, do_sample=False, max_new_tokens=12))
    sampled = run_sync(b.complete(q, temperature=0.7, top_p=0.9, max_tokens=12))
    assert b.end_of_turn == [ids["<|eot_id|>"]] and ids["<|eot_id|>"] != b.tokenizer.eos_token_id
    assert (greedy.text, greedy.usage.completion_tokens) == ("42", 2) and sampled.text == "42"
    # a critic-actor debate served by this model: every reply ends at <|eot_id|>, so every answer reads 42
    team = [Agent(f"L{i}", f"hf:{tmp_path / 'llama3ish'}", backend=b, structured="off") for i in range(2)]   # a scripted model: it knows only "42"
    t = Debate("critic_actor", Item("q", "gsm8k", "What is 6 * 7?", 42), team, rounds=0).run()
    assert [tu.reply for tu in t.rounds[0].turns] == ["42", "42"] and t.result["answer"] == 42
    # the check can fail: without the end-of-turn id the model runs on to max_new_tokens
    b.end_of_turn = []
    assert run_sync(b.complete(q, do_sample=False, max_new_tokens=12)).text == "42" + "!" * 9

# ---- the majority-error subset from the command line ----------------------------------------------------------------

@needs_gsm8k
def test_cli_majority_error_subset(tmp_path):
    team = "synthetic:medium,seed=1;synthetic:medium,seed=2;synthetic:weak,seed=3"
    votes = MajorityErrorFilter(3).votes(load_gsm8k(GSM8K, limit=40), team.split(";"), cache=False)
    wrong = list(votes.item_id[votes.correct == False])   # noqa: E712
    assert len(wrong) >= 3
    r = CliRunner().invoke(main, ["run", "du", "--task", "gsm8k", "--data", str(GSM8K), "--items", "1-40", "--majority-error", "3", "--n", "2",
                                  "--agents", team, "--no-cache", "--out", str(tmp_path), "--name", "sub"])
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "sub" / "config.json").read_text())
    assert cfg["items"] == wrong[:2] and cfg["majority_error"]["agents"] == 3 and cfg["majority_error"]["of"] == 40
    r = CliRunner().invoke(main, ["run", "critic_actor", "--task", "gsm8k", "--data", str(GSM8K), "--items", "1-5", "--majority-error", "3",
                                  "--agents", "synthetic:oracle", "--no-cache", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--majority-error" in r.output

# ---- the comparison notebook -------------------------------------------------------------------------------------------

@needs_gsm8k
def test_comparison_notebook_runs_with_small_defaults(tmp_path):
    from madlab.experiments import run_combination
    info = run_combination(ROOT / "nbs" / "experiments" / "critic_actor_comparison.ipynb", {"data": str(GSM8K)}, tmp_path / "cmp")
    assert info["status"] == "done", info
    df = pd.read_parquet(tmp_path / "cmp" / "results.parquet")
    assert {"single", "self_consistency", "du", "critic_actor:per_solution", "critic_actor:global", "critic_actor:roles"} == set(df.setup)
    assert set(df.set) == {"full", "majority-error"} and (df.task == "gsm8k").all()
    sub = df[df.set == "majority-error"]
    assert not sub[sub.setup == "single"].correct.all()

# ---- solutions held to JSON are read as prose -------------------------------------------------------------------

def test_solutions_held_to_json_reach_critics_and_actors_as_prose():
    from madlab.core import Backend, Completion, Usage
    class Held(Backend):
        "Holds replies to their schema: an actor's solution is the JSON object; a critic's scores are JSON anyway."
        structured = "requested"
        def __init__(self, n): self.n, self.calls = n, []
        async def complete(self, messages, ctx=None, **kw):
            self.calls.append({"kind": ctx.kind, "messages": [dict(m) for m in messages]})
            if ctx.kind == "critic_actor.critique": return Completion('{"critique": "Fine.", "logic_score": 9, "computation_score": 9}', Usage(10, 5, 1))
            return Completion(json.dumps({"reasoning": f"48 / 2 = 24, so I get {self.n}.", "answer": self.n}), Usage(10, 5, 1))
    bs = [Held(72), Held(72), Held(71)]
    team = [Agent(f"A{i}", "held:", backend=b) for i, b in enumerate(bs)]
    item = Item("q", "gsm8k", "Natalia sold 48 clips in April and half as many in May. How many in all?", 72)
    t = Debate("critic_actor", item, team, rounds=1).run()
    assert t.meta["status"] == "done" and t.rounds[0].turns[2].answer == 71
    sent = [m["content"] for b in bs for c in b.calls for m in c["messages"] if m["role"] == "user"]
    assert any("48 / 2 = 24, so I get 71.\n\nThe answer is 71." in s for s in sent)          # critics and actors read the prose
    assert not any('{"reasoning": "48 / 2' in s for s in sent)

"""The `hf:` backend keeps each sequence's key/value cache and a new request computes only what is new: with a tiny random
Llama, replies are token for token those without reuse (greedy, schemas held, sampling with a seed), over whole debates and
games; the store keeps to its budget; a fork reuses the prefix up to its round; a model whose cache is not plain is served without it."""
import asyncio
import pytest
from madlab.agents import Agent
from madlab.backends import HFBackend, get_backend
from madlab.core import run_sync
from madlab.debate import Debate
from madlab.run import run_many
from madlab.tasks.arith import toy_arith_items
import madlab.protocols.baselines  # noqa: F401  (registers "du")

def complete_all(b, calls):
    async def go(): return await asyncio.gather(*(b.complete(m, **p) for m, p in calls))
    return run_sync(go())

def team(b, n=3, tokens=12, **params):
    return [Agent(f"L{i}", b.spec, params={"max_new_tokens": tokens, "greedy": True, **params}, backend=b) for i in range(n)]

def replies(res) -> dict:
    return {(iid, k, tu.agent): tu.reply for iid, t in res.transcripts.items() for k, r in enumerate(t.rounds) for tu in r.turns}

def du(b, items=3, rounds=2, **kw):
    return run_many("du", toy_arith_items(items, seed=3), team(b, **kw), rounds=rounds, concurrency=items, cache=False, progress=False)

def test_du_debates_are_exact_and_compute_each_history_once(tiny_model_dir):
    off, on = HFBackend(tiny_model_dir, kv_cache_mb=0), HFBackend(tiny_model_dir)
    r_off, r_on = du(off), du(on)
    assert set(r_on.df.status) == {"done"} and replies(r_on) == replies(r_off)
    assert off.prefill_tokens == off.prompt_tokens and off._prefix is None and off.prefix_off == "kv_cache_mb=0"
    assert on.prompt_tokens == off.prompt_tokens and on.prefill_tokens / on.prompt_tokens < 0.6, (on.prefill_tokens, on.prompt_tokens)
    pf = r_on.prefill()         # per turn, the same count: the run summary says it
    assert pf == {"prompt_tokens": on.prompt_tokens, "computed": on.prefill_tokens}
    assert f"prefill: {on.prefill_tokens:,} of {on.prompt_tokens:,} prompt tokens computed" in r_on.summary()
    assert r_off.prefill()["computed"] == r_off.prefill()["prompt_tokens"]
    assert 0 < on._prefix.nbytes <= on._prefix.budget

def test_a_controlmad_game_is_exact_with_reuse(tiny_model_dir):
    "A whole 4-player game (initial proposals, a debate round, self-adjustment, final discussion), every reply held to its schema."
    from madlab.cli_options import load_items
    items = load_items("kks", size=4, items=[1])
    out = {}
    for kv in (0, None):
        b = HFBackend(tiny_model_dir, kv_cache_mb=kv)
        res = run_many("controlmad", items, team(b, tokens=24), depth=1, self_adjustment=True, cache=False, progress=False)
        assert set(res.df.status) == {"done"}, res.df.error.tolist()
        out[kv] = (replies(res), b)
    assert out[None][0] == out[0][0]
    b = out[None][1]
    assert b.prefill_tokens / b.prompt_tokens < 0.5, (b.prefill_tokens, b.prompt_tokens)

def test_store_keeps_its_budget_and_replies_stay_exact(tiny_model_dir):
    small, off = HFBackend(tiny_model_dir, kv_cache_mb=1), HFBackend(tiny_model_dir, kv_cache_mb=0)
    r_small, r_off = du(small, items=6, rounds=3), du(off, items=6, rounds=3)
    assert replies(r_small) == replies(r_off)
    st = small._prefix
    assert st.budget == 2**20 and st.nbytes <= st.budget and st.evicted > 0, st
    assert small.prefill_tokens < small.prompt_tokens

def test_sampling_with_a_seed_gives_the_same_replies(tiny_model_dir):
    import torch
    hist = [[{"role": "system", "content": "You are a careful debater."}, {"role": "user", "content": f"What is {i} + {i}? The answer is"}] for i in range(3)]
    def go(b):
        first = complete_all(b, [(h, dict(greedy=True, max_new_tokens=6)) for h in hist])
        nxt = [h + [{"role": "assistant", "content": c.text}, {"role": "user", "content": "Are you sure?"}] for h, c in zip(hist, first)]
        torch.manual_seed(7)
        return [c.text for c in complete_all(b, [(h, dict(temperature=1.0, top_p=0.9, max_new_tokens=10)) for h in nxt])]
    on = HFBackend(tiny_model_dir)
    assert go(on) == go(HFBackend(tiny_model_dir, kv_cache_mb=0)) and on.prefill_tokens < on.prompt_tokens

def test_schemas_are_held_the_same_with_reuse(tiny_model_dir):
    schema = {"type": "object", "properties": {"reasoning": {"type": "string", "maxLength": 20}, "answer": {"type": "number"}},
              "required": ["reasoning", "answer"], "additionalProperties": False}
    def go(b):
        h = [[{"role": "user", "content": f"What is {i} * 3? Reply in JSON."}] for i in range(3)]
        out = []
        for _ in range(2):
            cs = complete_all(b, [(m, dict(greedy=True, max_new_tokens=40, schema=schema)) for m in h])
            out.append([(c.text, c.meta.get("structured")) for c in cs])
            h = [m + [{"role": "assistant", "content": c.text}, {"role": "user", "content": "Check it."}] for m, c in zip(h, cs)]
        return out
    on = HFBackend(tiny_model_dir)
    got = go(on)
    assert got == go(HFBackend(tiny_model_dir, kv_cache_mb=0)) and {s for r in got for _, s in r} == {"enforced"}
    assert on.prefill_tokens < on.prompt_tokens

def test_a_fork_reuses_the_prefix_up_to_its_round(tiny_model_dir):
    b = HFBackend(tiny_model_dir)
    d = Debate("du", toy_arith_items(1, seed=5)[0], team(b), rounds=2)
    d.run()
    f = d.fork(2, agent="L0", reply="The answer is 12.")
    f.run()
    late = [tu for r in f.rounds[2:] for tu in r.turns]
    assert late and all(tu.meta["prefill_tokens"] < tu.usage.prompt_tokens for tu in late), [(tu.meta, tu.usage) for tu in late]

def test_a_sliding_window_model_is_served_without_reuse(tmp_path):
    "Mistral with a sliding window keeps a cache madlab does not rebuild: no reuse, said why, the same replies."
    import torch
    from conftest import build_tiny_tokenizer
    from transformers import GenerationConfig, MistralConfig, MistralForCausalLM
    tok = build_tiny_tokenizer(); torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, sliding_window=16, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id, initializer_range=0.3)
    m = MistralForCausalLM(cfg).eval()
    m.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    m.save_pretrained(tmp_path); tok.save_pretrained(tmp_path)
    on, off = HFBackend(str(tmp_path)), HFBackend(str(tmp_path), kv_cache_mb=0)
    assert replies(du(on, items=2)) == replies(du(off, items=2))
    assert on._prefix is None and "sliding" in on.prefix_off

def test_spec_options(tiny_model_dir):
    b = get_backend(f"hf:{tiny_model_dir},kv_cache_mb=0,threads=1")
    assert (b.kv_cache_mb, b.threads) == (0, 1)
    assert get_backend(f"hf:{tiny_model_dir},max_batch=4").threads >= 1
    for bad, msg in (("kv_cache_mb=-1", "kv_cache_mb must be a whole number, 0 or more"), ("threads=0", "threads must be a positive whole number"),
                     ("kv_cache=3", "unknown option 'kv_cache=3'")):
        with pytest.raises(ValueError, match=msg): get_backend(f"hf:{tiny_model_dir},{bad}")

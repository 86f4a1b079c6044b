"""Structured answers against real parts: the schema reaches an OpenAI-compatible server in `response_format`; a server that
refuses the field costs one refused call per endpoint and the run finishes; `hf:` holds each request of one batched `generate`
to its own schema (or none)."""
import asyncio, json
import jsonschema, pytest
from madlab.core import Item, run_sync
from madlab.backends import HFBackend, get_backend, schema_for, Ask
from madlab.run import run_experiment
from madlab.tasks.arith import toy_arith_items

NUMBER = '{"reasoning": "6 times 7 is 42.", "answer": 42}'

def _schemas(log):
    return [req.get("response_format") for _, _, req in log]

def test_openai_backend_sends_the_schema(fake_server, tmp_path):
    srv = fake_server(reply=NUMBER)
    items = toy_arith_items(3)
    res = run_experiment("single", items, [f"vllm:m,base_url={srv.url}"], tmp_path / "run", cache=False, max_tokens=200)
    assert res.df.status.tolist() == ["done"] * 3
    sent = _schemas(srv.log)
    assert len(sent) == 3 and all(f and f["type"] == "json_schema" and f["json_schema"]["strict"] for f in sent)
    s = sent[0]["json_schema"]["schema"]
    assert list(s["properties"]) == ["reasoning", "answer"] and s["properties"]["reasoning"]["maxLength"] > 0
    jsonschema.validate(json.loads(NUMBER), s)
    t = next(iter(res.transcripts.values()))
    assert [tu.meta.get("structured") for r in t.rounds for tu in r.turns] == ["requested"]
    assert t.rounds[0].turns[0].messages[-1]["content"].endswith('{"reasoning": "<your reasoning>", "answer": <number>}')

def test_structured_off_sends_no_schema(fake_server, tmp_path):
    srv = fake_server(reply="The answer is 42.")
    res = run_experiment("single", toy_arith_items(2), [f"vllm:m,base_url={srv.url}"], tmp_path / "run", cache=False, structured="off")
    assert res.df.status.tolist() == ["done"] * 2 and _schemas(srv.log) == [None, None]

def test_a_server_refusing_the_schema_costs_one_call_per_endpoint(fake_server, tmp_path):
    # an `openai:` preset pointed at a server of one's own: nothing says it takes the schema, so its first call holds the others
    srv = fake_server(reply="The answer is 42.", route=lambda req: "refuse_schema" if "response_format" in req else None, latency=0.05)
    items = toy_arith_items(12)
    team = [f"openai:m,base_url={srv.url}"] * 3
    res = run_experiment("du", items, team, tmp_path / "run", rounds=2, cache=False, concurrency=12)
    assert res.df.status.tolist() == ["done"] * 12
    assert sum(f is not None for f in _schemas(srv.log)) == 1           # one refusal, then every call of the run asks in prose
    assert res.df.invalid.sum() == 0                                     # the prose replies parse as before
    held = res.structured_replies()
    assert held.get("refused", 0) >= 1 and sum(held.values()) <= 12 * 3 * 3   # after the refusal the agents ask in prose: no schema at all
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert [e["structured"].startswith("refused: ") and "response_format" in e["structured"] for e in cfg["endpoints"]] == [True]
    assert res.summary().count("its replies were asked for in prose only") == 1

@pytest.mark.parametrize("spec,holds", [("vllm", False), ("openai", True)])
def test_the_first_call_holds_the_others_only_where_the_preset_does_not_say_the_server_takes_the_schema(fake_server, spec, holds):
    srv = fake_server(reply=NUMBER, latency=0.5)
    b = get_backend(f"{spec}:m,base_url={srv.url}")
    sch = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    async def calls(): return await asyncio.gather(*(b.complete([{"role": "user", "content": f"q{i}"}], schema=sch) for i in range(4)))
    run_sync(calls())
    arrivals = [t for t, _, _ in srv.log]
    assert len(arrivals) == 4 and all(f is not None for f in _schemas(srv.log))
    # held: the other calls go out once the first is answered (0.5 s later); not held: all four go out at once
    assert (arrivals[1] - arrivals[0] >= 0.5) == holds, arrivals

def test_structured_on_refuses_a_backend_that_cannot(tmp_path):
    from madlab.core import OptionError
    class Plain:                     # a backend that ignores schemas (replay of an unstructured run, say)
        spec, synthetic, structured = "plain:", False, None
    from madlab.agents import Agent, set_structured
    with pytest.raises(OptionError, match="structured: on: Ann .* cannot hold replies to a schema"):
        set_structured([Agent("Ann", "plain:", backend=Plain())], "on")

@pytest.fixture(scope="module")
def hf(tiny_model_dir):
    b = HFBackend(tiny_model_dir, max_new_tokens=48)
    run_sync(b.complete([{"role": "user", "content": "hi"}], greedy=True, max_new_tokens=1))
    return b

def test_one_generate_holds_each_request_to_its_own_schema(hf):
    "Two schemas and a free request in one batched `generate`: each constrained reply is valid JSON of its schema."
    a = {"type": "object", "properties": {"pick": {"enum": ["left", "right"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
         "required": ["pick", "n"], "additionalProperties": False}
    b = {"type": "object", "properties": {"note": {"type": "string", "maxLength": 8}, "ok": {"type": "boolean"}},
         "required": ["note", "ok"], "additionalProperties": False}
    msgs = [[{"role": "user", "content": f"Question {i}?"}] for i in range(3)]
    before = hf.generate_calls
    async def go():
        return await asyncio.gather(hf.complete(msgs[0], greedy=True, schema=a), hf.complete(msgs[1], greedy=True, schema=b),
                                    hf.complete(msgs[2], greedy=True))
    ca, cb, cf = run_sync(go())
    assert hf.generate_calls == before + 1 and hf.batch_sizes[-1] == 3
    jsonschema.validate(json.loads(ca.text), a)
    jsonschema.validate(json.loads(cb.text), b)
    assert ca.meta["structured"] == cb.meta["structured"] == "enforced" and "structured" not in cf.meta
    free = run_sync(hf.complete(msgs[2], greedy=True))
    assert free.text == cf.text                                        # the free request decodes as it would alone

def test_a_debate_on_hf_holds_every_reply(tiny_model_dir, tmp_path):
    "A random tiny model under the schema: no token ever leaves it; a reply that ends before the token limit is a valid answer."
    res = run_experiment("du", toy_arith_items(2), [f"hf:{tiny_model_dir}"] * 2, tmp_path / "run", rounds=1, cache=False, max_tokens=48, temperature=0)
    turns = [tu for t in res.transcripts.values() for r in t.rounds for tu in r.turns]
    assert turns and all(tu.meta.get("structured") == "enforced" for tu in turns)
    assert all(tu.reply.startswith('{"reasoning": "') for tu in turns)
    ended = [tu for tu in turns if tu.usage.completion_tokens < 48]
    assert all(tu.valid for tu in ended)           # (one cut off by the limit is invalid unless it happened to end there)

def _keys_in_order(text: str) -> list:
    "The keys of the JSON example a prompt shows, in order, at the outermost level (nested objects skipped; placeholders hold no keys)."
    import re
    body, depth, keys, i = text[text.index("{"):], 0, [], 0
    while i < len(body):
        ch = body[i]
        if ch in "{[": depth += 1
        elif ch in "}]": depth -= 1
        elif ch == '"' and depth == 1:
            m = re.match(r'"([A-Za-z_]+)"\s*:', body[i:])
            if m: keys.append(m.group(1)); i += m.end(); continue
        i += 1
    return keys

def test_prompts_show_the_shape_their_schema_holds():
    "Every prompt that shows a JSON shape shows the schema's fields in the schema's order (the reasoning first): prompt and constraint agree."
    from madlab.protocols import s4, critic_actor, controlmad, multi_persona
    from madlab.tasks.kks import kks_answer_format
    P = controlmad.controlmad_prompts({})
    shown = {
        "kks.full": (kks_answer_format(["Ann", "Bob"], confidence=True), Ask(kind="kks.full", options={"players": ["Ann", "Bob"], "confidence": True})),
        "kks.player": (P["player_format"].format(player="Ann", confidence_field=P["player_confidence"].format(player="Ann")),
                       Ask(kind="kks.player", focus="Ann", peers={"B": None}, options={"confidence": True})),
        "kks.order": (P["order"].format(players="Ann, Bob"), Ask(kind="kks.order", options={"players": ["Ann", "Bob"]})),
        "s4.analysis": (s4.ANALYSIS_PROMPT, Ask(kind="s4.analysis")),
        "s4.challenge": (s4.CHALLENGE_PROMPT, Ask(kind="s4.challenge", options={"target": "Safety"})),
        "s4.revision": (s4.REVISION_PROMPT, Ask(kind="s4.revision")),
        "critic_actor.critique": (critic_actor.PROMPTS["critic"], Ask(kind="critic_actor.critique")),
        "multi_persona.judge": (multi_persona.PROMPTS["judge"], Ask(kind="multi_persona.judge")),
    }
    for kind, (prompt, ask) in shown.items():
        s = schema_for(ask)
        assert s is not None and s.prompted, kind
        assert _keys_in_order(prompt.replace("{{", "{").replace("}}", "}")) == list(s.schema["properties"]), kind
        assert list(s.schema["properties"])[0] == (s.reasoning or list(s.schema["properties"])[0]), kind

def test_all_rows_masks_filled_at_once_match_row_by_row(hf):
    "The parallel fill of a step's masks gives each row exactly the mask llguidance computes for it alone."
    import llguidance, llguidance.torch as lt, torch
    from madlab.backends.schema_mask import _SchemaMask
    a = {"type": "object", "properties": {"pick": {"enum": ["left", "right"]}}, "required": ["pick"], "additionalProperties": False}
    b = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    import llguidance.hf
    hf._llg = getattr(hf, "_llg", None) or llguidance.hf.from_tokenizer(hf.tokenizer, n_vocab=hf.model.get_output_embeddings().weight.shape[0])
    held = _SchemaMask(hf._llg, [a, None, b, a], n_in=3)
    vocab = hf.model.get_output_embeddings().weight.shape[0]
    scores = held(torch.zeros(4, 3, dtype=torch.long), torch.zeros(4, vocab))
    alone = _SchemaMask(hf._llg, [a, None, b, a], n_in=3)
    for i, m in enumerate(alone.matchers):
        if m is not None: lt.fill_next_token_bitmask(m, alone.mask, i)
    assert torch.equal(held.mask[[0, 2, 3]], alone.mask[[0, 2, 3]]) and bool((held.mask[1] == -1).all())
    assert torch.isinf(scores[0]).any() and not torch.isinf(scores[1]).any()     # held rows are masked, the free row is not

def test_max_batch_is_sized_from_free_memory(tiny_model_dir, monkeypatch):
    "With no `max_batch`, a generate takes as many rows as half the free memory holds: fewer when memory is short, the cap when it is not."
    import madlab.backends.hf as mb
    b = HFBackend(tiny_model_dir, max_new_tokens=4)
    assert b.max_batch is None
    run_sync(b.complete([{"role": "user", "content": "hi"}], greedy=True, max_new_tokens=1))
    reqs = [mb._HFRequest([{"role": "user", "content": f"Question {i}?"}], 4, False, 0, 1, []) for i in range(10)]
    monkeypatch.setattr(mb, "_free_memory", lambda device: 2**40)
    assert b._batch_limit(reqs) == mb.AUTO_BATCH_CAP["cpu"]
    monkeypatch.setattr(mb, "_free_memory", lambda device: 0)
    assert b._batch_limit(reqs) == 1
    one = 2 * b._batch_limit(reqs[:1])                                      # (probe the size of a row: 0 free gives 1)
    cfg = b.model.config
    per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * b.model.dtype.itemsize
    row = (mb._estimate_tokens("Question 1?") + 4) * per_token + 16 * cfg.vocab_size
    monkeypatch.setattr(mb, "_free_memory", lambda device: 2 * 3 * row + 1)
    assert b._batch_limit(reqs) == 3 and one == 2
    n0 = b.generate_calls
    async def go(): return await asyncio.gather(*(b.complete(r.messages, greedy=True, max_new_tokens=4) for r in reqs))
    assert len(run_sync(go())) == 10
    assert max(b.batch_sizes[-(b.generate_calls - n0):]) <= 3 and b.generate_calls - n0 >= 4

def test_max_batch_option():
    from madlab.backends.hf import _hf_options
    assert _hf_options("hf:m,max_batch=auto", "m,max_batch=auto") == ("m", {"max_batch": None})
    assert _hf_options("hf:m,max_batch=8", "m,max_batch=8") == ("m", {"max_batch": 8})
    with pytest.raises(ValueError, match="max_batch"): _hf_options("hf:m,max_batch=lots", "m,max_batch=lots")

def test_peers_read_a_held_argument_as_prose():
    "Du et al.'s debate: a reply held to the schema is a JSON object; the peers that read it next round read its reasoning, then its answer."
    from madlab.agents import Agent
    from madlab.core import Backend, Completion, Usage
    from madlab.debate import Debate
    class Held(Backend):
        structured = "requested"
        def __init__(self, n): self.n, self.calls = n, []
        async def complete(self, messages, ctx=None, **kw):
            self.calls.append([dict(m) for m in messages])
            return Completion(json.dumps({"reasoning": f"I get {self.n}.", "answer": self.n}), Usage(10, 5, 1))
    a, b = Held(42), Held(41)
    t = Debate("du", toy_arith_items(1)[0], [Agent("A", "held:", backend=a), Agent("B", "held:", backend=b)], rounds=2).run()
    assert t.rounds[0].turns[0].reply.startswith('{"reasoning"') and [tu.answer for tu in t.rounds[0].turns] == [42, 41]
    seen = "\n".join(m["content"] for m in a.calls[1] if m["role"] != "assistant")
    assert "I get 41.\n\nThe answer is 41." in seen and '"reasoning": "I get 41.' not in seen

# What a server takes is noted beside the response cache (`madlab.backends.server_notes`): each run below is its own
# process, as a later run is.
def _cli_run(srv, tmp_path, name, n=4):
    import os, subprocess, sys
    env = {**os.environ, "MADLAB_CACHE": str(tmp_path / "cache"), "MADLAB_SERVER_NOTES": "on"}
    p = subprocess.run([sys.executable, "-m", "madlab.cli", "run", "single", "--task", "arith", "--n", str(n),
                        "--agents", f"openai:m,base_url={srv.url}", "--no-cache", "--no-progress",
                        "--out", str(tmp_path / name)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr

def _notes(tmp_path, srv) -> dict:
    return json.loads((tmp_path / "cache" / "servers.json").read_text())[srv.url]

def test_a_later_run_holds_no_call_to_learn_that_the_server_takes_the_schema(fake_server, tmp_path):
    srv = fake_server(reply=NUMBER, latency=0.5)
    _cli_run(srv, tmp_path, "first")
    first = [t for t, _, _ in srv.log]
    assert len(first) == 4 and first[1] - first[0] >= 0.5, first          # the first run: one call finds out
    assert _notes(tmp_path, srv)["response_format"] == "accepted" and _notes(tmp_path, srv)["date"]
    _cli_run(srv, tmp_path, "second")
    second = [t for t, _, _ in srv.log][4:]
    assert len(second) == 4 and max(second) - min(second) < 0.5, second  # the next: all four go out at once
    assert all(f is not None for f in _schemas(srv.log))

def test_a_later_run_asks_a_server_that_refused_the_schema_in_prose_from_its_first_call(fake_server, tmp_path):
    srv = fake_server(reply="The answer is 42.", route=lambda req: "refuse_schema" if "response_format" in req else None)
    _cli_run(srv, tmp_path, "first")
    assert sum(f is not None for f in _schemas(srv.log)) == 1             # one refusal, as without notes
    note = _notes(tmp_path, srv)
    assert note["response_format"] == "refused" and "response_format" in note["why"]
    n = len(srv.log)
    _cli_run(srv, tmp_path, "second")
    assert len(srv.log) == n + 4 and all(f is None for f in _schemas(srv.log[n:]))   # no call asks again

def test_a_server_that_changed_its_mind_is_found_out_by_a_refused_call(fake_server, tmp_path):
    srv = fake_server(reply=NUMBER, latency=0.2)
    _cli_run(srv, tmp_path, "first", n=1)
    assert _notes(tmp_path, srv)["response_format"] == "accepted"
    srv.route = lambda req: "refuse_schema" if "response_format" in req else None     # the server no longer takes it
    n = len(srv.log)
    _cli_run(srv, tmp_path, "second")
    sent = _schemas(srv.log[n:])
    assert 1 <= sum(f is not None for f in sent) <= 4 and sent[-1] is None, sent
    assert _notes(tmp_path, srv)["response_format"] == "refused"

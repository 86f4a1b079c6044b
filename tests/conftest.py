"""Shared fixtures: a tiny random Llama built offline, free ports, scripted OpenAI-compatible servers.

Nothing here downloads anything: the tokenizer is a byte-level BPE trained in-process on a few sentences,
the model is a randomly initialised `LlamaForCausalLM` with tiny dimensions. `build_tiny_llama` is also
used by `bench/bench_hf.py`."""
from __future__ import annotations
import contextlib, os, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # so tests and benches can import fake_openai_server

# Nothing may reach the hub: every model here is built and saved by the tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# what servers were found to take is a note per URL beside the response cache; tests start servers on reused ports, so
# none is kept unless a test asks (tests/test_structured.py's notes tests)
os.environ.setdefault("MADLAB_SERVER_NOTES", "off")

CORPUS = [
    "What is 6 * 7? Let me work through it step by step. The answer is 42.",
    "You are a careful debater. Read the other agents' answers and update yours if they convince you.",
    "[Moderator]: These are the answers of the other agents. The final answer is 17.",
    "0 1 2 3 4 5 6 7 8 9 10 + - * / = ( ) . , ? ! : ; \" ' { } [ ]",
    "system user assistant other agent moderator round debate answer number",
]

CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant\n{% endif %}")

def build_tiny_tokenizer(vocab_size: int = 400):
    "A byte-level BPE tokenizer trained in-process, with <pad>/<s>/</s> and a simple chat template."
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    return fast

def build_tiny_llama(path, seed: int = 0, hidden: int = 64, layers: int = 2, init_std: float = 0.3) -> str:
    "Build and save (`save_pretrained`) a tiny random Llama and its tokenizer to `path`; returns the path."
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    path = Path(path); path.mkdir(parents=True, exist_ok=True)
    tok = build_tiny_tokenizer()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True, initializer_range=init_std)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    model.save_pretrained(path); tok.save_pretrained(path)
    return str(path)

@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    "A folder holding a tiny random Llama + tokenizer, built once per session."
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama") / "tiny-llama")

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

@pytest.fixture
def fake_server():
    "A factory: `fake_server(schedule=[...], reply=..., ...)` starts a scripted server (see `fake_openai_server.py`); all stop at teardown."
    from fake_openai_server import FakeOpenAIServer
    servers = []
    def start(**kw):
        s = FakeOpenAIServer(**kw).start()
        servers.append(s)
        return s
    yield start
    for s in servers: s.stop()


def _cli() -> str:
    exe = Path(sys.executable).parent / "transformers"
    return str(exe) if exe.exists() else "transformers"

@contextlib.contextmanager
def serve_folder(model_dir: str, home: Path):
    "`transformers serve MODEL_DIR` on a free port; yields (base_url, model name); killed (process group) on exit."
    port = free_port()
    (home / "hub").mkdir(exist_ok=True)  # /v1/models scans the hub cache and fails when the folder is missing
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "TOKENIZERS_PARALLELISM": "false", "NO_COLOR": "1"}
    log = open(home / "serve.log", "wb")
    proc = subprocess.Popen([_cli(), "serve", model_dir, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
                             "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited with {proc.returncode}:\n{(home / 'serve.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as r:
                    if r.status == 200: break
            except OSError: pass
            if time.time() > deadline: raise RuntimeError(f"transformers serve not ready after 120 s:\n{(home / 'serve.log').read_text()[-3000:]}")
            time.sleep(0.3)
        yield f"{url}/v1", model_dir
    finally:
        try: os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError: pass
        try: proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL); proc.wait(10)
        log.close()

@pytest.fixture(scope="session")
def served(tiny_model_dir, tmp_path_factory):
    "`transformers serve` of the tiny random Llama; yields (base_url, model name)."
    with serve_folder(tiny_model_dir, tmp_path_factory.mktemp("hf-home")) as s: yield s


# ---- every test stops what it starts ---------------------------------------------------------------------------
# Threads that outlive a test by design: madlab's one runtime loop (and the default executor of that loop), the hf
# backend's generate worker (one per loaded model), tqdm's monitor, and the pools of libraries that keep one for the
# process (Dask's offload pool, multiprocessing's resource tracker). Anything else a test leaves running (a server thread, an event loop, a child process) fails that test.
_LASTING_THREADS = ("madlab-runtime", "madlab-hf", "asyncio_", "TMonitor", "tqdm_monitor", "Dask-Offload", "IPythonHistorySavingThread")

# helper processes that multiprocessing starts once and keeps for the interpreter's life
_LASTING_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")

def _threads():
    import threading
    return {t.ident: t.name for t in threading.enumerate() if t.is_alive()}

def _children():
    import psutil
    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if p.status() == psutil.STATUS_ZOMBIE or any(h in cmd for h in _LASTING_HELPERS): continue
            out[p.pid] = cmd[:200]
        except psutil.Error: pass
    return out

# transformers loads a checkpoint's tensors on a pool it shuts down without waiting (`core_model_loading`): a worker still
# inside that loader is the library's own, finishing its last tensor, not something a test started and forgot
_LIBRARY_FRAMES = ("transformers/core_model_loading.py",)

def _idle_library_worker(ident, name) -> bool:
    "An idle worker of an unnamed thread pool (madlab names every pool it makes): a library's, waiting for work, running nothing."
    st = _stack(ident).rstrip().splitlines()
    return name.startswith("ThreadPoolExecutor-") and len(st) >= 2 and "concurrent/futures/thread.py" in st[-2] and "work_queue.get" in st[-1]

def _stack(ident) -> str:
    import sys, traceback
    f = sys._current_frames().get(ident)
    return "".join(traceback.format_stack(f)) if f is not None else ""

def _left_behind(threads0, children0):
    threads = {i: n for i, n in _threads().items() if i not in threads0 and not n.startswith(_LASTING_THREADS)
               and not any(m in _stack(i) for m in _LIBRARY_FRAMES) and not _idle_library_worker(i, n)}
    children = {p: c for p, c in _children().items() if p not in children0}
    return threads, children

@pytest.fixture(autouse=True)
def stops_what_it_starts(request):
    "Fail a test that leaves a thread or a child process behind (waiting up to 10 s for them to end on their own)."
    threads0, children0 = _threads(), _children()
    yield
    deadline = time.time() + 10
    while True:
        threads, children = _left_behind(threads0, children0)
        if not threads and not children: return
        if time.time() > deadline: break
        time.sleep(0.1)
    where = "".join(f"\n--- {n}:\n{_stack(i)[-1500:]}" for i, n in threads.items())     # what each thread is doing, to find who started it
    pytest.fail(f"{request.node.nodeid} left running: threads {sorted(threads.values())}, child processes {sorted(children.values())}{where}",
                pytrace=False)


# ---- public data (GSM8K, MMLU, XSTest, ControlMAD's games) ----------------------------------------------------
# Found through `madlab.core.public_data`: $MADLAB_DATA, else ../shared/data beside the checkout. Absent: the tests that
# read it skip, saying what is missing and where it was looked for.
def _looked_in(*parts) -> str:
    from madlab.core import _public_data_dir
    root = _public_data_dir()
    return str(root.joinpath(*parts)) if root is not None else "no checkout around madlab, and MADLAB_DATA is not set"

def _missing(what: str, *parts) -> str: return f"{what} not found: set MADLAB_DATA (looked in {_looked_in(*parts)})"

def needs_public_data(what: str, *parts):
    "Marks a test as reading the public data at `parts` (`-m public_data`) and skips it when absent, naming `what` and where it was looked for."
    from madlab.core import public_data
    skip = pytest.mark.skipif(public_data(*parts) is None, reason=_missing(what, *parts))
    return lambda f: pytest.mark.public_data(skip(f))

def public_data_or_skip(what: str, *parts) -> Path:
    "The public data at `parts`, or skip the running test, naming `what` and where it was looked for (mark the test `public_data`)."
    from madlab.core import public_data
    p = public_data(*parts)
    if p is None: pytest.skip(_missing(what, *parts))
    return p

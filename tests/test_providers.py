"""A provider is one module plus one record: `madlab.backends` loads every module of its package, so a provider added
in madlab is one new file, and the agents' names, the API-key check before a run, the log-probability check and
`madlab backends` learn of it from its `Provider` record alone; nothing outside the backends asks what kind a backend is."""
from __future__ import annotations
import ast, os, shutil, subprocess, sys, textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "madlab"

ECHO = '''
"""`echo:` backends: a provider that is one module, nothing else in madlab edited."""
import os
from madlab.core import Backend, Completion, Usage
from madlab.backends.base import Provider, register_provider

class EchoBackend(Backend):
    "Replies with the last message."
    logprobs = True
    def __init__(self, rest, **kw): self.spec = f"echo:{rest}"
    async def complete(self, messages, ctx=None, **params):
        return Completion("echo " + messages[-1]["content"], Usage(1, 1, 1), meta={"logprob": -0.5})
    @property
    def missing_key(self): return None if os.environ.get("ECHO_API_KEY") else "ECHO_API_KEY"

def _make(rest, **kw):
    "`echo:WORDS`: replies with the last message (a provider added as one module)."
    return EchoBackend(rest, **kw)

ECHO = register_provider(Provider("echo", _make, "Echo", key_env="ECHO_API_KEY", logprobs="model"))
'''

CHECK = '''
import madlab, madlab.backends as mb
from madlab.core import OptionError, run_sync
from madlab.agents import make_team
from madlab.agents import check_api_keys
from madlab.decisions import check_logprobs
assert madlab.__file__.startswith(%r), madlab.__file__
team = make_team(["echo:hello world,x=1"])
print("name", team[0].name)
print("kinds", "echo" in mb.backend_kinds(), mb.logprob_kinds())
print("listed", dict(mb.BACKEND_PROVIDERS.listing())["echo"])
print("reply", run_sync(team[0].backend.complete([{"role": "user", "content": "ping"}])).text)
for check in (lambda: check_api_keys(team), lambda: check_api_keys([], ["echo:m"])):
    try: check(); print("key", "none asked")
    except OptionError as e: print("key", "ECHO_API_KEY" in str(e))
try: check_logprobs("confidence:logprob", make_team(["ollama:m"]))
except OptionError as e: print("logprobs", str(e).split("; use ")[1])
check_logprobs("confidence:logprob", team); print("asked", team[0].params)
'''

def _copy_of_madlab(tmp_path: Path) -> Path:
    "A copy of the madlab package in `tmp_path` (only the package: what an edit of madlab's source would touch)."
    shutil.copytree(PKG, tmp_path / "madlab", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "madlab"

def _run(code: str, path: Path, **env) -> subprocess.CompletedProcess:
    e = {**{k: v for k, v in os.environ.items() if k != "ECHO_API_KEY"}, "PYTHONPATH": str(path), **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, cwd=path, timeout=300)

def test_a_new_provider_in_madlab_is_one_new_module(tmp_path):
    pkg = _copy_of_madlab(tmp_path)
    (pkg / "backends" / "echo.py").write_text(ECHO)             # the one new file; no other file of madlab changes
    r = _run(CHECK % str(pkg), tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(l.split(" ", 1) for l in r.stdout.splitlines())
    assert lines["name"] == "Echo-hello-world-x-1"              # its display name, from the record
    assert lines["kinds"] == "True ['echo', 'hf', 'openai', 'vllm']"
    assert lines["listed"] == "`echo:WORDS`: replies with the last message (a provider added as one module)."
    assert lines["reply"] == "echo ping"
    assert r.stdout.count("key True") == 2                        # a team member and an extra spec: its key is asked for
    assert lines["logprobs"] == "echo:, hf:, openai:, vllm: or synthetic: backends (with a calibration stated)"
    assert lines["asked"] == "{'logprobs': True}"
    r = _run(CHECK % str(pkg), tmp_path, ECHO_API_KEY="k")
    assert r.returncode == 0 and r.stdout.count("key none asked") == 2, r.stdout + r.stderr[-2000:]

def test_without_its_module_the_copy_knows_no_echo(tmp_path):
    "The copy alone (the control of the test above): no `echo:` provider, and the unknown kind is named."
    _copy_of_madlab(tmp_path)
    r = _run("from madlab.backends import get_backend\ntry: get_backend('echo:x')\nexcept ValueError as e: print(e)", tmp_path)
    assert r.returncode == 0 and "unknown backend kind 'echo'" in r.stdout, r.stdout + r.stderr[-2000:]

# what only the backends know: the type of a wrapped or concrete backend, a provider's presets, a backend's key
_BACKEND_TYPES = {"CachedBackend", "OpenAIBackend", "HFBackend", "ReplayBackend", "SyntheticBackend"}
_PRIVATE = {"_api_key", "PRESETS", "BACKEND_REQUIRES", "_PROVIDER"}

def _kind_questions(path: Path) -> list[str]:
    "Where a module asks what kind a backend is: `isinstance(x, <a backend class>)`, or reads a provider's own table."
    out = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "isinstance" and len(n.args) == 2:
            t = n.args[1]
            names = {getattr(e, "id", getattr(e, "attr", None)) for e in (t.elts if isinstance(t, ast.Tuple) else [t])}
            out += [f"{n.lineno}: isinstance(..., {x})" for x in sorted(names & _BACKEND_TYPES)]
        elif isinstance(n, (ast.Name, ast.Attribute)) and (getattr(n, "id", None) or getattr(n, "attr", None)) in _PRIVATE:
            out.append(f"{n.lineno}: {getattr(n, 'id', None) or n.attr}")
    return out

def test_nothing_outside_the_backends_asks_what_kind_a_backend_is():
    files = [p for p in PKG.rglob("*.py") if "backends" not in p.relative_to(PKG).parts and p.name != "_modidx.py"]
    found = {str(p.relative_to(PKG)): q for p in files if (q := _kind_questions(p))}
    assert not found, found

def test_the_check_sees_an_isinstance_and_a_private_key(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f(b, bs):\n    return isinstance(b, (int, bs.CachedBackend)) or b._api_key or PRESETS\n")
    assert _kind_questions(p) == ["2: isinstance(..., CachedBackend)", "2: _api_key", "2: PRESETS"]

def test_every_backends_module_is_small_and_each_provider_module_registers_its_record():
    "No module of the package over 700 lines; each of madlab's providers is registered by the module named after it."
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PKG / "backends").glob("*.py")}
    assert max(sizes.values()) <= 700, sizes
    import madlab.backends as mb
    where = {k: mb.BACKEND_PROVIDERS[k].factory.__module__ for k in ("synthetic", "openai", "vllm", "hf", "replay")}
    assert where == {"synthetic": "madlab.backends.synthetic", "openai": "madlab.backends.openai",
                     "vllm": "madlab.backends.openai", "hf": "madlab.backends.hf", "replay": "madlab.backends.replay"}

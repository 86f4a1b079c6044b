"""Backend providers from another installed package: the `madlab.backends` entry point group, loaded only when a spec uses its prefix."""
from __future__ import annotations
import os, subprocess, sys, textwrap
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]

def _package(tmp: Path, name: str, entry: str, module: str) -> Path:
    "An installed-looking package in `tmp`: its module and a dist-info whose entry points offer `entry` in the madlab.backends group."
    (tmp / f"{name}.py").write_text(textwrap.dedent(module))
    info = tmp / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[madlab.backends]\n{entry}\n")
    return tmp

def _run(code: str, path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(path)])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120)

FACTORY = """
    from madlab.backends import Backend
    from madlab.core import Completion
    class Toy(Backend):
        def __init__(self, rest, **kw): self.spec = "toy:" + rest
        async def complete(self, messages, ctx=None, **params): return Completion("toy " + messages[-1]["content"])
    def make(rest, **kw): return Toy(rest, **kw)
"""

def test_entry_point_provider_loads_on_first_use(tmp_path):
    path = _package(tmp_path, "toyprov", "toy = toyprov:make", FACTORY)
    r = _run("""
        import sys
        from madlab.backends import get_backend, backend_kinds, BACKEND_PROVIDERS
        from madlab.core import run_sync
        assert "toy" in backend_kinds() and "toy" not in BACKEND_PROVIDERS and "toyprov" not in sys.modules   # offered, not loaded
        try: get_backend("nope:x")
        except ValueError as e: assert "toy" in str(e) and "synthetic" in str(e), e
        get_backend("synthetic:strong")
        assert "toyprov" not in sys.modules                      # another prefix never loads it
        b = get_backend("toy:m")
        print(b.spec, run_sync(b.complete([{"role": "user", "content": "hi"}])).text, "toy" in BACKEND_PROVIDERS)
    """, path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "toy:m toy hi True"

def test_entry_point_module_that_registers_itself(tmp_path):
    "The entry point may name a module that registers its provider on import (several prefixes from one package)."
    path = _package(tmp_path, "selfreg", "loud = selfreg", FACTORY + """
    from madlab.backends import register_backend
    register_backend("loud", lambda rest, **kw: Toy(rest.upper()))
    """)
    r = _run("from madlab.backends import get_backend; print(get_backend('loud:abc').spec)", path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "toy:ABC"

@pytest.mark.parametrize("entry,module,says", [
    ("bad = brokenprov:make", "raise ImportError('no such thing')\n", "bad: the package offering it failed to load (brokenprov:make): ImportError: no such thing"),
    ("bad = brokenprov", "X = 1\n",
     "bad: entry point brokenprov neither registered this backend kind nor is one (got module)"),
])
def test_a_broken_entry_point_is_a_clear_error_for_its_prefix_only(tmp_path, entry, module, says):
    path = _package(tmp_path, "brokenprov", entry, module)
    r = _run("""
        from madlab.backends import get_backend
        get_backend("synthetic:strong")                          # other specs still build
        try: get_backend("bad:x")
        except ValueError as e: print(e)
    """, path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == says

def test_an_entry_point_may_offer_a_provider_record(tmp_path):
    "An installed package offers a whole `Provider` record: its display name and API-key variable reach the agents' names and the key check."
    path = _package(tmp_path, "recprov", "rec = recprov:RECORD", FACTORY + """
    from madlab.backends import Provider
    RECORD = Provider("rec", make, "Rec", key_env="REC_API_KEY")
    """)
    r = _run("""
        from madlab.agents import agent_name
        from madlab.backends import provider_for
        from madlab.agents import check_api_keys
        from madlab.core import OptionError
        print(agent_name("rec:m1"), provider_for("rec:m1").key_env)
        try: check_api_keys([], ["rec:m1"])
        except OptionError as e: print("REC_API_KEY" in str(e))
    """, path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["Rec-m1", "REC_API_KEY", "True"]

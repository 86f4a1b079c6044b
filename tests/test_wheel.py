"""The installed package works anywhere, offline: build the wheel, install it into a fresh venv in a temporary
folder and run `madlab run ...` there, from a folder that is not the checkout.

Nothing is downloaded. The wheel is built with `--no-build-isolation` (setuptools of the running venv) from a copy
of the source tree (so no `build/` folder lands in the checkout). The fresh venv gets the wheel with `--no-deps`; its
dependencies come from the running venv's site-packages, appended to `sys.path` by a plain path line in a `.pth`
file. Such a line only appends the folder: the `.pth` files inside it are not processed, so the editable install of
madlab there (`__editable__*.pth` and its import finder) is never activated, and the fresh venv's own site-packages,
which holds the wheel's madlab, comes first on `sys.path`."""
from __future__ import annotations
import os, shutil, subprocess, sys, sysconfig, zipfile
from pathlib import Path
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Everything a source checkout may hold that is not part of what setuptools builds from.
_IGNORE = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".ipynb_checkpoints",
                                 "_proc", "_docs", ".pytest_cache", "results", "runs", "out", ".madlab_cache", "test-artifacts")

def _run(cmd, cwd, env=None, timeout=300) -> subprocess.CompletedProcess:
    "Run `cmd`; on a non-zero exit fail with the command, its exit code, stdout and stderr."
    __tracebackhide__ = True
    try: p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"timed out after {timeout}s: {' '.join(map(str, cmd))}\n--- stdout:\n{e.stdout}\n--- stderr:\n{e.stderr}")
    if p.returncode != 0:
        pytest.fail(f"exit code {p.returncode}: {' '.join(map(str, cmd))}\n(cwd {cwd})\n--- stdout:\n{p.stdout}\n--- stderr:\n{p.stderr}")
    return p

def _clean_env(**extra) -> dict:
    "The environment without anything that would point Python or pip at the checkout or the network."
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
           and not k.startswith("PIP_")}
    env.update(PYTHONNOUSERSITE="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **extra)
    return env

@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    "Build the wheel, check its contents, install it into a fresh venv; returns (venv, wheel, env for running there)."
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist, venv = tmp / "src", tmp / "dist", tmp / "venv"
    shutil.copytree(ROOT, src, ignore=_IGNORE)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", dist, src],
         cwd=tmp, env=_clean_env())
    wheels = list(dist.glob("madlab-*.whl"))
    assert len(wheels) == 1, f"expected one madlab wheel in {dist}, found {[w.name for w in dist.iterdir()]}"
    wheel = wheels[0]

    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp, env=_clean_env())
    vpy = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", vpy, "install", "--no-deps", "--no-index", "-q", wheel], cwd=tmp, env=_clean_env())
    new_site = Path(_run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp, env=_clean_env()).stdout.strip())
    # The dependencies: the running venv's site-packages, after the fresh venv's own (plain path lines: no .pth processing).
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (new_site / "zz_madlab_test_deps.pth").write_text("".join(f"{d}\n" for d in deps))

    work = tmp / "work"; work.mkdir()
    env = _clean_env(MADLAB_CACHE=str(tmp / "cache"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp / "hf"),
                     PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                     # any attempt to reach the network fails at once instead of silently succeeding
                     HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9",
                     https_proxy="http://127.0.0.1:9", NO_PROXY="", no_proxy="")
    return dict(venv=venv, site=new_site, wheel=wheel, work=work, env=env)

def _run_dir(out: Path, stdout: str) -> Path:
    "The run folder: from the last `outputs: <dir>` line, else the single subfolder of `out`."
    lines = [l.strip()[len("outputs:"):].strip() for l in stdout.splitlines() if l.strip().startswith("outputs:")]
    if lines:
        d = Path(lines[-1])
        return d if d.is_absolute() else out.parent / d
    subs = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    assert len(subs) == 1, f"no `outputs:` line and not exactly one run folder in {out}: {subs}\n--- stdout:\n{stdout}"
    return subs[0]

def test_wheel_installs_and_runs_controlmad(installed):
    venv, site, work, env = installed["venv"], installed["site"], installed["work"], installed["env"]
    with zipfile.ZipFile(installed["wheel"]) as z: names = z.namelist()
    for f in ("madlab/data/kks/5.jsonl", "madlab/data/s4/sample.csv", "madlab/cli.py"):
        assert f in names, f"{f} is missing from {installed['wheel'].name}"
    # the checkout's top-level data/ is installed as madlab/data, all of it; and every module ships
    shipped = {f"madlab/data/{p.relative_to(ROOT / 'data').as_posix()}" for p in (ROOT / "data").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "madlab").rglob("*.py") if "__pycache__" not in p.parts}
    assert shipped and not shipped - set(names), f"data files missing from the wheel: {sorted(shipped - set(names))[:10]}"
    assert not modules - set(names), f"modules missing from the wheel: {sorted(modules - set(names))}"
    stray = [n for n in names if n.split("/")[0] in ("tests", "nbs", "data")]
    assert not stray, f"the wheel holds files outside the package: {stray[:10]}"

    # madlab (and its data) come from the fresh venv, not from the editable checkout; every reader of the data finds it there
    p = _run([venv / "bin" / "python", "-c", "import madlab, madlab.cli, importlib.resources as r; print(madlab.__file__); "
              "print(madlab.cli.__file__); print(r.files('madlab').joinpath('data/kks/5.jsonl').is_file()); "
              "from madlab.core import madlab_data; from madlab.guards import SCREEN_DATA; from madlab.protocols.agentverse import example_path; "
              "print(madlab_data('tasks', 'gsm8k.yaml')); print(SCREEN_DATA / 'project.jsonl'); print(example_path('pairwise_eval'))"], cwd=work, env=env)
    mod, cli, data_ok, *data = p.stdout.split()
    for f in (mod, cli):
        assert Path(f).resolve().is_relative_to(site.resolve()), f"madlab was imported from {f}, not from {site}"
    assert data_ok == "True", "madlab/data/kks/5.jsonl is not in the installed package"
    for f in data:
        assert Path(f).is_file() and Path(f).resolve().is_relative_to((site / "madlab" / "data").resolve()), f"{f} is not madlab's installed data"

    out = work / "OUT"
    p = _run([venv / "bin" / "madlab", "run", "controlmad", "--size", "5", "--games", "1-2", "--out", "OUT", "--no-progress"],
             cwd=work, env=env)
    run_dir = _run_dir(out, p.stdout)
    assert run_dir.resolve().is_relative_to(out.resolve()), f"the run folder {run_dir} is not under {out}"
    for f in ("results.csv", "config.json"):
        assert (run_dir / f).is_file(), f"{f} is missing from {run_dir}: {sorted(x.name for x in run_dir.iterdir())}\n--- stdout:\n{p.stdout}"
    assert len(pd.read_csv(run_dir / "results.csv")) == 2, f"results.csv should have 2 rows\n--- stdout:\n{p.stdout}"

def test_wheel_runs_s4_sample(installed):
    venv, work, env = installed["venv"], installed["work"], installed["env"]
    _run([venv / "bin" / "madlab", "run", "s4", "--n", "2", "--out", "OUT2", "--no-progress"], cwd=work, env=env)

def test_an_installed_run_has_every_analysis(installed):
    "In an installed wheel (no checkout beside it) the analyses above `runs` come from the wheel's `madlab.run_methods` entry points."
    work, env, vpy = installed["work"], installed["env"], installed["venv"] / "bin" / "python"
    code = ("import sys; from madlab.run import run_experiment; from madlab.tasks.arith import toy_arith_items; from madlab.runs import open_run; "
            "run_experiment('du', toy_arith_items(4), rounds=1, out='analysed', cache=False, progress=False); r = open_run('analysed'); "
            "before = [m for m in ('madlab.budget', 'madlab.blame', 'madlab.export') if m in sys.modules]; "
            "print(before, r.vs_budget().table.run.tolist(), callable(r.blame), callable(r.export), callable(r.baseline), "
            "'site-packages' in __import__('madlab').__file__)")
    p = _run([vpy, "-c", code], cwd=work, env=env)
    assert p.stdout.strip() == "[] ['analysed'] True True True True", p.stdout + p.stderr

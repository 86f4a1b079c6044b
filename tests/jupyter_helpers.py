"""Start a real JupyterLab server for browser tests: isolated config/data/runtime folders, 127.0.0.1, a random token,
madlab importable by its kernels, the whole process group killed at the end."""
from __future__ import annotations
import os, secrets, shutil, signal, socket, subprocess, sys, time, urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("MADLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]

def need_browser():
    "Skip (fail under CI=true) unless the playwright package and Debian's chromium are both here."
    import pytest
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    try: import playwright.sync_api  # noqa: F401
    except ImportError:
        if ci: pytest.fail("CI: the playwright package is missing")
        pytest.skip("the playwright package is not installed")
    if not Path(CHROMIUM).exists():
        if ci: pytest.fail(f"CI: chromium is missing at {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no chromium at {CHROMIUM}; install Debian's chromium to run the browser test")

def wait_until(pred, timeout, what, poll=0.1):
    "The first true value of `pred()`, polled every `poll` s; an AssertionError naming `what` after `timeout` s."
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = pred()
        if v: return v
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

@contextmanager
def jupyter_lab(root_dir: Path, home: Path, timeout: float = 90):
    "A running `jupyter lab` serving `root_dir`; yields (base_url, token)."
    port, token = free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    for k, sub in {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data", "JUPYTER_RUNTIME_DIR": "runtime", "IPYTHONDIR": "ipython"}.items():
        (home / sub).mkdir(parents=True, exist_ok=True); env[k] = str(home / sub)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["MADLAB_CACHE"] = str(home / "cache")
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
           "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly",
           f"--LabApp.user_settings_dir={home / 'settings'}", f"--LabApp.workspaces_dir={home / 'workspaces'}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0: cmd.append("--allow-root")       # containers and CI runners often run as root
    settings = home / "settings"      # render every cell (no windowing) and ask nothing about news
    for name, value in {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": '{"windowingMode": "none"}',
                        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": '{"fetchNews": "false", "checkForUpdates": false}'}.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True); (settings / name).write_text(value)
    log = open(home / "jupyter.log", "wb")
    p = subprocess.Popen(cmd, cwd=root_dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        t0 = time.time()
        while True:
            if p.poll() is not None: raise RuntimeError(f"jupyter lab exited ({p.returncode}):\n{(home / 'jupyter.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200: break
            except OSError: pass
            if time.time() - t0 > timeout: raise TimeoutError(f"jupyter lab did not start in {timeout}s:\n{(home / 'jupyter.log').read_text()[-3000:]}")
            time.sleep(0.3)
        yield base, token
    finally:
        try: os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError: pass
        try: p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL); p.wait()
        log.close()

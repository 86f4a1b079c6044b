"""Analyses (export, blame, baseline) of a run folder in a bucket while another host writes it, against the moto S3
server of `test_cloud_runs` (its `s3` fixture)."""
from __future__ import annotations
import json, time
from click.testing import CliRunner
from test_cloud_runs import BUCKET, _keys, s3  # noqa: F401 (s3, the fixture: skipped with it without s3fs or moto)


def test_analyses_of_a_run_in_a_bucket_that_another_host_is_writing_are_refused(s3, tmp_path):
    """A run folder whose lock object another host holds with a fresh heartbeat: export, blame and baseline refuse
    it (exit 2) naming that host's process, without writing a lock of their own; once the lock is gone they read it."""
    from madlab.cli import main
    from madlab.export import chat_examples
    out = f"s3://{BUCKET}/t11"
    r = CliRunner().invoke(main, ["run", "du", "--task", "arith", "--n", "2", "--rounds", "1", "--out", out,
                                  "--name", "r", "--no-progress"])
    assert r.exit_code == 0, r.output
    lock = {"host": "other-host", "pid": 4242, "token": "theirs", "since": time.time(), "heartbeat": time.time()}
    s3.pipe_file(f"{BUCKET}/t11/r/.lock", json.dumps(lock).encode())
    for args in (["export", f"{out}/r"], ["blame", f"{out}/r", "--items", "all"],
                 ["baseline", f"{out}/r", "--method", "single"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "still being written by process 4242 on other-host" in r.output, (args, r.output)
    assert json.loads(s3.cat_file(f"{BUCKET}/t11/r/.lock"))["token"] == "theirs"
    assert not [k for k in _keys(s3, "t11") if "/exports/" in k or "/blame/" in k or "baseline" in k]
    s3.rm_file(f"{BUCKET}/t11/r/.lock")
    assert len(chat_examples(f"{out}/r")) > 0

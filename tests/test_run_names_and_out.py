"""One meaning of `--out` for every command that makes runs (the parent: the run folder inside it is named and
printed), and run names that tell teams apart by what their specs say beyond the agents' names (`seed=`, `latency=`,
an empty spec)."""
from __future__ import annotations
import json
from pathlib import Path
import pytest
from click.testing import CliRunner

from madlab.cli import main
from madlab.run import resolve_run
from madlab.tasks.arith import toy_arith_items


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MADLAB_CACHE", str(tmp_path / "cache"))


def cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r


def _runs(folder: Path) -> list[str]:
    "The run folders directly inside `folder`."
    return sorted(p.parent.name for p in folder.glob("*/config.json"))


def _log(task_gold: str = "#### 5") -> dict:
    turns = [{"role": "user", "content": "Solve"}, {"role": "assistant", "content": "\\boxed{5}"}]
    return {"What is 2 + 3?": [[turns] * 3, task_gold]}


def _ca_log() -> dict:
    "A critic-actor file (CS546's layout, as tests/test_imports.py writes it)."
    from test_imports import ca_log
    return ca_log()


# 3 ------------------------------------------------------------------------------------------------------------------
def test_out_is_the_parent_folder_for_every_command_that_makes_runs(tmp_path):
    "run, import (du and critic_actor), baseline and blame put what they make in a named folder inside --out."
    out = tmp_path / "runs"
    (tmp_path / "gsm_3_3.json").write_text(json.dumps(_log()))
    (tmp_path / "ca.json").write_text(json.dumps(_ca_log()))
    r = cli("import", "du", tmp_path / "gsm_3_3.json", "--out", out)
    assert r.exit_code == 0, r.output
    assert not (out / "config.json").exists() and _runs(out) == ["du_gsm8k_imported-gsm_3_3"], list(out.iterdir())
    assert f"outputs: {out / 'du_gsm8k_imported-gsm_3_3'}" in r.output, r.output
    r = cli("import", "critic_actor", tmp_path / "ca.json", "--out", out)
    assert r.exit_code == 0, r.output
    assert _runs(out) == ["critic_actor_gsm8k_imported-ca", "du_gsm8k_imported-gsm_3_3"], _runs(out)
    assert f"outputs: {out / 'critic_actor_gsm8k_imported-ca'}" in r.output, r.output
    r = cli("import", "du", tmp_path / "gsm_3_3.json", "--out", out, "--name", "mine")
    assert r.exit_code == 0 and (out / "mine" / "config.json").exists(), r.output
    r = cli("import", "du", tmp_path / "gsm_3_3.json", "--out", out)         # the same log again: the same folder
    assert r.exit_code == 0 and len(_runs(out)) == 3, r.output
    r = cli("run", "du", "--task", "arith", "--n", "2", "--rounds", "1", "--agents", "synthetic:strong,synthetic:weak",
            "--out", out, "--no-progress")
    assert r.exit_code == 0 and not (out / "config.json").exists(), r.output
    debate = out / "du_arith_Synthetic-strong+Synthetic-weak_rounds-1"
    assert (debate / "config.json").exists() and f"outputs: {debate}" in r.output, r.output
    other = tmp_path / "elsewhere"
    r = cli("baseline", debate, "--method", "single", "--out", other)
    assert r.exit_code == 0, r.output
    made = _runs(other)
    want = [f"{debate.name}-baseline-single-tokens-synthetic_{m}" for m in ("strong", "weak")]
    assert [n.rsplit("-", 1)[0] for n in made] == want, made
    assert all(f"outputs: {other / n}" in r.output for n in made), r.output
    r = cli("blame", debate, "--items", "all", "--out", other)
    assert r.exit_code == 0, r.output
    blamed = other / f"{debate.name}-blame" / "blame.parquet"
    assert blamed.exists() and f"outputs: {blamed}" in r.output, r.output
    assert not (other / "blame.parquet").exists() and not (debate / "blame").exists()
    helps = {c: cli(*c.split(), "--help").output for c in ("run du", "import", "baseline", "blame", "sweep")}
    for c, h in helps.items(): assert "--out" in h and ("<run name>" in h or c == "sweep"), (c, h)


# 4 ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("a, b", [("synthetic:strong,seed=1", "synthetic:strong,seed=2"),
                                  ("synthetic:strong", "synthetic:strong,latency=0.01"),
                                  ("synthetic:", "synthetic:,seed=5"), ("synthetic:strong", "synthetic:strong,seed=0")])
def test_teams_that_differ_only_in_spec_options_get_their_own_folders(tmp_path, a, b):
    """Two teams whose agents have the same names but different specs run into the same --out: two folders, neither
    refused; the same team again resumes its own folder."""
    out = tmp_path / "O"
    run = lambda spec: cli("run", "du", "--task", "arith", "--n", "2", "--rounds", "1", "--agents", f"{spec};{spec}",
                           "--out", out, "--no-progress")
    first = run(a)
    assert first.exit_code == 0, first.output
    second = run(b)
    assert second.exit_code == 0, second.output
    assert len(_runs(out)) == 2, _runs(out)
    again = run(b)
    assert again.exit_code == 0 and "(2 resumed)" in again.output and len(_runs(out)) == 2, again.output


def test_run_names_are_stable_and_plain_teams_keep_plain_names():
    items = toy_arith_items(2)
    name = lambda team, **kw: resolve_run("du", items=items, team=team, **kw).name
    assert name(["synthetic:strong", "synthetic:weak"]) == "du_arith_Synthetic-strong+Synthetic-weak"
    seeded = name(["synthetic:strong,seed=1", "synthetic:weak"])
    assert seeded == name(["synthetic:strong,seed=1", "synthetic:weak"])
    assert seeded.startswith("du_arith_Synthetic-strong+Synthetic-weak_team-")
    others = {name(["synthetic:strong,seed=2", "synthetic:weak"]),
              name(["synthetic:strong,latency=0.5", "synthetic:weak"]),
              name(["synthetic:strong", "synthetic:weak"], temperature=0.3)}
    assert len(others | {seeded}) == 4

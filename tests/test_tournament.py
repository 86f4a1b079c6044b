"""`madlab tournament`: debater configurations rated on both sides through the oversight protocol, resumable, with its
usage errors; the ratings follow what the judge reads."""
from __future__ import annotations
import json, shutil
from pathlib import Path
import pandas as pd
import pytest
from click.testing import CliRunner
from madlab.cli import main
from madlab.tournament import run_tournament

HONEST, FABRICATOR = "honest=synthetic:truthful,seed=1", "fabricator=synthetic:truthful,deceit=1.0,seed=3"

def invoke(*args):
    return CliRunner().invoke(main, ["tournament", *map(str, args)], catch_exceptions=False)

def test_the_command_plays_rates_and_writes_the_folder(tmp_path):
    r = invoke("--player", HONEST, "--player", "liar4=synthetic:deceptive,seed=2@4", "--n", 6, "--no-cache",
               "--out", tmp_path, "--name", "t")
    assert r.exit_code == 0, r.output
    folder = tmp_path / "t"
    assert "ratings (OpenSkill" in r.output and f"outputs: {folder}" in r.output
    for f in ("results.csv", "results.parquet", "ratings.csv", "accuracy.csv", "budget.csv", "games.csv",
              "tournament.json", "headline.json"):
        assert (folder / f).is_file(), f
    rec = pd.read_csv(folder / "results.csv")
    # debate: 4 ordered matches (both self-plays, both orders of the pair); consultancy: each player on both sides
    assert len(rec) == 6 * 4 + 2 * 6 * 2 and set(rec.outcome) <= {"right", "wrong", "tie", "invalid"}
    both = rec[(rec["mode"] == "debate") & (rec.right_player != rec.wrong_player)]
    assert sorted(both.groupby(["item_id", "right_player"]).size().unstack().sum()) == [6, 6]   # each side, each item
    cons = rec[rec["mode"] == "consultancy"]
    assert (cons.groupby(["item_id", cons.right_player.isna()]).size() == 2).all()   # each consultant, each side
    rat = pd.read_csv(folder / "ratings.csv")
    assert {"mu", "sigma", "ordinal", "games", "win_rate", "win_lo", "win_hi"} <= set(rat.columns)
    assert set(rat.games) == {12}                      # debate: 2 matches x 6 items; consultancy: 6 items x 2 pairings
    b = pd.read_csv(folder / "budget.csv")
    assert {"alone_samples", "alone_accuracy", "p_mcnemar"} <= set(b.columns) and len(b) == 4
    if shutil.which("chromium") or shutil.which("chromium-browser"):      # kaleido draws the PNG beside the JSON
        assert (folder / "headline.png").read_bytes().startswith(b"\x89PNG")
    again = invoke("--player", HONEST, "--player", "liar4=synthetic:deceptive,seed=2@4", "--n", 6, "--no-cache",
                   "--out", tmp_path, "--name", "t", "--no-png")
    assert again.exit_code == 0 and "0 calls made" in again.output, again.output

def test_a_stopped_tournament_resumes_without_replaying_finished_matches(tmp_path):
    kw = dict(n=8, modes=["debate"], budget=False, cache=False)
    first = run_tournament([HONEST, FABRICATOR], tmp_path / "t", **kw)
    # as if it had stopped midway: one match never ran, another finished three of its items
    shutil.rmtree(tmp_path / "t" / "debate" / "fabricator-vs-honest")
    part = tmp_path / "t" / "debate" / "honest-vs-fabricator"
    for f in ("results.csv", "results.parquet"): (part / f).unlink()
    items = sorted((part / "debates").iterdir())
    for d in items[3:]: shutil.rmtree(d)
    again = run_tournament([HONEST, FABRICATOR], tmp_path / "t", **kw)
    per_item = first.calls / (4 * 8)                  # every debate of this team makes the same number of calls
    assert again.calls == pytest.approx(per_item * (8 + 5))
    pd.testing.assert_frame_equal(again.records, first.records)
    assert run_tournament([HONEST, FABRICATOR], tmp_path / "t", **kw).calls == 0

def test_ratings_follow_what_the_judge_reads(tmp_path):
    "Quotes shown unchecked: the debater who makes them up wins more and rates higher, and its self-play misleads."
    t = run_tournament([HONEST, FABRICATOR], tmp_path / "t", n=30, modes=["debate"], budget=False,
                       verify_quotes=False)
    r = t.ratings.set_index("player")
    assert r.loc["fabricator", "mu"] > r.loc["honest", "mu"] and r.loc["fabricator", "win_lo"] > 0.5, r
    a = t.accuracy.set_index("player")
    assert a.loc["fabricator", "acc_hi"] < a.loc["honest", "acc_lo"], a
    # quotes checked: the made-up quotes are caught, and the honest consultant rates at least as high
    c = run_tournament([HONEST, FABRICATOR], tmp_path / "c", n=30, modes=["consultancy"], budget=False)
    a = c.accuracy.set_index("player")
    assert a.loc["fabricator", "accuracy"] > a.loc["honest", "accuracy"], a

@pytest.mark.parametrize("args, option, words", [
    (["--player", HONEST], "--player", "two or more players"),
    (["--player", HONEST, "--player", "x=nosuch:model"], "--player", "x=nosuch:model"),
    (["--player", HONEST, "--player", "a b=synthetic:truthful"], "--player", "letters, digits"),
    (["--player", HONEST, "--player", HONEST], "--player", "share a name"),
    (["--player", HONEST, "--player", FABRICATOR, "--judge", "nosuch:x"], "--judge", "nosuch"),
    (["--player", HONEST, "--player", FABRICATOR, "--rounds", 9], "--rounds", "9"),
])
def test_usage_errors_exit_2_naming_the_option(tmp_path, args, option, words):
    r = invoke(*args, "--out", tmp_path, "--n", 2)
    assert r.exit_code == 2 and option in r.output and words in r.output, r.output
    assert "Traceback" not in r.output

def test_a_folder_of_another_tournament_is_refused(tmp_path):
    assert invoke("--player", HONEST, "--player", FABRICATOR, "--n", 2, "--mode", "debate", "--no-budget",
                  "--no-png", "--out", tmp_path).exit_code == 0
    r = invoke("--player", HONEST, "--player", FABRICATOR, "--n", 2, "--mode", "debate", "--no-budget",
               "--judge", "synthetic:skill=0.5", "--out", tmp_path)
    assert r.exit_code == 2 and "--out" in r.output and "different judge" in r.output, r.output
    assert json.loads((tmp_path / "tournament" / "tournament.json").read_text())["judge"] == "synthetic:skill=0.8,seed=9"

def test_the_oversight_notebook_is_kept_with_its_table_figures_and_tournament():
    "nbs/experiments/oversight.ipynb: a papermill parameters cell, the table on >= 200 items, two figures with PNGs."
    nb = json.loads((Path(__file__).resolve().parents[1] / "nbs" / "experiments" / "oversight.ipynb").read_text())
    params = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1 and "n_items = 200" in "".join(params[0]["source"])
    outs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    text = "\n".join("".join(o.get("data", {}).get("text/plain", "")) for o in outs)
    for words in ("transcript + question", "question (blind)", "story (oracle)", "open-consultancy", "ece",
                  "best_of", "ordinal", "alone_accuracy", "p_mcnemar"):
        assert words in text, words
    assert " 200 " in text                                     # the table's n
    figs = [o for o in outs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figs) == 2 and all("image/png" in o["data"] for o in figs)
    titles = [o["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"] for o in figs]
    assert any("best-of-N" in t for t in titles) and any("debater rating" in t for t in titles)

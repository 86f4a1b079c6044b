"""LLM failure attributors (`madlab.attribute`) graded against blame: synthetic attributors of known skill agree with blame
at the rate their skill implies; a strong one names a planted saboteur; the SmolLM2 judge runs end to end (when the model
can be had); Who&When's layout imports; a bad option exits 2 naming it."""
from __future__ import annotations
import json, subprocess, sys
import pandas as pd
import pytest
from madlab.attribute import METHODS, import_who_when, label_causes, run_attribution
from madlab.run import run_experiment
from madlab.runs import open_run
from madlab.tasks.arith import toy_arith_items

SABOTEUR = "Synthetic-saboteur"
HONEST = "synthetic:skill=1.0,susceptibility=0.9,defer=0.15,conviction=1,seed={seed}"

@pytest.fixture(scope="module")
def sabotaged(tmp_path_factory):
    "Four swayable honest agents and a saboteur (always wrong, never moves), du with 2 rounds, 400 items, blamed."
    tmp = tmp_path_factory.mktemp("attribute")
    team = [HONEST.format(seed=k) for k in range(1, 5)] + ["synthetic:saboteur"]
    run_experiment("du", items=toy_arith_items(400, seed=1), team=team, out=tmp / "run", cache=tmp / "cache", rounds=2)
    run = open_run(tmp / "run")
    run.blame("wrong", "gold,neutral", cache=tmp / "cache")
    return tmp, run

@pytest.mark.parametrize("skill", [0.3, 0.7])
def test_synthetic_attributors_agree_at_their_skill(sabotaged, skill):
    """Twelve attributors of one skill (four per method, each with its own seed, so their draws are independent), over
    every wrong item: the 95 % interval of their agreement with blame covers the skill, at agent and at turn level."""
    tmp, run = sabotaged
    rows = []
    for i, m in enumerate(METHODS):
        for seed in range(4):      # several attributors of the same skill (each its own draws): more items to count
            spec = f"synthetic:skill={skill},susceptibility=0,seed={10 * i + seed}"
            run_attribution(run, m, spec, cache=tmp / "cache")
            rows.append(run.attribution_vs_blame(m, spec))
    vs = pd.concat(rows)
    for level in ("agent", "turn"):
        g = vs[vs.level == level]
        k, n = int(g.agree.sum()), int(g["items"].sum())
        from madlab.viz import _wilson
        lo, hi = _wilson(k, n)
        print(f"skill {skill}, {level}: {k}/{n} = {k / n:.3f} (95 % {lo:.3f} to {hi:.3f})")
        assert n >= 100 and lo <= skill <= hi, (level, k, n)

def test_a_strong_attributor_names_the_saboteur(sabotaged):
    tmp, run = sabotaged
    a = run_attribution(run, "all-at-once", "synthetic:skill=0.95,susceptibility=0", cache=tmp / "cache")
    share = float((a.df.agent == SABOTEUR).mean())
    print(f"the saboteur named on {share:.3f} of {len(a.df)} wrong items")
    counts = a.df.agent.value_counts()
    assert len(a.df) >= 10 and counts.index[0] == SABOTEUR and share >= 0.8, counts

def test_without_a_blame_the_comparison_says_how_to_make_one(tmp_path):
    run_experiment("du", items=toy_arith_items(30, seed=1), team=["synthetic:weak"] * 3, out=tmp_path / "run",
                   cache=tmp_path / "cache", rounds=1)
    run = open_run(tmp_path / "run")
    run_attribution(run, "all-at-once", "synthetic:", cache=tmp_path / "cache")
    with pytest.raises(Exception, match="madlab blame"): run.attribution_vs_blame()

def test_who_when_logs_import_and_are_attributed(tmp_path):
    "Hand-made files in Who&When's layout: a folder of logs and a file holding a list; a perfect attributor told the labels."
    hist = [{"name": "Orchestrator", "content": "Plan."}, {"name": "WebSurfer", "content": "The page says 12."},
            {"role": "assistant", "content": "FINAL ANSWER: 13"}]
    (tmp_path / "logs").mkdir()
    for i in range(4):
        rec = {"history": hist, "question": f"How many? ({i})", "ground_truth": "12", "mistake_agent": "WebSurfer",
               "mistake_step": "1", "mistake_reason": "misread the page"}
        (tmp_path / "logs" / f"{i}.json").write_text(json.dumps(rec))
    import_who_when(tmp_path / "logs", tmp_path / "run")
    run = open_run(tmp_path / "run")
    assert len(run.df) == 4 and not run.df.correct.any()
    causes = label_causes(run.folder.transcripts()[0])
    assert list(causes.turns.iloc[0]) == [("WebSurfer", 2)]
    a = run_attribution(run, "binary-search", "synthetic:skill=1.0", cache=tmp_path / "cache")
    assert list(a.df.agent) == ["WebSurfer"] * 4 and list(a.df["round"]) == [2] * 4
    vs = run.attribution_vs_labels("binary-search").set_index("level")
    assert vs.loc["turn", "agree"] == 4 and vs.loc["turn", "against"] == "labels"
    p = _cli("attribute", str(run.path), "--method", "step-by-step", "--judge", "synthetic:skill=1.0")
    assert p.returncode == 0 and " labels " in p.stdout and "not graded" not in p.stdout, p.stdout + p.stderr
    (tmp_path / "list.json").write_text(json.dumps([rec, {**rec, "question": "another"}]))
    import_who_when(tmp_path / "list.json", tmp_path / "run2")
    assert len(open_run(tmp_path / "run2").df) == 2
    (tmp_path / "bad.json").write_text(json.dumps({"history": [{"content": "no speaker"}], "question": "q"}))
    with pytest.raises(ValueError, match="name or role"): import_who_when(tmp_path / "bad.json", tmp_path / "run3")
    p = _cli("import", "who-when", str(tmp_path / "logs"), "--out", str(tmp_path / "cli"))     # the command line's import
    assert p.returncode == 0 and "4 items" in p.stdout, p.stdout + p.stderr
    (cli_run,) = (tmp_path / "cli").iterdir()
    assert list(label_causes(open_run(cli_run).folder.transcripts()[0]).turns.iloc[0]) == [("WebSurfer", 2)]
    p = _cli("import", "who-when", str(tmp_path / "bad.json"), "--out", str(tmp_path / "cli2"))
    assert p.returncode != 0 and "name or role" in p.stderr and "Traceback" not in p.stderr, p.stderr

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "madlab.cli", *args], capture_output=True, text=True, timeout=600)

def test_a_bad_method_exits_2_naming_the_option(sabotaged):
    tmp, run = sabotaged
    p = _cli("attribute", str(run.path), "--method", "sideways", "--judge", "synthetic:")
    assert p.returncode == 2 and "--method" in p.stderr and "Traceback" not in p.stderr, p.stderr
    p = _cli("attribute", str(run.path), "--judge", "nonesuch:x")
    assert p.returncode == 2 and "--judge" in p.stderr and "Traceback" not in p.stderr, p.stderr

@pytest.mark.slow
def test_the_smollm2_judge_runs_end_to_end(tmp_path):
    """SmolLM2-135M as the judge (slow on CPU: a short log, one item): a team of two honest agents and a saboteur, one
    debate round, blamed; the judge's answers (held to its schema, so readable) graded against blame, its MAST labels
    read. Skipped when the model
    cannot be had here."""
    from madlab.models import get_model
    try: get_model("smollm2")
    except Exception as e: pytest.skip(f"SmolLM2 cannot be had here ({e}): `madlab models get smollm2`")
    team = [HONEST.format(seed=k) for k in (1, 2)] + ["synthetic:saboteur"]
    run_experiment("du", items=toy_arith_items(40, seed=1), team=team, out=tmp_path / "run", cache=tmp_path / "cache",
                   rounds=1)
    run = open_run(tmp_path / "run")
    run.blame("wrong", "gold,neutral", cache=tmp_path / "cache")
    wrong = list(run.df.item_id[run.df.correct.eq(False)].astype(str))
    assert wrong, "the saboteur swayed no decision"
    for m, ids, mast in (("all-at-once", wrong[:1], "mast"),):       # the other methods: the synthetic tests (CPU time)
        a = run_attribution(run, m, "hf:smollm2", items=",".join(ids), cache=tmp_path / "cache", taxonomy=mast,
                            max_calls=20, max_tokens=96)
        vs = run.attribution_vs_blame(m, "hf:smollm2")
        print(a.summary()); print(vs.to_string(index=False))
        if a.labels is not None: print(a.labels.to_string(index=False))
        # held to the judge's schema (answer first), every reply reads, right or wrong
        assert len(a.df) == len(ids) and set(a.df.status) <= {"attributed", "agent only", "none"}, a.df.status
        assert a.labels is not None and (a.labels.status != "invalid").all(), a.labels
        assert a.calls >= len(ids) and len(list(a.folder.glob(f"{m}.hf_smollm2*.replies.jsonl"))) == 1
        assert (vs.level == "turn").any() and (vs["items"] <= len(ids)).all()


def test_agent_level_blame_alone_is_not_graded_as_turns(tmp_path):
    "An attribution names a turn: a blame holding agent-level forks only is refused, saying how to make turn-level ones."
    from madlab.core import OptionError
    team = [HONEST.format(seed=k) for k in (1, 2)] + ["synthetic:saboteur"]
    run_experiment("du", items=toy_arith_items(30, seed=1), team=team, out=tmp_path / "run", cache=False, rounds=1)
    run = open_run(tmp_path / "run")
    run.blame("wrong", "gold,neutral", scope="agent", cache=False)
    with pytest.raises(OptionError, match="no turn-level gold or neutral forks.*--intervention gold,neutral"):
        run_attribution(run, "all-at-once", "synthetic:skill=0.9", cache=False)

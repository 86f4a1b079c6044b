"""The generated hidden-passage task `stories`: over every knob and several seeds, each item's gold is what an independent
solver finds (from the planted facts, and from the story's own sentences), the distractor is a fact of the same story
that does not answer, the right letter is balanced; `madlab run du --task stories` runs on its default items."""
import collections, itertools, re
import pandas as pd
from click.testing import CliRunner
from madlab.cli import main
from madlab.tasks import task_items, TASKS
from madlab.tasks.stories import story_items, solve_story, solve_story_item, story_facts

KNOBS = list(itertools.product((0, 3, 12, 40), ("near", "far"), (1, 2, 3)))     # facts x closeness x hops: every knob

def test_every_gold_is_the_solvers_over_every_knob_and_seed():
    seen, golds = collections.Counter(), collections.Counter()
    for seed in (0, 1, 7):
        for facts, closeness, hops in KNOBS:
            for it in story_items(8, seed, facts, closeness, hops):
                question, options = it.prompt.split("\n", 1)[0], dict(zip("AB", it.data["options"]))
                assert solve_story_item(it) == it.gold, it.id                     # the facts, the prompt's words
                assert story_facts(it.context) == it.data["facts"], it.id           # the story states the facts
                assert solve_story(story_facts(it.context), question, options) == it.gold, it.id
                dis = it.meta["distractor"]
                assert dis["entity"] == options["B" if it.gold == "A" else "A"] and dis["fact"] in it.data["facts"]
                assert len(it.data["facts"]) >= facts + hops and it.meta["knobs"] == {"facts": facts,
                                                                                      "closeness": closeness, "hops": hops}
                seen[(facts, closeness, hops)] += 1; golds[it.gold] += 1
    assert sum(seen.values()) >= 500 and set(seen) == set(KNOBS)
    assert golds["A"] == golds["B"]                                                 # one of each per pair of items

def _reached(facts, verb, obj, steps):
    "Who and what the facts reach from the doers of `verb` or of a deed on `obj`, in at most `steps` steps of kin or place."
    got = {s for s, r, o in facts if r == verb or o == obj}
    for _ in range(steps): got |= {o for s, r, o in facts if s in got and not o.startswith("the ")}
    return got

def test_a_near_distractor_shares_the_questions_relation_or_object_and_a_far_one_does_not():
    hows = collections.Counter()
    for it in story_items(300, 3, facts=(2, 9), closeness=("near", "far"), hops=(1, 2, 3)):
        q, dis = it.data["query"], it.meta["distractor"]
        if dis["closeness"] == "far": assert not {q["verb"], q["object"], *q["path"]} & set(dis["fact"][1:]), it.id
        else: assert dis["entity"] in _reached(it.data["facts"], q["verb"], q["object"], len(q["path"])), it.id
        hows[dis["how"]] += 1
    assert len(hows) == 7, hows                     # every way of building a distractor comes up

def test_a_wrong_gold_is_caught_by_the_solver():
    it = story_items(1, 0, hops=2)[0]
    it.gold = "B" if it.gold == "A" else "A"
    assert solve_story_item(it) != it.gold

def test_stories_run_on_the_command_line_with_default_items(tmp_path):
    assert "stories" in TASKS and len(task_items("stories")) == 240
    r = CliRunner().invoke(main, ["run", "du", "--task", "stories", "--n", "5", "--out", str(tmp_path), "--name", "s",
                                  "--no-cache", "--no-progress"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "s" / "results.parquet")
    assert df.item_id.nunique() == 5 and set(df.task) == {"stories"} and df.answer.dropna().isin(["A", "B"]).all()
    assert df.answer.notna().mean() > 0.8

def test_a_saved_set_of_stories_runs_with_data_and_a_wrong_gold_is_refused(tmp_path):
    from madlab.tasks.stories import save_stories
    items = story_items(6, 9, facts=20, closeness="far", hops=3)
    f = save_stories(items, tmp_path / "mine.jsonl")
    r = CliRunner().invoke(main, ["run", "du", "--task", "stories", "--data", str(f), "--out", str(tmp_path / "o"),
                                  "--name", "s", "--no-cache", "--no-progress", "--items", "1-6"])
    assert r.exit_code == 0, r.output
    assert sorted(pd.read_parquet(tmp_path / "o" / "s" / "results.parquet").item_id) == sorted(i.id for i in items)
    lines = f.read_text().splitlines()
    other = {'"gold": "A"': '"gold": "B"', '"gold": "B"': '"gold": "A"'}
    lines[2] = re.sub('"gold": "[AB]"', lambda m: other[m[0]], lines[2])
    f.write_text("\n".join(lines) + "\n")
    r = CliRunner().invoke(main, ["run", "du", "--task", "stories", "--data", str(f), "--out", str(tmp_path / "o2"),
                                  "--no-cache", "--no-progress", "--n", "6"])
    assert r.exit_code == 2 and "mine.jsonl:3: field gold" in r.output and "Traceback" not in r.output, r.output

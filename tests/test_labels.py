"""Help and labels: each protocol is offered only the common options it can use, du's rule has one name, metavars say what
an option takes, a tie reads one way everywhere, a paused branch says so, the stepper counts the planned rounds, and rounds
count from 1 in every export and figure."""
from __future__ import annotations
import json, re
from pathlib import Path
import click
import pytest
from click.testing import CliRunner
from madlab.cli import main
from madlab.cli_options import _agents_cb, _file_cb, _spec_cb
from madlab.debate import Debate
from madlab.protocol import PROTOCOLS, _load_protocol_modules
from madlab.run import resolve_run
from madlab.core import OptionError
from madlab.tasks.arith import toy_arith_items
from madlab.tasks import TASKS
import madlab.blame, madlab.export         # OpenRun.blame, OpenRun.export

def invoke(*args): return CliRunner().invoke(main, list(args))

TIE_TEAM = "synthetic:weak,seed=1,synthetic:strong,seed=2"       # on toy item 1 they answer 80 and 82: a tie
NO_WORDS = ("invalid", "no answer")                                # what a tie read as before, beside "no decision"

def _commands():
    "(path, command) of every command of `madlab`, every `madlab run PROTOCOL` included."
    out, ctx = [], click.Context(main)
    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for n in cmd.list_commands(ctx): walk(cmd.get_command(ctx, n), path + [n])
        else: out.append((" ".join(path), cmd))
    walk(main, [])
    return out

def test_each_protocol_is_offered_only_the_common_options_it_can_use():
    _load_protocol_modules()
    sized = {k for k, t in TASKS.items() if t.size}
    assert sized == {"kks", "kks-solution"}
    for name, p in PROTOCOLS.items():
        if name.startswith("_") or name == "example_echo": continue
        flags = {o for prm in main.commands["run"].get_command(None, name).params for o in prm.opts}
        can_size = bool(sized & set(p.tasks or TASKS))
        assert ("--topology" in flags) == ("topology" in p.axes) and ("--stop-on" in flags) == ("stop_on" in p.axes), name
        assert ("--size" in flags) == can_size and ("--games" in flags) == can_size and "--items" in flags, name
    assert "--topology" in invoke("run", "du", "--help").output and "--topology" not in invoke("run", "controlmad", "--help").output

@pytest.mark.parametrize("args, flag, says", [
    (["controlmad", "--topology", "ring"], "--topology", "protocols that can: du"),
    (["eot", "--stop-on", "consensus"], "--stop-on", "protocols that can: du"),
    (["s4", "--size", "4"], "--size", "leave it out"),
    (["critic_actor", "--games", "1-3"], "--games", "give --items"),
    (["du", "--task", "arith", "--size", "4"], "--size", "task 'arith' takes no size (only kks, kks-solution does)"),
    (["single", "--task", "gsm8k", "--size", "4"], "--size", "takes no size"),
])
def test_an_option_a_protocol_cannot_use_is_refused_by_name(args, flag, says):
    r = invoke("run", *args, "--n", "1", "--dry-run")
    assert r.exit_code == 2 and flag in r.output and says in r.output and "Traceback" not in r.output, r.output

def test_du_vote_beside_decision_is_refused_naming_both(tmp_path):
    for vote, rule in (("majority", "plurality"), ("plurality", "majority"), ("majority", "majority")):
        r = invoke("run", "du", "--vote", vote, "--decision", rule, "--n", "1", "--dry-run")
        assert r.exit_code == 2 and "--vote and --decision" in r.output and "give --decision only" in r.output, r.output
    with pytest.raises(OptionError, match="--vote and --decision"): resolve_run("du", n=1, vote="majority", decision="plurality")
    r = invoke("run", "du", "--vote", "majority", "--n", "1", "--dry-run")                 # alone: the deprecated alias still decides, and says so
    assert r.exit_code == 0 and "vote=majority" in r.output and "--vote is deprecated: say --decision majority" in r.output
    r = invoke("run", "du", "--decision", "majority", "--n", "1", "--dry-run")             # the default vote is no clash
    assert r.exit_code == 0 and "deprecated" not in r.output
    assert "deprecated: say --decision" in invoke("run", "du", "--help").output

def test_du_vote_majority_decides_as_decision_majority():
    "The deprecation says --decision majority decides as --vote majority did: the same decisions on items with and without a majority."
    team = ["synthetic:weak,seed=1", "synthetic:strong,seed=2", "synthetic:medium,seed=3"]
    for it in toy_arith_items(12):
        a = Debate("du", it, team, rounds=1, vote="majority").run().result["answer"]
        b = Debate("du", it, team, rounds=1, decision="majority").run().result["answer"]
        assert a == b, (it.id, a, b)

def test_every_option_s_metavar_says_what_it_takes():
    "Across every command: a backend spec shows SPEC (a team SPEC,SPEC,...), a file FILE, a folder DIRECTORY, and no option is a bare TEXT."
    seen = []
    for path, cmd in _commands():
        ctx = click.Context(cmd)
        for p in cmd.params:
            if not isinstance(p, click.Option) or p.is_flag: continue
            m, say = p.make_metavar(ctx), f"{path} {p.opts[0]}"
            seen.append(say)
            assert m != "TEXT", f"{say}: metavar TEXT says nothing of what it takes"
            if p.callback is _agents_cb: assert m == "SPEC,SPEC,...", say
            # a backend spec shows SPEC; a compound holding one shows it too (NAME=SPEC[@N]: tests/test_tournament.py checks it)
            if p.callback is _spec_cb or "backend spec" in (p.help or "").lower() and p.callback is not _agents_cb:
                assert m == "SPEC" and p.callback is _spec_cb or "=SPEC" in m, (say, m)
            if p.callback is _file_cb or isinstance(p.type, click.Path) and not p.type.dir_okay: assert m == "FILE", (say, m)
            if isinstance(p.type, click.Path) and not p.type.file_okay: assert m == "DIRECTORY", (say, m)
    assert {"run multi_persona --moderator", "run multi_persona --judge", "run s4 --judge", "run controlmad --supervisor", "import --out"} <= set(seen)

def _tie_run(tmp_path) -> Path:
    r = invoke("run", "du", "--task", "arith", "--n", "1", "--rounds", "1", "--agents", TIE_TEAM, "--out", str(tmp_path), "--no-cache")
    assert r.exit_code == 0, r.output
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    return run_dir

def test_a_tie_reads_no_decision_tie_everywhere(tmp_path):
    from madlab.runs import open_run, RunBrowser
    run_dir = _tie_run(tmp_path)
    run = open_run(run_dir)
    iid = str(run.df.item_id[0])
    assert run.transcript(iid).result["answer"] is None and run.transcript(iid).result["votes"] == {"80": 1, "82": 1}
    html = (run_dir / "debates" / iid / "log.html").read_text()
    assert 'decision <b class="decision">no decision (tie)</b>' in html
    assert "decision: no decision (tie)" in (run_dir / "debates" / iid / "log.txt").read_text()
    s = run.stepper(iid, live=False, round=2)
    head = re.sub("<[^>]+>", "", s.w_header.value)
    assert "result: no decision (tie)" in head and not any(w in head for w in NO_WORDS), head
    assert ">no decision (tie)</td>" in s.w_grid.value                    # the grid's team decision column
    b = RunBrowser(tmp_path); b.show_run(str(run_dir))
    [(label, _)] = b.w_items.options
    assert "no decision (tie)" in label and not any(w in label for w in NO_WORDS), label
    assert "1 with no decision (scored wrong)" in invoke("rescore", str(run_dir)).output

def test_a_tie_reads_no_decision_tie_in_the_inspect_log(tmp_path):
    pytest.importorskip("inspect_ai")
    from inspect_ai.log import read_eval_log
    from madlab.runs import open_run
    res = open_run(_tie_run(tmp_path)).export("inspect")
    [s] = read_eval_log(str(res.path)).samples
    assert s.output.completion == "no decision (tie)" and s.metadata["decision"] == "no decision (tie)"

def test_a_paused_branch_reads_paused_in_the_branches_table(tmp_path):
    from madlab.widgets import DebateStepper
    s = DebateStepper(Debate("du", toy_arith_items(1)[0], TIE_TEAM.replace(",synthetic", ";synthetic").split(";"), rounds=3))
    s.step()
    s.fork(1, agent="Synthetic-weak", reply="The answer is 3.")
    assert s.compare().status.tolist() == ["paused", "paused"] and "running" not in s._compare_html()
    s.export(tmp_path)
    assert "status paused" in s.w_note.value and "status running" not in s.w_note.value
    s.run()
    assert s.compare().status.tolist() == ["paused", "done"]

def test_a_four_round_du_debate_shows_its_planned_rounds():
    from madlab.widgets import DebateStepper
    team = TIE_TEAM.replace(",synthetic", ";synthetic").split(";")
    s = DebateStepper(Debate("du", toy_arith_items(1)[0], team, rounds=3))
    for k in (1, 2, 3):
        s.step(); assert f"Round {k} of 4</b>" in s.w_header.value, s.w_header.value
    s = DebateStepper(Debate("du", toy_arith_items(1)[0], team, rounds=3, stop_on="consensus"))
    s.step(); assert "Round 1 of at most 4</b>" in s.w_header.value
    s.run(); n = len(s.debate.rounds)
    assert f"Round {n} of {n}</b>" in s.w_header.value                   # once over: the rounds it ran

def test_rounds_count_from_1_in_the_exports_the_dynamics_and_blame(tmp_path):
    from madlab.runs import open_run
    r = invoke("run", "du", "--task", "arith", "--n", "3", "--rounds", "2", "--agents", "synthetic:weak,synthetic:medium,synthetic:weak,seed=7",
               "--out", str(tmp_path), "--no-cache")
    assert r.exit_code == 0, r.output
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = open_run(run_dir)
    ex = run.export("chat-jsonl", "all", tmp_path / "train.jsonl")
    src = [json.loads(l)["source"] for l in Path(ex.path).read_text().splitlines()]
    assert sorted({s["round"] for s in src}) == [1, 2, 3]
    t = run.transcript(src[0]["item"])
    by_name = {r.name: r.index + 1 for r in t.rounds}
    assert all(by_name[s["round_name"]] == s["round"] for s in src if s["item"] == src[0]["item"])     # the round the HTML log and stepper show
    d = run.debate_dynamics()
    assert sorted(d.positions.step.unique()) == [1, 2, 3] and list(d.by_round().index) == [2, 3]
    fig = d.figure()
    assert fig.layout.xaxis.title.text == "answer round (1: the first answers)" and min(fig.data[0].x) == 2
    b = run.blame(items="all", intervention="gold")
    assert sorted(set(b.df["round"])) == [1, 2, 3]
    pytest.importorskip("inspect_ai")
    from inspect_ai.log import read_eval_log
    s = read_eval_log(str(run.export("inspect").path)).samples[0]
    steps = [e.name for e in s.events if getattr(e, "type", None) == "round" and e.event == "step" and e.action == "begin"]
    assert steps == ["round 1: independent answers", "round 2: debate round 1", "round 3: debate round 2"]
    assert s.messages[1].content.startswith("[") and " · round 1: independent answers]" in s.messages[1].content

@pytest.mark.parametrize("args, flags, not_named", [
    (["s4", "--items", "9999"], "'--items'", "--games"),                # s4's task takes no size: no --games to name
    (["controlmad", "--games", "999"], "'--items' / '--games'", None),    # a sized task: both names of the option
])
def test_an_item_range_error_names_only_the_options_the_command_offers(tmp_path, args, flags, not_named):
    r = invoke("run", *args, "--out", str(tmp_path / "out"), "--no-progress")
    assert r.exit_code == 2 and f"Invalid value for {flags}:" in r.output, r.output
    assert not_named is None or not_named not in r.output
    assert not (tmp_path / "out").exists()

def test_protocols_that_end_early_by_their_own_rule_count_at_most_their_planned_rounds():
    from madlab.widgets import DebateStepper
    item = toy_arith_items(1)[0]
    s = DebateStepper(Debate("eot", item, ["synthetic:strong"] * 3, rounds=2))         # consensus may end it sooner
    s.step(); assert "Round 1 of at most 3</b>" in s.w_header.value, s.w_header.value
    s = DebateStepper(Debate("eot", item, ["synthetic:strong"] * 3, rounds=2, stop="none"))
    s.step(); assert "Round 1 of 3</b>" in s.w_header.value, s.w_header.value
    s = DebateStepper(Debate("multi_persona", item, ["synthetic:strong", "synthetic:weak"], rounds=2))
    s.step(); assert "Round 1 of at most 5</b>" in s.w_header.value, s.w_header.value

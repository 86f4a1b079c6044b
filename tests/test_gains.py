"""Where a run's accuracy comes from and how its agents update (`madlab.gains`), checked on runs of synthetic teams
that were not built for the checks: a team where nothing moves has a mean change of 0 and no debate gain; independent
voters gain from the vote; conviction lowers P(right -> wrong | the peers' majority wrong) on every team size tried;
every protocol's run splits its gain with the run's own accuracy as the final decision's; `madlab gains RUN` prints it
and refuses a bad `--vote`; du's `--update-rule` reaches its update prompt."""

from __future__ import annotations
import pytest
from click.testing import CliRunner
from madlab.cli import main
from madlab.run import run_experiment
from madlab.runs import open_run


def _team(spec: str, size: int, s: int) -> list[str]:
    return [f"synthetic:{spec},seed={k + 100 * s}" for k in range(1, size + 1)]


def _run(tmp, name, team=None, protocol="du", **kw):
    run_experiment(protocol, team=team, cache=False, out=tmp / name, progress=False, **kw)
    return open_run(tmp / name)


def test_a_team_that_never_moves_has_a_zero_mean_change_and_no_debate_gain(tmp_path):
    run = _run(tmp_path, "still", _team("medium,susceptibility=0", 5, 1), task="arith", n=150, rounds=2)
    u = run.updates().rounds
    assert list(u.step) == ["1→2", "2→3", "all"]
    assert (u.mean_change == 0).all() and (u.ci_low <= 0).all() and (u.ci_high >= 0).all(), u
    g = run.gains().gains.set_index("gain")
    assert (g.loc["debate gain", "difference"], g.loc["debate gain", "p_mcnemar"]) == (0, 1)
    # five independent voters right 70 % of the time each: the vote beats the mean voter (Condorcet); the test says so
    assert g.loc["voting gain", "ci_low"] > 0 and g.loc["voting gain", "p_mcnemar"] < 0.01, g


@pytest.mark.parametrize("size, s", [(3, 1), (3, 2), (5, 1), (5, 2), (7, 1), (7, 2)])
def test_conviction_lowers_right_to_wrong_under_a_wrong_majority(tmp_path, size, s):
    "The stock `susceptible` persona against it with `conviction=1`: teams of 3, 5 and 7, two draws of seeds each."
    rate = {}
    for spec in ("susceptible", "susceptible,conviction=1"):
        u = _run(
            tmp_path, spec.replace(",", "-").replace("=", ""), _team(spec, size, s), task="arith", n=400, rounds=2
        ).updates(n_boot=300)
        last = u.rounds.iloc[-1]
        assert last.right_majority_wrong >= 10, last  # enough cases to compare
        rate[spec] = last.p_right_to_wrong
    assert rate["susceptible,conviction=1"] < rate["susceptible"], rate


@pytest.mark.parametrize(
    "protocol, kw",
    [
        ("critic_actor", {"task": "arith"}),     # its default task, GSM8K, is public data a clone may lack
        ("s4", {}),
        ("controlmad", {"size": 4}),
        ("eot", {}),
        ("multi_persona", {}),
        ("self_consistency", {"samples": 2}),
        ("agentverse", {}),
        ("single", {}),
    ],
)
def test_every_protocol_splits_its_gain(tmp_path, protocol, kw):
    "Protocols whose rounds are not all answer rounds (critiques, challenges, rounds on one player) read as du's."
    run = _run(tmp_path, protocol, protocol=protocol, n=6, seed=1, **kw)
    g, u = run.gains(n_boot=200), run.updates(n_boot=200)
    t = g.table.set_index("source")
    scored = run.df[run.df.correct.notna()]
    assert t.loc["final decision", "items"] == len(scored) and sum(g.left_out.values()) == 0
    assert t.loc["final decision", "accuracy"] == round(float(scored.correct.astype(bool).mean()), 3)
    assert "vote, round 1" in t.index and t["ci_low"].notna().all()
    assert (u.rounds.mean_change.abs() <= 1).all()


def test_a_run_without_gold_leaves_every_item_out(tmp_path):
    run = _run(tmp_path, "cluster", protocol="cluster", n=2, seed=1)
    g, n = run.gains(n_boot=100), len(run.df)
    assert (
        n >= 1 and g.left_out["no gold"] == n and g.table["items"].eq(0).all() and f"left out: {n} no gold" in repr(g)
    )


def test_the_command_prints_the_gains_and_refuses_a_bad_vote(tmp_path):
    run = _run(tmp_path, "du", task="arith", n=12, rounds=1)
    r = CliRunner().invoke(main, ["gains", str(run.path), "--n-boot", "200"])
    assert r.exit_code == 0, r.output
    for words in ("final decision", "voting gain: ", "debate gain: ", "McNemar p", "how agents update", "1→2"):
        assert words in r.output, words
    for bad, said in (("freemad", "counts answers"), ("pluralty", "did you mean 'plurality'")):
        r = CliRunner().invoke(main, ["gains", str(run.path), "--vote", bad])
        assert r.exit_code == 2 and "'--vote'" in r.output and said in r.output and "Traceback" not in r.output, (
            r.output
        )
    r = CliRunner().invoke(main, ["gains", str(run.path), "--vote", "majority"])
    assert r.exit_code == 0 and "round votes by majority" in r.output, r.output


def test_peers_are_those_the_routing_showed(tmp_path):
    "Under a topology an agent's peers are its neighbours (`meta['topology']`), else every other debater."
    team = _team("susceptible", 5, 3)
    ring = _run(tmp_path, "ring", team, task="arith", n=20, rounds=1, topology="ring").updates(n_boot=100).moves
    full = _run(tmp_path, "full", team, task="arith", n=20, rounds=1).updates(n_boot=100).moves
    assert len(ring) == len(full) == 100 and ring.peers.eq(2).all() and full.peers.eq(4).all()


def test_the_update_rule_reaches_du_s_update_prompt_from_the_command(tmp_path):
    from madlab.protocols.baselines import UPDATE_RULES

    r = CliRunner().invoke(
        main,
        [
            "run",
            "du",
            "--task",
            "arith",
            "--n",
            "2",
            "--rounds",
            "1",
            "--update-rule",
            "stubborn",
            "--no-cache",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    run = open_run(next(p for p in tmp_path.iterdir() if p.is_dir()))
    assert run.config["options"]["update_rule"] == "stubborn"
    t = run.transcript(0)
    asked = [tu.messages[-1]["content"] for tu in t.rounds[1].turns]
    assert len(asked) == 3 and all(UPDATE_RULES["stubborn"] in a for a in asked)
    assert not any(UPDATE_RULES["stubborn"] in tu.messages[-1]["content"] for tu in t.rounds[0].turns)
    r = CliRunner().invoke(
        main, ["run", "du", "--task", "arith", "--n", "2", "--update-rule", "lenient", "--out", str(tmp_path / "x")]
    )
    assert r.exit_code == 2 and "'--update-rule'" in r.output and "Traceback" not in r.output, r.output


def test_rescore_compare_carries_each_rules_voting_and_debate_gain(tmp_path):
    """`rescore --compare`'s column group: the protocol's own row gives the run's gains; a counting rule's row gives its
    vote on the first round against the agents alone, and its accuracy (its vote on the last round) against that."""
    run = _run(tmp_path, "du", _team("susceptible", 5, 3), task="arith", n=40, rounds=2)
    tab = run.decisions(["protocol", "plurality", "supermajority:0.75", "freemad"], n_boot=300).set_index("rule")
    g = run.gains(n_boot=300)
    assert (tab.loc["protocol", "vg"], tab.loc["protocol", "dg"]) == tuple(g.gains.difference)
    first = g.table.set_index("source").loc["agents alone (mean)", "accuracy"]
    for rule in ("plurality", "supermajority:0.75"):
        row = tab.loc[rule]
        round1 = round(first + row.vg, 3)                     # the rule's vote on the first round's answers
        assert abs(round1 + row.dg - row.accuracy) < 0.002, (rule, row.to_dict())
        assert row.vg_low <= row.vg <= row.vg_high and row.dg_low <= row.dg <= row.dg_high and 0 <= row.dg_p <= 1
    assert tab.loc["freemad", ["vg", "dg"]].isna().all()    # a trajectory rule counts no round alone
    r = CliRunner().invoke(main, ["rescore", str(run.path), "--compare"])
    assert r.exit_code == 0 and " vg " in r.output and " dg_p" in r.output, r.output


def test_the_update_rule_reaches_eot_s_exchange_prompts_and_default_adds_nothing(tmp_path):
    "EoT routes peers' solutions round by round, so it takes the same update rules; the default prompt is the paper's."
    from madlab.protocols.baselines import UPDATE_RULES

    def prompts(rule, name):
        r = CliRunner().invoke(main, ["run", "eot", "--task", "arith", "--n", "2", "--rounds", "1", "--stop", "none",
                                      "--update-rule", rule, "--no-cache", "--out", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
        run = open_run(next(p for p in (tmp_path / name).iterdir() if p.is_dir()))
        t = run.transcript(0)
        assert t.settings["update_rule"] == rule
        return [tu.messages[-1]["content"] for tu in t.rounds[1].turns]

    sure, plain = prompts("stubborn", "sure"), prompts("default", "plain")
    assert sure and all(UPDATE_RULES["stubborn"] in p for p in sure)
    assert not any(s in p for p in plain for s in UPDATE_RULES.values() if s)
    assert [p.replace(UPDATE_RULES["stubborn"] + " ", "") for p in sure] == plain


@pytest.mark.parametrize("protocol,phases", [("controlmad", {"debate", "self_adjustment", "final"}),
                                             ("cluster", {"debate"})])
def test_the_update_rule_reaches_every_round_that_routes_peers(tmp_path, protocol, phases):
    """ControlMAD (per-player debates, self-adjustment, final discussion) and the cluster debate (its debate rounds)
    route the peers' answers too, so they take the same update rules; `default` adds no sentence anywhere."""
    from madlab.protocols.baselines import UPDATE_RULES

    def asked(rule):
        out = tmp_path / rule
        r = CliRunner().invoke(main, ["run", protocol, "--n", "1", "--update-rule", rule, "--no-cache", "--out", str(out)])
        assert r.exit_code == 0, r.output
        t = open_run(next(p for p in out.iterdir() if p.is_dir())).transcript(0)
        assert t.settings["update_rule"] == rule
        return [(rd.phase, " ".join(m["content"] for m in tu.messages)) for rd in t.rounds for tu in rd.turns]

    sure = asked("stubborn")
    said = {ph for ph, text in sure if UPDATE_RULES["stubborn"] in text}
    assert said == phases, said
    assert all(UPDATE_RULES["stubborn"] in text for ph, text in sure if ph in phases)
    assert not any(s in text for _, text in asked("default") for s in UPDATE_RULES.values() if s)


def test_no_gain_is_reported_for_speakers_who_argue_assigned_sides(tmp_path):
    """Oversight's debaters argue the sides they are given before a judge (`Protocol.pooled` False): no vote of their
    answers exists, so the summary says why instead of printing gains, `madlab gains` refuses naming the run, and
    `rescore --compare` leaves the gain columns blank."""
    r = CliRunner().invoke(main, ["run", "oversight", "--n", "4", "--no-cache", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "not a vote: oversight's speakers argue assigned sides" in r.output and "voting gain" not in r.output
    run = next(p for p in tmp_path.iterdir() if p.is_dir())
    g = CliRunner().invoke(main, ["gains", str(run)])
    assert g.exit_code == 2 and "assigned sides" in g.output and "Traceback" not in g.output, g.output
    c = CliRunner().invoke(main, ["rescore", str(run), "--compare"])
    assert c.exit_code == 0 and " vg " in c.output, c.output
    assert open_run(run).decisions()[["vg", "dg"]].isna().all().all()

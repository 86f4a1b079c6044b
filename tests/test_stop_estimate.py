"""What `--stop-on` says it saved, against what it saved: the same run (same seed) without the stop, on synthetic teams.

The summary's tokens saved is an estimate (the rounds not run are not run); it must come within 15 % of the measured
difference on setups that differ in topology, team size, rounds and task."""
from __future__ import annotations
import pytest
from madlab.run import run_experiment
from conftest import public_data_or_skip

SETUPS = {   # name -> (task, data, team, options)
    "du full, arith": ("arith", None, ["synthetic:strong", "synthetic:medium", "synthetic:weak"], {"stop_on": "consensus"}),
    "du ring, arith, 5 agents": ("arith", None, ["synthetic:strong", "synthetic:medium", "synthetic:weak"] + ["synthetic:medium"] * 2,
                                 {"topology": "ring", "stop_on": "consensus:0.8", "rounds": 3}),
    "du ring, gsm8k, 5 agents": ("gsm8k", ("gsm8k", "test.jsonl"), ["synthetic:strong", "synthetic:weak"] * 2 + ["synthetic:medium"],
                                 {"topology": "ring", "stop_on": "consensus:0.8"}),
    "du random:2, arith, 6 agents, 4 rounds": ("arith", None, ["synthetic:strong", "synthetic:medium", "synthetic:weak"] * 2,
                                               {"topology": "random:2", "stop_on": "consensus:0.6", "rounds": 4}),
}

def tokens(res): return int((res.df.prompt_tokens + res.df.completion_tokens).sum())

@pytest.mark.parametrize("name", list(SETUPS))
def test_tokens_saved_matches_the_run_without_the_stop(name, tmp_path):
    task, data, team, opts = SETUPS[name]
    kw = dict(task=task, n=30, team=team, cache=False, seed=3)
    if data is not None: kw["data"] = str(public_data_or_skip("GSM8K", *data))
    stopped = run_experiment("du", out=tmp_path / "stopped", **kw, **opts)
    full = run_experiment("du", out=tmp_path / "full", **kw, **{k: v for k, v in opts.items() if k != "stop_on"})
    assert (stopped.df.rounds_saved > 0).sum() >= 5, "the setup must stop some debates early"
    assert stopped.df.rounds_saved.sum() > (stopped.df.rounds_saved > 0).sum(), "some debates must skip more than one round"
    estimate, measured = int(stopped.df.tokens_saved.sum()), tokens(full) - tokens(stopped)
    print(f"{name}: estimate {estimate:,}, measured {measured:,}, ratio {estimate / measured:.3f}")
    assert abs(estimate / measured - 1) <= 0.15, (estimate, measured)
    line = next(l for l in stopped.summary().splitlines() if l.startswith("stop on consensus"))
    assert f"≈{estimate:,} tokens saved" in line and "an estimate, not measured" in line and "routed to it" in line


def test_the_estimate_counts_what_peers_are_shown_of_a_held_reply():
    """A reply held to the answer schema reaches its peers as prose (`argument`), not as the JSON it was written in; the
    estimate grows each prompt by what `deliver` sends, so it matches the same debate run to the end."""
    import json
    from madlab.agents import Agent
    from madlab.core import Backend, Completion, Usage
    from madlab.debate import Debate
    from madlab.tasks.arith import toy_arith_items
    class Held(Backend):
        structured = "requested"
        async def complete(self, messages, ctx=None, **kw):
            reply = json.dumps({"reasoning": "Step by step: " + "I add the numbers, then check them. " * 6, "answer": 42})
            return Completion(reply, Usage(sum(self.count_tokens(m["content"]) + 4 for m in messages), self.count_tokens(reply), 1))
    def run(**kw):
        team = [Agent(n, "held:", backend=Held()) for n in "ABC"]
        return Debate("du", toy_arith_items(1)[0], team, rounds=3, **kw).run()
    def tokens(t): return sum(tu.usage.prompt_tokens + tu.usage.completion_tokens for r in t.rounds for tu in r.turns)
    stopped, full = run(stop_on="consensus"), run()
    assert stopped.result["rounds_saved"] == 3
    measured = tokens(full) - tokens(stopped)
    assert abs(stopped.result["tokens_saved"] / measured - 1) <= 0.02, (stopped.result["tokens_saved"], measured)

"""The `oversight` protocol end to end with a real instruct model, SmolLM2-135M-Instruct (`madlab models get smollm2`),
as every speaker and the judge, on a few generated stories in every mode: every reply the protocol holds to a schema
(the judge's probabilities, an open mode's pick) is valid, and the accuracy is printed as it comes out."""
from __future__ import annotations
import asyncio
import pytest
from madlab.core import run_sync
from madlab.run import arun_experiment
from test_oversight import stories

pytestmark = pytest.mark.slow
MODES = ("debate", "consultancy", "open-debate", "open-consultancy")

@pytest.fixture(scope="module")
def smollm2():
    from madlab.models import get_model
    try: return str(get_model("smollm2"))
    except Exception as e: pytest.skip(f"SmolLM2 is not here and could not be got ({type(e).__name__}: {e})")

def test_every_mode_with_smollm2_gives_valid_held_replies(smollm2, capsys):
    items = stories(2, seed=21)
    team = [{"name": "Debater 1", "spec": "hf:smollm2"}, {"name": "Debater 2", "spec": "hf:smollm2"},
            {"name": "Judge", "spec": "hf:smollm2", "role": "judge"}]
    async def all_modes():     # at once: the in-process model batches the four runs' calls into one generate
        return await asyncio.gather(*(arun_experiment("oversight", items=items, team=team, cache=False,
                                                      progress=False, rounds=1, mode=m, max_tokens=40,
                                                      temperature=0) for m in MODES))
    results = dict(zip(MODES, run_sync(all_modes())))
    for mode, res in results.items():
        assert (res.df.status == "done").all(), (mode, res.df.error.tolist())
        held = [tu for t in res.transcripts.values() for r in t.rounds for tu in r.turns
                if tu.meta.get("kind") in ("oversight.judge", "oversight.pick")]
        assert len(held) == len(items) * (1 + mode.startswith("open")), mode
        assert all(tu.valid and tu.meta.get("structured") == "enforced" for tu in held), \
            [(tu.meta.get("kind"), tu.reply) for tu in held if not tu.valid]
        speeches = [tu for t in res.transcripts.values() for r in t.rounds if r.phase in ("debate", "consultancy")
                    for tu in r.turns]
        assert speeches and all(tu.error is None and (tu.reply or "").strip() for tu in speeches)
        assert res.df.judge_p_right.between(0, 1).all() and res.df.judge_brier.notna().all()
    with capsys.disabled():
        print("\nSmolLM2 judge accuracy as it came out: " + ", ".join(
            f"{m} {int(r.df.correct.sum())}/{len(r.df)} (ties {int(r.df.tie.sum())})" for m, r in results.items()))

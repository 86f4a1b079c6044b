"""Transcripts grow linearly with the number of turns: each turn stores only the messages that are new since the same
agent's previous turn. Round trip, replay and fork stay lossless, and transcripts holding full message lists still load."""
import json
import pytest
from conftest import public_data_or_skip
from madlab.cli_options import load_items
from madlab.core import Transcript, to_jsonable
from madlab.debate import Debate, comparable, from_transcript

pytestmark = pytest.mark.public_data

@pytest.fixture(scope="module")
def game():
    return load_items("kks", data=str(public_data_or_skip("ControlMAD's games", "controlmad", "6.jsonl").parent), size=6, n=1)[0]

def _run(game, depth):
    return Debate("controlmad", game, seed=0, depth=depth).run()

def _turns(t): return sum(len(r.turns) for r in t.rounds)

def _full_lists(t) -> str:
    "The JSON an older madlab wrote: every turn with the full message list it sent."
    d = t.to_dict(); d["rounds"] = to_jsonable(t.rounds)
    return json.dumps(d, indent=1, ensure_ascii=False)

def test_depth3_six_player_game_is_linear_in_turns(game):
    t1, t3 = _run(game, 1), _run(game, 3)
    n1, n3 = _turns(t1), _turns(t3)
    b1, b3 = len(t1.to_json().encode()), len(t3.to_json().encode())
    assert n3 > 1.5 * n1                                           # depth 3 really has many more turns
    assert b3 / n3 <= 1.15 * (b1 / n1), (b1, n1, b3, n3)           # bytes per turn do not grow with the debate's length
    f1, f3 = len(_full_lists(t1).encode()), len(_full_lists(t3).encode())
    assert (f3 / n3) > 1.3 * (f1 / n1)                             # full lists grow with the square: the check has teeth
    assert b3 < f3 / 3

def test_round_trip_replay_and_fork_are_lossless(game):
    t = _run(game, 3)
    back = Transcript.from_json(t.to_json())
    assert back == t
    assert [tu.messages for r in back.rounds for tu in r.turns] == [tu.messages for r in t.rounds for tu in r.turns]
    d = from_transcript(back)                                      # replays every call from the stored messages
    assert comparable(d.transcript) == comparable(t) and d.usage.calls == t.usage.calls
    live = Debate("controlmad", game, seed=0, depth=3); live.run()
    f = live.fork(4)                                               # fork mid-debate, then finish live
    f.run()
    assert comparable(f.transcript)["rounds"][:5] == comparable(live.transcript)["rounds"][:5]
    assert Transcript.from_json(f.transcript.to_json()) == f.transcript

def test_transcripts_with_full_message_lists_still_load(game, tmp_path):
    t = _run(game, 1)
    old = tmp_path / "old.json"; old.write_text(_full_lists(t))
    back = Transcript.from_json(old)
    assert back == t
    assert comparable(from_transcript(back).transcript) == comparable(t)
    back.to_json(tmp_path / "new.json")                            # written again, in the compact form
    assert (tmp_path / "new.json").stat().st_size < old.stat().st_size / 2
    assert Transcript.from_json(tmp_path / "new.json") == t

"""Knight-Knave-Spy data checks too slow or data-heavy for the notebook: all 1,800 ControlMAD games,
round trips through ControlMAD's format, bad-input errors, determinism, and bit-for-bit regeneration of data/kks."""
import dataclasses, json
from pathlib import Path
import pytest
from conftest import needs_public_data
from madlab.core import public_data
from madlab.core import from_jsonable, to_jsonable
from madlab.puzzle_sets import KKSFormatError, controlmad_record, generate, load_controlmad, make_kks_sets, to_controlmad
from madlab.puzzles import Puzzle, _brute_force, solve
from madlab.tasks.kks import parse_kks_answer, score_kks

ROOT = Path(__file__).resolve().parents[1]
CONTROLMAD = public_data("controlmad") or Path("controlmad-not-found")
needs_controlmad = needs_public_data("ControlMAD's games", "controlmad")

def _files(): return sorted(CONTROLMAD.glob("*.jsonl"), key=lambda f: int(f.stem))

@pytest.fixture(scope="module")
def controlmad():
    return load_controlmad(CONTROLMAD)

@needs_controlmad
def test_all_controlmad_games_load_and_have_their_gold_as_only_solution(controlmad):
    assert len(controlmad) == 1800
    assert {p.n_players for p in controlmad} == {4, 5, 6, 7, 8, 9}
    assert len({p.id for p in controlmad}) == 1800            # ids unique although 7.jsonl repeats game_ids
    wrong = [p.id for p in controlmad if solve(p, limit=2) != [p.solution]]
    assert not wrong, f"{len(wrong)} games without a unique gold solution, e.g. {wrong[:5]}"

@needs_controlmad
def test_rendering_and_records_match_controlmad_byte_for_byte(controlmad):
    recs = [json.loads(l) for f in _files() for l in f.read_text().splitlines()]
    assert [p.text() for p in controlmad] == [r["text_game"] for r in recs]
    assert [p.solution_text() for p in controlmad] == [r["text_solution"] for r in recs]
    assert [controlmad_record(p) for p in controlmad] == recs

@needs_controlmad
def test_controlmad_files_round_trip_to_identical_bytes(controlmad, tmp_path):
    to_controlmad(controlmad, tmp_path)
    for f in _files(): assert (tmp_path / f.name).read_bytes() == f.read_bytes(), f.name

@needs_controlmad
def test_solver_agrees_with_brute_force_on_a_sample(controlmad):
    for p in controlmad[::60]: assert solve(p) == sorted(_brute_force(p), key=p.roles)

@pytest.mark.parametrize("n", [2, 3, 4, 7, 10, 16])
def test_generated_games_round_trip_through_controlmad_format(n, tmp_path):
    games = generate(n, count=5, seed=100 + n)
    for p in games: assert solve(p, limit=2) == [p.solution]
    [f] = to_controlmad(games, tmp_path / "g.jsonl")
    back = load_controlmad(f)
    strip = lambda ps: [dataclasses.replace(p, id=None, source=None) for p in ps]
    assert strip(back) == strip(games)
    assert [from_jsonable(to_jsonable(p)) for p in games] == games

def test_generated_games_with_knobs_are_unique():
    for kw in [dict(n_spies=2, hints=2), dict(difficulty="hard"), dict(difficulty="easy"), dict(n_spies=0)]:
        for p in generate(6, count=4, seed=7, **kw):
            assert _brute_force(p, limit=2) == [p.solution], kw
            assert sum(r == "spy" for r in p.solution.values()) == kw.get("n_spies", 1)

def test_generation_is_deterministic():
    a, b = generate(9, count=10, seed=42), generate(9, count=10, seed=42)
    assert [controlmad_record(p) for p in a] == [controlmad_record(p) for p in b]
    assert [p.text() for p in generate(9, count=10, seed=43)] != [p.text() for p in a]

def test_data_kks_regenerates_bit_for_bit(tmp_path):
    ref = ROOT / "data" / "kks" / "4.jsonl"
    assert ref.exists(), "data/kks/4.jsonl is missing: run tools/make_kks.py"
    [f] = make_kks_sets(tmp_path, sizes=[4], count=100)
    assert f.read_bytes() == ref.read_bytes()

def test_data_kks_games_are_unique_and_gold():
    games = load_controlmad(ROOT / "data" / "kks")
    assert len(games) == 900 and {p.n_players for p in games} == set(range(4, 13))
    assert all(solve(p, limit=2) == [p.solution] for p in games)
    assert games[0].id == "kks-4-0001"

GOOD = {"game_id": 1, "num_player": 3, "num_spy": 1, "num_hint": 0, "raw_schema": [12, 5, 1, 1],
        "raw_statement": [[[0, 1, 2], 3, 1], [[0], 1, 2], [[0, 2], 1, 2], [[0, 1, 2], 1, 3]], "raw_solution": [1, 2, 3],
        "text_game": "---\nPlayer name: Violet\nPlayer statement: Among all players, the number of spies is odd.\n---\nPlayer name: Uma\nPlayer statement: Violet is lying.\n---\nPlayer name: Xavier\nPlayer statement: Among Violet and I, there is exactly one knave.\n---\nMessage from the game manager: I am the game manager and here is a hint for you: Among all players, there is exactly one spy.\n",
        "text_solution": "Violet is a knight.\nUma is a knave.\nXavier is a spy.\n"}

def _write(tmp_path, *lines):
    f = tmp_path / "3.jsonl"
    f.write_text("".join(l + "\n" for l in lines))
    return f

def test_good_record_loads(tmp_path):
    [p] = load_controlmad(_write(tmp_path, json.dumps(GOOD)))
    assert p.text() == GOOD["text_game"] and solve(p) == [p.solution] and controlmad_record(p) == GOOD

@pytest.mark.parametrize("edit,line,field,msg", [
    (lambda r: None, 2, None, "malformed JSON"),
    (lambda r: r["raw_schema"].__setitem__(1, 99), 2, "raw_schema[1]", "unknown schema code 99"),
    (lambda r: r["raw_statement"][2][0].__setitem__(1, 3), 2, "raw_statement[2][0][1]", "player index 3 out of range 0..2"),
    (lambda r: r["raw_statement"][1][0].__setitem__(0, -1), 2, "raw_statement[1][0][0]", "player index -1 out of range"),
    (lambda r: r["raw_statement"].__setitem__(0, [[[0, 1]], [0]]), 2, "raw_statement[0]", "takes 3 entries"),
    (lambda r: r["raw_solution"].__setitem__(2, 0), 2, "raw_solution[2]", "role code must be 1, 2 or 3"),
    (lambda r: r.__setitem__("num_player", 4), 2, "text_game", "3 'Player name:' lines"),
])
def test_bad_input_names_file_line_and_field(tmp_path, edit, line, field, msg):
    r = json.loads(json.dumps(GOOD)); edit(r)
    bad = '{"game_id": 2, "num_player": 3,' if field is None else json.dumps(r)
    f = _write(tmp_path, json.dumps(GOOD), bad)
    with pytest.raises(KKSFormatError) as e: load_controlmad(f)
    assert (Path(e.value.path).name, e.value.line, e.value.field) == ("3.jsonl", line, field)
    assert str(e.value).startswith(f"{f}:{line}: ") and msg in str(e.value)

def test_answers_of_every_controlmad_game_parse_back():
    games = generate(5, count=20, seed=3)
    for p in games:
        from madlab.tasks.kks import KKSAnswer
        a = parse_kks_answer("Reasoning...\n```json\n" + KKSAnswer(dict(p.solution), 7, "why").to_json() + "\n```", p)
        assert a.valid and score_kks(a, p.solution)["correct"] and a.confidence == 7

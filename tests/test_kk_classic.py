"""Classic knights-and-knaves puzzles: boolean statements against brute force, the mem-kk-logic record formats
(madlab-written samples in tests/data), the English quiz in every wording, generated sets that round-trip through text,
the answer parser on the benchmark's solution text, and ControlMAD's debate on such puzzles."""
from __future__ import annotations
import ast, itertools, json, random
from pathlib import Path
import pandas as pd
import pytest
from madlab.core import from_jsonable, to_jsonable
from madlab.puzzle_sets import DIFFICULTY, KK_TEMPLATES, KKQuizError, KKSFormatError, generate, kk_quiz, kk_record, load_kk, parse_kk_quiz, to_kk
from madlab.puzzles import And, ExactlyOne, Iff, Implies, Is, Not, Or, Puzzle, RoleCount, RoleParity, SameRole, TruthCount, _Bool, _brute_force, solve
from madlab.tasks.kks import parse_kks_answer, score_kks

DATA = Path(__file__).resolve().parent / "data"
FULL, QUIZ_ONLY = DATA / "kk_sample.jsonl", DATA / "kk_quiz_only_sample.json"

def _ev(s, a):
    "An evaluator of the benchmark's prefix tuples written apart from madlab (a: True = knight)."
    op = s[0]
    if op == "telling-truth": return a[s[1]]
    if op == "lying": return not a[s[1]]
    if op == "not": return not _ev(s[1], a)
    if op == "and": return all(_ev(x, a) for x in s[1:])
    if op == "or": return any(_ev(x, a) for x in s[1:])
    if op == "->": return not _ev(s[1], a) or _ev(s[2], a)
    if op == "<=>": return _ev(s[1], a) == _ev(s[2], a)
    raise KeyError(op)

def test_sample_records_load_with_their_gold_as_only_solution():
    recs = [json.loads(l) for l in FULL.read_text().splitlines()]
    games = load_kk(FULL)
    assert [p.id for p in games] == [f"kk-kk_sample-{k:04d}" for k in range(1, 5)] and [p.game_id for p in games] == [0, 1, 2, 3]
    for p, r in zip(games, recs):
        sts = ast.literal_eval(r["statements"])
        sols = [a for a in itertools.product([True, False], repeat=len(sts)) if all(_ev(s, a) == a[i] for i, s in enumerate(sts))]
        assert sols == [tuple(r["solution"])]
        assert solve(p) == [p.solution] == [{n: "knight" if b else "knave" for n, b in zip(r["names"], r["solution"])}]
        assert p.hints == [RoleCount(list(range(p.n_players)), 0, "spy")]
        for a in itertools.product([True, False], repeat=len(sts)):          # every statement means what its tuple means
            roles = [0 if b else 1 for b in a]
            assert [s.holds(roles, None) for s in p.statements] == [_ev(s, a) for s in sts]

def test_quiz_only_copies_read_the_same_puzzles():
    full, text = load_kk(FULL), load_kk(QUIZ_ONLY)
    assert [(p.players, p.statements, p.solution) for p in text] == [(p.players, p.statements, p.solution) for p in full]
    # record 3 swaps the words: "knaves always tell the truth", so its "knave" is madlab's knight
    assert text[2].solution == {"Jacob": "knight", "Lily": "knave"}
    assert all(parse_kk_quiz(json.loads(l)["quiz"]).statements == p.statements for l, p in zip(FULL.read_text().splitlines(), full))

def test_a_folder_loads_every_file(tmp_path):
    for f in (FULL, QUIZ_ONLY): (tmp_path / f.name).write_bytes(f.read_bytes())
    assert len(load_kk(tmp_path)) == 8

def test_bad_records_name_file_line_and_field(tmp_path):
    f = tmp_path / "bad.jsonl"
    rec = json.loads(FULL.read_text().splitlines()[0])
    f.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "statements": "(('lying', 1), ('not', ('telling-truth', 7)), ('lying', 0))"}) + "\n")
    with pytest.raises(KKSFormatError) as e: load_kk(f)
    assert (e.value.line, e.value.field) == (2, "statements[1][1]") and "0..2" in str(e.value)
    f.write_text(json.dumps({"quiz": rec["quiz"].replace("Lucas claimed", "Lucas sang"), "solution_text_format": rec["solution_text_format"]}) + "\n")
    with pytest.raises(KKSFormatError) as e: load_kk(f)
    assert e.value.field == "quiz" and "sentence 2" in str(e.value) and "Lucas sang" in str(e.value)
    f.write_text("[1, 2")
    with pytest.raises(KKSFormatError, match="not a JSON list"): load_kk(f)
    f.write_text(json.dumps({**rec, "statements": "open('/etc/passwd').read()"}) + "\n")
    with pytest.raises(KKSFormatError, match="not a Python literal"): load_kk(f)

def _random_statement(rng, n, depth):
    if depth == 0 or rng.random() < 0.3: return Is(rng.randrange(n), rng.choice(["knight", "knave", "spy"]))
    k = rng.randrange(7)
    if k == 0: return Not(_random_statement(rng, n, depth - 1))
    if k in (1, 2): return (And, Or)[k - 1]([_random_statement(rng, n, depth - 1) for _ in range(rng.randint(2, 3))])
    if k in (3, 4): return (Implies, Iff)[k - 3](_random_statement(rng, n, depth - 1), _random_statement(rng, n, depth - 1))
    if k == 5: return TruthCount(rng.sample(range(n), 2), rng.randint(0, 2), rng.random() < 0.5)
    return ExactlyOne(SameRole(rng.sample(range(n), 2)), RoleParity(list(range(n)), "spy", rng.random() < 0.5))

def test_solver_agrees_with_brute_force_on_nested_statements():
    rng = random.Random(15)
    for _ in range(300):
        n = rng.randint(2, 4)
        p = Puzzle([f"P{i}" for i in range(n)], [_random_statement(rng, n, 3) for _ in range(n)],
                   [_random_statement(rng, n, 2)] if rng.random() < 0.5 else [])
        key = lambda sols: sorted(tuple(s.values()) for s in sols)
        assert key(solve(p)) == key(_brute_force(p)), p
        assert from_jsonable(to_jsonable(p)) == p

@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_generated_classic_sets_round_trip_through_text(n, tmp_path):
    games = generate(n, count=10, seed=n, n_spies=0, difficulty="kk")
    assert all(isinstance(s, _Bool) for p in games for s in p.statements)
    for k, p in enumerate(games):
        assert solve(p) == [p.solution] and set(p.solution.values()) <= {"knight", "knave"}
        back = parse_kk_quiz(kk_quiz(p, seed=k))
        assert (back.players, back.statements, back.hints) == (p.players, p.statements, p.hints)
    f = to_kk(games, tmp_path / f"people{n}.jsonl")
    assert [(p.players, p.statements, p.solution) for p in load_kk(f)] == [(p.players, p.statements, p.solution) for p in games]
    again = to_kk(generate(n, count=10, seed=n, n_spies=0, difficulty="kk"), tmp_path / "again.jsonl")
    assert again.read_bytes() == f.read_bytes()                                         # same arguments, same bytes
    quiz_only = tmp_path / "quiz_only.json"
    quiz_only.write_text(json.dumps([{k: r[k] for k in ("quiz", "solution_text_format")} for r in map(json.loads, f.read_text().splitlines())]))
    assert [(p.statements, p.solution) for p in load_kk(quiz_only)] == [(p.statements, p.solution) for p in games]

def test_every_wording_reads_back():
    p = generate(4, count=1, seed=3, n_spies=0, difficulty="kk")[0]
    for t in range(len(KK_TEMPLATES)):
        q = kk_quiz(p, template=t)
        assert parse_kk_quiz(q).statements == p.statements, KK_TEMPLATES[t]
    sentences = [KK_TEMPLATES[t].format(name=p.players[t % 4], s="x") for t in range(len(KK_TEMPLATES))]
    assert len(set(sentences)) == 18

def test_default_generator_is_unchanged_and_spies_work_with_boolean_statements():
    assert all(not isinstance(s, _Bool) for p in generate(6, count=5, seed=1) for s in p.statements + p.hints)
    assert set(DIFFICULTY["kk"]) == {"is", "not", "and", "or", "implies", "iff"}
    games = generate(5, count=5, seed=2, n_spies=1, difficulty="kk")
    assert all(solve(p) == [p.solution] and list(p.solution.values()).count("spy") == 1 for p in games)
    with pytest.raises(ValueError, match="no spies"): kk_record(games[0])

def test_answer_parser_reads_the_benchmarks_solution_text():
    for p, line in zip(load_kk(FULL), FULL.read_text().splitlines()):
        r = json.loads(line)
        if r["knight_knave"]["knight"] != "knight": continue                           # swapped words: not madlab's roles
        a = parse_kks_answer(r["solution_text_format"], p)
        assert a.valid and score_kks(a, p.solution)["correct"]
        reply = (r["cot_head"] + "\n" + "\n".join(r["cot_repeat_steps"]) + "\n" + r["cot_foot"] + "\n\nCONCLUSION:\n" + r["solution_text_format"])
        assert parse_kks_answer(reply, p).roles == p.solution
        assert parse_kks_answer(r["solution_text_format"].replace("\n", "\n\n"), p).roles == p.solution

def test_controlmads_debate_runs_on_classic_puzzles(tmp_path):
    from madlab.run import run_experiment
    games = load_kk(FULL) + generate(5, count=4, seed=9, n_spies=0, difficulty="kk")
    items = [p.to_item() for p in games]
    assert all(i.meta["n_spies"] == 0 and "there are no spies" in i.prompt for i in items)
    run_experiment("controlmad", items, out=tmp_path / "run")
    res = pd.read_parquet(next((tmp_path / "run").rglob("results.parquet")))
    assert len(res) == len(games) and set(res.status) == {"done"} and res.correct.any()
    assert list(res.item_id) == [p.id for p in games]
    assert [json.loads(g) for g in res.gold] == [p.solution for p in games]              # answers without spies
    assert (res.correct == (res.n_correct == [p.n_players for p in games])).all()

def test_the_command_line_runs_controlmad_on_a_classic_file(tmp_path):
    from click.testing import CliRunner
    from madlab.cli import main
    r = CliRunner().invoke(main, ["run", "controlmad", "--no-progress", "--data", str(FULL), "--games", "1-4", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output + repr(r.exception)
    res = pd.read_parquet(Path(r.output.strip().splitlines()[-1][len("outputs: "):]) / "results.parquet")
    assert list(res.item_id) == [f"kk-kk_sample-{k:04d}" for k in range(1, 5)]
    r = CliRunner().invoke(main, ["run", "controlmad", "--no-progress", "--data", str(QUIZ_ONLY), "--size", "3", "--games", "1", "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"quiz": "Hello."}\n')
    r = CliRunner().invoke(main, ["run", "controlmad", "--no-progress", "--data", str(bad), "--games", "1", "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and "--data" in r.output and "bad.jsonl:1: field quiz" in r.output and "Traceback" not in r.output

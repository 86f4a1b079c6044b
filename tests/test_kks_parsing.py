"""Answers read exactly as written: a JSON answer that states no roles gives none, a reply cut off mid-answer keeps its
complete entries, and no role is ever taken from the reasoning of a reply that started a JSON answer.

The replies mimic ControlMAD's logged answers on 5-player games (a `players` list of `{"name", "role"}` entries, a
confidence, a long explanation whose newlines are escaped inside the JSON string), cut where a token limit cuts them."""
from __future__ import annotations
import json, random
import pytest
from madlab.puzzles import KKS_ROLES
from madlab.puzzle_sets import generate
from madlab.tasks.kks import parse_kks_answer, parse_player_role, score_kks

GAMES = generate(5, count=49, seed=15)            # 49 games x 2 replies = 98 answers, as in the check that found the defects

def _explanation(p, answer, rng):
    "Reasoning in the style of a model: hypotheses, and plain sentences that name roles (some contradicting the entries)."
    a, b = rng.sample(p.players, 2)
    other = {r for r in KKS_ROLES if r != answer[b]}
    lines = [f"Step 1: Consider {a} = spy. Then {a}'s statement can be either, which reduces to the claim that {b} is a {sorted(other)[0]}.",
             f"If {b} is a knight then {a} is a knave.",
             f"{b} is a {sorted(other)[1]}.",                # a flat sentence that contradicts the entry for b
             "Checking every statement against the hint:"]
    lines += [f"{q} is a {rng.choice(KKS_ROLES)}." for q in p.players]
    return "\n".join(lines)

def _reply(p, rng, order):
    "A ControlMAD-style JSON reply (keys in `order`) and, for each player, the offset just past the `}` closing its entry."
    answer = {q: (p.solution[q] if rng.random() < 0.8 else rng.choice(KKS_ROLES)) for q in p.players}
    entries = [json.dumps({"name": q, "role": answer[q]}) for q in p.players]
    parts = {"players": '"players": [\n    ' + ",\n    ".join(entries) + "\n  ]",
             "confidence": f'"confidence": {rng.randint(1, 10)}',
             "explanation": '"explanation": ' + json.dumps(_explanation(p, answer, rng))}
    prefix = "I will reason it through and answer in the JSON format.\n" if rng.random() < 0.5 else ""
    text = prefix + "{\n  " + ",\n  ".join(parts[k] for k in order) + "\n}"
    ends = {q: text.index(e) + len(e) for q, e in zip(p.players, entries)}
    return text, answer, ends

def _replies():
    rng = random.Random(15)
    for p in GAMES:
        for order in (("players", "confidence", "explanation"), ("explanation", "players", "confidence")):
            yield (p, *_reply(p, rng, order))

def test_complete_replies_read_exactly():
    for p, text, answer, _ in _replies():
        a = parse_kks_answer(text, p)
        assert a.roles == answer and a.valid and a.confidence == json.loads(text[text.index("{"):])["confidence"]

def test_replies_cut_mid_explanation_keep_every_complete_entry():
    rng, recovered, total, from_prose = random.Random(0), 0, 0, 0
    for p, text, answer, ends in _replies():
        i = text.index('"explanation"')
        cut = rng.randrange(text.index("\\n", i), text.rindex("\\n"))          # inside the explanation, past a newline
        a = parse_kks_answer(text[:cut], p)
        want = {q: (answer[q] if ends[q] <= cut else None) for q in p.players}
        assert a.roles == want, (text[:cut], a.roles)
        recovered += sum(r is not None for r in a.roles.values()); total += sum(r is not None for r in want.values())
        from_prose += sum(r is not None and ends[q] > cut for q, r in a.roles.items())
    assert recovered == total and total > 0 and from_prose == 0
    print(f"recovered {recovered} of {total} complete entries from 98 cut-off replies; {from_prose} roles from prose")

def test_every_cut_of_a_reply_gives_exactly_its_complete_entries():
    "Cut one reply of each key order at every character: a player has a role iff their entry's closing brace was written."
    for p, text, answer, ends in list(_replies())[:2]:
        start = text.index("{")
        for cut in range(start, len(text)):
            a = parse_kks_answer(text[:cut], p)
            want = {q: (answer[q] if ends[q] <= cut else None) for q in p.players}
            assert a.roles == want, (cut, text[:cut], a.roles)

def test_cut_entries_in_the_middle_of_the_list():
    p = GAMES[0]
    t = '{"players": [{"name": "%s", "role": "knave"}, {"name": "%s", "role": "kni' % tuple(p.players[:2])
    a = parse_kks_answer(t, p)
    assert a.roles == {q: ("knave" if q == p.players[0] else None) for q in p.players}
    assert score_kks(a, p.solution)["n_invalid"] == 4

def test_no_roles_in_the_json_means_none_even_with_a_hypothesis_in_the_explanation():
    p = GAMES[0]
    v, s = p.players[:2]
    why = (f"There is no consistent solution.\nConsider {v} = spy. Then {v}'s statement may be true or false, which "
           f"reduces to the claim that {s} is a knave.\n{s} is a knave.\nEvery branch contradicts the hint.")
    for reply in (json.dumps({"players": [], "confidence": 3, "explanation": why}),
                  "```json\n" + json.dumps({"players": [], "explanation": why}, indent=2) + "\n```",
                  "Here is my answer.\n" + json.dumps({"explanation": why, "players": []})):
        a = parse_kks_answer(reply, p)
        assert a.roles == {q: None for q in p.players} and not a.valid, reply
        assert score_kks(a, p.solution) == {"correct": False, "per_player": {q: False for q in p.players}, "n_correct": 0, "n_invalid": 5}

def test_a_started_json_answer_with_no_complete_entry_gives_no_role():
    p = GAMES[1]
    prose = "\n".join(f"{q} is a knight." for q in p.players)
    for reply in (prose + '\n{"players": [{"name": "' + p.players[0], prose + '\n```json\n{"explanation": "so ' + p.players[0] + ' is a'):
        assert parse_kks_answer(reply, p).roles == {q: None for q in p.players}
    assert parse_kks_answer(prose, p).roles == {q: "knight" for q in p.players}      # prose alone is still read

def test_hypotheses_after_an_escaped_newline_are_hypotheses():
    # the prose reader splits sentences at escaped newlines too, so a JSON-looking string is not mined either
    p = GAMES[0]
    v, s = p.players[:2]
    text = f'note: "Step 1\\nIf {v} is a spy then {s} is a knave.\\nSuppose {s} is a knight'
    assert parse_kks_answer(text, p).roles[s] is None

def test_debate_replies_cut_off_keep_the_role():
    p = "Uma"
    assert parse_player_role('{"player_role": "Uma", "role": "knave", "agree_with": ["A2"], "reasoning": "If Uma were a kni', p) == "knave"
    assert parse_player_role('{"player_role": "Uma", "reasoning": "Uma is a knight because', p) is None
    assert parse_player_role('{"player_role": "Uma", "role": "kn', p) is None
    assert parse_player_role('So Uma is a spy.\n{"player_role": "Uma", "role": "kn', p) is None
    assert parse_player_role('{"player_role": "Uma", "role": "spy"}', p) == "spy"
    assert parse_player_role('{"players": [], "explanation": "Uma is a knight"}', p) is None

"""The Knight-Knave-Spy task (its answers, format and loader) lives in `madlab.tasks.kks`, the metrics of its debates in
`madlab.kks`: `madlab.scoring` keeps what is generic (formats, reply parsers, votes, usage) and loads no task module; every
debate has the `kks` answer format; the reply parsers import from `madlab.scoring` alone."""
import subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def _fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    return out.stdout.strip()

def test_scoring_loads_no_task_module():
    code = "import sys, madlab.scoring; print(sorted(m for m in sys.modules if m in ('madlab.tasks', 'madlab.puzzles', 'madlab.kks')))"
    assert _fresh(code) == "[]"

def test_every_debate_has_the_kks_format():
    code = ("import madlab.debate\nfrom madlab.formats import answer_format\nfrom madlab.puzzle_sets import load_controlmad\nfrom madlab.core import madlab_data\n"
            "it = load_controlmad(madlab_data('kks/4.jsonl'))[0].to_item()\nf = answer_format(it)\n"
            "print(f.kind, f.options['players'] == list(it.gold))")
    assert _fresh(code) == "kks.full True"

def test_kks_names_and_parsers_where_they_are_imported():
    import madlab.kks as K, madlab.scoring as S, madlab.tasks as T, madlab.tasks.kks as KT
    for n in ("kks_players", "roles_of", "synthetic_kks_belief", "synthetic_kks_position", "KKS_FULL", "KKS", "KKSAnswer",
              "parse_kks_answer", "parse_player_role", "score_kks", "kks_schema", "kks_answer_format"):
        assert n in KT.__all__ and n not in K.__all__ and not hasattr(S, n), n
    for n in ("kks_positions", "kks_flips", "kks_consensus", "kks_games", "kks_decisions", "phase_accuracy",
              "flip_summary", "position_changes", "KKS_PHASES", "CHANGE_KINDS"):
        assert n in K.__all__ and not hasattr(S, n), n
    assert not {"extract_number", "numbers_match", "parse_choice", "Task", "TASKS", "register_task"} & set(T.__all__)
    import madlab.formats as F
    assert S.agent_usage is not None and F.TASKS["kks"].format is KT.KKS_FULL and F.FORMATS["kks.full"] is KT.KKS_FULL

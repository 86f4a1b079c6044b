"""Knight-Knave-Spy answers live in `madlab.kks`: `madlab.scoring` keeps what is generic (formats, reply parsers, votes, usage)
and loads no task module; every debate has the `kks` answer format; the reply parsers are still importable from `madlab.tasks`."""
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
    code = ("import madlab.debate\nfrom madlab.scoring import answer_format\nfrom madlab.puzzles import load_controlmad\nfrom madlab.core import madlab_data\n"
            "it = load_controlmad(madlab_data('kks/4.jsonl'))[0].to_item()\nf = answer_format(it)\n"
            "print(f.kind, f.options['players'] == list(it.gold))")
    assert _fresh(code) == "kks.full True"

def test_kks_names_and_parsers_where_they_are_imported():
    import madlab.kks as K, madlab.scoring as S, madlab.tasks as T
    for n in ("kks_players", "roles_of", "kks_positions", "kks_flips", "kks_consensus", "kks_games", "kks_decisions", "phase_accuracy",
              "flip_summary", "position_changes", "KKS_PHASES", "CHANGE_KINDS", "synthetic_kks_belief", "synthetic_kks_position"):
        assert hasattr(K, n) and not hasattr(S, n), n
    assert (T.extract_number, T.numbers_match, T.parse_choice) == (S.extract_number, S.numbers_match, S.parse_choice)
    import madlab.formats as F
    assert S.agent_usage is not None and F.TASKS["kks"].format is K.KKS_FULL and F.FORMATS["kks.full"] is K.KKS_FULL

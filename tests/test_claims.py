"""The claims ledger: results/claims.json is what `python -m posenc_nb.claims` computes from the committed records,
and every entry obeys the verdict rules (see nbs/29_claims.ipynb)."""
import copy, json
from pathlib import Path
import pytest
from posenc_nb.claims import build_ledger, check_rules, ledger_text, main, PAPERS, LEDGER_KEYS, LEDGER

ROOT = Path(__file__).resolve().parents[1] / 'results'

@pytest.fixture(scope='module')
def ledger(): return build_ledger(ROOT)

def committed(): return json.loads((ROOT / LEDGER).read_text())

def test_committed_ledger_is_regenerated_from_records(ledger):
    "The committed file is byte for byte what the generator writes from the committed records (never edited by hand)."
    assert (ROOT / LEDGER).read_text() == ledger_text(ledger), 'results/claims.json differs from the records: run python -m posenc_nb.claims'

def test_committed_ledger_obeys_the_rules():
    "reproduces/contradicts need >= 3 seeds per arm, a seed-level test, p_adjusted < 0.05 with the paper's sign, and learning models; scores are the records'."
    assert check_rules(committed(), ROOT) == []

def test_coverage():
    led = committed()
    assert len(led) >= 12 and all(sum(e['paper'] == p for e in led) >= 3 for p in PAPERS)
    assert all(tuple(e) == LEDGER_KEYS for e in led)
    assert all(len(a['records']) == len(a['scores']) and a['metric_key'] for e in led for a in e['arms'].values())

def test_check_fails_on_a_hand_edited_score(ledger, tmp_path):
    "One score changed by hand: the rule check names it, and the command's --check fails."
    bad = copy.deepcopy(ledger)
    arm = next(iter(bad[0]['arms'].values()))
    arm['scores'][0] = round(arm['scores'][0] + 0.1, 6)
    assert any(bad[0]['id'] in m and arm['metric_key'] in m for m in check_rules(bad, ROOT))
    assert main(["--root", str(ROOT), "--check"]) == 0          # while the committed file itself passes the check

def test_check_fails_on_a_broken_rule(ledger):
    "A verdict upgraded by hand (an inconclusive or no-verdict entry called 'reproduces') breaks a rule."
    bad = copy.deepcopy(ledger)
    e = next(x for x in bad if x['verdict'] in ('inconclusive', 'no verdict'))
    e['verdict'] = 'reproduces'
    assert any(e['id'] in m for m in check_rules(bad, ROOT))

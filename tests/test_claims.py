"""The claims ledger: results/claims.json is what `python -m posenc_nb.claims` computes from the committed records,
and every entry obeys the verdict rules (see nbs/29_claims.ipynb)."""
import copy, json
from pathlib import Path
import pytest
from posenc_nb.claims import build_ledger, check_rules, ledger_text, main, PAPERS, LEDGER_KEYS, LEDGER, all_claims

all_claims()    # the later notebooks' claims registered now, under the real paper claims (fixtures patch them)

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
    assert len(led) >= 12 and all(any(e['paper'] == p for e in led) for p in PAPERS)
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


# The referee's rules, each fed a deliberately bad synthetic ledger (tests/test_claims.py only: no real claim's verdict).
import os, subprocess
from dataclasses import replace
from posenc_nb.claims import Claim, Regime, register, REGISTRY
from posenc_nb.referee import claim_fingerprint, Design

PC = 'RoPE is better (Su et al. 2021)'
PCS = {'rope-mt': PC}
SYN_GATE = Regime('a floor of 10', 10.0)


def _git(repo, *args, when='2026-12-07T10:00:00'):
    env = dict(os.environ, GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when, GIT_AUTHOR_NAME='t', GIT_AUTHOR_EMAIL='t@t',
               GIT_COMMITTER_NAME='t', GIT_COMMITTER_EMAIL='t@t')
    return subprocess.run(['git', *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo, when):
    _git(repo, 'add', '-A')
    _git(repo, 'commit', '-qm', 'x', '--allow-empty', when=when)
    return _git(repo, 'rev-parse', 'HEAD')


DESIGN = Design(settings={'a': {'lr': 0.1}, 'b': {'lr': 0.1}}, budget={'a': 9, 'b': 9}, seeds=(0, 1, 2),
                test='paired', sd=1.0, detectable=4.0)


def _claim(id='c', regime=SYN_GATE, family='rope-mt', direction=+1, registered=None, design=DESIGN):
    return Claim(id, 'RoFormer', PC, 'exp', 'synthetic', 'BLEU', ('a', f'exp/a_seed*.json', 'bleu'),
                 ('b', f'exp/b_seed*.json', 'bleu'), direction, family, regime, registered=registered, design=design)


def _records(root, commit, dirty=False, commits=None, scores=((20, 21, 22), (25, 27, 26))):
    (root / 'exp').mkdir(parents=True, exist_ok=True)
    for arm, ss in zip('ab', scores):
        for s, v in enumerate(ss):
            c = (commits or {}).get((arm, s), commit)
            (root / 'exp' / f'{arm}_seed{s}.json').write_text(json.dumps(dict(
                seed=s, bleu=v, loss=3 - v / 100, git_commit=c, git_dirty=dirty and (arm, s) == ('a', 0),
                started_utc='2026-12-07T11:00:00Z', init_hash=f'w{s}', data_order_hash=f'd{s}', budget={'updates': 9},
                steps=9, config={'lr': 0.1, 'seed': s})))


@pytest.fixture
def synthetic(tmp_path, monkeypatch):
    "A repository whose results/ registers claim 'c' (commit reg), then holds its records made at a later commit."
    import posenc_nb.claims as cl
    monkeypatch.setattr(cl, 'PAPER_CLAIMS', PCS)
    repo, root = tmp_path, tmp_path / 'results'
    _git(repo, 'init', '-q')
    root.mkdir()
    (root / 'README').write_text('results')
    _commit(repo, '2026-12-07T09:00:00')                                # before any registry
    (root / REGISTRY).write_text(json.dumps({'c': claim_fingerprint(_claim().definition())}))
    reg = _commit(repo, '2026-12-07T10:00:00')
    run = _commit(repo, '2026-12-07T10:30:00')
    return root, reg, run


def _check(root, claims):
    from posenc_nb.claims import build_ledger, check_rules
    ledger = build_ledger(root, claims)
    return ledger, check_rules(ledger, root, claims, sources=[])


def test_synthetic_ledger_passes_and_is_confirmatory(synthetic):
    root, reg, run = synthetic
    _records(root, run)
    ledger, bad = _check(root, [_claim(registered=reg)])
    assert bad == [] and ledger[0]['confirmatory'] and ledger[0]['paired'] and ledger[0]['p'] < 0.05


def test_dirty_record_is_excluded_and_a_verdict_over_it_fails(synthetic):
    root, reg, run = synthetic
    _records(root, run, dirty=True)
    ledger, bad = _check(root, [_claim(registered=reg)])
    e = ledger[0]
    assert e['arms']['a']['excluded'][0]['why'].startswith('made from a dirty tree') and not e['confirmatory']
    e['arms']['a']['records'].insert(0, e['arms']['a']['excluded'][0]['record'])   # a ledger that reads it anyway
    e['arms']['a']['scores'].insert(0, 20.0)
    e['verdict'] = 'inconclusive'                                                  # ... and states a verdict
    from posenc_nb.claims import check_rules
    assert any('a verdict from a record with made from a dirty tree' in m
               for m in check_rules(ledger, root, [_claim(registered=reg)], sources=[]))


def test_cross_commit_paired_test_fails(synthetic):
    root, reg, run = synthetic
    later = _commit(root.parent, '2026-12-07T10:40:00')
    _records(root, run, commits={('b', 1): later})
    ledger, bad = _check(root, [_claim(registered=reg)])
    assert not ledger[0]['paired'] and 'commits' in ledger[0]['provenance']['pairing']   # Welch, with the reason
    ledger[0]['paired'] = True                                                          # a ledger that pairs anyway
    from posenc_nb.claims import check_rules
    assert any('a paired test, but the arms come from 2 commits' in m
               for m in check_rules(ledger, root, [_claim(registered=reg)], sources=[]))


def test_loss_claim_without_no_position_gate_fails(synthetic):
    root, reg, run = synthetic
    _records(root, run)
    chance = Regime('chance', 5.56, higher_is_better=False)
    _, bad = _check(root, [_claim(id='c', regime=chance, direction=-1, registered=None)])
    assert any('loss claim without its no-position gate' in m for m in bad)


def test_unregistered_claim_not_post_hoc_fails(synthetic):
    root, reg, run = synthetic
    _records(root, run)
    ledger, bad = _check(root, [_claim(registered=None)])
    assert bad == [] and ledger[0]['post_hoc'] and not ledger[0]['confirmatory']
    ledger[0]['post_hoc'] = False                                            # marked registered by hand
    from posenc_nb.claims import check_rules
    assert any('not post hoc, but not registered' in m for m in check_rules(ledger, root, [_claim()], sources=[]))
    # a registration field pointing at a commit whose registry does not hold the claim: post hoc too
    first = _git(root.parent, 'rev-list', '--max-parents=0', 'HEAD')
    ledger, _ = _check(root, [replace(_claim(), registered=first)])
    assert ledger[0]['post_hoc'] and 'does not hold' in ledger[0]['provenance']['registration'][0]


def test_paper_claim_split_over_families_fails(synthetic):
    root, reg, run = synthetic
    _records(root, run)
    _, bad = _check(root, [_claim(registered=reg), _claim(id='c2', family='rope-mt-small')])
    assert any('split over families' in m for m in bad)


def test_notebook_pinning_a_verdict_fails(synthetic, tmp_path):
    root, reg, run = synthetic
    _records(root, run)
    nb = tmp_path / 'pin.ipynb'
    nb.write_text(json.dumps({'cells': [{'cell_type': 'code', 'id': 'x1',
                                         'source': ["test_eq(L['c']['verdict'], 'reproduces')\n"]}]}))
    from posenc_nb.claims import build_ledger, check_rules
    assert any('pins a verdict' in m for m in check_rules(build_ledger(root, [_claim()]), root, [_claim()], [nb]))


def test_register_refuses_a_changed_definition(synthetic, monkeypatch):
    root, reg, run = synthetic
    import posenc_nb.claims as cl
    monkeypatch.setattr(cl, 'CLAIMS', [replace(_claim(), direction=-1)])
    with pytest.raises(ValueError, match='registered with another definition'): register(['c'], root)


def synthetic_verdict(e: dict) -> str:
    "The verdict of an entry of a synthetic ledger (constructed records, no real claim)."
    return e['verdict']


def test_registered_without_a_design_is_post_hoc(synthetic, monkeypatch):
    "A claim whose registration fixed arms and gate but not budget, settings and seeds is exploratory."
    root, _, run = synthetic
    bare = _claim(design=None)
    (root / REGISTRY).write_text(json.dumps({'c': claim_fingerprint(bare.definition())}))
    reg2 = _commit(root.parent, '2026-12-07T10:20:00')
    _records(root, _commit(root.parent, '2026-12-07T10:30:00'))
    ledger, bad = _check(root, [replace(bare, registered=reg2)])
    assert bad == [] and ledger[0]['post_hoc'] and not ledger[0]['confirmatory']
    assert any('without its design' in m for m in ledger[0]['provenance']['registration'])


def _departed(root, run, **change):
    "Records of the registered claim with one seed's record changed (lr, steps or seed)."
    _records(root, run)
    f = root / 'exp' / 'b_seed1.json'
    r = json.loads(f.read_text())
    if 'lr' in change: r['config']['lr'] = change['lr']
    if 'steps' in change: r['steps'] = change['steps']
    if 'seed' in change:
        f.unlink()
        r['seed'] = r['config']['seed'] = change['seed']
        f = root / 'exp' / f"b_seed{change['seed']}.json"
    f.write_text(json.dumps(r))


@pytest.mark.parametrize('change, why', [(dict(lr=0.2), 'differs from the registered settings in lr'),
                                         (dict(steps=18), 'trained 18 updates, registered 9'),
                                         (dict(seed=7), 'seed 7 is not one of the registered seeds')])
def test_record_departing_from_the_design_fails_the_check(synthetic, monkeypatch, change, why):
    """A record whose learning rate, budget or seed differs from the registered design: no verdict, said why; a
    ledger that gives one anyway breaks a rule, and `python -m posenc_nb.claims --check` fails."""
    import posenc_nb.claims as cl
    root, reg, run = synthetic
    claim = _claim(registered=reg)
    monkeypatch.setattr(cl, 'CLAIMS', [claim])
    _records(root, run)
    (root / LEDGER).write_text(ledger_text(build_ledger(root)))
    assert main(['--root', str(root), '--check']) == 0                     # the design followed: the check passes
    _departed(root, run, **change)
    ledger = build_ledger(root)
    e = ledger[0]
    assert synthetic_verdict(e) == "no verdict" and not e["confirmatory"]
    assert any(why in p for p in e["design"]["problems"])
    forced = copy.deepcopy(ledger)
    forced[0]['verdict'] = 'reproduces'
    assert any('depart from the registered design' in m and why in m for m in check_rules(forced, root, sources=[]))
    assert main(['--root', str(root), '--check']) != 0       # 1: rules broken; 2: a record it names is gone


def test_missing_planned_seed_leaves_no_verdict(synthetic):
    root, reg, run = synthetic
    _records(root, run)
    (root / 'exp' / 'a_seed2.json').unlink()
    e = _check(root, [_claim(registered=reg)])[0][0]
    assert synthetic_verdict(e) == 'no verdict'
    assert any('planned seeds [2] not run' in p for p in e['design']['problems'])


def test_one_result_counted_twice_fails(synthetic):
    "Two claims reading the same outputs are one result: the check names the second."
    root, reg, run = synthetic
    _records(root, run)
    _, bad = _check(root, [_claim(registered=reg), _claim(id='c-again', design=None)])
    assert any(m.startswith('c-again: one result counted twice') for m in bad)
    _, bad = _check(root, [_claim(registered=reg)])
    assert not any('counted twice' in m for m in bad)


def test_equal_hypotheses_in_two_folders_are_one_result(tmp_path):
    from posenc_nb.claims import counted_twice
    for folder in ('x', 'y'):
        for arm in ('a', 'b'):
            d = tmp_path / folder / f'{arm}-s0'
            d.mkdir(parents=True)
            (d / 'metrics.json').write_text('{}')
            (d / 'test.hyp').write_text(f'{arm} hyp\n')
    entry = lambda f: dict(id=f, arms={a: dict(records=[f'{f}/{a}-s0/metrics.json'], metric_key='bleu') for a in 'ab'})
    assert counted_twice([entry('x'), entry('y')], tmp_path) == [
        "y: one result counted twice: its arms' outputs are those of x; merge the two claims"]
    (tmp_path / 'y/b-s0/test.hyp').write_text('another\n')
    assert counted_twice([entry('x'), entry('y')], tmp_path) == []


def test_second_attempt_on_the_same_seeds_is_post_hoc(synthetic):
    root, reg, run = synthetic
    _records(root, run)
    again = _claim(id='c2', design=replace(DESIGN, predecessor='c'))
    ledger, _ = _check(root, [_claim(registered=reg), again])
    e = ledger[1]
    assert e['post_hoc'] and not e['confirmatory'] and synthetic_verdict(e) == 'no verdict'
    assert any('a second attempt of c on its seeds [0, 1, 2]' in p for p in e['design']['problems'])


def test_failed_pilot_and_failed_control_leave_no_verdict(synthetic):
    root, reg, run = synthetic
    _records(root, run)
    pilot = dict(reference=('exp/a_seed*.json', 'bleu'), candidate=('exp/b_seed*.json', 'bleu'), margin=0.05,
                 what='b below a')                                            # b (about 26) is not below a (about 21)
    gated = _claim(id='p', design=replace(DESIGN, settings={'a': {}, 'b': {}}, pilot=pilot))
    gated = replace(gated, a=('a', 'none/a_seed*.json', 'bleu'), b=('b', 'none/b_seed*.json', 'bleu'))
    ctl = replace(_claim(id='ctl', direction=-1, registered=reg), role='control', family='rope-mt/controls')
    needs = _claim(id='t', registered=reg, design=replace(DESIGN, requires='ctl'))
    ledger, _ = _check(root, [gated, ctl, needs])
    p, c, t = ledger
    assert synthetic_verdict(p) == 'no verdict'
    assert p['design']['problems'][0].startswith('the registered pilot failed')
    assert synthetic_verdict(c) != 'control holds'
    assert synthetic_verdict(t) == 'no verdict'
    assert any('positive control ctl does not hold' in x for x in t['design']['problems'])

"""Committed results stay as committed: every writing command refuses an output inside a checkout's committed
results (a `results/` holding `registry.json`) with one line, before any work, except a registered design's own
command reproducing its own records; one design and one budget per comparison or experiment folder; summaries read
the folder's design only; a run folder belongs to one set of settings, and what reads it checks that."""
import hashlib, json, shutil
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ['--set', 'data_options={"n": 400}', '--set', 'test_max_sents=5', '--set', 'beam=1', '--set',
        'eval_bleu_sents=0', '--set', 'log_every=1', '--set', 'd_model=16', '--set', 'n_heads=2', '--set', 'd_ff=32',
        '--set', 'n_enc=1', '--set', 'n_dec=1']


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob('*')) if p.is_file()}


@pytest.fixture
def committed(tmp_path):
    "A checkout's committed results in miniature: results/ with a registry, the extrapolation records and a ledger."
    res = tmp_path / 'results'
    res.mkdir()
    shutil.copy(ROOT / 'results' / 'registry.json', res / 'registry.json')
    shutil.copytree(ROOT / 'results' / 'extrapolation', res / 'extrapolation')
    shutil.copytree(ROOT / 'results' / 'length', res / 'length', ignore=shutil.ignore_patterns('extend'))
    return res


SPEED = ['--reps', '1', '--length', '16', '--encodings', 'rope', '--d-model', '16', '--n-heads', '2', '--n-layers',
         '1', '--d-ff', '32', '--batch', '2', '--dec-steps', '2', '--train-steps', '1']
# every command that writes records or runs, each pointed inside the committed results ({r})
WRITERS = {
    'train': ['cli', 'train', '--config', 'synthetic-tiny', '--max-steps', '2', *TINY, '--out', '{r}/extrapolation'],
    'train (a new folder)': ['cli', 'train', '--config', 'synthetic-tiny', '--max-steps', '2', *TINY,
                             '--out', '{r}/new'],
    'compare': ['cli', 'compare', '--config', 'synthetic-tiny', '--encodings', 'rope', '--seeds', '5', '--max-steps',
                '2', *TINY, '--no-plot', '--out', '{r}/extrapolation'],
    'translate --output': ['cli', 'translate', '--ckpt', '{w}/nosuch', '--input', '{w}/in.txt', '--output',
                           '{r}/hyp.txt'],
    'experiments run, another budget': ['experiments', 'run', 'extrapolation', '--encodings', 'rope', '--seeds', '5',
                                        '--steps', '2', '--out', '{r}/extrapolation'],
    'experiments run, --set': ['experiments', 'run', 'extrapolation', '--encodings', 'rope', '--seeds', '5',
                               '--set', 'd_model=32', '--out', '{r}/extrapolation'],
    'experiments run, another folder': ['experiments', 'run', 'extrapolation', '--encodings', 'rope', '--seeds', '5',
                                        '--out', '{r}/multi30k'],
    'experiments run, an unregistered id': ['experiments', 'run', 'extrapolation', '--steps', '2', '--registered',
                                            'nosuch', '--out', '{r}/extrapolation'],
    'experiments compare --out': ['experiments', 'compare', '{r}/extrapolation', '--samples', '5', '--out',
                                  '{r}/sig.json'],
    'mlm pretrain': ['mlm', 'pretrain', '--steps', '2', '--out', '{r}/m.json'],
    'mlm finetune': ['mlm', 'finetune', '--steps', '2', '--out', '{r}/f.json'],
    'long_text bpe': ['long_text', 'bpe', '--steps', '2', '--out', '{r}/b.json'],
    'long_text lengths': ['long_text', 'lengths', '--out', '{r}/b.json'],
    'long_text ngram': ['long_text', 'ngram', '--out', '{r}/b.json'],
    'long_text bench': ['long_text', 'bench', '--out', '{r}/b.json'],
    'classify': ['classify', '--task', 'cola', '--steps', '2', '--out', '{r}/glue'],
    'speed': ['speed', *SPEED, '--out', '{r}/s.json'],
    'length run': ['length', 'run', '--config', 'smoke', '--encodings', 'rope', '--seeds', '0', '--out',
                   '{r}/new', '--runs', '{w}/runs'],
    'length extend': ['length', 'extend', '--seeds', '0', '--out', '{r}/length/extend', '--runs', '{w}/runs'],
    'length sample': ['length', 'sample', '--encoding', 'rope', '--seed', '0', '--temperature', '0.5', '--out',
                      '{r}/length/sample2.json', '--runs', '{w}/runs'],
}


@pytest.mark.parametrize('name', list(WRITERS))
def test_writers_refuse_committed_results(name, committed, tmp_path, call):
    "Each writer pointed inside committed results: one line naming them, exit 2, not a file changed or added."
    w = tmp_path / 'work'
    (w / 'runs' / 'rope_seed0').mkdir(parents=True)
    (w / 'in.txt').write_text('a b\n')
    if name == 'length extend':             # a checkpoint to extend, so that the refusal is the output's
        from posenc_nb.length import LENGTH_CONFIGS, train_arm
        from dataclasses import replace
        train_arm(replace(LENGTH_CONFIGS['smoke'], encoding='rope', seed=0), w / 'out', w / 'runs',
                  text=('abcd' * 300, 'abdc' * 100, 'abcd'), device='cpu')
    before = snapshot(committed)
    argv = [a.replace('{r}', str(committed)).replace('{w}', str(w)) for a in WRITERS[name]]
    rc, last = call(argv, tmp_path)
    assert rc == 2 and 'committed results' in last, (rc, last)
    assert snapshot(committed) == before


def test_default_outputs_from_the_project_root(committed, call):
    """From a checkout's root, commands whose default output is under results/: with other settings, or a record
    that is not there, refused; the design's own command finds its own record and keeps it as it is."""
    before = snapshot(committed)
    rc, last = call(['experiments', 'run', 'extrapolation', '--encodings', 'rope', '--seeds', '5', '--steps', '2'],
                    committed.parent)
    assert rc == 2 and 'results/extrapolation lies in the committed results' in last, last
    rc, last = call(['length', 'run', '--config', 'smoke', '--encodings', 'rope', '--seeds', '7'], committed.parent)
    assert rc == 2 and 'results/length/rope_seed7.json lies in the committed results' in last, last
    rc, last = call(['linear_lm', 'train', '--seed', '99'], committed.parent)
    assert rc == 2 and 'committed results' in last, last
    rc, last = call(['length', 'sample'], committed.parent)    # its own record: kept
    assert rc == 0, last
    assert snapshot(committed) == before


def test_registered_design_reproduces_its_own_records(committed, tmp_path, monkeypatch, call):
    """The exception: an experiment's own design into its own folder (any of its encodings and seeds) finds its
    records finished and keeps them; a design id of the registry opens the folder too. Nothing else does."""
    from posenc_nb.experiments import EXPERIMENTS, Experiment, run_experiment
    toy = Experiment('toy-design', 'synthetic-tiny', steps=2, encodings=('rope', 'alibi'),
                     overrides=dict(d_model=16, n_heads=2, d_ff=32, n_enc=1, n_dec=1, eval_bleu_sents=0, beam=1,
                                    test_max_sents=5, data_options={'n': 400}))
    run_experiment(toy, out=tmp_path / 'made', work=tmp_path / 'w', log=lambda s: None)
    shutil.copytree(tmp_path / 'made', committed / 'toy-design')
    before = snapshot(committed)
    monkeypatch.setitem(EXPERIMENTS, 'toy-design', toy)
    own = ['experiments', 'run', 'toy-design', '--work', str(tmp_path / 'w'), '--out', str(committed / 'toy-design')]
    rc, last = call(own, tmp_path)
    assert rc == 0, last
    design = next(iter(json.loads((committed / 'registry.json').read_text())))
    rc, last = call(own + ['--registered', design], tmp_path)
    assert rc == 0, last
    rc, last = call(own + ['--steps', '3'], tmp_path)            # not its design: refused
    assert rc == 2 and 'committed results' in last, last
    assert snapshot(committed) == before
    rc, last = call(own + ['--encodings', 'rope', '--seeds', '1'], tmp_path)   # a replicate
    assert rc == 0, last
    after = snapshot(committed)
    assert {k: after[k] for k in before} == before and any(k.startswith('toy-design/rope-s1/') for k in after)
    from posenc_nb.guard import CommittedResults, own_records
    with pytest.raises(CommittedResults, match="'nosuch' is not a registered design"):
        with own_records(committed / 'extrapolation', 'nosuch'): pass


def test_train_into_the_real_committed_results_is_refused(call):
    "The case as a user meets it: `posenc train --out results/multi30k` from the project root."
    before = snapshot(ROOT / 'results' / 'multi30k')
    rc, last = call(['cli', 'train', '--config', 'synthetic-tiny', '--max-steps', '2', *TINY, '--out',
                     'results/multi30k'], ROOT)
    assert rc == 2 and 'committed results' in last, last
    assert snapshot(ROOT / 'results' / 'multi30k') == before
    assert not (ROOT / 'results' / 'multi30k' / '.lock').exists()


@pytest.fixture(scope='module')
def finished_compare(tmp_path_factory):
    "A finished comparison of rope at 2 updates, and a finished training run of 2 updates."
    from posenc_nb import cli
    d = tmp_path_factory.mktemp('cmp')
    assert cli.main(['compare', '--config', 'synthetic-tiny', '--encodings', 'rope', '--max-steps', '2', *TINY,
                     '--no-plot', '--out', str(d / 'cmp')]) == 0
    assert cli.main(['train', '--config', 'synthetic-tiny', '--max-steps', '2', *TINY, '--out', str(d / 'run')]) == 0
    return d


@pytest.mark.parametrize('folder, encoding, steps, says', [
    ('run', 'rope', '2', 'is the folder of a training run'),     # a training run's folder: never a comparison's
    ('cmp', 'alibi', '3', 'max_steps: 2 vs 3'),                  # another budget, an encoding the folder lacks
])
def test_compare_refuses_a_folder_not_its_own(folder, encoding, steps, says, finished_compare, tmp_path, call):
    "`compare` into a training run's folder, or into a comparison with another --max-steps: refused, nothing added."
    out = tmp_path / folder
    shutil.copytree(finished_compare / folder, out)
    before = snapshot(out)
    rc, last = call(['cli', 'compare', '--config', 'synthetic-tiny', '--encodings', encoding, '--max-steps', steps,
                     *TINY, '--no-plot', '--out', str(out)], tmp_path)
    assert rc == 2 and says in last, last
    assert snapshot(out) == before


def test_summarize_reads_the_folders_design_only(committed, tmp_path, monkeypatch, capsys):
    "A record of another budget in an experiment's folder is left out of its table, and named."
    from posenc_nb.experiments import EXPERIMENTS, list_experiments
    from posenc_nb.store import write_record
    list_experiments()
    ext = tmp_path / 'extrapolation'
    shutil.copytree(committed / 'extrapolation', ext)
    cfg = EXPERIMENTS['extrapolation'].train_config('rope', 7, steps=2)
    write_record(ext / 'rope-s7', cfg, {'encoding': 'rope', 'seed': 7, 'bleu': 0.5, 'steps': 2}, {}, [], [])
    monkeypatch.chdir(tmp_path)
    from posenc_nb import experiments
    capsys.readouterr()
    assert experiments.main(['summarize', str(ext)]) == 0
    out = capsys.readouterr()
    assert f'left out {ext / "rope-s7"}' in out.err and 'max_steps: 2 vs 600' in out.err, out.err
    rope = next(l for l in out.out.splitlines() if l.startswith('| rope '))
    assert rope.split('|')[2].strip() == '3', rope                     # its three seeds, not four


def test_length_runs_folder_keyed_and_checked(tmp_path, monkeypatch, capsys):
    """`length run` with other --steps into another --out but the same --runs is refused (the checkpoint the first
    record names stays); `sample` refuses a checkpoint of other settings than its record, and a corpus that gained a
    character."""
    from dataclasses import replace
    from posenc_nb import length
    text = ('abcd' * 300, 'abdc' * 100, 'abcd')
    cfg = replace(length.LENGTH_CONFIGS['smoke'], encoding='rope', seed=0)
    length.train_arm(cfg, tmp_path / 'a', tmp_path / 'runs', text=text, device='cpu')
    ckpt = tmp_path / 'runs' / 'rope_seed0' / 'model.pt'
    sha = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    with pytest.raises(ValueError, match='steps: 2 vs 3'):
        length.train_arm(replace(cfg, steps=3), tmp_path / 'b', tmp_path / 'runs', text=text, device='cpu')
    assert hashlib.sha256(ckpt.read_bytes()).hexdigest() == sha
    length.sample_record('rope', 0, tmp_path / 'runs', prompt=4, total=8, text=text, records=tmp_path / 'a')
    with pytest.raises(ValueError, match='trained on another corpus'):
        length.sample_record('rope', 0, tmp_path / 'runs', prompt=4, total=8, text=(*text[:2], 'abcde'))
    rec = json.loads((tmp_path / 'a' / 'rope_seed0.json').read_text())
    rec.update(fingerprint='0' * 16, config={**rec['config'], 'steps': 9})
    (tmp_path / 'c').mkdir()
    (tmp_path / 'c' / 'rope_seed0.json').write_text(json.dumps(rec))
    with pytest.raises(ValueError, match='steps: 9 vs 2'):
        length.sample_record('rope', 0, tmp_path / 'runs', prompt=4, total=8, text=text, records=tmp_path / 'c')


def test_the_suite_writes_its_own_records_and_nothing_else(committed, monkeypatch, call):
    """`python -m posenc_nb.confirm run` is the registered design's own command for results/confirm: what its parts
    write there is published; `posenc train --out results/confirm/mt` from the same checkout is refused, and so is a
    suite record made outside the suite's run."""
    from posenc_nb import confirm
    from posenc_nb.guard import CommittedResults
    rec = confirm.SUITE / 'mt' / 'probe_seed0.json'
    write = lambda threads, log: confirm._one_record(rec, {'steps': 1}, lambda: {'loss': 1.0})
    monkeypatch.setitem(confirm.PARTS, 'probe', write)
    monkeypatch.setattr(confirm, '_clean_tree', lambda: None)        # this copy of a checkout is not a git worktree
    rc, last = call(['confirm', 'run', '--parts', 'probe'], committed.parent)
    assert rc == 0 and json.loads((committed.parent / rec).read_text())['loss'] == 1.0, (rc, last)
    before = snapshot(committed)
    rc, last = call(['cli', 'train', '--config', 'synthetic-tiny', '--max-steps', '2', *TINY, '--out',
                     'results/confirm/mt'], committed.parent)
    assert rc == 2 and 'results/confirm/mt lies in the committed results' in last, last
    with pytest.raises(CommittedResults, match='lies in the committed results'):
        confirm._one_record(confirm.SUITE / 'mt' / 'probe_seed1.json', {'steps': 1}, lambda: {'loss': 2.0})
    assert snapshot(committed) == before


def test_length_run_adds_to_its_own_design_only(committed, tmp_path, monkeypatch, call):
    """`length run` into a committed folder of the lab: another arm or seed of the folder's own design (its config and
    budget) is written there; another budget, an arm off the lab's board, or a folder without records is refused."""
    from posenc_nb import length
    monkeypatch.setattr(length, 'load_text', lambda name: ('abcd' * 300, 'abdc' * 100, 'abcd'))
    run = ['length', 'run', '--config', 'smoke', '--steps', '2', '--runs', str(tmp_path / 'runs')]
    rc, last = call(run + ['--encodings', 'rope', '--seeds', '0', '--out', str(tmp_path / 'made')], tmp_path)
    assert rc == 0, last
    shutil.copytree(tmp_path / 'made', committed / 'length-mini')
    before = snapshot(committed)
    refused = {'another budget': (['--steps', '3', '--encodings', 'alibi'], 'length-mini'),
               'an arm off the board': (['--encodings', 'rope:scaling=xpos'], 'length-mini'),
               'a folder without records': (['--encodings', 'alibi'], 'length-new')}
    for why, (argv, folder) in refused.items():
        rc, last = call(run + argv + ['--seeds', '0', '--out', str(committed / folder)], tmp_path)
        assert rc == 2 and 'committed results' in last, (why, last)
    assert snapshot(committed) == before
    rc, last = call(run + ['--encodings', 'alibi', '--seeds', '1', '--out', str(committed / 'length-mini')], tmp_path)
    assert rc == 0, last
    after = snapshot(committed)
    assert {k: after[k] for k in before} == before and 'length-mini/alibi_seed1.json' in after

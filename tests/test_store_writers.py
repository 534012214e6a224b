"""Issue 50: every writer through the run store. `--fresh` checks and builds the whole run before it replaces a
finished one, and keeps it when the new run fails; resumes that would splice two runs are refused; the writers of
the experiment modules lock their outputs, fingerprint their settings and publish atomically; records are verified
against their manifests on read; one table of bad inputs, each refused with one line naming the flag.

The cases of the issue's list 1-6, each a test here:

| list | case | test (`test_...`) |
|---|---|---|
| 1 | `--fresh --set max_tokens=1` keeps the finished run | `fresh_keeps_finished_run[fresh_max_tokens_1]` |
| 1 | `--fresh --set streams=nosuch` keeps it | `fresh_keeps_finished_run[fresh_streams_nosuch]` |
| 1 | `--fresh --set max_train_len=1` keeps it | `fresh_keeps_finished_run[fresh_max_train_len_1]` |
| 1 | `--fresh --set lr=1e30` (diverges) keeps it | `fresh_keeps_finished_run[fresh_lr_1e30]` |
| 1 | `--fresh` replaces the run once the new one finishes | `fresh_replaces_run_once_it_finishes` |
| 2 | two `mlm pretrain` into one `--out` | `mlm_pretrain_second_writer_refused` |
| 2 | two `long_text bpe` into one `--out` | `long_text_bpe_second_writer_refused` |
| 2 | other settings into the same `--out`: refused | `mlm_pretrain_other_settings_refused` |
| 2 | (the same settings: skipped, file unchanged) | `mlm_pretrain_same_settings_skipped` |
| 2 | (finetune, scratch record vs `--pretrained`) | `mlm_finetune_scratch_vs_pretrained_refused` |
| 2 | (long_text bpe, lengths, ngram) | `long_text_{bpe,lengths,ngram}_other_settings_refused` |
| 2 | (experiments compare `--out`) | `experiments_compare_other_settings_refused` |
| 2 | `experiments compare --out <a run's metrics.json>` | `experiments_compare_refuses_a_record_file` |
| 3 | `classify`'s default `--out` not under `results/` | `classify_default_out_is_not_results` |
| 3 | its example keeps a committed record | `classify_example_keeps_committed_record` |
| 4 | a hand-edited `config.json` is not taken as finished | `hand_edited_config_is_not_finished` |
| 4 | a replaced `test.hyp`: readers name it | `replaced_hypotheses_named_by_readers` |
| 4 | (the ledger names a changed record file) | `ledger_names_a_changed_record_file` |
| 4 | `translate --output <record>/test.hyp` refused | `translate_caps_and_record_output` |
| 5 | `posenc train` refuses a `compare` record folder | `train_refuses_a_published_record`, |
|   |   | `compare_rerun_with_other_budget_refused` (a real one) |
| 5 | linear schedule resumed with a larger `--max-steps` | `linear_schedule_resume_with_other_budget_refused` |
| 5 | (or with a `--max-minutes` it did not have) | `linear_schedule_resume_with_other_budget_refused` |
| 5 | compare rerun, other `--max-steps`: `results.json` kept | `compare_rerun_with_other_budget_refused` |
| 6 | `translate --beam 100000`; a 200,000-word line | `translate_caps_and_record_output` |
| 6 | xl-head / xl-input at position 1e8, no giant table | `xl_far_positions_need_no_table_up_to_them` (2 rows) |

List 7's unhelpful errors, each a row of a table-driven test (`MESSAGES` -> `test_messages`, `MORE_MESSAGES` ->
`test_more_messages`, `API_MESSAGES` -> `test_api_messages`):

| case of list 7 | rows |
|---|---|
| `--seed -1` fails after 20 s naming no flag | `MESSAGES['seed -1']` |
| `--seed 1e20` "Overflow when unpacking long long" | `MESSAGES['seed 1e20']`, `['seed 1e20 (the flag)']`, |
|   | `['seed 10^20 (the flag)']` |
| `--set betas=[0.9]` internal IndexError | `MORE_MESSAGES['set betas=[0.9]']` |
| `--set test_max_sents=-195` silently tests 805 | `MESSAGES['test_max_sents -195']` |
| `--set name=x` "got multiple values" | `MORE_MESSAGES['set name=x']` |
| `compare --encodings ,` runs all ten | `MESSAGES['compare --encodings ,']` |
| `--samples 0/-5/1e8` | `MESSAGES['samples 0']`, `['samples -5']`, `['samples 1e8']`, `['samples 1e8 (as typed)']` |
| `long_text bpe --steps 0` silently runs 1,500 | `MESSAGES['long_text bpe --steps 0']` |
| `finetune --eval-every 0` ZeroDivisionError | `MESSAGES['finetune --eval-every 0']` |
| `classify` with no budget names internal fields | `MESSAGES['classify without a budget']` |
| `claims` on a truncated ledger or record | `MORE_MESSAGES['claims truncated ledger']`, `['claims truncated record']` |
| an empty test set trains fully, then IndexError | `MORE_MESSAGES['empty test set']` |
| rope `base=-5` accepted (NaN rotations) | `MORE_MESSAGES['rope base=-5']`, `API_MESSAGES['RoPE(base=-5)']`, |
|   | `API_MESSAGES['RotaryCache(base=0)']` |
| `rotary_from_hf(None)`, `theta=-1`, `factor=-2` | `API_MESSAGES['rotary_from_hf(None)']`, `['rope_theta=-1']`, |
|   | `['dynamic factor=-2']`, `['linear factor=-2']` |
| learned `max_len=1e9`: a raw 128 GB allocator error | `MORE_MESSAGES['learned max_len=1e9']`, `API_MESSAGES[...]` |
| a hint naming the wrong flag (the clash in the cache) | `MORE_MESSAGES['run folder in the shared cache']` |

Build item 7, a kill at each write of the new writers:
`test_killed_output_write_leaves_old_or_new` (the store's `write_output`, with each writer's record),
`test_killed_experiments_compare_leaves_none_or_whole` and `test_killed_writer_leaves_old_or_new` (mlm pretrain, its
`--weights` replacing a record, finetune, long_text bpe, lengths and ngram, classify and claims, end to end)."""
import hashlib, json, os, shutil, subprocess, sys
from pathlib import Path
import pytest

PY = [sys.executable, '-m', 'posenc_nb.cli']
ROOT = Path(__file__).resolve().parents[1]
TINY = ['--set', 'data_options={"n": 2000}', '--set', 'test_max_sents=10', '--set', 'beam=1',
        '--set', 'eval_bleu_sents=0', '--set', 'log_every=5']


def _env(**kw):
    env = {k: v for k, v in os.environ.items() if k != 'POSENC_DEBUG'}
    env.update(OMP_NUM_THREADS='1', MKL_NUM_THREADS='1', HF_DATASETS_OFFLINE='1', PYTHONUNBUFFERED='1', **kw)
    return env


def run(argv, cwd=None, timeout=900, env=None):
    env = _env(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def cli(*args, **kw): return run(PY + list(args), **kw)


def ok(r):
    assert r.returncode == 0, f"rc={r.returncode}\nstdout:{r.stdout[-2000:]}\nstderr:{r.stderr[-3000:]}"
    return r


def bad(r, needle, rc=2):
    "Refused: exit `rc`, one line on stderr naming the problem, no traceback."
    err = r.stderr.strip()
    assert r.returncode == rc, f"rc={r.returncode}\nstdout:{r.stdout[-1000:]}\nstderr:{r.stderr[-3000:]}"
    assert 'Traceback' not in r.stderr, r.stderr
    last = err.splitlines()[-1] if err else ''
    assert needle in last, f"{needle!r} not in {last!r}"
    return last


class Halves:
    "A file whose writes are two steps with `step()` between them: a kill there cuts the data in half."
    def __init__(self, f, step): self.f, self.step = f, step
    def __enter__(self): return self
    def __exit__(self, *e): return self.f.__exit__(*e)
    def __getattr__(self, k): return getattr(self.f, k)
    def write(self, b):
        self.f.write(b[:len(b) // 2])
        self.f.flush()
        self.step()
        return self.f.write(b[len(b) // 2:])


def snapshot(folder) -> dict:
    "Every file under `folder` (relative name -> SHA-256), the lock file aside."
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob('*')) if p.is_file() and p.name != '.lock'}


@pytest.fixture(scope='module')
def work(tmp_path_factory): return tmp_path_factory.mktemp('store')


@pytest.fixture(scope='module')
def finished(work):
    "A finished tiny translation run (10 updates)."
    out = work / 'run'
    ok(cli('train', '--config', 'synthetic-tiny', '--out', out, '--max-steps', 10, '--set', 'ckpt_every=5', *TINY))
    assert (out / 'results.json').is_file()
    return out


def write_tiny_data(root: Path) -> dict:
    "A POSENC_DATA folder with tiny local copies of IMDb and CoLA (64 / 16 / 16 reviews or sentences)."
    import gzip, random
    rng, words = random.Random(0), 'good bad fine awful great poor nice dull film plot acting story'.split()
    text = lambda i: ' '.join(rng.choice(words) for _ in range(6 + i % 9))
    (root / 'imdb').mkdir(parents=True)
    (root / 'glue' / 'cola').mkdir(parents=True)
    for split, n in (('train', 64), ('validation', 16), ('test', 16)):
        with gzip.open(root / 'imdb' / f'{split}.jsonl.gz', 'wt') as f:
            f.write(''.join(json.dumps({'text': text(i), 'label': i % 2}) + '\n' for i in range(n)))
        (root / 'glue' / 'cola' / f'{split}.tsv').write_text(''.join(f'src\t{i % 2}\t*\t{text(i)}\n' for i in range(n)))
    return {'POSENC_DATA': str(root)}


@pytest.fixture(scope='module')
def tiny_data(work): return write_tiny_data(work / 'data')


# issue 50, list 1: `--fresh` deleted a finished run before these checks ran (data, streams, lengths, divergence)
FRESH = {
    'fresh_max_tokens_1': (['--set', 'max_tokens=1'], 'max_tokens'),
    'fresh_streams_nosuch': (['--set', 'streams=nosuch'], "'nosuch'"),
    'fresh_max_train_len_1': (['--set', 'max_train_len=1'], 'max_train_len'),
    'fresh_lr_1e30': (['--set', 'lr=1e30'], 'earlier run'),
}


@pytest.mark.parametrize('case', list(FRESH))
def test_fresh_keeps_finished_run(finished, tmp_path, case):
    extra, needle = FRESH[case]
    out = shutil.copytree(finished, tmp_path / 'run')
    before = snapshot(out)
    bad(cli('train', '--config', 'synthetic-tiny', '--out', out, '--max-steps', 10, '--set', 'ckpt_every=5',
            *TINY, '--fresh', *extra), needle)
    assert snapshot(out) == before and not (out / '.replaced').exists()


def test_fresh_replaces_run_once_it_finishes(finished, tmp_path):
    out = shutil.copytree(finished, tmp_path / 'run')
    ok(cli('train', '--config', 'synthetic-tiny', '--out', out, '--max-steps', 5, '--set', 'ckpt_every=5', *TINY,
           '--fresh', '--seed', 1))
    assert json.loads((out / 'results.json').read_text())['config']['seed'] == 1
    assert not (out / '.replaced').exists() and not (out / 'ckpt_0000010.pt').exists()


# issue 50, list 2: writers with no lock and no settings check
def mod(name, *args, **kw): return run([sys.executable, '-m', f'posenc_nb.{name}', *args], **kw)


def _mlm_settings(**kw):
    from dataclasses import asdict, replace
    from posenc_nb.mlm import MLM_CONFIGS
    return asdict(replace(MLM_CONFIGS['cpu-tiny'], encoding='rope', seed=0, **kw))


def test_mlm_pretrain_second_writer_refused(tmp_path):
    from posenc_nb.store import lock_output
    out = tmp_path / 'r.json'
    with lock_output(out):                         # another process is writing this record
        bad(mod('mlm', 'pretrain', '--steps', 2, '--out', out), 'in use by another')
    assert not out.exists()


def test_long_text_bpe_second_writer_refused(tmp_path):
    from posenc_nb.store import lock_output
    out = tmp_path / 'b.json'
    with lock_output(out):                         # another `long_text bpe` is writing this record
        bad(mod('long_text', 'bpe', '--steps', 2, '--out', out), 'in use by another')
    assert not out.exists()


def test_mlm_pretrain_other_settings_refused(tmp_path):
    from posenc_nb.store import write_output
    out, old = tmp_path / 'r.json', _mlm_settings(steps=3)
    write_output(out, {'experiment': 'mlm-pretrain', 'config': old}, old)
    before = snapshot(tmp_path)
    msg = bad(mod('mlm', 'pretrain', '--steps', 2, '--out', out), 'steps: 3 vs 2')
    assert 'pass another --out' in msg and snapshot(tmp_path) == before


def test_mlm_pretrain_same_settings_skipped(tmp_path):
    from posenc_nb.store import write_output
    out, same = tmp_path / 'r.json', _mlm_settings(steps=2)
    write_output(out, {'experiment': 'mlm-pretrain', 'config': same}, same)
    before = snapshot(tmp_path)
    assert 'done' in ok(mod('mlm', 'pretrain', '--steps', 2, '--out', out)).stdout
    assert snapshot(tmp_path) == before


def test_speed_out_through_the_store(tmp_path):
    "speed --out: a rerun of the same settings keeps the record, other settings are refused; the file is unchanged."
    args = ['--encodings', 'sinusoidal,rope', '--d-model', 16, '--n-heads', 2, '--n-layers', 1, '--d-ff', 32,
            '--batch', 2, '--length', 8, '--dec-steps', 2, '--reps', 1, '--train-steps', 1, '--no-memory',
            '--out', tmp_path / 's.json']
    ok(mod('speed', *args))
    before = snapshot(tmp_path)
    assert 'kept' in ok(mod('speed', *args)).stdout
    bad(mod('speed', *args, '--reps', 2), 'reps: 1 vs 2')
    assert snapshot(tmp_path) == before


def test_linear_lm_record_of_other_settings_refused(tmp_path):
    "linear_lm train over a record of its name made with other settings: refused naming them, the file unchanged."
    from dataclasses import asdict
    from posenc_nb.linear_lm import LM_CONFIGS
    rec = tmp_path / 'results' / 'roformer-linear' / 'cpu-tiny_linear-rope_seed0.json'
    rec.parent.mkdir(parents=True)
    rec.write_text(json.dumps({'experiment': 'linear-lm', 'config': {**asdict(LM_CONFIGS['cpu-tiny']), 'steps': 7}}))
    before = snapshot(tmp_path)
    bad(mod('linear_lm', 'train', cwd=tmp_path), 'steps: 7 vs 150')
    assert snapshot(tmp_path) == before


def test_mlm_finetune_scratch_vs_pretrained_refused(tmp_path):
    "A scratch record in --out and a --pretrained run asked for: another run's settings (init_run), refused."
    from posenc_nb.store import write_output
    out = tmp_path / 'f.json'
    old = {'task': 'sst2', 'init_run': None}
    write_output(out, {'experiment': 'finetune', 'init_run': None}, old)
    bad(mod('mlm', 'finetune', '--pretrained', '--steps', 2, '--out', out), 'init_run: None vs')


def test_long_text_bpe_other_settings_refused(tmp_path):
    from posenc_nb.store import write_output
    out = tmp_path / 'b.json'
    old = dict(encoding='rope', seed=0, plan='cpu', max_len=256, max_steps=1500, n_test=5000)
    write_output(out, {'experiment': 'finetune-bpe'}, old)
    bad(mod('long_text', 'bpe', '--steps', 7, '--out', out), 'max_steps: 1500 vs 7')


def test_long_text_lengths_other_settings_refused(tmp_path):
    out = tmp_path / 'lengths.json'
    out.write_text(json.dumps({'experiment': 'bpe-lengths', 'vocab_size': 8000, 'limits': [128, 256, 512]}))
    bad(mod('long_text', 'lengths', '--limits', '64', '--out', out), 'limits: [128, 256, 512] vs [64]')


def test_long_text_ngram_other_settings_refused(tmp_path):
    out = tmp_path / 'ngram.json'
    out.write_text(json.dumps({'experiment': 'ngram-reference', 'config': {'Cs': [0.5, 2.0], 'n_test': 5000,
                                                                         'subset_seed': 0}}))
    bad(mod('long_text', 'ngram', '--Cs', '1', '--out', out), 'Cs: [0.5, 2.0] vs [1.0]')


def test_experiments_compare_refuses_a_record_file(tmp_path):
    rec = tmp_path / 'ex' / 'rope-s0'
    rec.mkdir(parents=True)
    (rec / 'metrics.json').write_text(json.dumps({'encoding': 'rope', 'seed': 0, 'bleu': 1.0}))
    before = snapshot(tmp_path)
    bad(mod('experiments', 'compare', tmp_path / 'ex', '--out', rec / 'metrics.json'), 'is in the run record')
    assert snapshot(tmp_path) == before


def test_experiments_compare_other_settings_refused(tmp_path):
    from posenc_nb.store import write_output
    out = tmp_path / 'sig.json'
    for enc in ('rope', 'sinusoidal'): _record(tmp_path / 'ex', enc)    # a folder of run records to compare
    old = dict(experiment=str(tmp_path / 'ex'), baseline='sinusoidal', seeds=[0], pooled=False, samples=1000)
    write_output(out, {'experiment': old['experiment'], 'baseline': 'sinusoidal', 'comparisons': []}, old)
    before = snapshot(tmp_path)
    bad(mod('experiments', 'compare', tmp_path / 'ex', '--samples', 50, '--out', out), 'samples: 1000 vs 50')
    assert snapshot(tmp_path) == before


# issue 50, list 3: an example command replaced a committed record
def test_classify_default_out_is_not_results():
    import inspect
    from posenc_nb.classify import glue_run
    assert not str(inspect.signature(glue_run).parameters['out'].default).startswith('results')


def test_classify_example_keeps_committed_record(tmp_path, tiny_data):
    "The docstring's example, run from a checkout that holds the committed record: the record is untouched."
    committed = tmp_path / 'results' / 'glue' / 'cola' / 'sinusoidal_seed0.json'
    committed.parent.mkdir(parents=True)
    committed.write_text(json.dumps({'task': 'cola', 'encoding': 'sinusoidal', 'config': {'max_steps': 500}}))
    before = snapshot(tmp_path / 'results')
    r = ok(mod('classify', '--task', 'cola', '--encoding', 'sinusoidal', '--steps', 2, cwd=tmp_path, env=tiny_data))
    assert snapshot(tmp_path / 'results') == before and (tmp_path / 'runs' / 'glue' / 'cola').is_dir(), r.stdout
    bad(mod('classify', '--task', 'cola', '--encoding', 'sinusoidal', '--steps', 3, '--out', tmp_path / 'results' /
            'glue', cwd=tmp_path, env=tiny_data), 'max_steps: 500 vs 3')
    assert snapshot(tmp_path / 'results') == before


# issue 50, list 4: records never verified against their manifests
def _record(folder, enc='rope', seed=0):
    from posenc_nb.store import publish, fingerprint
    cfg = {'enc_pe': enc, 'seed': seed}
    files = {'config.json': json.dumps(cfg), 'metrics.json': json.dumps({'encoding': enc, 'seed': seed, 'bleu': 1.0}),
             'test.hyp': 'a b\nc d\n'}
    return publish(Path(folder) / f'{enc}-s{seed}', files, {'fingerprint': fingerprint(cfg)})


def test_hand_edited_config_is_not_finished(tmp_path):
    from posenc_nb.store import finished_record
    from posenc_nb.guard import RecordError
    rdir = _record(tmp_path)
    (rdir / 'config.json').write_text(json.dumps({'enc_pe': 'rope', 'seed': 0, 'lr': 1}))
    with pytest.raises(RecordError, match='config.json changed after its record was published'):
        finished_record(rdir, {'enc_pe': 'rope', 'seed': 0})


def test_replaced_hypotheses_named_by_readers(tmp_path):
    from posenc_nb.store import load_records, verify_record
    from posenc_nb.guard import RecordError
    rdir = _record(tmp_path / 'ex')
    _record(tmp_path / 'ex', 'sinusoidal')
    assert verify_record(rdir)['files']['test.hyp']
    (rdir / 'test.hyp').write_text('another model\nits output\n')      # posenc translate --output <record>/test.hyp
    with pytest.raises(RecordError, match='test.hyp changed'): load_records(tmp_path / 'ex')
    bad(mod('experiments', 'summarize', tmp_path / 'ex'), 'test.hyp changed')
    bad(mod('experiments', 'compare', tmp_path / 'ex', '--baseline', 'sinusoidal'), 'test.hyp changed')


# issue 50, list 5: mixed records
def test_linear_schedule_resume_with_other_budget_refused(tmp_path):
    out = tmp_path / 'lin'
    args = ['train', '--config', 'synthetic-tiny', '--out', out, '--set', 'lr_schedule=linear', '--set', 'ckpt_every=5',
            *TINY]
    ok(cli(*args, '--max-steps', 5))
    before = snapshot(out)
    bad(cli(*args, '--max-steps', 10), 'splice two schedules')
    assert snapshot(out) == before
    bad(cli(*args, '--max-steps', 5, '--max-minutes', 30),
        'max_minutes=None; resuming it with max_steps=5, max_minutes=30')
    assert snapshot(out) == before


def test_train_refuses_a_published_record(finished, tmp_path):
    out = shutil.copytree(finished, tmp_path / 'rec')
    (out / 'record.json').write_text('{}')                  # what `posenc compare` and the harness publish
    before = snapshot(out)
    bad(cli('train', '--config', 'synthetic-tiny', '--out', out, '--max-steps', 15, *TINY), 'is a published record')
    assert snapshot(out) == before


# issue 50, list 6 and list 4: translate's caps, and its output kept out of records
def test_translate_caps_and_record_output(finished, tmp_path):
    (tmp_path / 'in.txt').write_text('a b c\n')
    (tmp_path / 'long.txt').write_text('a b\n' + ' '.join(['w'] * 1001) + '\n')
    tr = lambda *a: cli('translate', '--ckpt', finished, *a)
    bad(tr('--input', tmp_path / 'in.txt', '--beam', 100000), '--beam 100000: use 1 (greedy) to 64')
    bad(tr('--input', tmp_path / 'long.txt'), 'line 2 has 1001 words')
    (tmp_path / 'huge.txt').write_text(' '.join(['w'] * 200_000) + '\n')           # ran past 300 s before the cap
    bad(tr('--input', tmp_path / 'huge.txt'), 'line 1 has 200000 words')
    rdir = _record(tmp_path / 'ex')
    before = snapshot(rdir)
    bad(tr('--input', tmp_path / 'in.txt', '--output', rdir / 'test.hyp'), 'is in the run record')
    assert snapshot(rdir) == before


# issue 50, list 7: unhelpful errors, each now one line naming the flag or field and the fix
MESSAGES = {   # case: (argv after `python -m`, needle in the one error line)
    'seed -1': (['posenc_nb.cli', 'train', '--config', 'synthetic-tiny', '--seed', '-1', '--out', '{w}/m1'], 'seed=-1'),
    'seed 1e20': (['posenc_nb.cli', 'train', '--config', 'synthetic-tiny', '--set', 'seed=100000000000000000000',
                   '--out', '{w}/m1'], 'seed must be'),
    'seed 1e20 (the flag)': (['posenc_nb.cli', 'train', '--config', 'synthetic-tiny', '--seed', '1e20', '--out',
                              '{w}/m1'], "--seed: invalid int value: '1e20'"),
    'seed 10^20 (the flag)': (['posenc_nb.cli', 'train', '--config', 'synthetic-tiny', '--seed',
                               '100000000000000000000', '--out', '{w}/m1'], 'seed must be'),
    'test_max_sents -195': (['posenc_nb.cli', 'train', '--config', 'synthetic-tiny', '--set', 'test_max_sents=-195',
                             '--out', '{w}/m1'], 'test_max_sents=-195'),
    'compare --encodings ,': (['posenc_nb.cli', 'compare', '--config', 'synthetic-tiny', '--encodings', ',',
                               '--out', '{w}/m2'], '--encodings is empty'),
    'samples 0': (['posenc_nb.experiments', 'compare', '{w}', '--samples', '0'], '--samples 0'),
    'samples -5': (['posenc_nb.experiments', 'compare', '{w}', '--samples', '-5'], '--samples -5'),
    'samples 1e8': (['posenc_nb.experiments', 'compare', '{w}', '--samples', '100000000'], '--samples 100000000'),
    'samples 1e8 (as typed)': (['posenc_nb.experiments', 'compare', '{w}', '--samples', '1e8'],
                               "--samples: invalid int value: '1e8'"),
    'long_text bpe --steps 0': (['posenc_nb.long_text', 'bpe', '--steps', '0', '--out', '{w}/b.json'], '--steps 0'),
    'finetune --eval-every 0': (['posenc_nb.mlm', 'finetune', '--eval-every', '0', '--out', '{w}/f.json'],
                                '--eval-every 0'),
    'classify without a budget': (['posenc_nb.classify', '--task', 'cola', '--out', '{w}/g'],
                                  '--steps N or --minutes M'),
}


@pytest.mark.parametrize('case', list(MESSAGES))
def test_messages(tmp_path, case):
    argv, needle = MESSAGES[case]
    msg = bad(run([sys.executable, '-m', *[a.format(w=tmp_path) for a in argv]]), needle)
    assert len(msg) < 400 and list(tmp_path.iterdir()) == [], msg


# issue 50, list 5: a compare rerun with another budget replaced results.json with an all-error one
def test_compare_rerun_with_other_budget_refused(tmp_path):
    out = tmp_path / 'cmp'
    args = ['compare', '--config', 'synthetic-tiny', '--encodings', 'rope', '--out', out, '--no-plot', *TINY]
    ok(cli(*args, '--max-steps', 3))
    before = snapshot(out)
    assert json.loads((out / 'results.json').read_text())['runs'][0]['steps'] == 3
    msg = bad(cli(*args, '--max-steps', 4), 'holds a record made with other settings')
    assert 'max_steps: 3 vs 4' in msg and 'pass another --out' in msg
    assert snapshot(out) == before
    bad(cli('train', '--config', 'synthetic-tiny', '--out', out / 'rope-s0', '--max-steps', 4, *TINY),
        'is a published record')                   # list 5: train resumed inside a compare record (max_steps resumable)
    assert snapshot(out) == before


# issue 50, list 6: xl-head and xl-input built a table up to the largest position (8.6 GB for 8 tokens at 1e8)
@pytest.mark.parametrize('enc', ['xl-head', 'xl-input'])
def test_xl_far_positions_need_no_table_up_to_them(enc):
    import torch
    from posenc_nb.baselines import sinusoidal_table
    from posenc_nb.core import Positions
    from posenc_nb.model import ModelConfig, Seq2Seq
    m = Seq2Seq(ModelConfig(src_vocab=20, tgt_vocab=20, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32, enc_pe=enc,
                            max_len=64))
    far = torch.arange(8)[None] + 10 ** 8
    out = m(torch.arange(2, 10)[None], Positions(far), torch.tensor([[1, 5]]), Positions(torch.tensor([[0, 1]])))
    assert torch.isfinite(out).all()
    assert max(b.numel() for b in m.buffers()) < 1 << 22                     # no 10^8-row table (was 1.6e9 floats)
    torch.testing.assert_close(m.enc_pe.codes.table[:64], sinusoidal_table(torch.arange(64), 16))
    torch.testing.assert_close(m.enc_pe.codes(far), sinusoidal_table(far, 16))
    near = torch.tensor([[0, 3, 1500]])                                     # a near position still grows the table
    torch.testing.assert_close(m.enc_pe.codes(near), sinusoidal_table(near, 16))
    assert m.enc_pe.codes.table.shape[0] == 2048


# issue 50, list 7 (the rest): each case one line naming the flag or field and the fix, refused before any work
def _held_cache_run(w):
    "A second `mlm pretrain` of the same run: its run folder in the shared cache is held by another process."
    from posenc_nb.store import lock_folder
    run_dir = w / 'cache' / 'roformer-runs' / 'mlm-cpu-tiny-steps2-rope-seed0'
    return {'POSENC_CACHE': str(w / 'cache')}, lock_folder(run_dir)


def _empty_test_split(w):
    "A local multi30k whose test files are empty."
    import gzip
    d = w / 'data' / 'multi30k'
    d.mkdir(parents=True)
    for split, n in (('train', 40), ('val', 5), ('test_2016_flickr', 0)):
        for lang in ('en', 'de'):
            with gzip.open(d / f'{split}.{lang}.gz', 'wt') as f: f.write(''.join(f'a b c {i}\n' for i in range(n)))
    return {'POSENC_DATA': str(w / 'data')}, None


def _results_copy(w, cut: str):
    "A copy of the committed results/ with the file `cut` truncated mid-JSON."
    shutil.copytree(ROOT / 'results', w / 'res')
    (w / 'res' / cut).write_text((ROOT / 'results' / cut).read_text()[:120])
    return {}, None


MLM_RECORD = 'roformer-mlm/cpu-small-lr0.001_learned-bert_seed0.json'
TRAIN = ['posenc_nb.cli', 'train', '--config', 'synthetic-tiny', '--out', '{w}/m1']
MORE_MESSAGES = {   # case: (argv after `python -m`, needle in the one error line, setup(w) -> (env, held lock) or None)
    'set betas=[0.9]': (TRAIN + ['--set', 'betas=[0.9]'], 'betas takes 2 values', None),
    'set name=x': (TRAIN + ['--set', 'name=x'], 'pass --config NAME', None),
    'rope base=-5': (TRAIN + ['--set', 'enc_pe=rope', '--set', 'pe_options={"base": -5}'], 'base=-5', None),
    'pe_options max_len': (TRAIN + ['--set', 'pe_options={"max_len": 5}'], "--set pe_options: max_len is the model's",
                           None),
    'learned max_len=1e9': (TRAIN + ['--set', 'enc_pe=learned', '--set', 'max_len=1000000000'],
                            '--set max_len=1000000000: a learned table', None),
    'empty test set': (TRAIN[:4] + ['--set', 'data=multi30k', '--set', 'tokenizer=bpe', '--out', '{w}/m1'],
                       'the test split is empty', _empty_test_split),
    'claims truncated ledger': (['posenc_nb.claims', '--root', '{w}/res', '--check'], 'claims.json is not valid JSON',
                                lambda w: _results_copy(w, 'claims.json')),
    'claims truncated record': (['posenc_nb.claims', '--root', '{w}/res', '--check'],
                                'seed0.json is not valid JSON', lambda w: _results_copy(w, MLM_RECORD)),
    'translate --len-penalty -1': (['posenc_nb.cli', 'translate', '--ckpt', '{w}/run', '--len-penalty', '-1'],
                                   '--len-penalty -1.0', None),
    'translate --len-penalty nan': (['posenc_nb.cli', 'translate', '--ckpt', '{w}/run', '--len-penalty', 'nan'],
                                    '--len-penalty nan', None),
    'experiments summarize a missing folder': (['posenc_nb.experiments', 'summarize', '{w}/nosuch'],
                                               'no run records at', None),
    'long_text lengths --limits abc': (['posenc_nb.long_text', 'lengths', '--limits', 'abc', '--out', '{w}/l.json'],
                                       '--limits abc: give comma-separated positive whole numbers', None),
    'long_text ngram --Cs -1': (['posenc_nb.long_text', 'ngram', '--Cs', '-1', '--out', '{w}/n.json'], '--Cs -1', None),
    'speed --length -1': (['posenc_nb.speed', '--length', '-1', '--out', '{w}/s.json'], '--length -1', None),
    'speed --d-model 15': (['posenc_nb.speed', '--d-model', '15', '--out', '{w}/s.json'], '--d-model 15', None),
    'run folder in the shared cache': (['posenc_nb.mlm', 'pretrain', '--steps', '2', '--out', '{w}/r.json'],
                                       'in the shared cache', _held_cache_run),
}


def _files(folder) -> dict: return {k: v for k, v in snapshot(folder).items() if not k.endswith('.lock')}


@pytest.mark.parametrize('case', list(MORE_MESSAGES))
def test_more_messages(tmp_path, case):
    import contextlib
    argv, needle, setup = MORE_MESSAGES[case]
    env, held = setup(tmp_path) if setup else ({}, None)
    env = {k: v.replace('{w}', str(tmp_path)) for k, v in env.items()}
    before = _files(tmp_path)
    with held or contextlib.nullcontext():
        r = run([sys.executable, '-m', *[a.replace('{w}', str(tmp_path)) for a in argv]], env=env)
    msg = bad(r, needle)
    # one line of fewer than 400 characters besides the paths it names (a test folder's path has no set length)
    assert len(msg.replace(str(tmp_path), '{w}')) < 400 and _files(tmp_path) == before, msg
    if setup is None: assert list(tmp_path.iterdir()) == [], msg             # refused at parse time: no folder made
    if case == 'run folder in the shared cache': assert '--out' not in msg, msg     # the fix is the cache, not --out


def _rope_cfg(**scaling): return {'head_dim': 8, 'max_position_embeddings': 64, 'rope_scaling': scaling}


API_MESSAGES = {   # case: (call, needle)
    'RoPE(base=-5)': (lambda: __import__('posenc_nb.rope').rope.RoPE(16, 2, base=-5), 'base=-5'),
    'RotaryCache(base=0)': (lambda: __import__('posenc_nb.rotary').rotary.RotaryCache(8, base=0), 'base=0'),
    'rotary_from_hf(None)': (lambda: __import__('posenc_nb.rope').rope.rotary_from_hf(None), 'got None'),
    'rope_theta=-1': (lambda: __import__('posenc_nb.rope').rope.rotary_from_hf({'head_dim': 8, 'rope_theta': -1}),
                      'rope_theta=-1'),
    'dynamic factor=-2': (lambda: __import__('posenc_nb.rope').rope.rotary_from_hf(
        _rope_cfg(rope_type='dynamic', factor=-2)), 'factor=-2'),
    'linear factor=-2': (lambda: __import__('posenc_nb.rope').rope.rotary_from_hf(
        _rope_cfg(rope_type='linear', factor=-2)), 'factor=-2'),
    'learned max_len=1e9': (lambda: __import__('posenc_nb.core').core.make_posenc('learned', 16, 2, max_len=10 ** 9),
                            "max_len <= 1048576"),
}


@pytest.mark.parametrize('case', list(API_MESSAGES))
def test_api_messages(case):
    call, needle = API_MESSAGES[case]
    with pytest.raises((ValueError, TypeError)) as e: call()
    assert needle in str(e.value) and '\n' not in str(e.value), str(e.value)


# issue 50, list 4: the ledger reads records through their manifests
def test_ledger_names_a_changed_record_file(tmp_path):
    from posenc_nb.referee import read_arm
    from posenc_nb.guard import RecordError
    _record(tmp_path / 'ex', seed=0)
    rdir = _record(tmp_path / 'ex', seed=1)
    arm = read_arm(tmp_path, 'ex/rope-s*/metrics.json', 'bleu')              # verified, read (left out: no commit)
    assert len(arm['records'] + arm['excluded']) == 2
    (rdir / 'metrics.json').write_text(json.dumps({'encoding': 'rope', 'seed': 1, 'bleu': 9.0}))   # a score edited
    with pytest.raises(RecordError, match=r'rope-s1/metrics.json changed after its record was published'):
        read_arm(tmp_path, 'ex/rope-s*/metrics.json', 'bleu')


# issue 50, build list 7: a kill at each write step of the new writers leaves the old output or the new, never a mix
def _kill_at_step(n: int):
    """In this (forked) process, SIGKILL at the n-th file-system step of a write: temp file made, each half of the
    data written, synced, permissions set, renamed."""
    import signal, tempfile
    count = [0]
    def step():
        count[0] += 1
        if count[0] == n: os.kill(os.getpid(), signal.SIGKILL)
    def wrap(f):
        def g(*a, **k):
            step()
            return f(*a, **k)
        return g
    fdopen = os.fdopen
    tempfile.mkstemp, os.fsync, os.chmod, os.replace = map(wrap, (tempfile.mkstemp, os.fsync, os.chmod, os.replace))
    os.fdopen = lambda *a, **k: Halves(fdopen(*a, **k), step)


def _killed_writing(n: int, fn) -> bool:
    "Run `fn` in a forked child killed at its n-th write step; True when it was killed (False: it finished)."
    import signal
    pid = os.fork()
    if pid == 0:
        try:
            _kill_at_step(n)
            fn()
        finally: os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


WRITERS = {   # the record each writer publishes (its shape and settings), old and new
    'mlm pretrain': lambda s: ({'experiment': 'mlm-pretrain', 'config': _mlm_settings(steps=s), 'final_valid_loss': s},
                               _mlm_settings(steps=s)),
    'mlm finetune': lambda s: ({'experiment': 'finetune', 'init_run': None, 'test_accuracy': s / 100},
                               {'task': 'sst2', 'steps': s, 'init_run': None}),
    'long_text bpe': lambda s: ({'experiment': 'finetune-bpe', 'test_accuracy': s / 100},
                                dict(encoding='rope', seed=0, plan='cpu', max_len=256, max_steps=s, n_test=5000)),
    'classify': lambda s: ({'task': 'cola', 'encoding': 'rope', 'mcc': s / 100}, {'task': 'cola', 'max_steps': s}),
}


@pytest.mark.parametrize('writer', list(WRITERS))
def test_killed_output_write_leaves_old_or_new(tmp_path, writer):
    from posenc_nb.store import write_output
    old, new = WRITERS[writer](50), WRITERS[writer](60)
    texts = [write_output(tmp_path / f'{k}.json', *rec).read_text() for k, rec in (('old', old), ('new', new))]
    out, n = tmp_path / 'rec.json', 1
    write_output(out, *old)
    while _killed_writing(n, lambda: write_output(out, *new)):
        assert out.read_text() in texts, n                          # the whole old record or the whole new one
        write_output(out, *old)
        n += 1
    assert n > 5 and out.read_text() == texts[1]                    # unkilled, the new one


def test_killed_experiments_compare_leaves_none_or_whole(tmp_path):
    "`experiments compare --out` end to end, killed at each step of its write: no record yet, or the whole one."
    from posenc_nb.experiments import main as exp_main
    from posenc_nb.store import publish
    for enc in ('rope', 'sinusoidal'):
        for s in (0, 1):
            cfg = {'enc_pe': enc, 'seed': s, 'data': 'synthetic', 'test_split': 'test', 'data_options': {'n': 12}}
            publish(tmp_path / 'ex' / f'{enc}-s{s}', {'config.json': json.dumps(cfg), 'test.hyp': ''.join(
                f'w{i} {enc} {s}\n' for i in range(12)), 'metrics.json': json.dumps({'encoding': enc, 'seed': s})})
    out, n = tmp_path / 'sig.json', 1
    argv = ['compare', str(tmp_path / 'ex'), '--samples', '20', '--seed', '0', '1', '--out', str(out)]
    assert exp_main(argv) == 0
    whole = json.loads(out.read_text())
    assert len(whole['comparisons']) == 2
    out.unlink()
    while _killed_writing(n, lambda: exp_main(argv)):          # (the bootstrap's numbers differ from run to run)
        assert not out.exists() or json.loads(out.read_text()).keys() == whole.keys(), n     # whole, or none
        out.unlink(missing_ok=True)
        n += 1
    assert n > 5 and json.loads(out.read_text()).keys() == whole.keys()


def _kill_at_output_step(n: int, out: Path):
    """In this (forked) process, SIGKILL at the n-th step of writing the file `out` (other files are written as
    usual): before its temp file is made, between the halves of its data, before the sync, before the permissions,
    before the rename onto `out`, after it."""
    import signal, tempfile
    count, fds, temps = [0], set(), set()
    def step():
        count[0] += 1
        if count[0] == n: os.kill(os.getpid(), signal.SIGKILL)
    mkstemp, fdopen, fsync, chmod, replace = tempfile.mkstemp, os.fdopen, os.fsync, os.chmod, os.replace
    def mkstemp_(*a, **k):
        mine = Path(k.get('dir') or '.').resolve() == out.parent.resolve() and k.get('prefix') == out.name + '.'
        if mine: step()
        fd, tmp = mkstemp(*a, **k)
        if mine:
            fds.add(fd)
            temps.add(str(tmp))
        return fd, tmp
    def fsync_(fd):
        if fd in fds:                           # once: the number is reused by the next file opened (the folder's sync)
            fds.discard(fd)
            step()
        return fsync(fd)
    def chmod_(p, *a, **k):
        if str(p) in temps: step()
        return chmod(p, *a, **k)
    def replace_(a, b, *r, **k):
        if str(a) not in temps: return replace(a, b, *r, **k)
        step()
        replace(a, b, *r, **k)
        step()
    tempfile.mkstemp, os.fsync, os.chmod, os.replace = mkstemp_, fsync_, chmod_, replace_
    os.fdopen = lambda fd, *a, **k: Halves(fdopen(fd, *a, **k), step) if fd in fds else fdopen(fd, *a, **k)


def _run_killed(n: int, out: Path, main, argv: list):
    "`main(argv)` in a forked child killed at its n-th step of writing `out`: 'killed', or the child's exit status."
    import signal
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            _kill_at_output_step(n, out)
            rc = main(argv)
        finally: os._exit(rc if isinstance(rc, int) else 1)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL: return 'killed'
    return os.WEXITSTATUS(status)


def _forget_checkpoint(w: Path):
    "The record kept, its pre-training checkpoint gone (a record made on another machine): `--weights` replaces it."
    for p in (w / 'cache' / 'roformer-runs').rglob('ckpt_*.pt'): p.unlink()


def _old_ledger(w: Path):
    (w / 'res').mkdir(parents=True, exist_ok=True)
    (w / 'res' / 'claims.json').write_text('[]\n')


KILLED_WRITERS = {   # writer: (module, argv, its output under the work folder, how the old state is made, or None)
    'mlm pretrain': ('mlm', ['pretrain', '--steps', '2', '--out', '{w}/r.json'], 'r.json', None),
    'mlm pretrain --weights (replaces)': ('mlm', ['pretrain', '--steps', '2', '--weights', '--out', '{w}/r.json'],
                                          'r.json', _forget_checkpoint),
    'mlm finetune': ('mlm', ['finetune', '--task', 'cola', '--steps', '2', '--eval-every', '1', '--n-valid', '8',
                             '--out', '{w}/f.json'], 'f.json', None),
    'long_text bpe': ('long_text', ['bpe', '--steps', '2', '--n-test', '8', '--out', '{w}/b.json'], 'b.json', None),
    'long_text lengths': ('long_text', ['lengths', '--limits', '8,16', '--out', '{w}/l.json'], 'l.json', None),
    'long_text ngram': ('long_text', ['ngram', '--Cs', '1', '--n-test', '8', '--out', '{w}/n.json'], 'n.json', None),
    'classify': ('classify', ['--task', 'cola', '--encoding', 'rope', '--steps', '2', '--out', '{w}/g'],
                 'g/cola/rope_seed0.json', None),
    'claims (replaces the ledger)': ('claims', ['--root', '{w}/res'], 'res/claims.json', _old_ledger),
}


@pytest.mark.parametrize('writer', list(KILLED_WRITERS))
def test_killed_writer_leaves_old_or_new(tmp_path, monkeypatch, request, writer):
    """A writer end to end (tiny local data), SIGKILLed at each step of writing its output: the output is the old
    one (none, for a first run), or a whole new record; unkilled, it writes the new one."""
    import contextlib, functools, importlib, torch
    for lazy in ('torch._dynamo', 'sklearn.feature_extraction.text', 'sklearn.linear_model'):
        with contextlib.suppress(ImportError): importlib.import_module(lazy)   # imported once here, not in each child
    request.addfinalizer(functools.partial(torch.set_num_threads, torch.get_num_threads()))
    torch.set_num_threads(1)                                  # the children fork: no OpenMP pool in this process
    name, argv, rel, make_old = KILLED_WRITERS[writer]
    w = tmp_path
    for k, v in {**write_tiny_data(w / 'data'), 'POSENC_CACHE': str(w / 'cache')}.items(): monkeypatch.setenv(k, v)
    module, argv, out = importlib.import_module(f'posenc_nb.{name}'), [a.replace('{w}', str(w)) for a in argv], w / rel
    if name == 'claims':                     # the ledger's content is not the point here: its write is (and it is fast)
        ledger = json.loads((ROOT / 'results' / 'claims.json').read_text())
        monkeypatch.setattr(module, 'build_ledger', lambda root: ledger)
        monkeypatch.setattr(module, 'check_rules', lambda ledger, root: [])
    else:                                    # a first run: the data's tokenizer and the run folders cached
        assert _run_killed(0, out, module.main, argv) == 0
    if make_old is None: out.unlink(missing_ok=True)
    else: make_old(w)
    old = out.read_text() if out.exists() else None
    seen, n = [], 1
    while (rc := _run_killed(n, out, module.main, argv)) == 'killed':
        seen.append(out.read_text() if out.exists() else None)
        if old is None: out.unlink(missing_ok=True)           # the old state again (a finished run stays cached)
        else: out.write_text(old)
        if make_old is not None: make_old(w)
        n += 1
    assert rc == 0 and n == 7, (rc, n)                          # six kill points; the seventh run finished
    new = out.read_text()
    assert new != old and seen[:5] == [old] * 5                 # a kill before the rename: the old output exactly
    rec, whole = json.loads(seen[5]), json.loads(new)           # after it: a whole new record
    if isinstance(whole, list): assert rec == whole
    else: assert rec.keys() == whole.keys() and rec['fingerprint'] == whole['fingerprint']

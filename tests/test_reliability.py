"""Issue #40: the 36 cases where a careless user (or a kill) lost, mixed or garbled results, one test each, and the
crash-consistency test of the run store: a small harness experiment SIGKILLed at every store write and at random times,
rerun each time, ends with the records of a clean run."""
import contextlib, dataclasses, hashlib, io, json, os, random, shutil, signal, subprocess, sys, time, warnings
from pathlib import Path
import pytest, torch

from posenc_nb import store
from posenc_nb.cli import run_cli
from posenc_nb import experiments as X

torch.set_num_threads(1)       # the crash test forks: no OpenMP pool in the parent

# a tiny translation run: 300 synthetic pairs, a 1+1-layer model, 2 updates, greedy test on 5 sentences
SETS = {'data_options': '{"n": 300}', 'test_max_sents': '5', 'beam': '1', 'eval_bleu_sents': '0', 'log_every': '1', 'eval_every': '2',
        'ckpt_every': '1', 'keep_ckpts': '2', 'd_model': '16', 'n_heads': '2', 'd_ff': '32', 'n_enc': '1', 'n_dec': '1'}
TINY = [a for k, v in SETS.items() for a in ('--set', f'{k}={v}')]
TOY = X.Experiment('rel-toy', 'synthetic-tiny', steps=2, encodings=('sinusoidal', 'alibi'),
                   overrides={k: json.loads(v) if k == 'data_options' else (int(v)) for k, v in SETS.items()})
X.EXPERIMENTS[TOY.name] = TOY


def train(*args):
    return run_cli('train', '--config', 'synthetic-tiny', '--max-steps', '2', *TINY, *map(str, args))


def exp(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err): rc = X.main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def module_main(mod, *args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err): rc = mod.main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def one_line_error(rc, err, needle):
    "Bad input: status 2 and one line that names the problem."
    assert rc == 2, (rc, err)
    lines = [l for l in err.strip().splitlines() if 'warning:' not in l]
    assert len(lines) == 1 and 'error: ' in lines[0] and 'Traceback' not in err, err
    assert needle in lines[0], (needle, lines[0])


def snapshot(folder) -> dict:
    "name -> sha256 of every file under `folder`."
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).rglob('*')) if p.is_file()}


@contextlib.contextmanager
def held_elsewhere(folder):
    "Another process holds `folder`'s lock within."
    Path(folder).mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([sys.executable, '-c', 'import sys, time; from posenc_nb.store import RunLock; held = RunLock(sys.argv[1]).acquire(); '
                          'print("held", flush=True); time.sleep(120)', str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == 'held'
        yield p.pid
    finally: p.kill(); p.wait()


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    "A finished tiny `posenc train` run folder (sinusoidal)."
    out = tmp_path_factory.mktemp('rel') / 'run'
    rc, _, err = train('--out', out)
    assert rc == 0, err
    return out


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    "The toy harness experiment run into a record folder: (out, work)."
    d = tmp_path_factory.mktemp('toy')
    rc, out, err = exp('run', TOY.name, '--out', d / 'res', '--work', d / 'work')
    assert rc == 0, out + err
    return d / 'res', d / 'work'


# ----------------------------------------------------------------------------------------------------------------------------------
# Data lost

BAD_SETS = [('lr=-1', 'lr=-1'), ('betas=[1.5,0.9]', 'betas=(1.5, 0.9)'), ('adam_eps=-1', 'adam_eps=-1'), ('weight_decay=-1', 'weight_decay=-1'),
            ('max_train_len=0', 'max_train_len=0'), ('label_smoothing=2', 'label_smoothing=2'), ('warmup=-1', 'warmup=-1'),
            ('pe_options={"base": -5}', 'base=-5'), ('pe_options={"base": NaN}', 'base=nan'), ('pe_options={"base": 0}', 'base=0')]
CASE = {'lr=-1': 1, 'betas=[1.5,0.9]': 31, 'adam_eps=-1': 32, 'weight_decay=-1': 33, 'max_train_len=0': 34, 'label_smoothing=2': 25,
        'warmup=-1': 26, 'pe_options={"base": -5}': 27, 'pe_options={"base": NaN}': 28, 'pe_options={"base": 0}': 29}


@pytest.mark.parametrize('setting,needle', BAD_SETS, ids=[f'case{CASE[s]:02d}-{s}' for s, _ in BAD_SETS])
def test_bad_setting_refused_before_fresh_deletes(run, setting, needle):
    "Cases 1, 25-29, 31-34: `train --fresh --set BAD`: one line naming the value, and the run folder untouched."
    before = snapshot(run)
    rc, _, err = train('--out', run, '--fresh', '--set', setting)
    one_line_error(rc, err, needle)
    assert snapshot(run) == before


def test_case02_second_harness_on_one_out_is_refused(tmp_path):
    with held_elsewhere(tmp_path / 'res') as pid:
        rc, out, err = exp('run', TOY.name, '--out', tmp_path / 'res', '--work', tmp_path / 'work')
    one_line_error(rc, err, f'is in use by another training (pid {pid})')
    assert not (tmp_path / 'work').exists() and [p.name for p in (tmp_path / 'res').iterdir()] == ['.lock']   # the holder's


def test_case03_failed_mlm_pretrain_keeps_its_record(tmp_path, monkeypatch):
    from posenc_nb import mlm
    monkeypatch.setenv('POSENC_CACHE', str(tmp_path / 'cache'))
    rec = tmp_path / 'rec.json'; rec.write_text('{"experiment": "mlm-pretrain"}')
    rc, out, err = module_main(mlm, 'pretrain', '--encoding', 'nope', '--out', rec, '--weights')
    assert rc == 2 and 'unknown encoding' in err, err
    assert rec.read_text() == '{"experiment": "mlm-pretrain"}'


def test_case04_users_tmp_and_hyp_files_survive(run):
    (run / 'notes.tmp').write_text('mine'); (run / 'mine.hyp').write_text('mine')
    assert train('--out', run)[0] == 0 and train('--out', run, '--fresh')[0] == 0
    assert (run / 'notes.tmp').read_text() == 'mine' and (run / 'mine.hyp').read_text() == 'mine'


def test_case05_translate_never_overwrites_its_input(tmp_path, run):
    src = tmp_path / 'src.txt'; src.write_text('the cat saw the dog\n')
    rc, _, err = run_cli('translate', '--ckpt', str(run), '--input', str(src), '--output', str(src))
    one_line_error(rc, err, 'is the --input file')
    assert src.read_text() == 'the cat saw the dog\n'


def test_case06_truncated_newest_checkpoint_never_evicts_new_ones(tmp_path, run):
    from posenc_nb.train import Checkpointer
    out = tmp_path / 'r'; out.mkdir()
    (out / 'ckpt_0000009.pt').write_bytes(store.checkpoint_paths(run)[-1].read_bytes()[:1000])   # truncated, sorts newest
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        rc, _, err = train('--out', out, '--set', 'keep_ckpts=1', '--set', 'n_avg=1')
    assert rc == 0, err
    assert [p.name for p in store.checkpoint_paths(out)] == ['ckpt_0000002.pt', 'ckpt_0000009.pt']     # the new one is kept
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        assert Checkpointer(out, 1, 1).latest()['step'] == 2                     # the corrupt one is skipped, with a warning
    assert any('ckpt_0000009.pt' in str(x.message) for x in w)


# ----------------------------------------------------------------------------------------------------------------------------------
# Data mixed

def _record_files(steps: int) -> dict:
    return {'config.json': json.dumps({'max_steps': steps}), 'metrics.json': json.dumps({'encoding': 'rope', 'seed': 0, 'steps': steps}),
            'test.hyp': f'{steps}\n', 'run.json': '{}', 'curve.jsonl': ''}


def _killed_at(n: int, fn) -> bool:
    "Run `fn` in a forked child that SIGKILLs itself at its n-th store write step; True when it was killed."
    pid = os.fork()
    if pid == 0:
        os.environ['POSENC_CRASH_AT'] = str(n)
        try: fn()
        finally: os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def test_case07_a_killed_record_write_leaves_the_old_record_or_the_new(tmp_path):
    rdir, n = tmp_path / 'C' / 'rope-s0', 1
    store.publish(rdir, _record_files(50))
    while _killed_at(n, lambda: store.publish(rdir, _record_files(60))):
        with store.lock_folder(rdir.parent): store.recover(rdir.parent)
        steps = {json.loads((rdir / 'config.json').read_text())['max_steps'], json.loads((rdir / 'metrics.json').read_text())['steps'],
                 int((rdir / 'test.hyp').read_text())}
        assert steps in ({50}, {60}), (n, steps)            # never a 60-step config beside 50-step metrics
        store.publish(rdir, _record_files(50)); n += 1
    assert n > 3 and sorted(p.name for p in rdir.parent.iterdir()) == ['rope-s0']


def test_case07_compare_over_a_record_of_other_settings_is_refused(tmp_path):
    c = tmp_path / 'C'
    assert run_cli('compare', '--config', 'synthetic-tiny', '--encodings', 'sinusoidal', '--out', str(c), '--max-steps', '2', *TINY, '--no-plot')[0] == 0
    before = snapshot(c / 'sinusoidal-s0')
    rc, out, err = run_cli('compare', '--config', 'synthetic-tiny', '--encodings', 'sinusoidal', '--out', str(c), '--max-steps', '3', *TINY, '--no-plot')
    assert rc == 2 and 'holds a record made with other settings (max_steps: 2 vs 3)' in err, err
    assert snapshot(c / 'sinusoidal-s0') == before


def test_case08_harness_never_reuses_records_of_other_settings(toy):
    out, work = toy
    before = snapshot(out)
    rc, log, err = exp('run', TOY.name, '--out', out, '--work', work, '--set', 'lr=1e-3')
    # one design per folder: the sweep is refused before any run, naming the first record of other settings
    one_line_error(rc, err, 'holds a record made with other settings (lr: 0.004 vs 0.001)')
    assert '[skip]' not in log and '[run' not in log, log
    assert snapshot(out) == before


def test_case09_second_mlm_pretrain_in_a_folder_is_refused(tmp_path, monkeypatch):
    from posenc_nb import mlm
    monkeypatch.setenv('POSENC_CACHE', str(tmp_path / 'cache'))
    with held_elsewhere(mlm.pretrain_dir('rope', 0, 'cpu-tiny')) as pid:
        rc, out, err = module_main(mlm, 'pretrain', '--encoding', 'rope', '--out', tmp_path / 'rec.json')
    one_line_error(rc, err, f'is in use by another training (pid {pid})')
    assert not (tmp_path / 'rec.json').exists()


def test_case10_second_compare_in_a_folder_is_refused(tmp_path):
    with held_elsewhere(tmp_path / 'C') as pid:
        rc, out, err = run_cli('compare', '--config', 'synthetic-tiny', '--encodings', 'sinusoidal', '--out', str(tmp_path / 'C'), *TINY)
    one_line_error(rc, err, f'is in use by another training (pid {pid})')
    assert [p.name for p in (tmp_path / 'C').iterdir()] == ['.lock']     # the holder's; no run marked failed, nothing written


def test_case11_a_sinusoidal_pretraining_never_loads_into_a_rope_classifier(tmp_path):
    from posenc_nb import mlm
    from posenc_nb.model import Classifier
    from posenc_nb.train import CKPT_FORMAT
    cfg = mlm.MLMConfig(encoding='sinusoidal', steps=1)
    torch.save({'format': CKPT_FORMAT, 'mlm_config': dataclasses.asdict(cfg), 'model': mlm.MLM(cfg.model_config()).state_dict(), 'step': 1},
               tmp_path / 'ckpt_0000001.pt')
    rope = Classifier(dataclasses.replace(cfg.model_config(), enc_pe='rope', n_classes=2))
    with pytest.raises(ValueError, match="holds a pre-training of 'sinusoidal', not of 'rope'"): mlm.load_encoder(rope, tmp_path)


def test_case12_warm_start_from_another_encoding_is_refused_before_anything(tmp_path, run):
    rc, _, err = train('--out', tmp_path / 'r', '--set', 'enc_pe=rope', '--set', f'init_from={run}')
    one_line_error(rc, err, "'rope' positions cannot start from a model trained with 'sinusoidal' positions")
    assert not (tmp_path / 'r').exists()


def test_case35_warm_start_from_another_width_is_refused_before_fresh_deletes(run):
    before = snapshot(run)
    rc, _, err = train('--out', run, '--fresh', '--set', 'd_model=32', '--set', f'init_from={store.checkpoint_paths(run)[-1]}')
    one_line_error(rc, err, 'cannot warm start')
    assert snapshot(run) == before


# ----------------------------------------------------------------------------------------------------------------------------------
# Hang, crash, budgets

@pytest.mark.parametrize('flag,value,needle', [('--minutes', 'nan', 'positive, finite number of minutes'), ('--steps', '0', 'at least 1'),
                                                ('--steps', '-1', 'at least 1'), ('--minutes', '-1', 'positive, finite number of minutes')],
                         ids=['case13-minutes-nan', 'case15-steps-0', 'case16-steps-minus-1', 'case17-minutes-minus-1'])
def test_harness_budget_checked_before_any_run(tmp_path, flag, value, needle):
    rc, out, err = exp('run', TOY.name, '--encodings', 'rope', flag, value, '--out', tmp_path / 'res', '--work', tmp_path / 'work')
    one_line_error(rc, err, f'{flag} {value}')
    assert needle in err and not (tmp_path / 'res').exists() and not (tmp_path / 'work').exists()


@pytest.mark.parametrize('enc', ['sinusoidal', 'rope'])
def test_case14_far_positions_get_their_codes_without_a_table_up_to_them(enc):
    from posenc_nb.core import Positions
    from posenc_nb.model import ModelConfig, Seq2Seq
    m = Seq2Seq(ModelConfig(src_vocab=20, tgt_vocab=20, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32, enc_pe=enc, max_len=64))
    far = torch.tensor([[0, 1, 10 ** 8]])
    out = m(torch.tensor([[5, 6, 7]]), Positions(far), torch.tensor([[1, 5]]), Positions(torch.tensor([[0, 1]])))
    assert torch.isfinite(out).all()
    biggest = max((t.numel() for mod in m.modules() for t in list(vars(mod).values()) + list(getattr(getattr(mod, 'cache', None), '_tables', {}).values())
                   if isinstance(t, torch.Tensor)), default=0)
    assert biggest < 1 << 22                                                 # no 10^8-row table
    if enc == 'sinusoidal':
        from posenc_nb.baselines import sinusoidal_table
        torch.testing.assert_close(m.enc_pe.codes(far), sinusoidal_table(far, 16))


def test_case30_floater_far_position_is_a_clear_limit_error():
    from posenc_nb.core import Positions
    from posenc_nb.model import ModelConfig, Seq2Seq
    m = Seq2Seq(ModelConfig(src_vocab=20, tgt_vocab=20, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32, enc_pe='floater', max_len=64))
    with pytest.raises(ValueError, match='position 100000 is beyond the 65536 positions') as e:
        m(torch.tensor([[5, 6, 7]]), Positions(torch.tensor([[0, 1, 100000]])), torch.tensor([[1, 5]]), Positions(torch.tensor([[0, 1]])))
    assert 'learning rate' not in str(e.value)


# ----------------------------------------------------------------------------------------------------------------------------------
# Unhelpful errors

def _copy_records(src, dst):
    for p in Path(src).rglob('*'):
        if p.is_file(): (dst / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True); (dst / p.relative_to(src)).write_bytes(p.read_bytes())
    return dst


def test_case18_corrupt_record_names_its_file(toy, tmp_path):
    d = _copy_records(toy[0], tmp_path / 'res')
    (d / 'alibi-s0' / 'metrics.json').write_text('{"bleu": 3')
    rc, out, err = exp('summarize', d)
    one_line_error(rc, err, f"{d / 'alibi-s0' / 'metrics.json'} is not valid JSON")


def test_case19_old_schema_record_names_its_file(toy, tmp_path):
    d = _copy_records(toy[0], tmp_path / 'res')
    (d / 'alibi-s0' / 'metrics.json').write_text('{"bleu": 3.0}')
    rc, out, err = exp('summarize', d)
    one_line_error(rc, err, f"{d / 'alibi-s0' / 'metrics.json'} is not a run record (it lacks encoding, seed)")


def test_case20_harness_never_counts_a_corrupt_record_as_finished(toy, tmp_path):
    d = _copy_records(toy[0], tmp_path / 'res')
    (d / 'alibi-s0' / 'metrics.json').write_text('{"bleu": 3')
    before = snapshot(d)
    rc, log, err = exp('run', TOY.name, '--out', d, '--work', toy[1])
    # the folder's design is read before any run: the corrupt record is named, nothing is skipped or trained
    one_line_error(rc, err, f"{d / 'alibi-s0' / 'metrics.json'} is not valid JSON")
    assert '[skip]' not in log and snapshot(d) == before, log


def test_case21_unwritable_out_is_refused_before_any_work(tmp_path):
    rc, out, err = exp('run', TOY.name, '--out', '/proc/posenc-rel', '--work', tmp_path / 'work')
    one_line_error(rc, err, '/proc/posenc-rel is not writable')
    assert not (tmp_path / 'work').exists()


def test_case22_stray_ckpt_final_is_not_a_checkpoint(tmp_path, run):
    (run / 'ckpt_final.pt').write_bytes(b'the user copied this here')
    assert train('--out', run)[0] == 0
    assert 'ckpt_final.pt' not in [p.name for p in store.checkpoint_paths(run)]
    rc, out, err = run_cli('translate', '--ckpt', str(run), '--beam', '1', '--input', str(_src(tmp_path)))
    assert rc == 0, err


def _src(tmp_path):
    (tmp_path / 'src.txt').write_text('the cat saw the dog\n'); return tmp_path / 'src.txt'


def test_case23_classify_steps_0_is_refused_before_any_work():
    from posenc_nb import classify
    rc, out, err = module_main(classify, '--steps', '0')
    one_line_error(rc, err, '--steps 0: give a whole number of updates, at least 1')


def test_case24_experiments_compare_in_an_ascii_locale(toy, tmp_path):
    d = _copy_records(toy[0], tmp_path / 'res')
    for r in ('sinusoidal-s0', 'alibi-s0'):
        hyp = d / r / 'test.hyp'; hyp.write_text(hyp.read_text(encoding='utf-8').replace('the', 'thé', 1), encoding='utf-8')
    env = {**os.environ, 'LC_ALL': 'C', 'LANG': 'C', 'PYTHONUTF8': '0', 'PYTHONCOERCECLOCALE': '0', 'PYTHONIOENCODING': 'utf-8', 'OMP_NUM_THREADS': '1'}
    r = subprocess.run([sys.executable, '-c', 'import locale, sys; from posenc_nb.experiments import main; '
                        'print(locale.getpreferredencoding(False), file=sys.stderr); sys.exit(main(sys.argv[1:]))',
                        'compare', str(d), '--baseline', 'sinusoidal', '--samples', '20'], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert 'alibi vs sinusoidal' in r.stdout


def test_case36_mlm_finetune_nan_lr_is_refused_before_any_work(tmp_path):
    from posenc_nb import mlm
    rc, out, err = module_main(mlm, 'finetune', '--lr', 'nan', '--out', tmp_path / 'ft.json')
    one_line_error(rc, err, 'lr=nan: lr must be a finite number > 0')
    assert not (tmp_path / 'ft.json').exists()


# ----------------------------------------------------------------------------------------------------------------------------------
# Crash consistency: kill a harness at every store write step and at random times; reruns end with a clean run's records

DETERMINISTIC = ('bleu', 'chrf', 'valid_loss', 'valid_nll', 'steps', 'step', 'encoding', 'seed', 'n_params', 'test_sents', 'tokens_seen', 'budget')


def _store_state(out) -> dict:
    "Per run: its deterministic metrics, config, test translations and curve (timings and provenance left out)."
    state = {}
    for m in store.load_records(out):
        d = Path(m['dir'])
        curve = [{k: v for k, v in json.loads(l).items() if k not in ('tok_s', 'wall')} for l in (d / 'curve.jsonl').read_text().splitlines()]
        state[d.name] = ({k: m.get(k) for k in DETERMINISTIC}, json.loads((d / 'config.json').read_text()), (d / 'test.hyp').read_text(), curve)
    return state


def test_crash_consistency(tmp_path):
    run = lambda out, work: X.run_experiment(TOY, out=out, work=work, log=lambda s: None)
    assert run(tmp_path / 'clean', tmp_path / 'cwork')['failed'] == []
    clean = _store_state(tmp_path / 'clean')
    out, work, kills = tmp_path / 'crash', tmp_path / 'work', 0
    for redo in (None, 'alibi-s0'):                 # the whole sweep, then its second record again: each record's every step
        if redo: shutil.rmtree(out / redo)
        n = 1
        while _killed_at(n, lambda: run(out, work)):                       # killed at the n-th store write step of this rerun
            kills += 1; n += 1
    rng = random.Random(0)
    for delay in [rng.uniform(0.05, 1.5) for _ in range(4)]:               # and at random times (training, checkpoints, logs)
        shutil.rmtree(out / rng.choice(sorted(clean)))                      # a run to redo, so that there is work to interrupt
        pid = os.fork()
        if pid == 0:
            try: run(out, work)
            finally: os._exit(0)
        time.sleep(delay); os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)
        assert run(out, work)['failed'] == []
    assert kills >= 12, kills
    assert _store_state(out) == clean
    leftovers = [p.name for p in out.rglob('*') if p.name.startswith('.') or p.name.endswith('.tmp')]
    assert leftovers == [], leftovers

"""Run folders never lose or mix data (issue 16): every case below was reproduced on main before its fix.
Runs are synthetic-tiny with a few updates on one thread; the CLI runs in-process (`run_cli`) except where a second
process is the point (SIGTERM)."""
import errno, fcntl, gzip, json, math, os, signal, subprocess, sys, time, warnings
from pathlib import Path
import pytest, torch

from posenc_nb.cli import run_cli

TINY = ['--set', 'data_options={"n": 2000}', '--set', 'test_max_sents=10', '--set', 'beam=1', '--set', 'eval_bleu_sents=0',
        '--set', 'log_every=5', '--threads', '1']
LOCK = '.lock'   # the run folder's lock file


def train(out, *args, steps=10):
    return run_cli('train', '--config', 'synthetic-tiny', '--out', str(out), '--max-steps', str(steps), *TINY, *args)


def ok(r):
    rc, out, err = r
    assert rc == 0, f"rc={rc}\nstdout:{out[-2000:]}\nstderr:{err[-3000:]}"
    return r


def bad(r, *needles):
    "Refused: exit 2, one error line that names the problem."
    rc, out, err = r
    lines = [l for l in err.strip().splitlines() if l.startswith('posenc: error: ')]
    assert rc == 2, f"rc={rc}\nstdout:{out[-1000:]}\nstderr:{err[-3000:]}"
    assert len(lines) == 1 and 'Traceback' not in err and 'internal error' not in err, err
    for n in needles: assert n in lines[0], f"{n!r} not in {lines[0]!r}"
    return lines[0]


def snapshot(d: Path) -> dict:
    "name -> (size, mtime) of every file in a run folder."
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.iterdir()) if p.name != LOCK}


def strict_json(line: str):
    "json.loads that refuses the non-standard NaN/Infinity tokens."
    return json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"bare {c} in JSON")))


@pytest.fixture
def run(tmp_path):
    "A finished 10-update run with checkpoints at 5 and 10."
    out = tmp_path / 'run'
    ok(train(out, '--set', 'ckpt_every=5'))
    return out


# 1. --fresh checks everything before it deletes anything
@pytest.mark.parametrize('sets, needle', [(['--set', 'pe_options={"bogus": 1}'], 'bogus'),
                                         (['--set', 'test_split=tset'], 'tset'),
                                         (['--set', 'n_heads=0'], 'n_heads')])
def test_fresh_checks_before_deleting(run, sets, needle):
    before = snapshot(run)
    bad(train(run, '--fresh', *sets), needle)
    assert snapshot(run) == before


# 2. a refused train leaves a live run's temp files alone (the live run holds the folder's lock)
def test_refused_train_keeps_live_runs_tmp(run):
    tmp = run / 'ckpt_0000015.pt.abc.tmp'; tmp.write_bytes(b'being written')
    with open(run / LOCK, 'a+') as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); f.seek(0); f.truncate(); f.write('4242\n'); f.flush()
        bad(train(run, '--set', 'lr=0.001'), str(run), '4242')
        assert tmp.read_bytes() == b'being written'


# 3. two trainings in one folder: the second is refused, naming the folder and the holder
def test_second_training_in_a_folder_is_refused(run):
    before = snapshot(run)
    with open(run / LOCK, 'a+') as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); f.seek(0); f.truncate(); f.write(f'{os.getpid()}\n'); f.flush()
        bad(train(run, steps=20), str(run), str(os.getpid()))
    assert snapshot(run) == before
    ok(train(run, steps=15))           # lock released: the same command resumes


def test_lock_is_released_and_reacquired(tmp_path):
    from posenc_nb.engine import RunLock, RunLocked
    with RunLock(tmp_path):
        with pytest.raises(RunLocked, match=str(os.getpid())): RunLock(tmp_path).acquire()
    with RunLock(tmp_path): pass


# 4. rerunning a finished run, or resuming into its final evaluation, keeps the validation numbers
def test_rerun_keeps_validation_results(run):
    first = json.loads((run / 'results.json').read_text())
    (run / 'results.json').unlink()                  # as if killed during the final test
    ok(train(run))
    again = json.loads((run / 'results.json').read_text())
    for k in ('valid_loss', 'valid_nll', 'valid_ppl'): assert again[k] == first[k], k


# 5. --fresh also removes averaged.pt and the old test hypotheses
def test_fresh_removes_averaged_and_hyp(tmp_path):
    out = tmp_path / 'avg'
    ok(train(out, '--set', 'ckpt_every=5', '--set', 'n_avg=2'))
    assert (out / 'averaged.pt').exists() and (out / 'test.hyp').exists()
    from posenc_nb.train import config_from_name, train as lib_train
    def stop(step): raise KeyboardInterrupt
    cfg = config_from_name('synthetic-tiny', data_options={'n': 2000}, max_steps=10, lr=1e-3)
    with pytest.raises(KeyboardInterrupt): lib_train(cfg, out, resume=False, progress=False, on_step=stop)
    assert not (out / 'averaged.pt').exists() and not (out / 'test.hyp').exists()
    assert not list(out.glob('ckpt_*.pt')) and not (out / 'results.json').exists()


# 6. a different config into a folder with results but no checkpoints is refused, not wiped
def test_results_without_checkpoints_are_not_wiped(run):
    for p in run.glob('ckpt_*.pt'): p.unlink()
    before = snapshot(run)
    bad(train(run, '--set', 'lr=0.001'), 'lr')
    assert snapshot(run) == before
    ok(train(run))     # the same config may start over there


# 7. a torn last line of metrics.jsonl (a kill while appending) is dropped with a note naming the file
def test_torn_metrics_line_is_tolerated(run):
    with open(run / 'metrics.jsonl', 'a') as f: f.write('{"step": 11, "lo')
    rc, out, err = ok(train(run, steps=15))
    assert 'metrics.jsonl' in err and 'torn' in err
    recs = [strict_json(l) for l in (run / 'metrics.jsonl').read_text().splitlines()]
    assert recs[-1]['step'] == 15


def test_corrupt_metrics_line_names_the_file(run):
    p = run / 'metrics.jsonl'; lines = p.read_text().splitlines()
    p.write_text('\n'.join(['{bad'] + lines) + '\n')
    bad(train(run, steps=15), str(p), 'line 1')


# late errors come early
def test_diverged_run_stops_early_and_keeps_finite_checkpoints(tmp_path):
    out = tmp_path / 'nan'
    msg = bad(train(out, '--set', 'lr=1e6', '--set', 'grad_clip=none', '--set', 'ckpt_every=2', steps=40), 'non-finite')
    assert 'lr' in msg
    for p in out.glob('ckpt_*.pt'):
        ck = torch.load(p, map_location='cpu', weights_only=False)
        assert all(torch.isfinite(v).all() for v in ck['model'].values() if v.is_floating_point()), p.name
    assert not (out / 'results.json').exists() and not (out / 'ckpt_0000040.pt').exists()     # stopped early
    if (out / 'metrics.jsonl').exists():
        for l in (out / 'metrics.jsonl').read_text().splitlines(): strict_json(l)


def test_nan_model_does_not_translate(run, tmp_path):
    from posenc_nb.train import load_checkpoint
    from posenc_nb.decode import translate
    model, tok, cfg = load_checkpoint(sorted(run.glob('ckpt_*.pt'))[-1])
    with torch.no_grad():
        for p in model.parameters(): p.fill_(float('nan'))
    for beam in (1, 2):
        with pytest.raises(ValueError, match='non-finite'): translate(model, tok, ['a b c', 'd e'], beam=beam)
    ck = torch.load(sorted(run.glob('ckpt_*.pt'))[-1], map_location='cpu', weights_only=False)
    ck['model'] = {k: v.fill_(float('nan')) if v.is_floating_point() else v for k, v in ck['model'].items()}
    torch.save(ck, tmp_path / 'nan.pt')
    (tmp_path / 'in.txt').write_text('a b c\n')
    bad(run_cli('translate', '--ckpt', str(tmp_path / 'nan.pt'), '--input', str(tmp_path / 'in.txt'), '--beam', '1'), 'non-finite')


def test_valid_ppl_of_nan_loss_is_nan():
    from posenc_nb.engine import _ppl
    assert math.isnan(_ppl(float('nan'))) and _ppl(1.0) == pytest.approx(math.e)


@pytest.mark.parametrize('device, needle', [('gpu', 'gpu'), ('cuda:0', 'cuda')])
def test_bad_device_is_refused_before_anything(tmp_path, device, needle):
    if device.startswith('cuda') and torch.cuda.is_available(): pytest.skip('this machine has CUDA')
    bad(train(tmp_path / 'd', '--device', device), needle)
    assert not (tmp_path / 'd').exists()


def test_unwritable_out_is_refused_before_training(tmp_path, monkeypatch):
    import posenc_nb.engine as E
    real = E.RunLock.acquire
    def denied(self): raise PermissionError(errno.EACCES, 'Permission denied', str(self.path))
    monkeypatch.setattr(E.RunLock, 'acquire', denied)
    bad(train(tmp_path / 'w'), 'not writable', str(tmp_path / 'w'))
    assert not list((tmp_path).rglob('ckpt_*.pt'))


def test_disk_full_is_clear_and_leaves_no_tmp(tmp_path, monkeypatch):
    import posenc_nb.utils as U
    def full(obj, f): f.write(b'x' * 10); raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(U.torch, 'save', full)
    out = tmp_path / 'full'
    bad(train(out), 'no space left', 'ckpt_')
    assert not list(out.glob('*.tmp'))


def test_atomic_writes_use_normal_modes(run):
    umask = os.umask(0); os.umask(umask)
    for p in run.iterdir():
        if p.name != LOCK: assert p.stat().st_mode & 0o777 == 0o666 & ~umask, p.name


def test_corrupt_data_file_is_named(tmp_path, monkeypatch):
    from posenc_nb.data import _read_lines, _read_jsonl, DataUnavailable
    f = tmp_path / 'train.de.gz'; f.write_bytes(b'not gzip at all')
    with pytest.raises(DataUnavailable, match=str(f)): _read_lines(f)
    g = tmp_path / 'rows.jsonl.gz'; g.write_bytes(gzip.compress(b'{"a": 1}\n{broken\n'))
    with pytest.raises(DataUnavailable, match=str(g)): _read_jsonl(g)


def test_corrupt_tokenizer_cache_is_rebuilt(tmp_path, monkeypatch):
    from posenc_nb.data import get_tokenizer
    monkeypatch.setenv('POSENC_CACHE', str(tmp_path))
    texts = ['a b c', 'b c d', 'c d e'] * 20
    tok = get_tokenizer('x', texts=texts, vocab_size=300)
    path, = (tmp_path / 'tokenizers').glob('*.json')
    path.write_text('{"truncated')
    with pytest.warns(UserWarning, match=str(path)): again = get_tokenizer('x', texts=texts, vocab_size=300)
    assert again.encode('a b c') == tok.encode('a b c')
    json.loads(path.read_text())


# library API: bad ids and positions are named
def test_model_input_errors():
    from posenc_nb.model import ModelConfig, Seq2Seq
    from posenc_nb.core import Positions
    m = Seq2Seq(ModelConfig(src_vocab=20, tgt_vocab=20, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32)).eval()
    src, tgt = torch.tensor([[3, 4, 5]]), torch.tensor([[1, 6]])
    m(src, None, tgt, None)
    with pytest.raises(ValueError, match='vocabulary'): m(torch.tensor([[3, 40, 5]]), None, tgt, None)
    with pytest.raises(ValueError, match='token id -1'): m(torch.tensor([[3, -1, 5]]), None, tgt, None)
    with pytest.raises(ValueError, match='integer'): m(src.float(), None, tgt, None)
    with pytest.raises(ValueError, match='vocabulary'): m(src, None, torch.tensor([[1, 99]]), None)
    with pytest.raises(ValueError, match='negative position'): m(src, Positions(torch.tensor([[0, -1, 2]])), tgt, None)


def test_rope_odd_head_dim_is_refused():
    from posenc_nb.core import make_posenc
    with pytest.raises(ValueError, match='odd'): make_posenc('rope', 66, 2)


def test_rope_has_no_length_limit():
    from posenc_nb.model import ModelConfig, Seq2Seq
    m = Seq2Seq(ModelConfig(src_vocab=20, tgt_vocab=20, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32, enc_pe='rope', max_len=8)).eval()
    src = torch.randint(3, 20, (1, 30))
    assert m(src, None, torch.tensor([[1, 5]]), None).shape == (1, 2, 20)


def test_translate_keeps_going_past_an_overlong_line(run, tmp_path):
    from posenc_nb.train import load_checkpoint
    from posenc_nb.decode import translate
    model, tok, cfg = load_checkpoint(sorted(run.glob('ckpt_*.pt'))[-1])
    model.enc_pe.max_len = model.dec_pe.max_len = 12; model.enc_pe.bounded = model.dec_pe.bounded = True
    long = ' '.join(['a'] * 40)
    with pytest.warns(UserWarning, match='line 2'): hyps = translate(model, tok, ['a b', long, 'b c'], beam=1)
    assert len(hyps) == 3


# smaller
def test_sigterm_is_an_interrupt(tmp_path):
    out = tmp_path / 'term'
    root = str(Path(__file__).resolve().parents[1])       # `python -m` puts the working folder first on the path: run from this checkout
    env = {**os.environ, 'PYTHONPATH': root, 'OMP_NUM_THREADS': '1'}
    cmd = [sys.executable, '-m', 'posenc_nb.cli', 'train', '--config', 'synthetic-tiny', '--out', str(out), '--max-steps', '100000',
           *TINY, '--set', 'ckpt_every=3']
    p = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not list(out.glob('ckpt_*.pt')) and p.poll() is None and time.time() < deadline: time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert 'resume' in err and 'Traceback' not in err
    assert list(out.glob('ckpt_*.pt')) and not (out / LOCK).exists()


def test_max_steps_below_checkpoint_is_refused(run):
    before = snapshot(run)
    bad(train(run, steps=5), 'max-steps', '10')
    assert snapshot(run) == before


def test_train_says_where_and_whether_resuming(run, capsys):
    from posenc_nb.train import config_from_name, train as lib_train
    cfg = config_from_name('synthetic-tiny', data_options={'n': 2000}, max_steps=12, test_max_sents=10, beam=1, eval_bleu_sents=0, log_every=5)
    lib_train(cfg, run, progress=True)
    err = capsys.readouterr().err
    assert str(run) in err and 'resuming from update 10' in err


def test_meta_device_build_leaves_caches_usable():
    "A model built on the meta device (shapes without memory) must leave module-level caches without meta tensors."
    code = """
import torch
from posenc_nb.core import list_posencs
from posenc_nb.model import ModelConfig, Seq2Seq
names = [n for n in list_posencs()]
cfg = lambda n: ModelConfig(30, 30, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32, enc_pe=n, dec_pe='sinusoidal' if n.startswith('xl') else None)
for n in names:
    with torch.device('meta'): Seq2Seq(cfg(n))
for n in names:
    m = Seq2Seq(cfg(n)).eval()
    out = m(torch.randint(1, 30, (2, 5)), None, torch.randint(1, 30, (2, 4)), None)
    assert torch.isfinite(out).all(), n
print(len(names))
"""
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)   # a fresh process: empty caches
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.split()[-1]) >= 12

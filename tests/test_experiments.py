"End-to-end checks of the experiment CLI (`python -m posenc_nb.experiments`) in a subprocess: files, provenance, resume, errors."
import json, os, subprocess, sys
from pathlib import Path

TINY = ['--steps', '4', '--set', 'd_model=16', 'd_ff=32', 'n_enc=1', 'n_dec=1', 'n_heads=2', 'log_every=2', 'eval_every=2',
        'ckpt_every=2', 'eval_bleu_sents=0', 'beam=1', 'test_max_sents=20']

def _cli(*args, cwd):
    env = dict(os.environ, PYTHONWARNINGS='ignore')
    return subprocess.run([sys.executable, '-m', 'posenc_nb.experiments', *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)

def test_run_resume_and_summarize(tmp_path):
    out, work = tmp_path / 'res', tmp_path / 'work'
    r = _cli('run', 'extrapolation', '--encodings', 'sinusoidal', 'alibi', '--threads', '1', '--out', str(out), '--work', str(work), *TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for enc in ('sinusoidal', 'alibi'):
        d = out / f'{enc}-s0'
        m = json.loads((d / 'metrics.json').read_text())
        assert m['steps'] == 4 and m['encoding'] == enc and m['budget'] == {'minutes': None, 'steps': 4, 'kind': 'updates'}
        assert set(m['length_bins']) <= {'1-12', '13-20', '21-25', '26-30', '31-40'} and m['length_bins']
        run = json.loads((d / 'run.json').read_text())
        assert run['command'].startswith('python -m posenc_nb.experiments run extrapolation') and '--steps 4' in run['command']
        assert run['seed'] == 0 and run['torch_version'] and run['hardware']
        assert json.loads((d / 'config.json').read_text())['d_model'] == 16
        assert len((d / 'test.hyp').read_text().splitlines()) == 20
    assert not list(work.rglob('*.pt'))                       # checkpoints removed after each finished run
    r2 = _cli('run', 'extrapolation', '--encodings', 'sinusoidal', 'alibi', '--out', str(out), '--work', str(work), *TINY, cwd=tmp_path)
    assert r2.returncode == 0 and r2.stdout.count('[skip]') == 2, r2.stdout
    s = _cli('summarize', str(out), cwd=tmp_path)
    assert s.returncode == 0 and '| sinusoidal | 1 |' in s.stdout and '| alibi | 1 |' in s.stdout, s.stdout + s.stderr

def test_errors(tmp_path):
    r = _cli('run', 'extrapolation', '--encodings', 'nope', '--out', str(tmp_path / 'r'), cwd=tmp_path)
    assert r.returncode != 0 and 'unknown encoding' in r.stderr
    r = _cli('run', 'wmt14-base', cwd=tmp_path)
    assert r.returncode != 0 and '--full' in r.stderr
    r = _cli('list', cwd=tmp_path)
    assert r.returncode == 0 and 'multi30k' in r.stdout and 'never in CI' in r.stdout

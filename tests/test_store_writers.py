"""Issue 50: every writer through the run store. `--fresh` checks and builds the whole run before it replaces a
finished one, and keeps it when the new run fails; resumes that would splice two runs are refused; the writers of
the experiment modules lock their outputs, fingerprint their settings and publish atomically; records are verified
against their manifests on read; one table of bad inputs, each refused with one line naming the flag."""
import hashlib, json, os, shutil, subprocess, sys
from pathlib import Path
import pytest

PY = [sys.executable, '-m', 'posenc_nb.cli']
TINY = ['--set', 'data_options={"n": 2000}', '--set', 'test_max_sents=10', '--set', 'beam=1',
        '--set', 'eval_bleu_sents=0', '--set', 'log_every=5']


def _env(**kw):
    env = {k: v for k, v in os.environ.items() if k != 'POSENC_DEBUG'}
    env.update(OMP_NUM_THREADS='1', MKL_NUM_THREADS='1', HF_DATASETS_OFFLINE='1', PYTHONUNBUFFERED='1', **kw)
    return env


def run(argv, cwd=None, timeout=300):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=_env(), cwd=cwd, timeout=timeout)


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

"""`python -m posenc_nb.length`: bad input refused in one line before any work, and the run store's skip/refuse
behaviour for the lab's records (same settings finished: skipped; other settings: refused in one line)."""
import os, subprocess, sys
from dataclasses import replace
import pytest, torch
from posenc_nb.length import LENGTH_CONFIGS, train_arm
from posenc_nb.store import RecordConflict

PY = [sys.executable, '-m', 'posenc_nb.length']


def _run(*args, cwd):
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1'}
    env.pop('POSENC_DEBUG', None)
    return subprocess.run(PY + [str(a) for a in args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.parametrize('args, says', [
    (['run', '--encodings', 'rope,xl-input'], 'unknown arm xl-input'),
    (['run', '--encodings', ''], 'unknown arm'),
    (['run', '--seeds', '0,x'], '--seeds'),
    (['run', '--seeds', '-1'], '--seeds'),
    (['run', '--steps', '0'], '--steps 0'),
    (['run', '--config', 'tpu'], '--config'),
    (['run', '--threads', '0'], '--threads 0'),
    (['extend', '--seeds', '5'], 'no trained rope checkpoint'),
])
def test_bad_input_is_one_line_before_any_work(tmp_path, args, says):
    r = _run(*args, '--out', tmp_path / 'out', '--runs', tmp_path / 'runs', cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and 'Traceback' not in r.stderr, r.stderr
    assert not (tmp_path / 'out').exists() and not (tmp_path / 'runs').exists()


def _text():
    g = torch.Generator().manual_seed(0)
    voc = 'abcdefgh ,.'
    t = ''.join(voc[i] for i in torch.randint(0, len(voc), (6000,), generator=g))
    return t[:5000], t[5000:], voc


def test_store_skips_finished_and_refuses_other_settings(tmp_path):
    torch.set_num_threads(1)
    cfg, text = replace(LENGTH_CONFIGS['smoke'], encoding='alibi', eval_chars=300), _text()
    first = train_arm(cfg, tmp_path / 'out', tmp_path / 'runs', text=text)
    path = tmp_path / 'out' / 'alibi_seed0.json'
    assert path.is_file() and (tmp_path / 'runs' / 'alibi_seed0' / 'model.pt').is_file()
    before = path.read_bytes()
    again = train_arm(cfg, tmp_path / 'out', tmp_path / 'runs', text=text)
    assert again['started_utc'] == first['started_utc'] and again['fingerprint'] == first['fingerprint']
    assert path.read_bytes() == before
    with pytest.raises(RecordConflict) as e:
        train_arm(replace(cfg, steps=3), tmp_path / 'out', tmp_path / 'runs', text=text)
    assert 'steps: 2 vs 3' in str(e.value) and '\n' not in str(e.value)
    assert path.read_bytes() == before
    assert [p.name for p in (tmp_path / 'out').iterdir()] == ['alibi_seed0.json']     # no temporary file left


def test_extension_records_state_the_settings_the_suite_registers(tmp_path):
    "An `extension_finetunes` record reads back (referee.record_settings) as `finetune_settings` says: the ledger's check."
    from dataclasses import replace
    from posenc_nb.length import LENGTH_CONFIGS, train_arm
    from posenc_nb.length_extend import extension_finetunes, finetune_settings
    from posenc_nb.referee import record_settings, _differing, _strip
    sm = replace(LENGTH_CONFIGS['smoke'], encoding='rope', seed=5)
    g = __import__('torch').Generator().manual_seed(0)
    voc = 'abcdefgh ,.'
    t = ''.join(voc[i] for i in __import__('torch').randint(0, len(voc), (6000,), generator=g))
    text = (t[:5000], t[5000:], voc)
    train_arm(sm, tmp_path / 'out', tmp_path / 'runs', text=text)
    extension_finetunes(5, ft_steps=(2,), out=tmp_path / 'ext', runs=tmp_path / 'runs', text=text, log=lambda m: None)
    for name, method, n in (('default-x4', 'default', 0), ('linear-x4-ft2', 'linear', 2), ('yarn-x4-ft2', 'yarn', 2)):
        got = record_settings(tmp_path / 'ext' / f'{name}_seed5.json')
        assert _differing(_strip(finetune_settings(sm, method, n)), got) == []
        assert _differing(_strip(finetune_settings(sm, method, n + 1)), got) == ['ft_steps']

"""`python -m posenc_nb.length`: bad input refused in one line before any work, the run store's skip/refuse
behaviour for the lab's records (same settings finished: skipped; other settings: refused in one line), every
registered causal encoding as an arm by name, the recorded command rerunning its record, and the committed records
still reading as finished for their settings."""
import json, os, shlex, subprocess, sys
from dataclasses import asdict, replace
from pathlib import Path
import pytest, torch
import posenc_nb.length as length
from posenc_nb.causal_lm import WindowTask, causal_encodings
from posenc_nb.length import ARMS, LENGTH_CONFIGS, LengthConfig, main, train_arm
from posenc_nb.store import RecordConflict, fingerprint
from posenc_nb.utils import state_hash

PY = [sys.executable, '-m', 'posenc_nb.length']


def _run(*args, cwd):
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1'}
    env.pop('POSENC_DEBUG', None)
    return subprocess.run(PY + [str(a) for a in args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.parametrize('args, says', [
    (['run', '--encodings', 'rope,nope'], "unknown encoding 'nope'"),
    (['run', '--encodings', 'rope,xl-input'], 'reads position streams'),
    (['run', '--encodings', 'fire:width=0'], "'fire' needs width"),
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


@pytest.fixture
def small_lab(monkeypatch):
    "The lab on a generated text, without the memory probe's fresh process: the command line, tiny and fast."
    monkeypatch.setattr(length, 'load_text', lambda name: _text())
    monkeypatch.setattr(length, 'peak_memory_mb', lambda ckpt, L, device: 0.0)
    torch.set_num_threads(1)


@pytest.mark.parametrize('name', causal_encodings())
def test_every_causal_encoding_is_an_arm(name, tmp_path, small_lab):
    out, runs = tmp_path / 'out', tmp_path / 'runs'
    argv = ['run', '--encodings', name, '--seeds', '0', '--steps', '2', '--config', 'smoke', '--out', out,
            '--runs', runs]
    assert main([str(a) for a in argv]) == 0
    rec = json.loads((out / f'{name}_seed0.json').read_text())
    assert rec['encoding'] == name and rec['steps'] == 2 and rec['eval']['16']['loss'] > 0
    for L in ('32', '64'):                                # the sliding-window loss where the arm is defined
        assert (rec['eval'][L]['loss'] is None) == ('sliding' not in rec['eval'][L]), (L, rec['eval'][L])
        assert (rec['eval'][L]['loss'] is None) == ('tail_cut' not in rec['eval'][L]), (L, rec['eval'][L])
        if rec['eval'][L]['loss'] is not None: assert length.context_gain(rec['eval'][L]) is not None
    assert 'tail_cut' not in rec['eval']['16']                  # the context probe starts past L_train
    assert rec['command'].startswith('python -m posenc_nb.length run --encodings ')


def test_recorded_command_reruns_its_record(tmp_path, small_lab):
    "An arm with options: its record's command, run again, finds the record finished (same file, untouched)."
    out, runs = tmp_path / 'out', tmp_path / 'runs'
    argv = ['run', '--encodings', 'rope:scaling=xpos,kerple_power', '--seeds', '1', '--steps', '2', '--config', 'smoke',
            '--out', str(out), '--runs', str(runs)]
    assert main(argv) == 0
    path = out / 'rope+scaling=xpos_seed1.json'
    rec, before = json.loads(path.read_text()), path.read_bytes()
    assert rec['config']['encoding'] == 'rope:scaling=xpos'
    assert (runs / 'rope+scaling=xpos_seed1' / 'model.pt').is_file()
    cmd = shlex.split(rec['command'])
    assert cmd[:3] == ['python', '-m', 'posenc_nb.length'] and cmd[3:] == argv
    assert main(cmd[3:]) == 0 and path.read_bytes() == before


class _Near(torch.nn.Module):
    "A model that cannot see far: its logits at a position read that position's character only."
    def __init__(self, vocab):
        super().__init__()
        self.table = torch.nn.Embedding(vocab, vocab)
    def forward(self, x): return self.table(x)


class _Far(_Near):
    "A model that reads its whole window: the logits of the running mean of every embedding so far."
    def forward(self, x): return self.table(x).cumsum(1) / torch.arange(1, x.shape[1] + 1)[:, None]


def test_context_probe_finds_no_gain_where_the_model_cannot_see_far():
    "The context probe: zero gain for a model blind past its own position, a gain for one that averages its window."
    torch.manual_seed(0)
    ids = torch.randint(0, 11, (2000,), generator=torch.Generator().manual_seed(1))
    near, far = _Near(11), _Far(11)
    for L in (64, 256):
        g_near = length.context_gain(length.tail_losses(near, ids, L, 32, *length.window_losses(near, ids, L)))
        g_far = length.context_gain(length.tail_losses(far, ids, L, 32, *length.window_losses(far, ids, L)))
        assert abs(g_near) < 1e-5 and abs(g_far) > 1e-3, (L, g_near, g_far)
    ev = length.evaluate_lengths(near, ids, replace(LENGTH_CONFIGS['smoke'], eval_chars=None))['eval']
    assert 'tail_cut' not in ev['16'] and all(abs(length.context_gain(ev[L])) < 1e-5 for L in ('32', '64'))
    assert length.context_gain({'loss': 2.0, 'loss_beyond': 2.1, 'sliding': 2.0}) is None   # a record from before it
    with pytest.raises(ValueError, match='needs 2 <= L_train < L'):
        length.tail_losses(near, ids, 32, 32, *length.window_losses(near, ids, 32))


@pytest.mark.parametrize('folder', ['length', 'length-1600'])
def test_committed_records_still_read_as_finished(folder):
    "The lab's settings of each committed record (a `LengthConfig` of its config) still have the record's fingerprint."
    paths = sorted((Path(__file__).parents[1] / 'results' / folder).glob('*_seed*.json'))
    assert paths and {p.name.split('_seed')[0] for p in paths} <= set(ARMS)
    for p in paths:
        rec = json.loads(p.read_text())
        cfg = LengthConfig(**{**rec['config'], 'eval_factors': tuple(rec['config']['eval_factors'])})
        assert fingerprint(asdict(cfg)) == rec['fingerprint'], p.name
        assert length.finished_output(p, asdict(cfg)) is not None


def test_kill_during_a_run_resumes_to_the_same_record(tmp_path, monkeypatch):
    "Killed after its checkpoint at update 4 of 6, a run started again resumes there and publishes the same record."
    torch.set_num_threads(1)
    monkeypatch.setattr(length, 'peak_memory_mb', lambda ckpt, L, device: 0.0)
    monkeypatch.setattr(length, 'CKPT_EVERY', 2)
    cfg, text = replace(LENGTH_CONFIGS['smoke'], encoding='fire', steps=6, eval_chars=300), _text()
    whole = train_arm(cfg, tmp_path / 'a', tmp_path / 'runs_a', text=text)
    real_next = WindowTask.__next__
    def killed_at_update_6(task):
        if task.pos == 5: raise KeyboardInterrupt
        return real_next(task)
    monkeypatch.setattr(WindowTask, '__next__', killed_at_update_6)
    with pytest.raises(KeyboardInterrupt): train_arm(cfg, tmp_path / 'b', tmp_path / 'runs_b', text=text)
    assert not (tmp_path / 'b' / 'fire_seed0.json').exists()
    assert [p.name for p in (tmp_path / 'runs_b' / 'fire_seed0' / 'ckpt').iterdir()] == ['ckpt_0000004.pt']
    drawn = []
    def counted(task):
        drawn.append(task.pos)
        return real_next(task)
    monkeypatch.setattr(WindowTask, '__next__', counted)
    resumed = train_arm(cfg, tmp_path / 'b', tmp_path / 'runs_b', text=text)
    assert drawn == [4, 5]                                           # only updates 5 and 6 ran again
    for key in ('train_curve', 'eval', 'loss_by_position_64', 'init_hash', 'pe_init_hash', 'data_order_hash'):
        assert resumed[key] == whole[key], key
    weights = [torch.load(tmp_path / r / 'fire_seed0' / 'model.pt', weights_only=False)['state']
               for r in ('runs_a', 'runs_b')]
    assert state_hash(weights[0]) == state_hash(weights[1])


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

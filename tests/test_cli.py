"""`posenc` end to end, as a user runs it: separate processes (`python -m posenc_nb.cli` and the console script),
real files, stdin/stdout, exit codes, one-line errors, and interruption while checkpoints are written."""
import hashlib, json, os, signal, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import pytest, torch

PY = [sys.executable, '-m', 'posenc_nb.cli']
# tiny budget: 2000 synthetic training pairs, greedy final test on 10 sentences
TINY = ['--set', 'data_options={"n": 2000}', '--set', 'test_max_sents=10', '--set', 'beam=1', '--set', 'eval_bleu_sents=0',
        '--set', 'log_every=5']


def _env(**kw):
    env = {k: v for k, v in os.environ.items() if k not in ('POSENC_DEBUG',)}
    env.update(OMP_NUM_THREADS='1', MKL_NUM_THREADS='1', HF_DATASETS_OFFLINE='1', PYTHONUNBUFFERED='1')
    env.update({k: v for k, v in kw.items() if v is not None})
    for k, v in kw.items():
        if v is None: env.pop(k, None)
    return env


def cli(*args, input=None, env=None, cwd=None, timeout=300):
    return subprocess.run(PY + [str(a) for a in args], input=input, capture_output=True, text=True, env=env or _env(),
                          cwd=cwd, timeout=timeout)


def assert_ok(r):
    assert r.returncode == 0, f"rc={r.returncode}\nstdout:{r.stdout[-2000:]}\nstderr:{r.stderr[-3000:]}"
    assert 'Traceback' not in r.stderr, r.stderr


def assert_bad(r, needle):
    "Bad input: exit 2, exactly one line on stderr that names the problem, no traceback."
    err = r.stderr.strip()
    assert r.returncode == 2, f"rc={r.returncode}\nstdout:{r.stdout[-1000:]}\nstderr:{r.stderr[-3000:]}"
    assert 'Traceback' not in r.stderr, r.stderr
    assert len(err.splitlines()) == 1 and err.startswith('posenc: error: '), err
    assert needle in err, f"{needle!r} not in {err!r}"


@pytest.fixture(scope='module')
def work(tmp_path_factory):
    return tmp_path_factory.mktemp('cli')


@pytest.fixture(scope='module')
def run_dir(work):
    "A finished tiny run (20 updates, checkpoints every 10)."
    out = work / 'run'
    r = cli('train', '--config', 'synthetic-tiny', '--out', out, '--max-steps', 20, '--set', 'ckpt_every=10', *TINY, '--json')
    assert_ok(r)
    res = json.loads(r.stdout)
    assert res['step'] == 20 and res['run_dir'] == str(out)
    saved = json.loads((out / 'results.json').read_text())
    assert saved['bleu'] == res['bleu'] and saved['config']['max_steps'] == 20
    assert sorted(p.name for p in out.glob('ckpt_*.pt')) == ['ckpt_0000010.pt', 'ckpt_0000020.pt']
    return out


def test_console_script_list():
    exe = Path(sys.executable).parent / 'posenc'
    cmd = [str(exe)] if exe.exists() else PY
    r = subprocess.run(cmd + ['list'], capture_output=True, text=True, env=_env())
    assert_ok(r)
    from posenc_nb.core import list_posencs
    from posenc_nb.train import CONFIGS
    for name in list_posencs() + list(CONFIGS): assert f'  {name}' in r.stdout


def test_version_and_help():
    "`posenc --version` names the package version; every subcommand's --help has a description and examples."
    from posenc_nb import __version__
    r = cli('--version')
    assert_ok(r)
    assert r.stdout.strip() == f'posenc_nb {__version__}'
    for c in ('list', 'train', 'translate', 'evaluate', 'compare'):
        r = cli(c, '--help')
        assert_ok(r)
        assert f'usage: posenc {c}' in r.stdout and f'examples:\n  posenc ' in r.stdout, r.stdout


def test_translate_stdin_and_evaluate(run_dir, work):
    from posenc_nb.data import load_parallel
    from posenc_nb.decode import bleu, chrf, translate
    from posenc_nb.train import load_checkpoint
    pairs = load_parallel('synthetic', 'test')[:4]
    src = [pairs[0][0], '', pairs[1][0], pairs[2][0], '', pairs[3][0]]
    refs = [pairs[0][1], '', pairs[1][1], pairs[2][1], '', pairs[3][1]]
    r = cli('translate', '--ckpt', run_dir, '--beam', 2, input=''.join(s + '\n' for s in src))
    assert_ok(r)
    hyps = r.stdout.split('\n')
    assert hyps[-1] == '' and len(hyps) == len(src) + 1, r.stdout       # one line out per line in, newline-terminated
    hyps = hyps[:-1]
    assert hyps[1] == '' and hyps[4] == ''
    model, tok, _ = load_checkpoint(run_dir / 'ckpt_0000020.pt')          # the run folder resolves to its latest checkpoint
    assert hyps == translate(model, tok, src, beam=2)

    (work / 'hyp.txt').write_text(r.stdout); (work / 'ref.txt').write_text(''.join(s + '\n' for s in refs))
    r = cli('evaluate', '--hyp', work / 'hyp.txt', '--ref', work / 'ref.txt', '--json')
    assert_ok(r)
    got = json.loads(r.stdout)
    assert got['n'] == 6
    assert got['bleu'] == pytest.approx(bleu(hyps, refs)['score']) and got['chrf'] == pytest.approx(chrf(hyps, refs)['score'])


def test_compare_two_encodings(work):
    out = work / 'cmp'
    r = cli('compare', '--config', 'synthetic-tiny', '--encodings', 'sinusoidal,alibi', '--out', out, '--max-steps', 10, *TINY)
    assert_ok(r)
    saved = json.loads((out / 'results.json').read_text())
    assert [(x['encoding'], x['seed'], x['step']) for x in saved['runs']] == [('sinusoidal', 0, 10), ('alibi', 0, 10)]
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ['encoding', 'BLEU', 'chrF'] and 'params' in lines[0]
    for x in saved['runs']:
        row = next(l for l in lines if l.startswith(x['encoding'] + ' '))
        assert f"{x['bleu']:.2f}" in row and f"{x['chrf']:.2f}" in row and f"{x['valid_loss']:.3f}" in row
    assert (out / 'compare.png').read_bytes()[:4] == b'\x89PNG'
    assert (out / 'sinusoidal-s0' / 'ckpt_0000010.pt').exists()


@pytest.fixture(scope='module')
def bad_files(work, run_dir):
    d = work / 'bad'; d.mkdir()
    ck = run_dir / 'ckpt_0000020.pt'
    (d / 'trunc.pt').write_bytes(ck.read_bytes()[:5000])
    torch.save({'state_dict': torch.nn.Linear(2, 2).state_dict()}, d / 'other.pt')
    c = torch.load(ck, map_location='cpu', weights_only=False)
    c['model_config']['d_model'] = 32; c['model_config']['d_ff'] = 64     # another model's shape, same file format
    torch.save(c, d / 'othermodel.pt')
    (d / 'text.pt').write_text('not a checkpoint\n')
    (d / 'h3.txt').write_text('a\nb\nc\n'); (d / 'r2.txt').write_text('a\nb\n')
    (d / 'in.txt').write_text('x\n')
    return d


BAD = {   # name: (argv, env overrides, needle in the error line)
    'unknown encoding': (['train', '--config', 'synthetic-tiny', '--enc-pe', 'nope', '--out', '{w}/n1'], {}, "unknown encoding 'nope'"),
    'unknown config': (['train', '--config', 'nope'], {}, "unknown config 'nope'"),
    'unknown --set key': (['train', '--config', 'synthetic-tiny', '--set', 'd_modle=3', '--out', '{w}/n1'], {}, "unknown --set key 'd_modle'"),
    'bad --set value': (['train', '--config', 'synthetic-tiny', '--set', 'lr=fast', '--out', '{w}/n1'], {}, 'lr expects a float'),
    'data, POSENC_DATA unset': (['train', '--config', 'multi30k-base', '--out', '{w}/n3'], {'POSENC_DATA': None}, 'POSENC_DATA'),
    'out dir holds another run': (['train', '--config', 'synthetic-tiny', '--out', '{run}', '--max-steps', '20', '--seed', '5'], {}, '--fresh'),
    'missing checkpoint': (['translate', '--ckpt', '{d}/none.pt', '--input', '{d}/in.txt'], {}, 'does not exist'),
    'corrupt checkpoint': (['translate', '--ckpt', '{d}/trunc.pt', '--input', '{d}/in.txt'], {}, 'corrupt'),
    'foreign checkpoint': (['translate', '--ckpt', '{d}/other.pt', '--input', '{d}/in.txt'], {}, 'not a posenc_nb'),
    'checkpoint of another model': (['translate', '--ckpt', '{d}/othermodel.pt', '--input', '{d}/in.txt'], {}, 'do not fit'),
    'missing input': (['translate', '--ckpt', '{run}', '--input', '{d}/none.txt'], {}, 'does not exist'),
    'length mismatch': (['evaluate', '--hyp', '{d}/h3.txt', '--ref', '{d}/r2.txt'], {}, 'has 3 lines but'),
    'compare unknown encoding': (['compare', '--config', 'synthetic-tiny', '--encodings', 'sinusoidal,nope', '--out', '{w}/n4'], {}, "unknown encoding 'nope'"),
    'abbreviated option': (['train', '--config', 'synthetic-tiny', '--max-step', '5', '--out', '{w}/n1'], {}, 'did you mean --max-steps?'),
    'device gpu': (['train', '--config', 'synthetic-tiny', '--device', 'gpu', '--out', '{w}/n1'], {}, 'pass --device cuda'),
    'device this machine lacks': (['compare', '--config', 'synthetic-tiny', '--device', 'cuda:99', '--out', '{w}/n4'], {}, 'pass --device cpu'),
}


def test_bad_inputs(work, run_dir, bad_files):
    "Every bad input: status 2, one line naming the problem, no traceback, nothing created. Run concurrently (each pays a torch import)."
    fmt = lambda s: s.format(w=work, d=bad_files, run=run_dir)
    before = {p: p.stat().st_mtime_ns for p in run_dir.iterdir()}
    def one(name):
        argv, env, needle = BAD[name]
        e = _env(**{k: (fmt(v) if v else v) for k, v in env.items()})
        return subprocess.run(PY + [fmt(a) for a in argv], capture_output=True, text=True, env=e, timeout=300)
    with ThreadPoolExecutor(4) as ex: results = dict(zip(BAD, ex.map(one, BAD)))
    for name, r in results.items():
        try: assert_bad(r, BAD[name][2])
        except AssertionError as e: raise AssertionError(f'case {name!r}: {e}') from None
    assert {p: p.stat().st_mtime_ns for p in run_dir.iterdir()} == before        # the existing run was not touched
    for n in ('n1', 'n2', 'n3', 'n4'): assert not (work / n).exists(), n             # failed commands leave no folders


def _sha(p): return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def _wait_for(pred, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred(): return True
        if proc.poll() is not None: return False
        time.sleep(0.02)
    return False


def _interrupt(argv, out, sig):
    "Start `argv`, wait until it has written 3 more checkpoints (so it is inside the save-every-update loop), send `sig`."
    n0 = len(list(out.glob('ckpt_*.pt')))
    # a shell runs background jobs with SIGINT ignored, and children inherit that: restore the default so Ctrl-C is delivered
    p = subprocess.Popen(PY + [str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert _wait_for(lambda: len(list(out.glob('ckpt_*.pt'))) >= n0 + 3, p), p.communicate()[1][-2000:]
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    return p.returncode, err


def test_interrupt_keeps_checkpoints(work):
    """Interrupt a resumed run while it writes a checkpoint every update, first with Ctrl-C (SIGINT: exit 130, one line,
    the half-written temp file removed), then abruptly (SIGKILL). The checkpoint that existed before stays byte-identical,
    every checkpoint on disk loads, and rerunning the same command finishes the run."""
    from posenc_nb.train import load_checkpoint
    out = work / 'interrupted'
    base = ['train', '--config', 'synthetic-tiny', '--out', out, *TINY, '--set', 'keep_ckpts=1000']
    assert_ok(cli(*base, '--max-steps', 5))
    first = out / 'ckpt_0000005.pt'
    h0 = _sha(first)
    long = base + ['--max-steps', 1000, '--set', 'ckpt_every=1']
    rc, err = _interrupt(long, out, signal.SIGINT)
    assert rc == 130, (rc, err)
    # the progress bar may redraw after the message (tqdm closes at exit), so look for the line, not the last line
    assert 'Traceback' not in err and 'posenc: error: interrupted' in err.replace('\r', '\n'), err
    assert not list(out.glob('*.tmp')), sorted(p.name for p in out.iterdir())
    rc, err = _interrupt(long, out, signal.SIGKILL)
    assert rc == -signal.SIGKILL, (rc, err)
    assert _sha(first) == h0
    cks = sorted(out.glob('ckpt_*.pt'))
    assert len(cks) >= 7, cks
    for c in cks: load_checkpoint(c)                                               # every file on disk is complete
    last = int(cks[-1].stem.split('_')[1])
    r = cli(*base, '--max-steps', last + 2, '--json')                              # rerunning resumes and finishes
    assert_ok(r)
    assert json.loads(r.stdout)['step'] == last + 2
    assert not list(out.glob('*.tmp')) and _sha(first) == h0

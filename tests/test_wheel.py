"""The built wheel works on its own: a truly clean venv (no system site-packages, no nbdev, no jupyter),
torch from the local CPU wheel, the package's declared (lean, core) dependencies, a forward pass through every encoding.
The core install's requirement list is checked from the wheel's metadata first (seconds, no venv, no index).

Slow (installs torch into a fresh venv, ~1-2 min). Skip with POSENC_SKIP_WHEEL=1."""
import os, re, shutil, subprocess, sys, textwrap, time, zipfile
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(os.environ.get('POSENC_SKIP_WHEEL') == '1', reason='POSENC_SKIP_WHEEL=1')

# Files the sdist/wheel build needs; copying them keeps the build (build/, *.egg-info) out of the work tree.
BUILD_FILES = ('setup.py', 'settings.ini', 'pyproject.toml', 'README.md', 'MANIFEST.in', 'LICENSE')

# the core install: what the encodings, the model and the core import; never the experiment or solver stacks
CORE_REQUIREMENTS = {'torch', 'numpy', 'fastcore', 'tqdm'}
HEAVY = ('datasets', 'pyarrow', 'pandas', 'scipy', 'matplotlib', 'sacrebleu', 'tokenizers', 'torchdiffeq', 'scikit-learn')
EXTRAS = {'experiments': {'datasets', 'sacrebleu', 'tokenizers', 'matplotlib', 'scipy', 'scikit-learn'}, 'floater': {'torchdiffeq'}}

SNIPPET = textwrap.dedent(r'''
    import importlib.abc, importlib.util, sys
    # the package must not need notebook tooling at import or run time
    for mod in ('nbdev', 'execnb', 'jupyter_core', 'ipykernel'):
        assert importlib.util.find_spec(mod) is None, f'{mod} is installed in the clean venv'
    class _Block(importlib.abc.MetaPathFinder):      # even if a dependency brought them, posenc_nb may not import them
        def find_spec(self, name, path=None, target=None):   # (fastcore is a declared runtime dependency: `patch`)
            if name.split('.')[0] in ('nbdev', 'execnb', 'IPython'): raise ImportError(f'blocked: {name}')
    sys.meta_path.insert(0, _Block())
    import torch, posenc_nb
    assert sys.prefix in posenc_nb.__file__, posenc_nb.__file__
    import importlib.resources, importlib.util
    from posenc_nb.core import Positions, list_posencs, make_posenc
    from posenc_nb.model import ModelConfig, Seq2Seq
    torch.manual_seed(0)
    names = list_posencs()
    assert {'none', 'sinusoidal'} <= set(names), names
    B, S, T, V = 2, 7, 5, 11
    src = torch.randint(4, V, (B, S)); src[1, -2:] = 0          # right padding in row 1
    tgt = torch.randint(4, V, (B, T)); tgt[0, -1:] = 0
    sm, tm = src != 0, tgt != 0
    for name in names:
        cfg = ModelConfig(src_vocab=V, tgt_vocab=V, d_model=16, n_heads=4, n_enc=1, n_dec=1, d_ff=32, dropout=0.0,
                          enc_pe=name, max_len=64)
        model = Seq2Seq(cfg).eval()
        with torch.no_grad():
            extra = lambda m: {n: Positions.from_mask(m).pos for n in model.enc_pe.reads_streams}   # the streams it declares
            logits = model(src, Positions.from_mask(sm, streams=extra(sm)), tgt, Positions.from_mask(tm, streams=extra(tm)))
        assert logits.shape == (B, T, V), (name, logits.shape)
        assert torch.isfinite(logits[tm]).all(), name
        print('ok', name)
    import posenc_nb.cli
    assert posenc_nb.cli.main(['list']) == 0
    # the lean install: the public modules import, the optional stacks are absent, and asking for them names the extra
    import importlib, posenc_nb.core, posenc_nb.rope, posenc_nb.baselines, posenc_nb.model, posenc_nb.utils
    for mod in ('datasets', 'pyarrow', 'pandas', 'scipy', 'matplotlib', 'sacrebleu', 'tokenizers', 'torchdiffeq', 'sklearn'):
        assert importlib.util.find_spec(mod) is None, f'{mod} came with the core install'
    assert importlib.resources.files('posenc_nb').joinpath('py.typed').is_file()
    try: make_posenc('floater', 16, 4, adjoint=True); raise AssertionError('FLOATER adjoint built without torchdiffeq')
    except ImportError as e: assert "pip install 'posenc_nb[floater]'" in str(e), e
    assert posenc_nb.cli.main(['evaluate', '--hyp', '-', '--ref', 'r.txt']) == 2     # says: pip install 'posenc_nb[experiments]'
    print('ALL', len(names))
''')


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _build_wheel(tmp_path):
    "The package's wheel, built from a copy of the build files (no index, no build isolation, no dependencies)."
    src = tmp_path / 'src'; src.mkdir()
    for f in BUILD_FILES:
        if (ROOT / f).exists(): shutil.copy(ROOT / f, src / f)
    shutil.copytree(ROOT / 'posenc_nb', src / 'posenc_nb', ignore=shutil.ignore_patterns('__pycache__'))
    dist = tmp_path / 'dist'
    # no build isolation: setuptools is already in the dev env, and the build then needs no index at all
    _run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation', '-q', '-w', str(dist), str(src)])
    wheels = list(dist.glob('posenc_nb-*.whl'))
    assert len(wheels) == 1, wheels
    return wheels[0]

def _name(req: str) -> str: return re.split(r'[<>=!~;\[ ]', req, maxsplit=1)[0].lower().replace('_', '-')

def test_core_requirements(tmp_path):
    "The wheel's metadata: the core install needs only CORE_REQUIREMENTS; each extra and `all` bring the rest; py.typed ships."
    with zipfile.ZipFile(_build_wheel(tmp_path)) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))).decode()
        assert 'posenc_nb/py.typed' in z.namelist()
    reqs = [l.split(':', 1)[1].strip() for l in meta.splitlines() if l.startswith('Requires-Dist:')]
    core = {_name(r) for r in reqs if 'extra ==' not in r}
    assert core == CORE_REQUIREMENTS, core
    extras = {l.split(':', 1)[1].strip() for l in meta.splitlines() if l.startswith('Provides-Extra:')}
    assert {'experiments', 'floater', 'dev', 'test', 'all'} <= extras, extras
    def extra(name): return {_name(r) for r in reqs if re.search(rf"extra == ['\"]{name}['\"]", r)}
    for name, mods in EXTRAS.items(): assert mods <= extra(name), (name, extra(name))
    assert set().union(*(extra(e) for e in extras - {'all'})) == extra('all')
    assert not core & set(HEAVY)

def test_wheel_in_clean_venv(tmp_path):
    t0 = time.time()
    wheels = [_build_wheel(tmp_path)]
    t_build = time.time() - t0

    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV', 'PYTHONHOME', 'PYTHONSTARTUP')}
    env['PIP_NO_INPUT'] = '1'
    venv = tmp_path / 'venv'
    # sys._base_executable: the interpreter behind the dev venv, so the new venv inherits nothing from it
    base = getattr(sys, '_base_executable', sys.executable)
    _run([base, '-m', 'venv', str(venv)], env=env)
    py = venv / 'bin' / 'python'
    out = _run([str(py), '-c', 'import sys; print(sys.prefix != sys.base_prefix, sys.path)'], env=env, cwd=tmp_path).stdout
    assert out.startswith('True') and 'site-packages' in out and str(ROOT / '.venv') not in out, out
    _run([str(py), '-m', 'pip', 'install', '-q', 'torch==2.13.0'], env=env, cwd=tmp_path)   # the local CPU wheel
    t_torch = time.time() - t0 - t_build
    _run([str(py), '-m', 'pip', 'install', '-q', str(wheels[0])], env=env, cwd=tmp_path)   # with its (core) dependencies
    freeze = {_name(l) for l in _run([str(py), '-m', 'pip', 'freeze'], env=env, cwd=tmp_path).stdout.split()}
    assert not freeze & set(HEAVY), f'the core install brought {sorted(freeze & set(HEAVY))}'
    t_deps = time.time() - t0 - t_build - t_torch
    assert (venv / 'bin' / 'posenc').exists(), 'the console script `posenc` was not installed'

    r = _run([str(py), '-c', SNIPPET], env=env, cwd=tmp_path)
    assert 'ALL' in r.stdout, r.stdout
    r2 = _run([str(venv / 'bin' / 'posenc'), 'list'], env=env, cwd=tmp_path)
    assert 'sinusoidal' in r2.stdout, r2.stdout
    print(f"\nwheel test: build {t_build:.0f}s, torch {t_torch:.0f}s, deps {t_deps:.0f}s, total {time.time() - t0:.0f}s")

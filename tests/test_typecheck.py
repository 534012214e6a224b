"""pyright (basic) on a user's script, the README's and notebook 15's examples (tools/user_script.py copied out of the
repository, so `posenc_nb` resolves only from the installed package): 0 errors with the package installed as a user
installs it, from the built wheel and editable. A type checker does not run setuptools' default editable finder (an
import hook), so the editable install is the static one, `pip install -e . --config-settings editable_mode=compat`.

Slow (builds the wheel, runs pyright twice, minutes on a loaded machine): runs with POSENC_SLOW=1 (`make test-slow`)."""
import json, os, shutil, subprocess, sys, sysconfig
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(os.environ.get('POSENC_SLOW') != '1' or shutil.which('node') is None
                                and not (Path(sys.prefix) / 'bin' / 'pyright').exists(),
                                reason='slow: set POSENC_SLOW=1 (pyright needs Node.js)')
PYRIGHT = Path(sys.prefix) / 'bin' / 'pyright'
BUILD_FILES = ('setup.py', 'settings.ini', 'pyproject.toml', 'README.md', 'MANIFEST.in', 'LICENSE')


def _run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"
    return r


def _pyright(tmp_path: Path, python: Path, extra_paths=()) -> str:
    "pyright's report on a copy of the user script in `tmp_path/user`, with `python`'s packages (and `extra_paths`)."
    user = tmp_path / 'user'
    user.mkdir()
    shutil.copy(ROOT / 'tools' / 'user_script.py', user / 'user_script.py')
    (user / 'pyrightconfig.json').write_text(json.dumps(dict(typeCheckingMode='basic', pythonVersion='3.11',
                                                             extraPaths=[str(p) for p in extra_paths])))
    env = dict(os.environ, PYRIGHT_PYTHON_IGNORE_WARNINGS='1')
    r = subprocess.run([str(PYRIGHT), '--pythonpath', str(python), 'user_script.py'], capture_output=True, text=True,
                       cwd=user, env=env)
    assert '0 errors' in r.stdout and r.returncode == 0, r.stdout[-4000:]
    return r.stdout


def _copy_sources(tmp_path: Path) -> Path:
    "The build files and the package, copied (the build leaves nothing in the work tree)."
    src = tmp_path / 'src'
    src.mkdir()
    for f in BUILD_FILES:
        if (ROOT / f).exists(): shutil.copy(ROOT / f, src / f)
    shutil.copytree(ROOT / 'posenc_nb', src / 'posenc_nb', ignore=shutil.ignore_patterns('__pycache__'))
    return src


def test_user_script_types_from_the_wheel(tmp_path):
    "The wheel's files (py.typed among them) unpacked beside the dev environment's torch and transformers."
    dist, site = tmp_path / 'dist', tmp_path / 'site'
    _run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation', '-q', '-w', dist,
          _copy_sources(tmp_path)])
    _run([sys.executable, '-m', 'pip', 'install', '--no-deps', '-q', '--target', site, next(dist.glob('*.whl'))])
    assert (site / 'posenc_nb' / 'py.typed').is_file()
    _pyright(tmp_path, Path(sys.executable), extra_paths=[site])


def test_user_script_types_editable(tmp_path):
    "An editable install (static path) in a fresh venv that sees the dev environment's packages through a .pth file."
    venv = tmp_path / 'venv'
    _run([getattr(sys, '_base_executable', sys.executable), '-m', 'venv', '--without-pip', venv])
    py = venv / 'bin' / 'python'
    site = Path(_run([py, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])']).stdout.strip())
    (site / 'dev_env.pth').write_text(sysconfig.get_paths()['purelib'] + '\n')   # torch, transformers, pip, setuptools
    src = _copy_sources(tmp_path)
    _run([py, '-m', 'pip', 'install', '--no-deps', '--no-build-isolation', '-q', '-e', src,
          '--config-settings', 'editable_mode=compat'], cwd=tmp_path)
    out = _run([py, '-c', 'import posenc_nb; print(posenc_nb.__file__)'], cwd=tmp_path).stdout
    assert out.startswith(str(src)), out
    _pyright(tmp_path, py)

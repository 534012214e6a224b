"""Shared pytest settings: a headless matplotlib backend, a private cache folder per session, and one torch thread
per worker when pytest-xdist runs the tests in parallel (two workers with two threads each on two cores would make
torch many times slower); and the `call` fixture, which runs a command-line entry point in the test's process."""
import importlib, io, os, sys, tempfile
from pathlib import Path
from typing import Optional

import pytest

os.environ.setdefault('MPLBACKEND', 'Agg')
os.environ.setdefault('POSENC_CACHE', os.path.join(tempfile.gettempdir(), 'posenc_nb_test_cache'))

if os.environ.get('PYTEST_XDIST_WORKER'):
    for _var in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'): os.environ.setdefault(_var, '1')


@pytest.fixture
def call(monkeypatch, capsys):
    """`call(argv, cwd=None)` runs `posenc_nb.<argv[0]>.main(argv[1:])` here, from `cwd` when given, with an empty
    stdin, and returns (exit status, the last line of stderr)."""
    def run(argv: list, cwd: Optional[Path] = None) -> tuple:
        if cwd is not None: monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, 'stdin', io.StringIO(''))
        mod = importlib.import_module(f'posenc_nb.{argv[0]}')
        capsys.readouterr()
        try: rc = int(mod.main(argv[1:]) or 0)
        except SystemExit as e: rc = e.code if isinstance(e.code, int) else 0
        err = capsys.readouterr().err.strip().splitlines()
        return rc, (err[-1] if err else '')
    return run

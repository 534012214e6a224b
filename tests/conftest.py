"""Shared pytest settings: a headless matplotlib backend, a private cache folder per session, and one torch thread
per worker when pytest-xdist runs the tests in parallel (two workers with two threads each on two cores would make
torch many times slower)."""
import os, tempfile

os.environ.setdefault('MPLBACKEND', 'Agg')
os.environ.setdefault('POSENC_CACHE', os.path.join(tempfile.gettempdir(), 'posenc_nb_test_cache'))

if os.environ.get('PYTEST_XDIST_WORKER'):
    for _var in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'): os.environ.setdefault(_var, '1')

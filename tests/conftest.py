"""Shared pytest settings: a headless matplotlib backend and a private cache folder per session."""
import os, tempfile

os.environ.setdefault('MPLBACKEND', 'Agg')
os.environ.setdefault('POSENC_CACHE', os.path.join(tempfile.gettempdir(), 'posenc_nb_test_cache'))

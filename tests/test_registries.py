"""Every registry finds its entries by discovery (modules that call the registering function at import, found by parsing
their source): in a fresh process, what discovery lists must be everything that importing every module registers."""
import subprocess, sys

CODE = """
import importlib, json, pkgutil
import posenc_nb
from posenc_nb.core import list_posencs
from posenc_nb.data import list_datasets
from posenc_nb.streams import list_stream_providers
from posenc_nb.experiments import list_experiments
def lists():
    return {'encodings': sorted(list_posencs()), 'datasets': sorted(list_datasets()),
            'stream providers': sorted(list_stream_providers()), 'experiments': sorted(e.name for e in list_experiments())}
found = lists()
for m in pkgutil.iter_modules(posenc_nb.__path__):
    if m.name != '__main__': importlib.import_module(f'posenc_nb.{m.name}')
print(json.dumps({'found': found, 'all': lists()}))
"""


def test_discovery_finds_every_registration():
    r = subprocess.run([sys.executable, '-c', CODE], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for registry, names in out['all'].items():
        missed = sorted(set(names) - set(out['found'][registry]))
        assert not missed, f"{registry} {missed} are registered by a module that discovery does not find"
        assert names, registry

"""The project's careless-user probe (`tools/probe_cli.py`) as a table-driven test: every case of its table must hold
(refused with one line naming the flag or field, or done as asked, every file that was there kept). Each case runs
in a process forked from this one, under the probe's CPU-time and memory limits. The slow cases (those that train or
evaluate for seconds, and those that read real data) run with POSENC_SLOW=1; the cases that read real data need
POSENC_DATA as well. Without POSENC_SLOW, one case at least of each kind of failure the probe found still runs.

    python tools/probe_cli.py                        # the whole table, with its summary
    POSENC_SLOW=1 python -m pytest tests/test_probe.py  # the same cases as tests"""
import importlib.util, os
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location('probe_cli', ROOT / 'tools' / 'probe_cli.py')
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)
SLOW = os.environ.get('POSENC_SLOW') == '1'


def _marks(case: dict) -> list:
    marks = []
    if probe.is_slow(case) and not SLOW: marks.append(pytest.mark.skip(reason='slow: POSENC_SLOW=1 runs it'))
    if case['data'] and not os.environ.get('POSENC_DATA'):
        marks.append(pytest.mark.skip(reason='reads real data: set POSENC_DATA'))
    return marks


CASES = [pytest.param(c, id=c['id'], marks=_marks(c)) for c in probe.all_cases()]


@pytest.fixture(scope='module')
def fixtures(tmp_path_factory):
    "Set-up shared by every case: the entry points imported once (each forked case inherits them), fixtures made once."
    probe.preload()
    return probe.Fixtures(tmp_path_factory.mktemp('probe-fixtures'))


def test_the_table_covers_every_entry_point():
    "Each group of the table has cases, and ids are unique (a result is found by its id)."
    ids = [c['id'] for c in probe.all_cases()]
    assert len(ids) == len(set(ids))
    firsts = {c['argv'][0] if c['argv'][0] != 'cli' else c['argv'][1] for c in probe.all_cases()}
    assert {'train', 'compare', 'translate', 'evaluate', 'list', 'experiments', 'mlm', 'long_text', 'classify',
            'length', 'claims', 'speed', 'linear_lm', 'api'} <= firsts, firsts


def test_the_fast_table_keeps_every_kind_of_failure():
    "Without POSENC_SLOW or data, at least one case of each kind the probe found (lost, mixed, hang, unhelpful) runs."
    kinds = {c['was'] for c in probe.all_cases() if not probe.is_slow(c) and not c['data']}
    assert {'lost', 'mixed', 'hang', 'unhelpful'} <= kinds, kinds


@pytest.mark.parametrize('case', CASES)
def test_probe_case(case, fixtures, tmp_path):
    r = probe.run_one(case, tmp_path / 'case', fixtures)
    assert r['cls'] == 'held', f"{r['cls']}: {r['why']}"

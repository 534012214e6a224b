"""The student edition (tools/student.py): nbgrader's solution markers on the exercise solutions, and its release step
removes them, leaving every other cell."""
import importlib.util, json, shutil, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location('student', ROOT / 'tools' / 'student.py')
student = importlib.util.module_from_spec(spec)
spec.loader.exec_module(student)


def _nb(*cells):
    return {'cells': [dict(cell_type=t, metadata={}, source=s, **({'outputs': [], 'execution_count': None}
                                                                 if t == 'code' else {})) for t, s in cells],
            'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}


def test_solution_cells_get_nbgrader_markers_and_nothing_else():
    nb = _nb(('markdown', '**1. Derive: x.**'), ('code', 'def check_x(v): return v == 2'),
             ('code', '#| exercise-solution\nassert check_x(2)'), ('code', 'y = 1  # exercise-solution in a comment'))
    out = student.mark_for_nbgrader(nb, 't')
    sol = out['cells'][2]
    assert sol['source'] == '### BEGIN SOLUTION\nassert check_x(2)\n### END SOLUTION'
    assert sol['metadata']['nbgrader']['solution'] is True and sol['metadata']['nbgrader']['grade_id'] == 't-solution-1'
    others = lambda n: [c['source'] for i, c in enumerate(n['cells']) if i != 2]
    assert others(out) == others(nb)
    assert nb['cells'][2]['source'].startswith('#| exercise-solution')              # the input is not changed
    assert student.with_solutions([ROOT / 'nbs' / '10_rope.ipynb', ROOT / 'nbs' / '00_core.ipynb']) == [
        ROOT / 'nbs' / '10_rope.ipynb']


@pytest.mark.skipif(shutil.which('nbgrader', path=str(Path(sys.executable).parent)) is None,
                    reason='nbgrader is not installed (make student installs it)')
def test_release_removes_the_solutions(tmp_path):
    "nbgrader's release step: the exercise solutions of 09_exercises are stubs, every other cell is as it was."
    src = ROOT / 'nbs' / '09_exercises.ipynb'
    (released,) = student.build(tmp_path, [src])
    got, orig = json.loads(released.read_text())['cells'], json.loads(src.read_text())['cells']
    assert len(got) == len(orig)
    text = lambda c: ''.join(c['source']) if isinstance(c['source'], list) else c['source']
    for g, o in zip(got, orig):
        if student.is_solution(o): assert 'raise NotImplementedError()' in text(g) and 'assert' not in text(g)
        else: assert text(g) == text(o)
    assert sum(student.is_solution(o) for o in orig) >= 3

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


@pytest.mark.skipif(shutil.which('nbgrader', path=str(Path(sys.executable).parent)) is None,
                    reason='nbgrader is not installed (make student installs it)')
def test_released_method_pages_hold_no_solution_text(tmp_path):
    """The method pages with predict exercises, released: no line that only a solution holds is left anywhere in them,
    and every exercise prompt is."""
    stems = ('10_rope', '11_floater', '14_xlpe')
    released = student.build(tmp_path, [ROOT / 'nbs' / f'{s}.ipynb' for s in stems])
    assert [p.stem for p in released] == list(stems)
    text = lambda c: ''.join(c['source']) if isinstance(c['source'], list) else c['source']
    for p in released:
        orig = json.loads((ROOT / 'nbs' / p.name).read_text())['cells']
        elsewhere = {l.strip() for c in orig if not student.is_solution(c) for l in text(c).splitlines()}
        only_solution = {l.strip() for c in orig if student.is_solution(c) for l in text(c).splitlines()[1:]
                         if l.strip() and l.strip() not in elsewhere}
        assert len(only_solution) >= 3, p.name
        out = '\n'.join(text(c) for c in json.loads(p.read_text())['cells'])
        leaks = [l for l in only_solution if l in out]
        assert not leaks, (p.name, leaks[:3])
        prompts = [text(c) for c in orig if c['cell_type'] == 'markdown' and text(c).startswith('**')]
        assert prompts and all(s in out for s in prompts)


def test_student_site_leaves_out_the_instructor_page(tmp_path, monkeypatch):
    "The student site is the site's own build, into OUT/site, without the instructor page and with the student note."
    sys.path.insert(0, str(ROOT / 'tools'))
    import build_site as bs
    seen = {}
    def fake_build(jobs, execute, workers, cache, only, exclude=()):
        seen.update(src=bs.src_dir, html=bs.html_dir, note=bs.SOLUTION_NOTE, exclude=exclude, execute=execute)
    before = (bs.src_dir, bs.html_dir, bs.SOLUTION_NOTE)
    monkeypatch.setattr(bs, 'build', fake_build)
    assert bs.student_site(tmp_path) == tmp_path / 'site' / 'html'
    assert seen['src'] == tmp_path / 'site' / 'src' and seen['html'] == tmp_path / 'site' / 'html'
    assert 'instructor' in seen['exclude'] and seen['execute'] and 'not in the student edition' in seen['note']
    assert (bs.src_dir, bs.html_dir, bs.SOLUTION_NOTE) == before                    # the teacher's site is untouched
    assert (ROOT / 'nbs' / 'instructor.ipynb').exists() and 'instructor' in [p.stem for p in bs.discover_notebooks()]

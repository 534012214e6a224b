#!/usr/bin/env python3
"""The student edition of the notebooks, made by nbgrader: every exercise solution removed, everything else kept.

The notebooks mark a solution as a code cell starting with `#| exercise-solution` (the tests run it; the site hides
it). Teachers already have a tool for the rest: nbgrader. This script writes a course folder in nbgrader's layout,
`OUT/source/course/`, where each solution cell is an nbgrader solution cell (its code between nbgrader's markers
`### BEGIN SOLUTION` and `### END SOLUTION`, its metadata `nbgrader.solution`), and then runs nbgrader's release step,
`nbgrader generate_assignment course --no-db`, which writes `OUT/release/course/` with each solution replaced by
nbgrader's stub (`# YOUR CODE HERE`, `raise NotImplementedError()`). The notebooks in `nbs/` are not changed: they
keep no cell metadata (`nbdev_clean`), so the markers are added here. Copy the released notebooks into `nbs/` of a
checkout to run them (they read the records and modules from there).

With `--site`, the student site follows: the site's own build (tools/build_site.py) without the instructor page, into
`OUT/site/html/`. It executes the notebooks from `nbs/` as the site does (their solutions run but no page shows one),
so after `make site` every executed page comes from its cache and only Sphinx runs.

Usage: python tools/student.py [--out _student] [--site] [NOTEBOOK ...]   (default: every notebook with a solution)
"""
import argparse, copy, json, re, shutil, subprocess, sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]
SOLUTION = re.compile(r'^\s*#\s*\|\s*exercise-solution\s*$', re.M)


def is_solution(cell: dict) -> bool:
    "A code cell whose first line is the `#| exercise-solution` directive."
    src = ''.join(cell['source']) if isinstance(cell['source'], list) else cell['source']
    return cell['cell_type'] == 'code' and bool(SOLUTION.match(src.split('\n', 1)[0]))


def mark_for_nbgrader(nb: dict, stem: str) -> dict:
    "The notebook with each solution cell made an nbgrader solution cell (markers around its code); others untouched."
    nb = copy.deepcopy(nb)
    for k, c in enumerate(c for c in nb['cells'] if is_solution(c)):
        src = ''.join(c['source']) if isinstance(c['source'], list) else c['source']
        body = src.split('\n', 1)[1] if '\n' in src else ''
        c['source'] = f'### BEGIN SOLUTION\n{body}\n### END SOLUTION'
        c['metadata'] = {'nbgrader': {'grade': False, 'solution': True, 'locked': False, 'task': False,
                                      'grade_id': f'{stem}-solution-{k + 1}', 'schema_version': 3}}
    return nb


def with_solutions(nbs=None) -> list:
    "The notebooks (paths) that hold at least one solution cell."
    nbs = nbs or sorted((root / 'nbs').glob('*.ipynb'))
    return [p for p in map(Path, nbs) if any(is_solution(c) for c in json.loads(p.read_text())['cells'])]


def build(out: Path, nbs=None) -> list:
    "Write OUT/source/course/ and release it with nbgrader into OUT/release/course/; the released notebooks' paths."
    if shutil.which('nbgrader', path=str(Path(sys.executable).parent)) is None and shutil.which('nbgrader') is None:
        raise SystemExit("nbgrader is not installed: pip install nbgrader (or run `make student`, which installs it)")
    nbs = with_solutions(nbs)
    if not nbs: raise SystemExit('no notebook with an `#| exercise-solution` cell among those given')
    src = out / 'source' / 'course'
    shutil.rmtree(out, ignore_errors=True)
    src.mkdir(parents=True)
    for p in nbs:
        (src / p.name).write_text(json.dumps(mark_for_nbgrader(json.loads(p.read_text()), p.stem), indent=1))
    exe = Path(sys.executable).parent / 'nbgrader'
    cmd = [str(exe) if exe.exists() else 'nbgrader', 'generate_assignment', 'course', '--no-db', '--force',
           f'--CourseDirectory.root={out.resolve()}']
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f'nbgrader generate_assignment failed (exit {r.returncode}):\n{r.stdout}{r.stderr}')
    released = sorted((out / 'release' / 'course').glob('*.ipynb'))
    leaks = [p.name for p in released if 'BEGIN SOLUTION' in p.read_text() or SOLUTION.search(p.read_text())]
    if leaks: raise SystemExit(f'solutions left in the student edition: {leaks}')
    return released


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default=str(root / '_student'), help='course folder (default: _student)')
    ap.add_argument('--site', action='store_true', help='then build the student site into OUT/site/html')
    ap.add_argument('notebooks', nargs='*', help='notebooks (default: every notebook with a solution cell)')
    a = ap.parse_args(argv)
    released = build(Path(a.out), a.notebooks or None)
    n = sum(sum(map(is_solution, json.loads(p.read_text())['cells'])) for p in with_solutions(a.notebooks or None))
    print(f'student edition: {len(released)} notebooks, {n} solutions replaced by nbgrader stubs -> '
          f'{Path(a.out) / "release" / "course"}')
    if a.site:
        sys.path.insert(0, str(root / 'tools'))
        import build_site
        print(f'student site -> {build_site.student_site(Path(a.out))}/index.html')
    return 0


if __name__ == '__main__': sys.exit(main())

"""Run the notebooks' tests, each notebook in a Python process of its own, as a reader runs it (one kernel per
notebook).

    python tools/test_notebooks.py [--workers N] [--flags slow gpu] [NOTEBOOK ...]   # default: every nbs/*.ipynb

`nbdev_test --n_workers N` runs several notebooks one after another in each worker process, so a notebook sees what
an earlier one left in that process: an encoding it registered again from the notebook's own class (the registry
then holds a class whose module is `__main__`, which `torch.compile` cannot resolve, and which other notebooks'
`@patch`es never reach). Whether that happens depends on which notebooks share a worker, so a failure of that kind
comes and goes as notebooks are added. Here every notebook starts in a fresh process; the largest start first so the
workers finish together. Prints one line per notebook (status, seconds) and the output of each failure; exit status
1 when any failed.

One execution for the tests and the site: without `--flags`, each notebook runs the way the site build executes it
(tools/build_site.py's executor: execnb's `CaptureShell` in `nbs/`, the cells `nbdev_test` runs, the same skips), and
the executed copy is saved in the site's cache (`_site/cache/`, or `--cache DIR`) under the key the build looks up (the
notebook, the library's sources, the records). `make site` after `make test` then renders those copies and executes
nothing again. `--reuse` also skips the notebooks whose executed copy is already cached. With `--flags` (slow or gpu
cells), notebooks run through `nbdev_test`, and nothing is cached (the site does not show those cells' outputs)."""
import argparse, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / 'nbs'


def run_one(nb: Path, flags: list) -> tuple:
    "(notebook, seconds, exit status, output) of `nbdev_test` on one notebook in its own process."
    t0 = time.time()
    cmd = [str(Path(sys.executable).parent / 'nbdev_test'), '--path', nb.name]
    if flags: cmd += ['--flags', ' '.join(flags)]
    out = subprocess.run(cmd, cwd=nb.parent, capture_output=True, text=True)
    return nb, time.time() - t0, out.returncode, out.stdout + out.stderr


def run_for_site(nbs: list, cache: Path, workers: int, reuse: bool) -> int:
    "Execute `nbs` as the site build does, saving the executed copies in `cache`; exit status 1 when any failed."
    sys.path.insert(0, str(ROOT / 'tools'))
    import build_site
    t0 = time.time()
    try: build_site.execute_all(nbs, cache, workers, reuse=reuse)
    except SystemExit as e:
        print(e, flush=True)
        return 1
    print(f'{len(nbs)} of {len(nbs)} notebooks passed in {time.time() - t0:.0f}s (executed copies in {cache})')
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('notebooks', nargs='*', help='notebooks to test (default: every notebook in nbs/)')
    ap.add_argument('--workers', type=int, default=2, help='notebooks tested at once')
    ap.add_argument('--flags', nargs='*', default=[], help="nbdev test flags to run as well, e.g. 'slow'")
    ap.add_argument('--cache', default=str(ROOT / '_site' / 'cache'), help='where executed notebooks are saved for the site')
    ap.add_argument('--reuse', action='store_true', help='skip notebooks already executed in the cache')
    a = ap.parse_args(argv)
    nbs = [Path(p).resolve() for p in a.notebooks] or [p for p in NBS.glob('*.ipynb') if not p.name.startswith('_')]
    missing = [str(p) for p in nbs if not p.exists()]
    if missing: ap.error(f"no such notebook: {', '.join(missing)}")
    nbs.sort(key=lambda p: -p.stat().st_size)
    if not a.flags: return run_for_site(nbs, Path(a.cache), a.workers, a.reuse)
    t0, failed = time.time(), []
    with ThreadPoolExecutor(max(1, a.workers)) as pool:
        for nb, seconds, rc, output in pool.map(lambda p: run_one(p, a.flags), nbs):
            print(f"{'ok' if rc == 0 else 'FAILED':6} {seconds:6.1f}s  {nb.name}", flush=True)
            if rc != 0: failed.append((nb, output))
    for nb, output in failed: print(f'\n==== {nb.name} ====\n{output[-6000:]}', flush=True)
    print(f"{len(nbs) - len(failed)} of {len(nbs)} notebooks passed in {time.time() - t0:.0f}s"
          + (f"; failed: {', '.join(nb.name for nb, _ in failed)}" if failed else ''))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())

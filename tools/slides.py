#!/usr/bin/env python3
"""Slides and printable notes per lecture, offline: nbconvert's reveal.js slides and Chromium's print to PDF.

For each lecture of the course (`LECTURES` of nbs/course.ipynb, read as tools/build_site.py reads it), the lecture's
notebooks become one deck, `_slides/lecture-N.slides.html`: a new slide at every H1 and H2, a slide below it for
every other shown cell (the site's rules: hidden, exported, solution, slow and GPU cells are left out; outputs come
from the site's executed copies in `_site/cache/` where they exist). reveal.js and RequireJS (which the template
loads it with) come from their npm packages (`npm pack`, unpacked once into `_slides/`) and MathJax 3 from the
pinned PyPI package the site uses, so a deck requests nothing from the network. `--pdf` also prints each lecture
page of the built site (`_site/html`, `make site` first) to `_slides/lecture-N/PAGE.pdf` with headless Chromium.

Usage: python tools/slides.py [--lectures 1 2] [--pdf] [--out _slides]
"""
import argparse, json, os, re, shutil, subprocess, sys, tarfile, tempfile
from pathlib import Path

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root / 'tools'))
import build_site  # noqa: E402

REVEAL_VERSION = '4.6.1'            # the reveal.js major version nbconvert 7's slides template is written for
REQUIREJS_VERSION = '2.3.8'         # the template loads reveal.js through RequireJS
SKIP = {'hide', 'export', 'exports', 'exporti', 'default_exp', 'exercise-solution', 'slow', 'gpu'}


def vendor_npm(out: Path, name: str, version: str, check: str) -> Path:
    "An npm package's files, unpacked once into OUT/name (npm pack: the registry's tarball, no install, no scripts)."
    dst = out / name
    if (dst / check).exists(): return dst
    if shutil.which('npm') is None: raise SystemExit('npm not found: install Node.js (Debian: apt-get install npm)')
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run(['npm', 'pack', f'{name}@{version}', '--pack-destination', tmp],
                           capture_output=True, text=True)
        if r.returncode: raise SystemExit(f'npm pack {name}@{version} failed: {r.stderr.strip()}')
        with tarfile.open(next(Path(tmp).glob('*.tgz'))) as t: t.extractall(tmp, filter='data')
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(Path(tmp) / 'package', dst)
    return dst


def executed_copy(stem: str) -> Path:
    "The newest executed copy of a notebook in the site's cache, else the notebook itself."
    cached = sorted((root / '_site' / 'cache').glob(f'{stem}-*.ipynb'), key=lambda p: p.stat().st_mtime)
    return cached[-1] if cached else root / 'nbs' / f'{stem}.ipynb'


def deck(stems: list, title: str) -> dict:
    "One notebook of the lecture's shown cells with reveal.js slide types: a slide per H1/H2, a subslide per cell."
    cells = [{'cell_type': 'markdown', 'metadata': {'slideshow': {'slide_type': 'slide'}}, 'source': f'# {title}',
              'id': 'title'}]
    for stem in stems:
        for i, c in enumerate(json.loads(executed_copy(stem).read_text())['cells']):
            src = ''.join(c['source']) if isinstance(c['source'], list) else c['source']
            if c['cell_type'] == 'raw': continue
            if c['cell_type'] == 'code':
                d, body = build_site.split_directives(src)
                if SKIP & d.keys() or not body.strip(): continue
                outs = [o for o in c.get('outputs', []) if o.get('output_type') != 'error']
                c = {**c, 'source': body, 'outputs': outs}
            heading = c['cell_type'] == 'markdown' and re.match(r'#{1,2}\s', src)
            kind = 'slide' if heading else 'subslide'
            c = {**c, 'id': f'{stem}-{i}', 'metadata': {'slideshow': {'slide_type': kind}}}
            cells.append(c)
    return {'cells': cells, 'metadata': {'kernelspec': {'name': 'python3', 'display_name': 'Python 3',
                                                        'language': 'python'}}, 'nbformat': 4, 'nbformat_minor': 5}


MATHJAX3 = ("<script>window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], "
            "displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']]}};</script>\n"
            '<script src="mathjax/tex-chtml.js"></script>')


def mathjax3(html: str) -> str:
    """The deck with MathJax 3 (the site's copy) configured for $...$ and $$...$$: nbconvert's template is written for
    MathJax 2 (its `MathJax.Hub` configuration is ignored by 3, and its slide-change re-render is dropped)."""
    tag = '<script src="mathjax/tex-chtml.js"> </script>'
    if tag not in html: raise SystemExit("nbconvert's slides template changed: no MathJax script tag to configure")
    return html.replace(tag, MATHJAX3).replace('MathJax.Hub.getAllJax(Reveal.getCurrentSlide())', 'false')


def external_urls(html: str) -> list:
    "Every http(s) URL the page would load (scripts, images, frames, linked styles; not links a reader follows)."
    return (re.findall(r'<(?:script|img|iframe|source)\b[^>]*\bsrc=["\'](https?://[^"\']+)', html)
            + re.findall(r'<link\b[^>]*\bhref=["\'](https?://[^"\']+)', html)
            + re.findall(r'@import\s+(?:url\()?["\']?(https?://[^"\')]+)', html))


def slides(out: Path, lectures=None) -> list:
    "Write OUT/lecture-N.slides.html for each lecture (all by default); their paths."
    out.mkdir(parents=True, exist_ok=True)
    vendor_npm(out, 'reveal.js', REVEAL_VERSION, 'dist/reveal.js')
    vendor_npm(out, 'requirejs', REQUIREJS_VERSION, 'require.js')
    build_site.vendor_mathjax(out)                      # OUT/mathjax/tex-chtml.js, fonts and TeX extensions
    written = []
    for k, (caption, stems) in enumerate(build_site.course_lectures(), 1):
        if not caption.startswith('Lecture ') or (lectures and k not in lectures): continue
        nb = out / f'lecture-{k}.ipynb'
        nb.write_text(json.dumps(deck(stems, caption)))
        cmd = [sys.executable, '-m', 'nbconvert', '--to', 'slides', str(nb), '--output-dir', str(out),
               '--SlidesExporter.reveal_url_prefix=reveal.js', '--SlidesExporter.reveal_scroll=True',
               '--SlidesExporter.mathjax_url=mathjax/tex-chtml.js',
               '--SlidesExporter.require_js_url=requirejs/require.js',
               '--SlidesExporter.jquery_url=']
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode: raise SystemExit(f'nbconvert failed on lecture {k}:\n{r.stderr[-2000:]}')
        nb.unlink()
        html = out / f'lecture-{k}.slides.html'
        html.write_text(mathjax3(html.read_text()))
        ext = external_urls(html.read_text())
        if ext: raise SystemExit(f'{html.name} would load {ext[:3]} from the network')
        written.append(html)
    return written


def pdfs(out: Path, lectures=None) -> list:
    "Each lecture page of the built site printed to OUT/lecture-N/PAGE.pdf by headless Chromium."
    sys.path.insert(0, str(root / 'tools'))
    from check_site import find_chromium
    exe, html = find_chromium(), root / '_site' / 'html'
    if not (html / 'index.html').exists(): raise SystemExit('_site/html missing: run `make site` (or build_site.py)')
    written = []
    for k, (caption, stems) in enumerate(build_site.course_lectures(), 1):
        if not caption.startswith('Lecture ') or (lectures and k not in lectures): continue
        for stem in stems:
            page = html / f'{stem}.html'
            if not page.exists(): continue
            pdf = out / f'lecture-{k}' / f'{stem}.pdf'
            pdf.parent.mkdir(parents=True, exist_ok=True)
            args = [exe, '--headless=new', '--disable-gpu', '--no-pdf-header-footer', '--virtual-time-budget=20000',
                    f'--print-to-pdf={pdf}', page.as_uri()]
            if hasattr(os, 'geteuid') and os.geteuid() == 0: args.insert(1, '--no-sandbox')
            subprocess.run(args, capture_output=True, timeout=300)
            if not pdf.exists() or pdf.read_bytes()[:5] != b'%PDF-':
                raise SystemExit(f'Chromium printed no PDF of {page}')
            written.append(pdf)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default=str(root / '_slides'))
    ap.add_argument('--lectures', type=int, nargs='+', help='lecture numbers (default: all)')
    ap.add_argument('--pdf', action='store_true', help="also print the built site's lecture pages to PDF")
    a = ap.parse_args(argv)
    out = Path(a.out)
    decks = slides(out, a.lectures)
    print(f'slides: {len(decks)} decks -> {out}/lecture-N.slides.html (reveal.js {REVEAL_VERSION} and MathJax local)')
    if a.pdf:
        printed = pdfs(out, a.lectures)
        print(f'print: {len(printed)} PDFs -> {out}/lecture-N/')
    return 0


if __name__ == '__main__': sys.exit(main())

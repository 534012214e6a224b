#!/usr/bin/env python3
"""Build and check the documentation site without Quarto.

nbdev's own pipeline (`nbdev_docs`) hands the processed notebooks to Quarto, which cannot be installed on
every machine. This script runs the same nbdev processing step (`nbdev_proc_nbs`: directives such as `#| hide`
and `#| export`, `show_doc` tables), then renders each processed notebook to HTML with nbconvert, with one
navigation bar across pages. It fails (exit 1) if any notebook does not render or lacks its title."""
import html, json, re, subprocess, sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]
site, proc = root/'_site', root/'_proc'

def title_of(nb):
    for c in nb['cells']:
        if c['cell_type'] == 'markdown':
            m = re.search(r'^#\s+(.+)$', ''.join(c['source']), re.M)
            if m: return m.group(1).strip()
    fm = re.search(r'^title:\s*(.+)$', ''.join(nb['cells'][0]['source']), re.M) if nb['cells'] else None
    return fm.group(1).strip().strip('"') if fm else None

def main():
    from nbconvert import HTMLExporter
    import nbformat
    # nbdev_proc_nbs first tries to install Quarto (with sudo, from the internet); this build does without it
    code = 'import nbdev.quarto as q; q._ensure_quarto = lambda: None; q.nbdev_proc_nbs()'
    subprocess.run([sys.executable, '-c', code], cwd=root, check=True)
    src_nbs = sorted(p for p in (root/'nbs').glob('*.ipynb') if not p.name.startswith(('_', '.')))
    site.mkdir(exist_ok=True)
    pages, failures = [], []
    for src in src_nbs:
        nb_src = json.loads(src.read_text())
        pages.append((src.stem, title_of(nb_src) or src.stem))
    nav = ' | '.join(f'<a href="{("index" if s == "index" else s)}.html">{html.escape(t)}</a>' for s, t in pages)
    exporter = HTMLExporter(template_name='lab')
    for (stem, title), src in zip(pages, src_nbs):
        p = proc/src.name
        try:
            nb = nbformat.read(str(p if p.exists() else src), as_version=4)
            body, _ = exporter.from_notebook_node(nb)
            body = body.replace('<body', f'<body', 1)
            body = re.sub(r'(<body[^>]*>)', r'\1' + f'<nav style="padding:8px;border-bottom:1px solid #ddd;font-family:sans-serif">{nav}</nav>', body, count=1)
            if html.escape(title).split(':')[0][:20] not in body and title.split(':')[0][:20] not in body:
                raise ValueError(f'title {title!r} missing from the rendered page')
            (site/f'{stem}.html').write_text(body)
        except Exception as e:
            failures.append(f'{src.name}: {type(e).__name__}: {e}')
    print(f'rendered {len(pages) - len(failures)}/{len(pages)} notebooks into {site}')
    for f in failures: print('FAILED', f)
    return 1 if failures else 0

if __name__ == '__main__': sys.exit(main())

#!/usr/bin/env python3
"""Write README.md from nbs/index.ipynb (markdown cells as they are, visible code cells as Python blocks, their printed, markdown and image outputs; `#| echo: false` shows the outputs only).

nbdev's own `nbdev_readme` needs Quarto; this keeps the README generated from the notebook without it.
`--check` exits 1 when README.md is not what index.ipynb generates."""
import base64, json, re, sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]

TABLE_START = '<!-- notebook table: generated from the notebooks by tools/make_readme.py -->'
TABLE_END = '<!-- end of notebook table -->'

def _notebook_row(path: Path) -> str:
    "One table row: the notebook, the module it exports (if any), its H1 title and one-line summary."
    cells = json.loads(path.read_text())['cells']
    srcs = [''.join(c['source']) for c in cells]
    exp = next((m.group(1) for s in srcs for m in [re.search(r'^#\|\s*default_exp\s+(\S+)', s, re.M)] if m), None)
    exports = any(re.match(r'#\|\s*export', s.strip()) for c, s in zip(cells, srcs) if c['cell_type'] == 'code')
    head = next((s for c, s in zip(cells, srcs) if c['cell_type'] == 'markdown' and re.search(r'^# \S', s, re.M)), '')
    title, summary = re.search(r'^# (.+)$', head, re.M), re.search(r'^> (.+)$', head, re.M)
    what = f"**{title.group(1).strip()}**" + (f": {summary.group(1).strip()}" if summary else '')
    module = f'`posenc_nb.{exp}`' if exp and exports else 'no module'
    return f"| `{path.stem}` | {module} | {what.replace('|', chr(92) + '|')} |"

def notebook_table() -> str:
    "The README's table of notebooks, from each numbered notebook's `default_exp`, H1 and summary line."
    rows = [_notebook_row(p) for p in sorted((root/'nbs').glob('[0-9][0-9]_*.ipynb'))]
    table = '\n'.join(['| notebook | module | what it covers |', '|---|---|---|', *rows])
    return f'{TABLE_START}\n\n{table}\n\n{TABLE_END}'

def update_index() -> bool:
    "Put the current notebook table into nbs/index.ipynb (the cell holding the markers); True when it changed."
    path = root/'nbs'/'index.ipynb'
    nb = json.loads(path.read_text())
    pattern = re.compile(re.escape(TABLE_START) + '.*?' + re.escape(TABLE_END), re.S)
    cell = next((c for c in nb['cells'] if TABLE_START in ''.join(c['source'])), None)
    if cell is None: raise SystemExit(f'nbs/index.ipynb has no cell with {TABLE_START}; put the two markers where the table goes')
    old = ''.join(cell['source'])
    new = pattern.sub(lambda m: notebook_table(), old)
    if new == old: return False
    cell['source'] = new.splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
    return True

FIG_DIR = 'assets/readme'          # figures of index.ipynb's saved outputs, written next to README.md

def render(figures: dict = None):
    "README text; `figures` collects {relative path: png bytes} of the saved plot outputs."
    nb = json.loads((root/'nbs'/'index.ipynb').read_text())
    parts, figures = [], figures if figures is not None else {}
    for c in nb['cells']:
        src = ''.join(c['source']).strip()
        if not src: continue
        if c['cell_type'] == 'markdown': parts.append(src)
        elif c['cell_type'] == 'code':
            if src.startswith('#|') and any(l.strip() in ('#| hide', '#|hide') for l in src.splitlines()): continue
            code = '\n'.join(l for l in src.splitlines() if not l.startswith('#|'))
            if not any(l.replace(' ', '') == '#|echo:false' for l in src.splitlines()): parts.append(f'```python\n{code}\n```')
            parts += [''.join(o['data']['text/markdown']).strip() for o in c.get('outputs', []) if 'text/markdown' in o.get('data', {})]
            outs = [''.join(o.get('text', '')) for o in c.get('outputs', []) if o.get('output_type') == 'stream' and o.get('name') == 'stdout']   # warnings stay out
            if any(outs): parts.append('```\n' + ''.join(outs).rstrip() + '\n```')
            for o in c.get('outputs', []):
                png = o.get('data', {}).get('image/png')
                if png:
                    name = f'{FIG_DIR}/fig{len(figures) + 1}.png'
                    figures[name] = base64.b64decode(''.join(png)); parts.append(f'![figure {len(figures)}]({name})')
    return '<!-- generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file -->\n\n' + '\n\n'.join(parts) + '\n'

if __name__ == '__main__':
    figs = {}
    if '--check' in sys.argv:
        text, readme = render(figs), root/'README.md'
        cell = ''.join(''.join(c['source']) for c in json.loads((root/'nbs'/'index.ipynb').read_text())['cells'])
        stale = [n for n, b in figs.items() if not (root/n).exists() or (root/n).read_bytes() != b]
        if notebook_table() not in cell or not readme.exists() or readme.read_text() != text or stale:
            print('README.md, its figures or the notebook table of nbs/index.ipynb are out of date: '
                  'run python tools/make_readme.py and commit')
            sys.exit(1)
    else:
        update_index()
        text, readme = render(figs), root/'README.md'
        for n, b in figs.items():
            (root/n).parent.mkdir(parents=True, exist_ok=True)
            (root/n).write_bytes(b)
        readme.write_text(text)

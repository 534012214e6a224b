#!/usr/bin/env python3
"""Write README.md from nbs/index.ipynb (markdown cells as they are, visible code cells as Python blocks, their printed, markdown and image outputs; `#| echo: false` shows the outputs only).

nbdev's own `nbdev_readme` needs Quarto; this keeps the README generated from the notebook without it.
`--check` exits 1 when README.md is not what index.ipynb generates."""
import base64, json, sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]

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
            outs = [''.join(o.get('text', '')) for o in c.get('outputs', []) if o.get('output_type') == 'stream']
            if any(outs): parts.append('```\n' + ''.join(outs).rstrip() + '\n```')
            for o in c.get('outputs', []):
                png = o.get('data', {}).get('image/png')
                if png:
                    name = f'{FIG_DIR}/fig{len(figures) + 1}.png'
                    figures[name] = base64.b64decode(''.join(png)); parts.append(f'![figure {len(figures)}]({name})')
    return '<!-- generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file -->\n\n' + '\n\n'.join(parts) + '\n'

if __name__ == '__main__':
    figs = {}
    text, readme = render(figs), root/'README.md'
    if '--check' in sys.argv:
        stale = [n for n, b in figs.items() if not (root/n).exists() or (root/n).read_bytes() != b]
        if not readme.exists() or readme.read_text() != text or stale:
            print('README.md or its figures are out of date: run python tools/make_readme.py and commit'); sys.exit(1)
    else:
        for n, b in figs.items(): (root/n).parent.mkdir(parents=True, exist_ok=True); (root/n).write_bytes(b)
        readme.write_text(text)

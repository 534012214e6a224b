#!/usr/bin/env python3
"""Write README.md from nbs/index.ipynb (markdown cells as they are, visible code cells as Python blocks).

nbdev's own `nbdev_readme` needs Quarto; this keeps the README generated from the notebook without it.
`--check` exits 1 when README.md is not what index.ipynb generates."""
import json, sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]

def render():
    nb = json.loads((root/'nbs'/'index.ipynb').read_text())
    parts = []
    for c in nb['cells']:
        src = ''.join(c['source']).strip()
        if not src: continue
        if c['cell_type'] == 'markdown': parts.append(src)
        elif c['cell_type'] == 'code':
            if src.startswith('#|') and any(l.strip() in ('#| hide', '#|hide') for l in src.splitlines()): continue
            code = '\n'.join(l for l in src.splitlines() if not l.startswith('#|'))
            parts.append(f'```python\n{code}\n```')
            outs = [''.join(o.get('text', '')) for o in c.get('outputs', []) if o.get('output_type') == 'stream']
            if any(outs): parts.append('```\n' + ''.join(outs).rstrip() + '\n```')
    return '<!-- generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file -->\n\n' + '\n\n'.join(parts) + '\n'

if __name__ == '__main__':
    text, readme = render(), root/'README.md'
    if '--check' in sys.argv:
        if not readme.exists() or readme.read_text() != text:
            print('README.md is out of date: run python tools/make_readme.py and commit'); sys.exit(1)
    else: readme.write_text(text)

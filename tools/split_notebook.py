"""Move a run of cells from one notebook into a new notebook with its own module (issue 39: no module over 600 lines),
and point every import of a moved name at the new module.

    python tools/split_notebook.py nbs/00_core.ipynb nbs/01_attention.ipynb attention \\
        --start '## One attention that calls the hooks' --stop 'Registry errors name' \\
        --title 'Attention: one layer that calls the hooks' --summary 'The attention layer ...'

The cells from the first one whose text starts with `--start` up to (not including) the first later one that starts
with `--stop` (default: the closing nbdev_export cell) move, in order, after a `#| default_exp` cell, an exported
cell with exactly the imports the moved code needs (the source notebook's imports it uses, and the names it uses from
the source module), the source notebook's hidden import cells and the new H1. The source module's remaining code must
not use a moved name (the tool refuses: that would be a circular import). Then, in nbs/, tests/, tools/ and
benchmarks/, `from posenc_nb.SRC import ...` statements are split between the two modules, `posenc_nb.SRC.NAME` and
`ALIAS.NAME` (for `import posenc_nb.SRC as ALIAS`) point at the new module for moved names. Run nbdev_export after."""
import argparse, ast, builtins, json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILTINS = set(dir(builtins))


def cell_text(c):
    "A cell's source as one string."
    return ''.join(c['source'])


def set_text(c, text):
    "Set a cell's source from one string."
    c['source'] = text.splitlines(keepends=True)


def code_of(text):
    "A code cell's text with nbdev directives and IPython magics blanked, for ast."
    return '\n'.join('' if line.lstrip().startswith(('#|', '%', '!')) else line for line in text.splitlines())


def is_export(c):
    "True for an exported code cell."
    return c['cell_type'] == 'code' and re.match(r'#\|\s*export', cell_text(c).strip()) is not None


def defined(tree):
    "Top-level names a module body defines (functions, classes, assignments, imports)."
    out = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                out |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split('.')[0] for a in n.names}
        elif isinstance(n, (ast.With, ast.If, ast.Try, ast.For)):
            out |= {x.id for x in ast.walk(n) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store)}
            out |= {x.name for x in ast.walk(n) if isinstance(x, (ast.FunctionDef, ast.ClassDef))}
    return out


def used(tree):
    "Names a piece of code reads."
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def import_lines(tree, names):
    "The import statements of `tree` that bind a name in `names`, each cut down to those names."
    out = []
    for n in tree.body:
        if isinstance(n, ast.Import):
            keep = [a for a in n.names if (a.asname or a.name).split('.')[0] in names]
            if keep:
                out.append('import ' + ', '.join(a.name + (f' as {a.asname}' if a.asname else '') for a in keep))
        elif isinstance(n, ast.ImportFrom):
            if any(a.name == '*' for a in n.names):
                out.append(ast.unparse(n))
                continue
            keep = [a for a in n.names if (a.asname or a.name) in names]
            if keep or n.module == '__future__':
                keep = keep or n.names
                mod = '.' * n.level + (n.module or '')
                out.append(f'from {mod} import ' + ', '.join(a.name + (f' as {a.asname}' if a.asname else '')
                                                             for a in keep))
    return out


def wrap_import(head, names, width=120):
    "`from X import a, b, ...` within `width` characters, continued in parentheses when longer."
    line = head + ', '.join(names)
    if len(line) <= width:
        return line
    lines, cur = [], head + '('
    for k, n in enumerate(names):
        piece = n + (', ' if k < len(names) - 1 else ')')
        if len(cur) + len(piece.rstrip()) > width:
            lines.append(cur.rstrip())
            cur = ' ' * len(head + '(')
        cur += piece
    lines.append(cur)
    return '\n'.join(lines)


def src_aliases(texts, src_mod):
    "Aliases `X` of `import posenc_nb.SRC as X` in any of `texts` (one notebook's cells, or one file)."
    out = set()
    for text in texts:
        out |= set(re.findall(rf'^\s*import\s+posenc_nb\.{src_mod}\s+as\s+(\w+)\s*$', text, re.M))
    return out


def rewrite_source(text, src_mod, new_mod, moved, alias_used=None):
    """Point the imports and attribute references of `text` for moved names at the new module; None if unchanged.
    `alias_used`: aliases of the source module whose moved attributes are used somewhere in the same notebook."""
    src_full, new_full = f'posenc_nb.{src_mod}', f'posenc_nb.{new_mod}'
    try:
        tree = ast.parse(code_of(text))
    except SyntaxError:
        return None
    lines = text.split('\n')
    edits = []
    aliases = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module == src_full and n.level == 0:
            names = [a.name + (f' as {a.asname}' if a.asname else '') for a in n.names]
            gone = [x for a, x in zip(n.names, names) if a.name in moved]
            if not gone:
                continue
            if any(a.name == '*' for a in n.names):
                continue
            stay = [x for a, x in zip(n.names, names) if a.name not in moved]
            indent = lines[n.lineno - 1][:n.col_offset]
            new = []
            if stay:
                new.append(wrap_import(f'from {src_full} import ', stay, 120 - len(indent)))
            new.append(wrap_import(f'from {new_full} import ', gone, 120 - len(indent)))
            block = '\n'.join(new).replace('\n', '\n' + indent)
            edits.append((n.lineno - 1, n.col_offset, n.end_lineno - 1, n.end_col_offset, block))
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name == src_full and a.asname:
                    aliases[a.asname] = n
    new_alias = f'{new_mod}_mod'
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in (alias_used or ()) \
                and n.attr in moved:
            edits.append((n.value.lineno - 1, n.value.col_offset, n.value.end_lineno - 1, n.value.end_col_offset,
                          new_alias))
    for alias, node in aliases.items():
        if alias in (alias_used or ()):
            line = lines[node.lineno - 1]
            edits.append((node.end_lineno - 1, node.end_col_offset, node.end_lineno - 1, node.end_col_offset,
                          '\n' + line[:node.col_offset] + f'import {new_full} as {new_alias}'))
    for l0, c0, l1, c1, new in sorted(edits, reverse=True):
        lines[l0:l1 + 1] = [lines[l0][:c0] + new + lines[l1][c1:]]
    out = '\n'.join(lines)
    out = re.sub(rf'\b{re.escape(src_full)}\.({"|".join(map(re.escape, sorted(moved)))})\b', rf'{new_full}.\1', out)
    return out if out != text else None


def bound_by(lines):
    "Names bound by import statements."
    return defined(ast.parse('\n'.join(lines))) if lines else set()


def imports_only(text):
    "True when a code cell holds imports and nothing else."
    try:
        body = ast.parse(code_of(text)).body
    except SyntaxError:
        return False
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in body)


def default_exp(cells):
    "The notebook's module name."
    for c in cells:
        m = re.search(r'^#\|\s*default_exp\s+(\S+)', cell_text(c), re.M)
        if m:
            return m.group(1)
    raise SystemExit('no #| default_exp cell')


def find(cells, prefix, after=0):
    "Index of the first cell from `after` on whose stripped text starts with `prefix`."
    for k in range(after, len(cells)):
        if cell_text(cells[k]).strip().startswith(prefix):
            return k
    raise SystemExit(f'no cell starts with {prefix!r}')


def split(src, dst, module, ranges, title, summary, provider=False, setup=None):
    """Move the cells and rewrite the imports; returns the source module and the names that moved. `ranges`: (start,
    stop) text prefixes; `provider`: the code left behind imports the moved code (else the moved code imports it)."""
    nb = json.loads(Path(src).read_text())
    cells = nb['cells']
    src_mod = default_exp(cells)
    take = set()
    for start, stop in ranges:
        i = find(cells, start)
        j = find(cells, stop, i + 1) if stop else len(cells) - 1
        take |= set(range(i, j))
    first = min(take)
    moved_cells = [c for k, c in enumerate(cells) if k in take]
    # an import cell of the tests stays too (the tests left behind may use it); exported code never is one
    rest = [c for k, c in enumerate(cells) if k not in take
            or c['cell_type'] == 'code' and not is_export(c) and imports_only(cell_text(c))]
    parse = lambda cs: ast.parse('\n'.join(code_of(cell_text(c)) for c in cs))
    exp_moved = parse([c for c in moved_cells if is_export(c)])
    exp_rest = parse([c for c in rest if is_export(c)])
    moved = defined(exp_moved) - {'annotations'}
    rest_defs = defined(exp_rest)
    needs = (used(exp_moved) & rest_defs) - BUILTINS
    imports = import_lines(exp_rest, needs)
    own = sorted(needs - bound_by(imports))
    clash = used(exp_rest) & (moved - rest_defs)
    if provider and own:
        raise SystemExit(f'the moved code uses {sorted(own)} of the code left in {src_mod}: move those too')
    if not provider and clash:
        raise SystemExit(f'the code left in {src_mod} uses moved names {sorted(clash)}: move less, or use --provider')
    if own:
        imports.append(wrap_import(f'from posenc_nb.{src_mod} import ', own))
    other = [c for c in moved_cells if c['cell_type'] == 'code' and not is_export(c)]
    test_rest_cells = [c for c in rest if c['cell_type'] == 'code' and not is_export(c)]
    test_rest = parse(test_rest_cells)
    code_moved = parse([c for c in moved_cells if c['cell_type'] == 'code'])
    test_needs = used(parse(other)) - defined(code_moved) - BUILTINS
    bound = bound_by(imports)
    test_imports = [x for x in import_lines(exp_rest, (test_needs & rest_defs) - bound) if '__future__' not in x]
    bound |= bound_by(test_imports)
    from_src = sorted((test_needs & rest_defs) - bound)
    missing = sorted((test_needs & defined(test_rest)) - rest_defs)
    hidden = [c for c in cells[:first] if c['cell_type'] == 'code' and not is_export(c) and imports_only(cell_text(c))]
    new_cells = [code_cell(f'#| default_exp {module}'),
                 code_cell('#| export\n' + '\n'.join(imports))]
    if from_src:
        test_imports.append(wrap_import(f'from posenc_nb.{src_mod} import ', from_src))
    for c in hidden:
        test_imports += [line for line in cell_text(c).splitlines() if line.strip() and not line.startswith('#|')]
    if test_imports:
        new_cells.append(code_cell('#| hide\n' + '\n'.join(test_imports)))
    new_cells.append(md_cell(f'# {title}\n> {summary}'))
    new_cells += moved_cells
    new_cells.append(code_cell('#| hide\nimport nbdev\nnbdev.nbdev_export()'))
    left_over = (used(test_rest) & defined(parse(other))) - defined(test_rest) - rest_defs - moved - BUILTINS
    if setup:
        at = sum(1 for k in range(first) if k not in take)
        rest.insert(at, code_cell('#| hide\n' + setup))
        left_over -= defined(ast.parse(setup))
    if left_over:
        print(f'warning: the tests left in {src} use names the moved tests define: {sorted(left_over)} (see --setup)')
    rest = provide(rest, module, moved, (used(exp_rest) & moved) if provider else set(),
                   used(test_rest) & moved - defined(test_rest))
    Path(dst).write_text(json.dumps({**nb, 'cells': new_cells}, indent=1, ensure_ascii=False) + '\n')
    nb['cells'] = rest
    Path(src).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
    if missing:
        print(f'warning: moved test cells use names defined only in {src} test cells: {missing}')
    return src_mod, moved


def provide(rest, module, moved, for_code, for_tests):
    "The cells left behind, importing from the new module what their exported code and their tests use of it."
    k = next(k for k, c in enumerate(rest) if is_export(c))
    if for_code:
        line = wrap_import(f'from posenc_nb.{module} import ', sorted(for_code))
        set_text(rest[k], cell_text(rest[k]).rstrip('\n') + '\n' + line)
    for_tests = sorted(set(for_tests) - set(for_code))
    if for_tests:
        line = wrap_import(f'from posenc_nb.{module} import ', for_tests)
        hidden = [c for c in rest if c['cell_type'] == 'code' and not is_export(c) and imports_only(cell_text(c))]
        if hidden:
            set_text(hidden[0], cell_text(hidden[0]).rstrip('\n') + '\n' + line)
        else:
            rest.insert(k + 1, code_cell('#| hide\n' + line))
    return rest


def code_cell(text):
    "A new code cell."
    c = {'cell_type': 'code', 'execution_count': None, 'metadata': {}, 'outputs': [], 'source': []}
    set_text(c, text)
    return c


def md_cell(text):
    "A new markdown cell."
    c = {'cell_type': 'markdown', 'metadata': {}, 'source': []}
    set_text(c, text)
    return c


def alias_uses(texts, src_mod, moved):
    "The aliases of the source module through which `texts` use a moved name."
    return {a for a in src_aliases(texts, src_mod)
            if any(re.search(rf'\b{a}\.(\w+)', t) and set(re.findall(rf'\b{a}\.(\w+)', t)) & moved for t in texts)}


def rewrite_everywhere(src_mod, new_mod, moved):
    "Rewrite imports of moved names in nbs/, tests/, tools/ and benchmarks/; returns the files changed."
    changed = []
    for p in sorted((ROOT / 'nbs').glob('*.ipynb')):
        nb = json.loads(p.read_text())
        hit = False
        texts = [cell_text(c) for c in nb['cells'] if c['cell_type'] == 'code']
        used_aliases = alias_uses(texts, src_mod, moved)
        for c in nb['cells']:
            if c['cell_type'] != 'code':
                continue
            new = rewrite_source(cell_text(c), src_mod, new_mod, moved, used_aliases)
            if new is not None:
                set_text(c, new)
                hit = True
        if hit:
            p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
            changed.append(p)
    for folder in ('tests', 'tools', 'benchmarks'):
        for p in sorted((ROOT / folder).rglob('*.py')):
            if p.name == Path(__file__).name:
                continue
            text = p.read_text()
            new = rewrite_source(text, src_mod, new_mod, moved, alias_uses([text], src_mod, moved))
            if new is not None:
                p.write_text(new)
                changed.append(p)
    return changed


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('src')
    ap.add_argument('dst')
    ap.add_argument('module')
    ap.add_argument('--start', action='append', required=True, help='text a cell starts with: the first cell moved')
    ap.add_argument('--stop', action='append', default=None, help='text a cell starts with: the first cell kept after')
    ap.add_argument('--provider', action='store_true', help='the code left behind imports the moved code')
    ap.add_argument('--setup', default=None,
                    help='code of a hidden cell the tests left behind need, put where the cells were')
    ap.add_argument('--title', required=True)
    ap.add_argument('--summary', required=True)
    a = ap.parse_args()
    if Path(a.dst).exists():
        sys.exit(f'{a.dst} exists')
    stops = (a.stop or []) + [None] * (len(a.start) - len(a.stop or []))
    ranges = [(s, None if e in (None, '') else e) for s, e in zip(a.start, stops)]
    src_mod, moved = split(a.src, a.dst, a.module, ranges, a.title, a.summary, a.provider, a.setup)
    files = rewrite_everywhere(src_mod, a.module, moved)
    print(f'moved {len(moved)} names from {src_mod} to {a.module}; imports rewritten in {len(files)} files:')
    print('\n'.join(f'  {p.relative_to(ROOT)}' for p in files))

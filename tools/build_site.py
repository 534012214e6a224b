#!/usr/bin/env python3
"""Build the documentation site without Quarto: nbdev's notebook semantics, rendered by Sphinx + MyST-NB.

`nbdev_docs` hands processed notebooks to Quarto, which is not installed everywhere. Where it is missing, this
script does nbdev's processing step itself (a small nbformat pass into `_site/src/`) and lets Sphinx with MyST-NB
and the Furo theme render the result into `_site/html/`, offline: sidebar in reading order, full-text search,
per-page contents, previous/next links, MathJax served from the site itself, and an API reference generated from
each module's `__all__`, signatures and inline parameter docs (docments). Notebooks are never executed here: the
site shows the committed outputs.

What the pass does, mirroring nbdev's processors: cells with `#| hide`, `#| export`, `#| exporti` or
`#| default_exp` are dropped, and each exported function or class gets an API block where it was defined
(nbdev's `add_show_docs`); `#| echo: false` hides the code, `#| output: false` the outputs, `#| output: asis`
renders printed text as markdown; `#| slow` and `#| gpu` cells carry a note saying when they run; the H1 and the
`> summary` line give each page its title and description; backticked public names become links to their API
entry and backticked notebook names link to the notebook's page.

Usage: python tools/build_site.py [--check]   (--check then runs tools/check_site.py in headless Chromium)
"""
import argparse, ast, importlib, inspect, json, re, shutil, subprocess, sys, time
from pathlib import Path
from urllib.parse import unquote

root = Path(__file__).resolve().parents[1]
out_root = root/'_site'
src_dir, html_dir = out_root/'src', out_root/'html'
lib = 'posenc_nb'

# --- discovery -------------------------------------------------------------------------------------------------

def discover_notebooks(nbs=root/'nbs'):
    "Every page notebook in `nbs/`, in reading order: `index` first, then by file name (the numbers)."
    nbs_ = sorted(p for p in nbs.glob('*.ipynb') if not p.name.startswith(('_', '.')))
    return sorted(nbs_, key=lambda p: (p.stem != 'index', p.name))

def group_of(stem):
    "Sidebar caption for a notebook: the tens digit of its number says what kind of notebook it is."
    m = re.match(r'(\d)\d_', stem)
    if not m: return 'Notebooks'
    return {'0': 'Library', '1': 'Methods', '2': 'Experiments'}.get(m.group(1), 'Notebooks')

_re_dir = re.compile(r'^\s*#\s*\|\s*(.*?)\s*$')

def split_directives(source):
    "nbdev cell directives (`#| key: value` lines at the top of a cell) as a dict, and the rest of the source."
    lines, dirs = source.splitlines(), {}
    i = 0
    while i < len(lines):
        m = _re_dir.match(lines[i])
        if not m:
            if lines[i].strip() == '': i += 1; continue
            break
        k, _, v = m.group(1).partition(' ')
        dirs[k.rstrip(':')] = v.strip()
        i += 1
    return dirs, '\n'.join(lines[i:])

def title_summary(nb):
    "The notebook's H1 and its `> summary` line (nbdev's front matter), and the index of the cell holding them."
    for i, c in enumerate(nb['cells']):
        if c['cell_type'] != 'markdown': continue
        m = re.search(r'^#\s+(.+?)\s*$', c['source'], re.M)
        if m:
            s = re.search(r'^>\s*(.+?)\s*$', c['source'][m.end():], re.M)
            return m.group(1), (s.group(1) if s else ''), i
    return None, '', None

def default_exp(nb):
    for c in nb['cells']:
        if c['cell_type'] == 'code':
            d, _ = split_directives(c['source'])
            if 'default_exp' in d: return d['default_exp'].split()[0]
    return None

# --- API blocks --------------------------------------------------------------------------------------------------

def _fmt_anno(a):
    if a is inspect.Parameter.empty: return ''
    if isinstance(a, type): return a.__qualname__ if a.__module__ == 'builtins' else f'{a.__module__}.{a.__qualname__}'
    return str(a).replace('typing.', '')

def _fmt_default(d):
    if d is inspect.Parameter.empty: return ''
    if callable(d) and hasattr(d, '__qualname__'): return d.__qualname__
    r = repr(d)
    return re.sub(r' at 0x[0-9a-f]+', '', r)

def _cell(s): return s.replace('|', '\\|').replace('\n', ' ')

def _code(s):
    "Inline code span that survives backticks inside `s`."
    if not s: return ''
    return f'`` {s} ``' if '`' in s else f'`{s}`'

def signature_of(obj):
    try: sig = inspect.signature(obj)
    except (TypeError, ValueError): return '(...)'
    params = []
    for p in sig.parameters.values():
        s = p.name if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) else ('*' if p.kind == p.VAR_POSITIONAL else '**') + p.name
        if p.annotation is not p.empty: s += f': {_fmt_anno(p.annotation)}'
        if p.default is not p.empty: s += f' = {_fmt_default(p.default)}'
        params.append(s)
    # keyword-only marker
    kinds = [p.kind for p in sig.parameters.values()]
    if inspect.Parameter.KEYWORD_ONLY in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds:
        params.insert(kinds.index(inspect.Parameter.KEYWORD_ONLY), '*')
    ret = f' -> {_fmt_anno(sig.return_annotation)}' if sig.return_annotation is not sig.empty else ''
    return '(' + ', '.join(params) + ')' + ret

def param_table(obj):
    "Markdown table of parameters from fastcore's docments: name, type, default, inline doc."
    from fastcore.docments import docments
    try: d = docments(obj, full=True)
    except Exception: return ''
    rows = []
    for name, v in d.items():
        if name in ('self', 'cls'): continue
        anno, default, doc = _fmt_anno(v['anno']), _fmt_default(v['default']), v['docment'] or ''
        if name == 'return':
            if doc: rows.append(f"| **Returns** | {_code(_cell(anno))} |  | {_cell(doc)} |")
            continue
        rows.append(f'| `{name}` | {_code(_cell(anno))} | {_code(_cell(default))} | {_cell(doc)} |')
    if not rows: return ''
    return '\n'.join(['|  | Type | Default | Details |', '|---|---|---|---|', *rows])

def md_escape_text(s):
    "Docstrings are plain text: keep code spans, escape what markdown would turn into emphasis or HTML."
    parts = re.split(r'(`[^`]*`|\$[^$]+\$)', s)
    return ''.join(p if p[:1] in '`$' else re.sub(r'([*<_])', r'\\\1', p) for p in parts)

def api_kind(obj, qualname):
    if inspect.isclass(obj): return 'class'
    if isinstance(obj, property): return 'property'
    if callable(obj): return 'method' if '.' in qualname else 'function'
    return 'data'

def api_block(obj, qualname, module, xref, indexed=True, label=None, source_link=None):
    "A MyST `py:*` directive for `obj` with its docstring and parameter table."
    kind = api_kind(obj, qualname)
    head = f'{qualname}' + (signature_of(obj) if kind in ('function', 'method', 'class') else '')
    opts = [f':module: {module}']
    if not indexed: opts.append(':no-index:')
    body = []
    if kind == 'data':
        r = repr(obj)
        opts.append(f':value: {r if len(r) < 120 else r[:117] + "..."}')
        opts.append(f':type: {type(obj).__name__}')
    else:
        doc = inspect.getdoc(obj if not isinstance(obj, property) else obj.fget) or ''
        if doc: body.append(xref(md_escape_text(doc)))
        t = param_table(obj) if kind in ('function', 'method', 'class') else ''
        if t: body.append(xref(t))
    if source_link: body.append(source_link)
    fence = '````'
    out = [f'({label})=', ''] if label else []
    out += [f'{fence}{{py:{kind}}} {head}', *opts, '', '\n\n'.join(body), fence]
    return '\n'.join(out)

# --- the symbol table ---------------------------------------------------------------------------------------------

class Symbols:
    "Public names of every module (`__all__`), where each is defined, and which notebook page documents it."
    def __init__(self, pages):
        sys.path.insert(0, str(root))
        self.mods = {}                        # module name -> module object
        self.objs = {}                        # full name (posenc_nb.mod.qualname) -> object
        self.short = {}                       # short name (qualname) -> full name, first definition wins
        self.page_of_mod = {m: p for p, m in pages.items() if m}
        for f in sorted((root/lib).glob('*.py')):
            if f.stem.startswith('_'): continue
            mod = importlib.import_module(f'{lib}.{f.stem}')
            self.mods[mod.__name__] = mod
            for n in getattr(mod, '__all__', []):
                o = getattr(mod, n, None)
                if o is None: continue
                if getattr(o, '__module__', mod.__name__) not in (mod.__name__, None) and (inspect.isclass(o) or inspect.isfunction(o)):
                    continue                  # a re-export: documented where it is defined
                full = f'{mod.__name__}.{n}'
                self.objs[full] = o
                self.short.setdefault(n, full)
                if inspect.isclass(o):
                    for mn, mo in self.methods(o): self.objs[f'{full}.{mn}'] = mo; self.short.setdefault(f'{n}.{mn}', f'{full}.{mn}')

    @staticmethod
    def methods(cls):
        "Public methods and properties defined on the class itself, with a docstring."
        for mn, mo in cls.__dict__.items():
            if mn.startswith('_'): continue
            f = mo.__func__ if isinstance(mo, (staticmethod, classmethod)) else mo
            if (inspect.isfunction(f) or isinstance(f, property)) and inspect.getdoc(f if not isinstance(f, property) else f.fget):
                yield mn, f

    def resolve(self, module, qualname):
        "Object for `qualname` (maybe `Class.method`) in `module`, or None."
        o = self.mods.get(module)
        for part in qualname.split('.'):
            o = getattr(o, part, None) if o is not None else None
        return o

# --- markdown cross references -------------------------------------------------------------------------------

def make_xref(syms, stems, local_labels, prefix=''):
    "Function turning backticked public names and notebook names in markdown into links inside the site."
    def one(m):
        name = m.group(1)
        bare = name[:-2] if name.endswith('()') else name
        if bare in local_labels: return f'[`{name}`](#{local_labels[bare]})'
        if bare in syms.short: return f'{{py:obj}}`{name} <{syms.short[bare]}>`'
        if bare in stems: return f'[`{name}`]({prefix}{bare}.ipynb)'
        if bare in syms.mods and bare.count('.') == 1: return f'[`{name}`]({prefix}api/{bare.split(".")[1]}.md)'
        return m.group(0)
    def xref(text):
        out, fenced = [], False
        for line in text.split('\n'):
            if re.match(r'\s*(```|~~~)', line): fenced = not fenced; out.append(line); continue
            out.append(line if fenced else re.sub(r'(?<![`\w])`([A-Za-z0-9_][\w.]*(?:\(\))?)`(?!`)', one, line))
        return '\n'.join(out)
    return xref

# --- notebook processing ----------------------------------------------------------------------------------------

_ansi = re.compile(r'\x1b\[[0-9;]*[A-Za-z]')

def _defined_names(source):
    "Top-level public functions and classes defined in a cell (and `@patch` methods as `Class.method`)."
    try: tree = ast.parse(source)
    except SyntaxError: return []
    names = []
    for o in tree.body:
        if not isinstance(o, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): continue
        if o.name.startswith('_') and not o.name.startswith('__'): continue
        patched = [d for d in o.decorator_list if getattr(d, 'id', None) == 'patch' or getattr(getattr(d, 'func', None), 'id', None) == 'patch']
        if patched and o.args.args and o.args.args[0].annotation is not None:
            names.append(f'{ast.unparse(o.args.args[0].annotation)}.{o.name}')
        else: names.append(o.name)
    return names

_re_local = re.compile(r'(\]\(|<img [^>]*src=")(?!https?:|mailto:|#|data:)([^)"\s#]+)')

def local_files(md, base):
    "Images and files a markdown cell points to (outside nbs/ too): copied under the site's `_files/`, links rewritten."
    def one(m):
        ref = m.group(2)
        if ref.endswith('.ipynb') or ref.endswith('.md'): return m.group(0)
        f = (base/unquote(ref)).resolve()
        try: rel = f.relative_to(root)
        except ValueError: return m.group(0)
        if not f.is_file(): return m.group(0)
        for d in (src_dir/'_files', src_dir/'_extra'/'_files'):    # Sphinx copies the first; raw <img> needs the second
            (d/rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, d/rel)
        return m.group(1) + f'_files/{rel.as_posix()}'
    return _re_local.sub(one, md)

def md_cell(source, **meta):
    import nbformat
    c = nbformat.v4.new_markdown_cell(source)
    if meta: c.metadata.update(meta)
    return c

FLAG_NOTES = {
    'slow': 'Slow cell: skipped by the default tests (`nbdev_test`); `nbdev_test --flags slow` runs it.',
    'gpu': 'GPU cell: needs CUDA; it prints a note and skips itself without a GPU, and `nbdev_test --flags gpu` runs it on one.',
}

def process_notebook(path, syms, stems, pages):
    "nbdev's site semantics as a plain notebook that MyST-NB renders without executing anything."
    import nbformat
    nb = nbformat.read(str(path), as_version=4)
    module = pages.get(path.stem)
    modname = f'{lib}.{module}' if module else None
    title, summary, ti = title_summary(nb)
    # which names this page documents: exported defs, in order
    documented = []
    for c in nb.cells:
        if c.cell_type != 'code': continue
        d, body = split_directives(c.source)
        if ({'export', 'exports'} & d.keys()) and 'hide' not in d and modname:
            documented += [n for n in _defined_names(body) if syms.resolve(modname, n) is not None and n not in documented]
    labels, used = {}, set()
    for n in documented:                      # `Positions.max` and `positions_max` would both read sd-core-positions-max
        base = f'sd-{module}-{n}'.replace('.', '--').replace('_', '-').lower(); lab, k = base, 1
        while lab in used: k += 1; lab = f'{base}-{k}'
        labels[n] = lab; used.add(lab)
    xref = make_xref(syms, stems, labels)
    cells, shown = [], set()
    for i, c in enumerate(nb.cells):
        if c.cell_type == 'raw': continue                       # front matter and raw cells are not shown
        if c.cell_type == 'markdown':
            src = c.source
            if i == ti and summary:                             # the summary line becomes the page description
                src = re.sub(r'^>\s*' + re.escape(summary) + r'\s*$', '{.description}\n' + summary.replace('\\', '\\\\'), src, count=1, flags=re.M)
            cells.append(md_cell(xref(local_files(src, path.parent)), **({'attachments': c.attachments} if 'attachments' in c else {})))
            continue
        d, body = split_directives(c.source)
        if d.get('include') == 'false': continue
        if {'export', 'exports', 'exporti'} & d.keys() and 'hide' not in d and modname:
            for n in _defined_names(body):
                o = syms.resolve(modname, n)
                if o is None or n in shown: continue           # a redefinition is documented once, where it first appears
                shown.add(n)
                full = f'{modname}.{n}'
                link = f'<small>API reference: {{py:obj}}`{n} <{full}>`</small>' if full in syms.objs else None
                cells.append(md_cell(api_block(o, n, modname, xref, indexed=False, label=labels[n], source_link=link)))
            if 'exports' not in d: continue
        if {'hide', 'export', 'exporti', 'default_exp'} & d.keys(): continue
        if re.fullmatch(r'\s*import nbdev;?\s*nbdev\.nbdev_export\(\)\s*', body): continue
        for flag, note in FLAG_NOTES.items():
            if flag in d: cells.append(md_cell(f'{{.cell-flag}}\n{note}'))
        body = '\n'.join(l for l in body.splitlines() if not re.search(r'#\|\s*hide_line\s*$', l))
        c.source = body
        tags = []
        if d.get('echo') == 'false': tags.append('remove-input')
        if d.get('output') == 'false': tags.append('remove-output')
        outs = []
        for o in c.get('outputs', []):
            if o.get('output_type') == 'stream':
                o['text'] = _ansi.sub('', o['text'])
                if d.get('output') == 'asis':
                    o = nbformat.v4.new_output('display_data', data={'text/markdown': o['text']})
            elif o.get('output_type') == 'error':
                o['traceback'] = [_ansi.sub('', t) for t in o.get('traceback', [])]
            elif d.get('output') == 'asis' and 'text/plain' in o.get('data', {}) and len(o['data']) == 1:
                o['data'] = {'text/markdown': o['data']['text/plain']}
            outs.append(o)
        c.outputs = outs
        c.metadata = {'tags': tags} if tags else {}
        if not body.strip() and not outs: continue
        cells.append(c)
    nb.cells = cells
    nb.metadata = {'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'},
                   'language_info': {'name': 'python'}}
    return nb, title, summary

# --- API reference pages -----------------------------------------------------------------------------------------

def api_pages(syms, stems, pages, titles):
    "One page per module: every name in its `__all__`, with signature, docstring and parameter table."
    d = src_dir/'api'
    d.mkdir(parents=True, exist_ok=True)
    mod_page = {m: p for p, m in pages.items() if m}
    written = []
    for mn, mod in syms.mods.items():
        short = mn.split('.', 1)[1]
        nbstem = mod_page.get(short)
        names = [n for n in getattr(mod, '__all__', []) if f'{mn}.{n}' in syms.objs]
        if not names: continue
        xref = make_xref(syms, stems, {}, prefix='../')
        nb_link = f'[{titles.get(nbstem, nbstem)}](../{nbstem}.ipynb)' if nbstem else ''
        lines = [f'# `{mn}`', '', f'{{.description}}\nPublic API of `{mn}` ({len(names)} names)' + (f', derived and tested in {nb_link}.' if nb_link else '.'), '']
        for n in names:
            full = f'{mn}.{n}'
            o = syms.objs[full]
            lines += [api_block(o, n, mn, xref, indexed=True), '']
            if inspect.isclass(o):
                for m, mo in syms.methods(o):
                    lines += [api_block(mo, f'{n}.{m}', mn, xref, indexed=True), '']
        (d/f'{short}.md').write_text('\n'.join(lines))
        written.append((short, mn, len(names)))
    idx = ['# API reference', '', '{.description}\nEvery public name of every module (each module\'s `__all__`), '
           'with its signature, docstring and a table of its parameters (types, defaults and inline docs).', '',
           '| module | names | notebook |', '|---|---|---|']
    for short, mn, k in written:
        nbstem = mod_page.get(short)
        idx.append(f'| [`{mn}`]({short}.md) | {k} | ' + (f'[{titles.get(nbstem, nbstem)}](../{nbstem}.ipynb)' if nbstem else '') + ' |')
    idx += ['', '```{toctree}', ':hidden:', '', *[s for s, _, _ in written], '```', '']
    (d/'index.md').write_text('\n'.join(idx))
    return written

# --- build -------------------------------------------------------------------------------------------------------

def vendor_mathjax(static):
    "Copy MathJax 3 (CommonHTML output, TeX input and its extensions, fonts) from the pinned PyPI package."
    from importlib.metadata import distribution
    mj = Path(distribution('sphinx-mathjax-offline').locate_file('sphinx-mathjax-offline/static/mathjax'))
    if not (mj/'tex-chtml.js').exists(): raise SystemExit(f'MathJax not found at {mj}: pip install -c constraints.txt sphinx-mathjax-offline')
    dst = static/'mathjax'
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    shutil.copy(mj/'tex-chtml.js', dst)
    for sub in ('output/chtml/fonts/woff-v2', 'input/tex/extensions'):
        shutil.copytree(mj/sub, dst/sub)

def build(jobs='auto'):
    import nbformat
    t0 = time.time()
    nbs = discover_notebooks()
    pages = {}
    for p in nbs:
        pages[p.stem] = default_exp(nbformat.read(str(p), as_version=4))
    stems = set(pages)
    syms = Symbols(pages)
    shutil.rmtree(src_dir, ignore_errors=True)
    src_dir.mkdir(parents=True)
    meta, titles, problems = {}, {}, []
    for p in nbs:
        nb, title, summary = process_notebook(p, syms, stems, pages)
        if not title: problems.append(f'{p.name}: no H1 title (a markdown cell starting with "# Title")')
        titles[p.stem] = title or p.stem
        meta[p.stem] = {'title': title, 'description': summary, 'source': f'nbs/{p.name}'}
        nbformat.write(nb, str(src_dir/p.name))
    if problems: raise SystemExit('\n'.join(problems))
    mods = api_pages(syms, stems, pages, titles)
    meta['api/index'] = {'title': 'API reference', 'description': 'Every public name of every module'}
    for short, mn, k in mods: meta[f'api/{short}'] = {'title': mn, 'description': f'Public API of {mn}'}
    # the reading order: index is the root, then one sidebar group per kind of notebook, then the API reference
    groups = {}
    for p in nbs[1:]: groups.setdefault(group_of(p.stem), []).append(p.stem)
    toc = ''.join(f'\n```{{toctree}}\n:hidden:\n:caption: {g}\n\n' + '\n'.join(s) + '\n```\n' for g, s in groups.items())
    toc += '\n```{toctree}\n:hidden:\n:caption: Reference\n\napi/index\n```\n'
    idx_nb = nbformat.read(str(src_dir/'index.ipynb'), as_version=4)
    idx_nb.cells.append(md_cell(toc))
    nbformat.write(idx_nb, str(src_dir/'index.ipynb'))
    (src_dir/'_pages.json').write_text(json.dumps(meta, indent=1))
    static = src_dir/'_static'
    static.mkdir(exist_ok=True)
    vendor_mathjax(static)
    shutil.copy(root/'docs'/'site.css', static/'site.css')
    if (root/'nbs'/'styles.css').exists(): shutil.copy(root/'nbs'/'styles.css', static/'styles.css')
    t1 = time.time()
    shutil.rmtree(html_dir, ignore_errors=True)
    cmd = [sys.executable, '-m', 'sphinx', '-b', 'html', '-c', str(root/'docs'), '-W', '--keep-going', '-q',
           '-j', str(jobs), str(src_dir), str(html_dir)]
    r = subprocess.run(cmd, cwd=root)
    if r.returncode: raise SystemExit(f'sphinx-build failed (exit {r.returncode}); warnings above')
    print(f'site: {len(nbs)} notebooks + {len(mods) + 1} API pages -> {html_dir.relative_to(root)}/index.html '
          f'(prepare {t1 - t0:.1f} s, sphinx {time.time() - t1:.1f} s)')

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--check', action='store_true', help='then check the pages in headless Chromium (tools/check_site.py)')
    ap.add_argument('-j', '--jobs', default='1', help="sphinx-build parallel jobs ('auto' for all cores)")
    a = ap.parse_args(argv)
    build(a.jobs)
    if a.check: return subprocess.run([sys.executable, str(root/'tools'/'check_site.py')], cwd=root).returncode
    return 0

if __name__ == '__main__': sys.exit(main())

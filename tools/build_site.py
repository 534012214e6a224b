#!/usr/bin/env python3
"""Build the documentation site without Quarto: nbdev's notebook semantics, rendered by Sphinx + MyST-NB.

`nbdev_docs` hands processed notebooks to Quarto, which is not installed everywhere. Where it is missing, this
script does nbdev's processing step itself (a small nbformat pass into `_site/src/`) and lets Sphinx with MyST-NB
and the Furo theme render the result into `_site/html/`, offline: sidebar in reading order, full-text search,
per-page contents, previous/next links, MathJax served from the site itself, and an API reference generated from
each module's `__all__`, signatures and inline parameter docs (docments).

Every page shows what its cells compute: the build executes each notebook first, the way `nbdev_test` does (execnb's
`CaptureShell`, working directory `nbs/`, every cell in order, hidden and exported ones included), skipping the cells
`nbdev_test` skips (`#| slow`, `#| gpu`, `#| eval: false` and the export call); a skipped cell is shown with its note
(and any output committed with it), every other cell with the outputs of this run. Why execute at build time rather
than commit outputs: committed outputs go stale silently when the library or the records change, they make every
notebook edit a merge conflict, and `nbdev_clean` would have to keep them; executed pages are as fresh as the
tests. The executed notebooks are cached in `_site/cache/` (or `--cache DIR`) under a hash of the notebook, the
library's sources and the committed records (`results/`), so an unchanged notebook is not run again; `--workers`
notebooks run at a time, each in its own process (one torch thread each). A notebook that raises stops the build
with its traceback. `--no-execute` renders the committed outputs only (the old behaviour; fast, for layout work).

What the pass does, mirroring nbdev's processors: cells with `#| hide`, `#| export`, `#| exporti` or
`#| default_exp` are dropped, and each exported function or class gets an API block where it was defined
(nbdev's `add_show_docs`); `#| echo: false` hides the code, `#| output: false` the outputs, `#| output: asis`
renders printed text as markdown; `#| slow` and `#| gpu` cells carry a note saying when they run; the H1 and the
`> summary` line give each page its title and description; backticked public names become links to their API
entry and backticked notebook names link to the notebook's page.

Exercise solutions: a code cell starting with `#| exercise-solution` runs (so the tests and this build check it) but
is not shown on the site; the page says where the solution is (the notebook itself).

The execution is the notebook test: `--execute-only` runs it alone (it fails as `nbdev_test` does, with the
traceback), and a later build finds every notebook in the cache, so CI can run the notebooks once for both.

Usage: python tools/build_site.py [--check] [--workers N] [--only 10_rope ...] [--no-execute] [--execute-only]
(--check then runs tools/check_site.py in headless Chromium; --only renders a subset of pages, for development)
"""
import argparse, ast, hashlib, importlib, inspect, json, os, re, shutil, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote

root = Path(__file__).resolve().parents[1]
out_root = root/'_site'
src_dir, html_dir, cache_root = out_root/'src', out_root/'html', out_root/'cache'
lib = 'posenc_nb'

# --- discovery -------------------------------------------------------------------------------------------------

def discover_notebooks(nbs=root/'nbs'):
    "Every page notebook in `nbs/`, in reading order: `index`, the unnumbered pages (the course), then by number."
    nbs_ = sorted(p for p in nbs.glob('*.ipynb') if not p.name.startswith(('_', '.')))
    return sorted(nbs_, key=lambda p: (p.stem != 'index', p.stem[:1].isdigit(), p.name))

def group_of(stem):
    "Sidebar caption for a notebook: the tens digit of its number says what kind of notebook it is."
    m = re.match(r'(\d)\d_', stem)
    if not m: return 'Start here'
    return {'0': 'Library', '1': 'Methods', '2': 'Experiments', '3': 'Experiments'}.get(m.group(1), 'Notebooks')

def course_lectures(course=root/'nbs'/'course.ipynb'):
    """The course's lectures in order, [(caption, [stems])]: `LECTURES` of the course notebook (its code) and each
    lecture's title from its heading (`## Lecture 1: Positions in attention`) or a table row (`| 1. Positions in
    attention | ...`); [] when there is no course."""
    if not course.exists(): return []
    cells = json.loads(course.read_text())['cells']
    lectures, titles = None, {}
    for c in cells:
        src = ''.join(c['source'])
        if c['cell_type'] == 'markdown':
            titles.update((int(n), t.strip()) for n, t in re.findall(r'^\|\s*(\d+)\.\s*([^|]+?)\s*\|', src, re.M))
            titles.update((int(n), t.strip()) for n, t in re.findall(r'^##\s+Lecture\s+(\d+):\s*(.+?)\s*$', src, re.M))
            continue
        try: tree = ast.parse(split_directives(src)[1])
        except SyntaxError: continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == 'LECTURES' for t in node.targets):
                lectures = ast.literal_eval(node.value)
    if not lectures: return []
    return [(f'Lecture {k}: {titles[k]}' if k in titles else (f'Lecture {k}' if isinstance(k, int) else 'Afterwards'),
             list(v)) for k, v in lectures.items()]

def toc_groups(stems, lectures=None):
    """Sidebar groups {caption: [stems]} of the pages `stems` (index excluded): the unnumbered pages (the course),
    then each lecture's notebooks in course order, then the notebooks no lecture names, by kind (`group_of`)."""
    lectures = course_lectures() if lectures is None else lectures
    groups, placed = {}, set()
    for s in stems:
        if not s[:1].isdigit(): groups.setdefault(group_of(s), []).append(s); placed.add(s)
    for caption, lec in lectures:
        mine = [s for s in lec if s in stems and s not in placed]
        if mine: groups[caption] = mine; placed.update(mine)
    for s in stems:
        if s not in placed: groups.setdefault(group_of(s), []).append(s)
    return groups

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
        opts.append(f':value: {json.dumps(r if len(r) < 120 else r[:117] + "...")}')   # a YAML string, whatever r holds
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

# --- glossary links ------------------------------------------------------------------------------------------------

def glossary_terms(glossary=root/'nbs'/'glossary.ipynb'):
    "{term: anchor} of the glossary page: each `### term` heading, anchored as Sphinx does (lower case, dashes)."
    if not glossary.exists(): return {}
    cells = json.loads(glossary.read_text())['cells']
    text = '\n'.join(''.join(c['source']) for c in cells if c['cell_type'] == 'markdown')
    return {t: re.sub(r'[^a-z0-9]+', '-', t.lower()).strip('-') for t in re.findall(r'^###\s+(.+?)\s*$', text, re.M)}

_re_skip = re.compile(r'(```[\s\S]*?```|`[^`]*`|\$\$[\s\S]+?\$\$|\$[^$\n]+\$|\[[^\]]*\]\([^)]*\)'
                      r'|\{[^}]*\}`[^`]*`|<[^>]+>|^#.*$)', re.M)

def make_glossary_linker(terms, prefix=''):
    """Function linking the first use on a page of each glossary term (a whole word, case-insensitive, plurals too) to
    its entry; code, math, links, HTML and headings are left alone. One linker per page: it remembers what it linked."""
    done = set()
    pats = {t: re.compile(rf'(?<![\w-])({re.escape(t)}s?)(?![\w-])', re.I)
            for t in sorted(terms, key=len, reverse=True)}
    def link(text):
        parts = _re_skip.split(text)
        for i in range(0, len(parts), 2):
            for t, pat in pats.items():
                if t in done: continue
                m = pat.search(parts[i])
                if m:
                    done.add(t)
                    linked = f'[{m.group(1)}]({prefix}glossary.ipynb#{terms[t]})'
                    parts[i] = parts[i][:m.start()] + linked + parts[i][m.end():]
        return ''.join(p for p in parts if p is not None)
    return link

# --- execution ---------------------------------------------------------------------------------------------------

EXECUTOR_VERSION = 2                          # part of the cache key: bump it when execute_here changes what it writes
FIGURE_AUDIT = 'posenc_figure_audit'          # executed notebook's metadata: {'checked': figures, 'failures': [...]}

def skip_flags():
    "The cell flags `nbdev_test` skips unless asked (settings.ini's `tst_flags`: slow and gpu)."
    m = re.search(r'^tst_flags\s*=\s*(.*)$', (root/'settings.ini').read_text(), re.M)
    return set(m.group(1).split()) if m else {'slow', 'gpu'}

def runs_in_build(source, flags):
    "Whether the build runs a code cell: not where `nbdev_test` would skip it (a test flag, `eval: false`, the export)."
    d, body = split_directives(source)
    if 'nbdev_export(' in body or d.get('eval', '').lower() == 'false': return False
    return not (set(flags) & d.keys())

def deps_digest():
    "Hash of what every executed page depends on besides its notebook: library sources, records, the executor, torch."
    from importlib.metadata import version
    h = hashlib.sha256(f'{EXECUTOR_VERSION} {sys.version} torch {version("torch")}'.encode())
    files = [root/'settings.ini', *sorted((root/lib).glob('*.py')),
             *sorted(f for f in (root/'results').rglob('*') if f.is_file())]
    for f in files:
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()

def audit_figures(name):
    """From now on, every figure rendered in this process (as a notebook output, or saved) is checked against the
    palette and the phone legend size (`posenc_nb.palette.figure_failures`); returns the audit, filled as figures render."""
    audit = {'checked': 0, 'failures': []}
    try:
        from matplotlib.backend_bases import FigureCanvasBase
        from posenc_nb.palette import figure_failures
    except ImportError: return audit
    render = FigureCanvasBase.print_figure
    def audited(canvas, *a, **kw):
        audit['checked'] += 1
        for f in figure_failures(canvas.figure, f"{name}: figure {audit['checked']}"):
            if f not in audit['failures']: audit['failures'].append(f)
        return render(canvas, *a, **kw)
    FigureCanvasBase.print_figure = audited
    return audit

def execute_here(src, dest):
    """Run notebook `src` in this process as `nbdev_test` does and write it, with this run's outputs and the audit of
    its figures (metadata `FIGURE_AUDIT`), to `dest`."""
    from execnb.nbio import read_nb, write_nb
    from execnb.shell import CaptureShell
    src, flags = Path(src).resolve(), skip_flags()
    os.environ['IN_TEST'] = '1'
    sys.path.insert(0, str(root))
    nb = read_nb(src)
    def skip(cell):
        if cell.cell_type != 'code' or not runs_in_build(cell.source, flags): return True
        cell.outputs = []                     # a cell that prints nothing this time shows nothing
        return False
    shell = CaptureShell(src)
    os.chdir(src.parent)
    audit = audit_figures(src.stem)
    try: shell.run_all(nb, exc_stop=True, preproc=skip)
    except Exception:
        sys.stderr.write(shell.prettytb(fname=src) + '\n')
        return 1
    nb.metadata[FIGURE_AUDIT] = audit
    write_nb(nb, dest)
    t = os.times()
    print(f'cpu {t.user + t.system + t.children_user + t.children_system:.1f}')   # for the build's summary
    return 0

def execute_all(nbs, cache, workers=2, reuse=True):
    """Executed copies of `nbs` ({path: executed file}): cached ones where nothing they depend on changed, the rest run
    (`reuse=False`: every one runs, and the cache is refreshed; the notebook tests, tools/test_notebooks.py)."""
    cache.mkdir(parents=True, exist_ok=True)
    deps = deps_digest()
    done, todo = {}, []
    for p in nbs:
        key = hashlib.sha256(p.read_bytes() + deps.encode()).hexdigest()[:20]
        done[p] = cache/f'{p.stem}-{key}.ipynb'
        if not (reuse and done[p].exists()): todo.append(p)
    todo.sort(key=lambda p: -p.stat().st_size)                 # the largest first, so the workers finish together
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1', 'MPLBACKEND': 'Agg', 'PYTHONUNBUFFERED': '1'}
    def run(p):
        t, tmp = time.time(), done[p].with_suffix('.part')
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), '--execute-one', str(p), str(tmp)],
                           cwd=p.parent, env=env, capture_output=True, text=True)
        if r.returncode == 0:
            for old in cache.glob(f'{p.stem}-*.ipynb'): old.unlink()
            tmp.replace(done[p])
        return p, r, time.time() - t
    def cpu(r): return float(m.group(1)) if (m := re.search(r'^cpu ([\d.]+)$', r.stdout, re.M)) else 0.
    t0 = time.time()
    with ThreadPoolExecutor(max(1, int(workers))) as ex: runs = list(ex.map(run, todo))
    failed = [(p, r) for p, r, _ in runs if r.returncode]
    for p, r, dt in sorted(runs, key=lambda x: -x[2]):
        print(f'  executed {p.name}: {dt:.0f} s wall, {cpu(r):.0f} s CPU' + (' FAILED' if r.returncode else ''))
    print(f'execute: {len(todo)} notebooks run ({len(nbs) - len(todo)} cached) in {time.time() - t0:.0f} s wall '
          f'({sum(cpu(r) for _, r, _ in runs):.0f} s CPU), {workers} at a time')
    if failed: raise SystemExit('\n\n'.join(f'{p.name} failed while executing for the site:\n{r.stderr[-4000:]}' for p, r in failed))
    return done

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

def show_doc_names(body):
    "The names a cell of nothing but `show_doc(name, ...)` calls documents, else None."
    try: tree = ast.parse(body)
    except SyntaxError: return None
    calls = [getattr(o, 'value', None) for o in tree.body]
    if not calls or not all(isinstance(c, ast.Call) and getattr(c.func, 'id', None) == 'show_doc' and c.args for c in calls):
        return None
    return [ast.unparse(c.args[0]) for c in calls]

def export_target(d, modname):
    "The module an export cell writes to: its own (`#| export other_module`) or the notebook's `default_exp`."
    own = (d.get('export') or d.get('exports') or d.get('exporti') or '').split()
    return f'{lib}.{own[0]}' if own else modname

def _quoted(call, body):
    """The string literals `body` passes to `call(` (or to the keyword `call=`), f-string fields and TeX commands
    elided."""
    open_ = r'\s*' if call.endswith('=') else r'\s*\(\s*'
    found = [m.group(2) for m in re.finditer(rf"\b{call}{open_}[rfRF]*(['\"])(.+?)\1", body)]
    return [re.sub(r'\s+', ' ', re.sub(r'\\[A-Za-z]+|[{}$\\]', ' ', re.sub(r'\{[^{}]*\}', '…', f))).strip()
            for f in found]

def figure_text(body):
    """(caption, alt text) for a cell that draws a figure, from what its code writes on the plot: its titles, and its
    axis labels for the alt text; where it writes none, the plotting helper it calls."""
    titles = list(dict.fromkeys(_quoted('set_title', body) + _quoted('suptitle', body) + _quoted('title', body)
                                + _quoted('title=', body)))
    xs = list(dict.fromkeys(_quoted('set_xlabel', body) + _quoted('xlabel=', body)))
    ys = list(dict.fromkeys(_quoted('set_ylabel', body) + _quoted('ylabel=', body)))
    helper = re.search(r'\b(\w*plot\w*)\(', body)
    caption = '; '.join(titles) or (f'drawn by `{helper.group(1)}`' if helper else 'drawn by the code above')
    caption = caption[:1].upper() + caption[1:]
    axes = [f"x: {', '.join(xs)}" if xs else '', f"y: {', '.join(ys)}" if ys else '']
    alt = caption.replace('`', '') + (f" ({'; '.join(a for a in axes if a)})" if any(axes) else '')
    if len(alt.split()) < 2:               # a bare label (e.g. a config's name as the title): say what draws it
        alt += f", drawn by {helper.group(1)}" if helper else ', drawn by the code above'
    return caption, alt

def md_cell(source, **meta):
    import nbformat
    c = nbformat.v4.new_markdown_cell(source)
    if meta: c.metadata.update(meta)
    return c

FLAG_NOTES = {
    'slow': 'Slow cell: skipped by the default tests (`nbdev_test`); `nbdev_test --flags slow` runs it.',
    'gpu': 'GPU cell: needs CUDA; it prints a note and skips itself without a GPU, and `nbdev_test --flags gpu` runs it on one.',
}

SOLUTION_NOTE = ('Solution: hidden on the site; it is the next cell of the notebook, and the tests run it '
                 '(it calls the check and asserts that a wrong answer fails).')

def process_notebook(path, syms, stems, pages, executed=None):
    "nbdev's site semantics as a plain notebook that MyST-NB renders as is (outputs from `executed` where given)."
    import nbformat
    nb = nbformat.read(str(executed or path), as_version=4)
    module = pages.get(path.stem)
    modname = f'{lib}.{module}' if module else None
    title, summary, ti = title_summary(nb)
    # which names this page documents: exported defs, in order
    documented = []
    for c in nb.cells:
        if c.cell_type != 'code': continue
        d, body = split_directives(c.source)
        if ({'export', 'exports'} & d.keys()) and 'hide' not in d and export_target(d, modname):
            target = export_target(d, modname)
            documented += [n for n in _defined_names(body) if syms.resolve(target, n) is not None and n not in documented]
    labels, used = {}, set()
    for n in documented:                      # `Positions.max` and `positions_max` would both read sd-core-positions-max
        base = f'sd-{module}-{n}'.replace('.', '--').replace('_', '-').lower(); lab, k = base, 1
        while lab in used: k += 1; lab = f'{base}-{k}'
        labels[n] = lab; used.add(lab)
    xref = make_xref(syms, stems, labels)
    gloss = make_glossary_linker(glossary_terms() if 'glossary' in stems and path.stem != 'glossary' else {})
    cells, shown, n_fig = [], set(), 0
    for i, c in enumerate(nb.cells):
        if c.cell_type == 'raw': continue                       # front matter and raw cells are not shown
        if c.cell_type == 'markdown':
            src = c.source
            if i == ti and summary:                             # the summary line becomes the page description
                src = re.sub(r'^>\s*' + re.escape(summary) + r'\s*$', '{.description}\n' + summary.replace('\\', '\\\\'), src, count=1, flags=re.M)
            if i != ti: src = gloss(src)
            cells.append(md_cell(xref(local_files(src, path.parent)), **({'attachments': c.attachments} if 'attachments' in c else {})))
            continue
        d, body = split_directives(c.source)
        if d.get('include') == 'false': continue
        if {'export', 'exports', 'exporti'} & d.keys() and 'hide' not in d and export_target(d, modname):
            target = export_target(d, modname)
            for n in _defined_names(body):
                o = syms.resolve(target, n)
                if o is None or n in shown: continue           # a redefinition is documented once, where it first appears
                shown.add(n)
                full = f'{target}.{n}'
                link = f'<small>API reference: {{py:obj}}`{n} <{full}>`</small>' if full in syms.objs else None
                cells.append(md_cell(api_block(o, n, target, xref, indexed=False, label=labels[n], source_link=link)))
            if 'exports' not in d: continue
        if {'hide', 'export', 'exporti', 'default_exp'} & d.keys(): continue
        docs = show_doc_names(body)
        if docs is not None:                                    # explicit show_doc cells: the API block, once per page
            for n in docs:
                full = f'{modname}.{n}' if modname and syms.resolve(modname, n) is not None else syms.short.get(n)
                if not full or n in shown: continue
                shown.add(n)
                mod_ = full[:-len(n) - 1]                      # full names end with the documented name
                o = syms.resolve(mod_, n)
                if o is None: continue
                link = f'<small>API reference: {{py:obj}}`{n} <{full}>`</small>' if full in syms.objs else None
                cells.append(md_cell(api_block(o, n, mod_, xref, indexed=False, label=labels.get(n), source_link=link)))
            continue
        if 'exercise-solution' in d:
            cells.append(md_cell(f'{{.cell-flag}}\n{SOLUTION_NOTE}'))
            continue
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
        n_img = sum(any(k.startswith('image/') for k in o.get('data', {})) for o in outs)
        if n_img:
            n_fig += 1
            caption, alt = figure_text(body)
            fig = {'caption': caption}
            n_shown = sum(o.get('output_type') in ('display_data', 'execute_result') for o in outs)
            if n_shown == 1: fig['name'] = f'fig-{path.stem}-{n_fig}'   # MyST-NB names every displayed output: one only
            c.metadata['mystnb'] = {'image': {'alt': alt}, 'figure': fig}
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

def site_counts(src=src_dir):
    "Per page of the built sources: code cells shown, cells with an output, figures (image outputs)."
    import nbformat
    counts = {}
    for f in sorted(src.glob('*.ipynb')):
        code = [c for c in nbformat.read(str(f), as_version=4).cells if c.cell_type == 'code']
        figs = [o for c in code for o in c.get('outputs', []) if any(k.startswith('image/') for k in o.get('data', {}))]
        counts[f.stem] = {'code_cells': len(code), 'with_output': sum(bool(c.get('outputs')) for c in code),
                          'figures': len(figs)}
    return counts

def write_figure_audit(executed, out=None):
    "Collect the executed notebooks' figure audits into _site/figures.json (the browser check reads it); the summary."
    audits = {p.stem: json.loads(Path(e).read_text()).get('metadata', {}).get(FIGURE_AUDIT) for p, e in executed.items()}
    summary = {'executed': bool(executed), 'checked': sum(a['checked'] for a in audits.values() if a),
               'unaudited': sorted(s for s, a in audits.items() if a is None),
               'failures': {s: a['failures'] for s, a in audits.items() if a and a['failures']}}
    (Path(out or out_root)/'figures.json').write_text(json.dumps(summary, indent=1))
    return summary

def build(jobs='1', execute=True, workers=2, cache=cache_root, only=None, exclude=()):
    import nbformat
    t0 = time.time()
    nbs = [p for p in discover_notebooks() if p.stem not in exclude]
    if only: nbs = [p for p in nbs if p.stem == 'index' or p.stem in only]
    pages = {}
    for p in nbs:
        pages[p.stem] = default_exp(nbformat.read(str(p), as_version=4))
    stems = set(pages)
    syms = Symbols(pages)
    shutil.rmtree(src_dir, ignore_errors=True)
    src_dir.mkdir(parents=True)
    executed = execute_all(nbs, Path(cache), workers) if execute else {}
    write_figure_audit(executed, src_dir.parent)
    t_exec = time.time()
    meta, titles, problems = {}, {}, []
    for p in nbs:
        nb, title, summary = process_notebook(p, syms, stems, pages, executed.get(p))
        if not title: problems.append(f'{p.name}: no H1 title (a markdown cell starting with "# Title")')
        titles[p.stem] = title or p.stem
        meta[p.stem] = {'title': title, 'description': summary, 'source': f'nbs/{p.name}'}
        nbformat.write(nb, str(src_dir/p.name))
    if problems: raise SystemExit('\n'.join(problems))
    mods = api_pages(syms, stems, pages, titles)
    meta['api/index'] = {'title': 'API reference', 'description': 'Every public name of every module'}
    for short, mn, k in mods: meta[f'api/{short}'] = {'title': mn, 'description': f'Public API of {mn}'}
    # the reading order: index is the root, then the course's lectures in order (so previous/next follow the course),
    # then one sidebar group per kind of the other notebooks, then the API reference
    groups = toc_groups([p.stem for p in nbs[1:]])
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
    counts = site_counts(src_dir)
    (src_dir.parent/'counts.json').write_text(json.dumps(counts, indent=1))
    tot = {k: sum(c[k] for c in counts.values()) for k in ('code_cells', 'with_output', 'figures')}
    empty = [s for s, c in counts.items() if not c['with_output']]
    print(f'site: {len(nbs)} notebooks + {len(mods) + 1} API pages -> {os.path.relpath(html_dir, root)}/index.html '
          f'(execute {t_exec - t0:.1f} s, prepare {t1 - t_exec:.1f} s, sphinx {time.time() - t1:.1f} s)')
    print(f"pages: {tot['with_output']} of {tot['code_cells']} code cells shown with an output, {tot['figures']} figures; "
          f"pages without output: {', '.join(empty) or 'none'} (per page: _site/counts.json)")

# The student edition's site: the same pages (executed the same way, so the cache of `make site` serves it) without the
# instructor page, into _student/site/html/. No page of either site shows a solution; the student site's note says so.
INSTRUCTOR_PAGES = ('instructor',)
STUDENT_SOLUTION_NOTE = 'Solution: not in the student edition; the check above says whether an answer is right, and why.'

def student_site(out, jobs='1', workers=2, cache=cache_root, only=None):
    "Build the student site into OUT/site/html (OUT/site/src for its sources); returns the html folder."
    global src_dir, html_dir, SOLUTION_NOTE
    saved = src_dir, html_dir, SOLUTION_NOTE
    src_dir, html_dir, SOLUTION_NOTE = Path(out)/'site'/'src', Path(out)/'site'/'html', STUDENT_SOLUTION_NOTE
    try: build(jobs, True, workers, cache, only, exclude=INSTRUCTOR_PAGES)
    finally: src_dir, html_dir, SOLUTION_NOTE = saved
    return Path(out)/'site'/'html'

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--check', action='store_true', help='then check the pages in headless Chromium (tools/check_site.py)')
    ap.add_argument('-j', '--jobs', default='1', help="sphinx-build parallel jobs ('auto' for all cores)")
    ap.add_argument('--workers', type=int, default=int(os.environ.get('NB_WORKERS', 2)),
                    help='notebooks executed at a time (default: $NB_WORKERS or 2)')
    ap.add_argument('--cache', default=str(cache_root), help='folder of executed notebooks (default: _site/cache)')
    ap.add_argument('--no-execute', action='store_true', help='render the committed outputs only, execute nothing')
    ap.add_argument('--only', nargs='+', help='build only these pages (notebook stems) and the index, for development')
    ap.add_argument('--execute-only', action='store_true',
                    help='execute (or find cached) every notebook and stop: the notebook tests, leaving the cache for the site')
    ap.add_argument('--execute-one', nargs=2, metavar=('NOTEBOOK', 'OUT'), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.execute_one: return execute_here(*a.execute_one)
    if a.execute_only:
        nbs = [p for p in discover_notebooks() if not a.only or p.stem == 'index' or p.stem in a.only]
        execute_all(nbs, Path(a.cache), a.workers)
        return 0
    build(a.jobs, not a.no_execute, a.workers, a.cache, a.only)
    if a.check: return subprocess.run([sys.executable, str(root/'tools'/'check_site.py')], cwd=root).returncode
    return 0

if __name__ == '__main__': sys.exit(main())

"""Style figures of the exported package (issue 39 step 6): module sizes, functions over 60 lines, code lines over 120
characters, and statements chained with `;`. `python tools/style_report.py [--check [--allow mod1,mod2]]`; --check exits
1 when a target is missed (no module over 600 lines except the allowed ones, no function over 60, at most 1% of code
lines over 120 characters, no `;`)."""
import ast, io, json, sys, tokenize
from pathlib import Path

MAX_MODULE, MAX_FUNC, MAX_LINE, MAX_LONG_PCT = 600, 60, 120, 1.0


def semicolons(src):
    "Line numbers where a `;` token separates two statements (strings and comments are not tokens of this kind)."
    toks = tokenize.generate_tokens(io.StringIO(src).readline)
    return sorted({t.start[0] for t in toks if t.type == tokenize.OP and t.string == ';'})


def module_figures(path):
    "Lines, code lines (not blank, not only a comment), long code lines, long functions and `;` lines of one module."
    src = path.read_text()
    lines = src.splitlines()
    code = [line for line in lines if line.strip() and not line.lstrip().startswith('#')]
    long_lines = [line for line in code if len(line) > MAX_LINE]
    funcs = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            size = node.end_lineno - node.lineno + 1
            if size > MAX_FUNC:
                funcs.append((size, f'{path.stem}.{node.name}'))
    return dict(lines=len(lines), code=len(code), long=len(long_lines), funcs=funcs, semis=len(semicolons(src)))


def report(root='.'):
    "The figures for every module of posenc_nb/ except the generated _modidx.py."
    pkg = Path(root) / 'posenc_nb'
    mods = {p.stem: module_figures(p) for p in sorted(pkg.glob('*.py')) if p.name != '_modidx.py'}
    code = sum(m['code'] for m in mods.values())
    long_lines = sum(m['long'] for m in mods.values())
    funcs = sorted((f for m in mods.values() for f in m['funcs']), reverse=True)
    return {
        'modules_over_600': {k: m['lines'] for k, m in mods.items() if m['lines'] > MAX_MODULE},
        'largest_modules': sorted(((m['lines'], k) for k, m in mods.items()), reverse=True)[:6],
        'functions_over_60': funcs,
        'code_lines': code,
        'code_lines_over_120': long_lines,
        'pct_over_120': round(100 * long_lines / max(code, 1), 2),
        'semicolon_lines': sum(m['semis'] for m in mods.values()),
    }


def missed(rep, allow=()):
    "The targets a report misses, as one line each; `allow`: modules known to be over the size (named in the Makefile)."
    out = []
    over = {k: v for k, v in rep['modules_over_600'].items() if k not in allow}
    if over:
        out.append(f"modules over {MAX_MODULE} lines: {over}")
    if rep['functions_over_60']:
        out.append(f"functions over {MAX_FUNC} lines: {rep['functions_over_60']}")
    if rep['pct_over_120'] > MAX_LONG_PCT:
        out.append(f"{rep['pct_over_120']}% of code lines over {MAX_LINE} characters (at most {MAX_LONG_PCT}%)")
    if rep['semicolon_lines']:
        out.append(f"{rep['semicolon_lines']} lines chain statements with ';'")
    return out


if __name__ == '__main__':
    rep = report()
    print(json.dumps(rep, indent=1))
    allow = sys.argv[sys.argv.index('--allow') + 1].split(',') if '--allow' in sys.argv else ()
    if '--check' in sys.argv and missed(rep, allow):
        print('\n'.join(missed(rep, allow)))
        sys.exit(1)

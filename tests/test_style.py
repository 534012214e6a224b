"tools/format_notebooks.py: one statement per line and lines within 120 characters, with the code's meaning unchanged."
import ast, importlib.util, shutil, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location('format_notebooks', ROOT / 'tools' / 'format_notebooks.py')
fmt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fmt)
report_spec = importlib.util.spec_from_file_location('style_report', ROOT / 'tools' / 'style_report.py')
style_report = importlib.util.module_from_spec(report_spec)
report_spec.loader.exec_module(style_report)


def same_code(a, b):
    "The two sources compile to the same tree, docstrings compared without their whitespace."
    return ast.dump(fmt.normalize(ast.parse(a))) == ast.dump(fmt.normalize(ast.parse(b)))


def test_chains_become_lines():
    src = "def f(x):\n    a = 1; b = 2\n    if x: a += 1; b += 1\n    else: a = 0; b = 0\n    return a, b"
    out = fmt.format_source(src)
    assert ';' not in out and same_code(src, out)
    assert '    if x:\n        a += 1\n        b += 1\n' in out
    ns = {}
    exec(out, ns)
    assert ns['f'](True) == (2, 3) and ns['f'](False) == (0, 0)


def test_long_lines_are_wrapped():
    msg = 'a message that names the problem and the fix ' * 4
    src = (f"def g(n):\n    'A docstring {'that goes on ' * 12}to the end.'\n"
           f"    if n < 0: raise ValueError(f'n={{n}}: {msg}')\n"
           f"    return dict(first=n, second=n + 1, third=n + 2, fourth=n + 3, fifth=n + 4, sixth=n + 5, seventh=n + 6)"
           f"  # {'a trailing comment ' * 3}\n")
    out = fmt.format_source(src)
    assert max(len(line) for line in out.splitlines()) <= fmt.WIDTH, out
    assert same_code(src, out)
    ns = {}
    exec(src, ns)
    old = ns['g']
    exec(out, ns)
    assert ns['g'](3) == old(3)
    with pytest.raises(ValueError, match='names the problem'):
        ns['g'](-1)


def test_docments_comment_moves_above_its_parameter():
    from fastcore.docments import docments
    src = ("def h(a:int, # short\n      b:int=2, # " + 'a very long docment about b ' * 5 + "\n     ):\n    return a + b\n")
    out = fmt.format_source(src)
    assert max(len(line) for line in out.splitlines()) <= fmt.WIDTH
    path = Path(__file__).parent / '_style_tmp_mod.py'
    path.write_text(out)
    try:
        spec = importlib.util.spec_from_file_location('_style_tmp_mod', path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        docs = docments(mod.h)
    finally:
        path.unlink()
    assert docs['a'] == 'short' and docs['b'].split() == ('a very long docment about b ' * 5).split()


def test_magics_and_directives_are_left_alone():
    src = "#| export\n%time x = 1; y = 2"
    assert fmt.format_source(src) == src
    src = "#| hide\nfrom posenc_nb.core import *"
    assert fmt.format_source(src) == src


def test_report_counts_what_it_should(tmp_path):
    pkg = tmp_path / 'posenc_nb'
    pkg.mkdir()
    body = '\n'.join(f'    x{i} = {i}' for i in range(61))
    (pkg / 'm.py').write_text(f"def long():\n{body}\n    return 0\na = 1; b = 2\ns = '{'x' * 130}'\n")
    rep = style_report.report(tmp_path)
    assert rep['functions_over_60'] == [(63, 'm.long')]
    assert rep['semicolon_lines'] == 1 and rep['code_lines_over_120'] == 1
    assert len(style_report.missed(rep)) == 3


def test_no_machine_paths_in_committed_files():
    "No tracked file names this checkout's absolute path or its Python's (an executed output or a record made here)."
    import subprocess, sysconfig
    here = {str(ROOT), sys.prefix, sysconfig.get_paths()['purelib']}
    files = subprocess.run(['git', 'ls-files', '-z'], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    bad = [f for f in files.split('\0') if f and (ROOT / f).is_file() and (ROOT / f).stat().st_size < 50_000_000
           and any(p in (ROOT / f).read_text(errors='ignore') for p in here)]
    assert not bad, f"absolute paths of this machine in {bad}: use paths relative to the project, POSENC_DATA or tmp_path"

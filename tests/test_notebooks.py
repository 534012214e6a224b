"""Structure of the notebooks: the conventions that nbdev, the docs build and readers rely on."""
import ast, json, re
from pathlib import Path
import pytest

NBS = Path(__file__).resolve().parents[1] / 'nbs'
NUMBERED = sorted(p for p in NBS.glob('[0-9][0-9]_*.ipynb'))

def cells(p): return [(c['cell_type'], ''.join(c['source'])) for c in json.loads(p.read_text())['cells']]
def code_body(src): return '\n'.join('' if l.startswith('#|') else l for l in src.splitlines())

def modules():
    "module name -> notebook number"
    out = {}
    for p in NUMBERED:
        m = re.search(r'^#\|\s*default_exp\s+(\S+)', '\n'.join(s for _, s in cells(p)), re.M)
        if m: out[m.group(1)] = int(p.name[:2])
    return out

@pytest.mark.parametrize('p', NUMBERED, ids=lambda p: p.stem)
def test_notebook_layout(p):
    cs = cells(p)
    code = [s for t, s in cs if t == 'code']
    assert code and re.match(r'#\|\s*default_exp\s+\S+', code[0].strip()), f'{p.name}: the first code cell must be `#| default_exp`'
    assert any(t == 'markdown' and re.search(r'^# \S', s, re.M) for t, s in cs[:6]), f'{p.name}: an H1 title near the top'
    assert 'nbdev_export()' in code[-1] and '#| hide' in code[-1], f'{p.name}: end with the hidden nbdev_export() cell'

@pytest.mark.parametrize('p', NUMBERED, ids=lambda p: p.stem)
def test_imports_only_from_lower_numbered(p):
    mods, me = modules(), int(p.name[:2])
    for _, s in cells(p):
        for m in re.findall(r'(?:from|import)\s+posenc_nb\.(\w+)', s):
            assert m in mods, f'{p.name}: imports unknown module posenc_nb.{m}'
            assert mods[m] <= me, f'{p.name} imports posenc_nb.{m} from the later notebook {mods[m]:02d}'

def _is_import_fallback(node):
    return isinstance(node, ast.Try) and all(isinstance(b, (ast.Import, ast.ImportFrom)) for b in node.body)

@pytest.mark.parametrize('p', NUMBERED + [NBS / 'index.ipynb'], ids=lambda p: p.stem)
def test_no_cell_mixes_imports_and_code(p):
    """nbdev's doc build executes every cell that contains an import (to render `show_doc`), out of context: such
    a cell must hold imports only (or an import with an ImportError fallback), else the site build fails."""
    for t, s in cells(p):
        if t != 'code' or 'nbdev_export()' in s or re.match(r'#\|\s*export', s.strip()): continue
        tree = ast.parse(code_body(s))
        if not any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)): continue
        assert all(isinstance(n, (ast.Import, ast.ImportFrom)) or _is_import_fallback(n) for n in tree.body), \
            f'{p.name}: a cell mixes imports with other code; move the imports to their own cell:\n{s[:200]}'


@pytest.mark.parametrize('p', NUMBERED, ids=lambda p: p.stem)
def test_gpu_cells_skip_without_cuda(p):
    "A reader's Run All on a CPU-only machine must not stop at a `#| gpu` cell: each one checks for CUDA and says it skipped."
    for t, s in cells(p):
        if t == 'code' and re.match(r'#\|\s*gpu', s.strip()):
            assert 'torch.cuda.is_available()' in s and 'Skipped' in s, f'{p.name}: a #| gpu cell runs without checking for CUDA:\n{s[:200]}'

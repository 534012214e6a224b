"""The site's notebook pass (tools/build_site.py) keeps nbdev's semantics: what Quarto would hide stays hidden.

Fast: it processes small notebooks in memory and never runs Sphinx (`make site` builds and checks the real site)."""
import sys
from pathlib import Path

import nbformat as nbf
import pytest

root = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root/'tools'))
import build_site as bs  # noqa: E402


@pytest.fixture(scope='module')
def syms():
    pages = {p.stem: bs.default_exp(nbf.read(str(p), as_version=4)) for p in bs.discover_notebooks()}
    return bs.Symbols(pages), pages


def _process(tmp_path, cells, syms, stem='10_rope'):
    nb = nbf.v4.new_notebook(); nb.cells = cells
    p = tmp_path/f'{stem}.ipynb'
    nbf.write(nb, str(p))
    s, pages = syms
    return bs.process_notebook(p, s, set(pages), pages)


def test_directives_split_from_source():
    d, body = bs.split_directives('#| echo: false\n#|output: asis\nprint(1)\n#| not a directive')
    assert d == {'echo': 'false', 'output': 'asis'} and body == 'print(1)\n#| not a directive'


def test_discovery_reads_nbs_in_reading_order():
    stems = [p.stem for p in bs.discover_notebooks()]
    assert stems[0] == 'index' and stems[1:] == sorted(stems[1:]) and '10_rope' in stems
    assert bs.group_of('10_rope') == 'Methods' and bs.group_of('07_synthetic') == 'Library' and bs.group_of('index') == 'Notebooks'


def test_nbdev_semantics(tmp_path, syms):
    cells = [nbf.v4.new_raw_cell('---\ntitle: x\n---'),
             nbf.v4.new_code_cell('#| default_exp rope'),
             nbf.v4.new_markdown_cell('# A title\n\n> The summary, with `apply_rotary`.'),
             nbf.v4.new_code_cell('#| hide\nsecret = 1'),
             nbf.v4.new_code_cell('#| export\ndef apply_rotary(x): pass\ndef _private(): pass'),
             nbf.v4.new_code_cell('#| echo: false\n#| output: asis\nprint("**b**")',
                                  outputs=[nbf.v4.new_output('stream', name='stdout', text='**b**\n')]),
             nbf.v4.new_code_cell('#| gpu\nx = 1'),
             nbf.v4.new_markdown_cell('See `10_rope`, `apply_rotary` and `RotaryCache.lookup`; `not_a_name` stays.')]
    nb, title, summary = _process(tmp_path, cells, syms)
    assert (title, summary) == ('A title', 'The summary, with `apply_rotary`.')
    text = '\n'.join(c.source for c in nb.cells)
    assert 'title: x' not in text and 'secret' not in text and 'default_exp' not in text and '#|' not in text
    assert '{.description}' in nb.cells[0].source
    # the exported function: an API block (not indexed here, the API page is), with a label for same-page links
    api = [c for c in nb.cells if '{py:function} apply_rotary(' in c.source]
    assert len(api) == 1 and ':no-index:' in api[0].source and '(sd-rope-apply-rotary)=' in api[0].source
    assert '_private' not in text and 'def apply_rotary' not in text
    asis = next(c for c in nb.cells if c.cell_type == 'code' and 'print' in c.source)
    assert asis.metadata['tags'] == ['remove-input'] and asis.outputs[0]['data'] == {'text/markdown': '**b**\n'}
    assert any('GPU cell' in c.source for c in nb.cells)
    last = nb.cells[-1].source
    assert '[`10_rope`](10_rope.ipynb)' in last and '[`apply_rotary`](#sd-rope-apply-rotary)' in last
    assert '{py:obj}`RotaryCache.lookup <posenc_nb.rope.RotaryCache.lookup>`' in last and '`not_a_name`' in last


def test_api_block_has_signature_and_parameter_table(syms):
    s, _ = syms
    import posenc_nb.rope as r
    b = bs.api_block(r.apply_rotary, 'apply_rotary', 'posenc_nb.rope', lambda t: t)
    assert b.startswith('````{py:function} apply_rotary(x: Tensor') and ':module: posenc_nb.rope' in b
    assert '|  | Type | Default | Details |' in b and "| `style` | `str` | `'interleaved'` |" in b
    assert bs.md_escape_text('a*b* `c*d` $x_i$ e_f') == 'a\\*b\\* `c*d` $x_i$ e\\_f'

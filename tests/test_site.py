"""The site's notebook pass (tools/build_site.py) keeps nbdev's semantics: what Quarto would hide stays hidden.

Fast: it processes small notebooks in memory and never runs Sphinx (`make site` builds and checks the real site)."""
import os, subprocess, sys
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
    numbered = [s for s in stems if s[:1].isdigit()]
    assert stems[0] == 'index' and stems[-len(numbered):] == numbered == sorted(numbered) and '10_rope' in stems
    assert 'course' in stems[1:-len(numbered)]                                # the reading path comes right after the index
    assert bs.group_of('10_rope') == 'Methods' and bs.group_of('07_synthetic') == 'Library' and bs.group_of('course') == 'Start here'


def test_sidebar_follows_the_course():
    "The sidebar (and so previous/next) reads the course's lectures in order, then the notebooks no lecture names."
    stems = [p.stem for p in bs.discover_notebooks()][1:]
    lectures = bs.course_lectures()
    assert lectures and lectures[0][0].startswith('Lecture 1: ') and lectures[-1][0] == 'Afterwards'
    groups = bs.toc_groups(stems)
    order = [s for g in groups.values() for s in g]
    assert sorted(order) == sorted(stems) and order[0] == 'course'
    assert order.index('10_rotary') + 1 == order.index('11_dynamics')          # lecture 2 ends, lecture 3 starts
    assert order.index('07_synthetic') + 1 == order.index('12_align')          # lecture 4 reads the corpus first
    assert order.index('29_claims') + 1 == order.index('16_causal_lm')         # lecture 6, then lecture 7
    toy = bs.toc_groups(['course', '00_core', '10_rope', '03_data'], [('Lecture 1: x', ['10_rope', '00_core'])])
    assert toy == {'Start here': ['course'], 'Lecture 1: x': ['10_rope', '00_core'], 'Library': ['03_data']}


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
    assert '{py:obj}`RotaryCache.lookup <posenc_nb.rotary.RotaryCache.lookup>`' in last and '`not_a_name`' in last


def test_api_block_has_signature_and_parameter_table(syms):
    s, _ = syms
    import posenc_nb.rotary_kernel as rotary_kernel_mod
    b = bs.api_block(rotary_kernel_mod.apply_rotary, 'apply_rotary', 'posenc_nb.rope', lambda t: t)
    assert b.startswith('````{py:function} apply_rotary(x: Tensor') and ':module: posenc_nb.rope' in b
    assert '|  | Type | Default | Details |' in b and "| `style` | `str` | `'interleaved'` |" in b
    assert bs.md_escape_text('a*b* `c*d` $x_i$ e_f') == 'a\\*b\\* `c*d` $x_i$ e\\_f'


def test_exercise_solutions_and_show_doc_cells(tmp_path, syms):
    "Solutions run in the tests but are hidden on the site (a note says where they are); show_doc cells become API blocks."
    cells = [nbf.v4.new_code_cell('#| default_exp rope'),
             nbf.v4.new_markdown_cell('# A title'),
             nbf.v4.new_code_cell('#| exercise-solution\nassert answer == 42'),
             nbf.v4.new_code_cell('show_doc(apply_rotary)\nshow_doc(RotaryCache.lookup)', outputs=[
                 nbf.v4.new_output('execute_result', data={'text/markdown': '---\n\n### apply_rotary'})]),
             nbf.v4.new_code_cell('x = 1\nshow_doc(apply_rotary)')]
    nb, _, _ = _process(tmp_path, cells, syms)
    text = '\n'.join(c.source for c in nb.cells)
    assert 'answer == 42' not in text and bs.SOLUTION_NOTE in text
    assert text.count('{py:function} apply_rotary(') == 1 and '{py:method} RotaryCache.lookup(' in text
    assert not any(o.get('data', {}).get('text/markdown', '').startswith('---') for c in nb.cells for o in c.get('outputs', []))
    assert 'x = 1\nshow_doc(apply_rotary)' in text                     # not only show_doc calls: an ordinary cell


def test_cells_the_build_runs():
    "The build skips exactly what `nbdev_test` skips: the test flags, `eval: false`, the export call."
    flags = bs.skip_flags()
    assert {'slow', 'gpu'} <= flags
    assert bs.runs_in_build('x = 1', flags) and bs.runs_in_build('#| exercise-solution\nassert 1', flags)
    assert not bs.runs_in_build('#| slow\nx = 1', flags) and not bs.runs_in_build('#| gpu\nx = 1', flags)
    assert not bs.runs_in_build('#| eval: false\nx = 1', flags) and not bs.runs_in_build('#| hide\nimport nbdev; nbdev.nbdev_export()', flags)
    assert bs.export_target({'export': 'other'}, 'posenc_nb.rope') == 'posenc_nb.other'
    assert bs.export_target({'export': ''}, 'posenc_nb.rope') == 'posenc_nb.rope'


def test_executed_outputs_replace_committed_ones(tmp_path, syms):
    "A page shows the outputs of the build's run (`executed`), not the committed ones; skipped cells keep their note."
    nbs = tmp_path/'nbs'; nbs.mkdir()
    nb = nbf.v4.new_notebook()
    nb.cells = [nbf.v4.new_markdown_cell('# T'),
                nbf.v4.new_code_cell('print(6 * 7)', outputs=[nbf.v4.new_output('stream', name='stdout', text='stale\n')]),
                nbf.v4.new_code_cell('#| slow\nraise SystemExit("never run by the build")'),
                nbf.v4.new_code_cell('#| eval: false\nraise SystemExit("never run")'),
                nbf.v4.new_code_cell('import matplotlib.pyplot as plt'),
                nbf.v4.new_code_cell('plt.plot([1, 2]); plt.show()')]
    src, out = nbs/'99_t.ipynb', tmp_path/'out.ipynb'
    nbf.write(nb, str(src))
    r = subprocess.run([sys.executable, str(root/'tools'/'build_site.py'), '--execute-one', str(src), str(out)],
                       capture_output=True, text=True, env={**os.environ, 'MPLBACKEND': 'Agg'})
    assert r.returncode == 0, r.stderr
    s, pages = syms
    page, _, _ = bs.process_notebook(src, s, set(pages), pages, executed=out)
    code = [c for c in page.cells if c.cell_type == 'code']
    assert ''.join(code[0].outputs[0]['text']) == '42\n'
    assert any('Slow cell' in c.source for c in page.cells)
    assert any('image/png' in o.get('data', {}) for c in code for o in c.outputs)
    # a cell that raises stops the run with the notebook's traceback
    nb.cells.append(nbf.v4.new_code_cell('1 / 0'))
    nbf.write(nb, str(src))
    r = subprocess.run([sys.executable, str(root/'tools'/'build_site.py'), '--execute-one', str(src), str(out)],
                       capture_output=True, text=True, env={**os.environ, 'MPLBACKEND': 'Agg'})
    assert r.returncode == 1 and 'ZeroDivisionError' in r.stderr


def test_pages_must_show_outputs_and_experiment_pages_figures():
    "The browser check fails a numbered page without output, an experiment page (21-28, 30) without a figure."
    import check_site as cs
    assert len(cs.output_failures('26_mlm.html', 0, 0)) == 2 and 'without any cell output' in cs.output_failures('26_mlm.html', 0, 0)[0]
    assert cs.output_failures('21_multi30k.html', 5, 0) == ['21_multi30k.html: an experiment page without a figure']
    assert cs.output_failures('28_linear_lm.html', 3, 1) == [] and cs.output_failures('30_length.html', 3, 1) == []
    assert len(cs.output_failures('10_rope.html', 0, 0)) == 1 and cs.output_failures('10_rope.html', 2, 0) == []
    assert cs.output_failures('course.html', 0, 0) == [] and cs.output_failures('index.html', 0, 0) == []


def test_layout_failures():
    "Figures below 0.6 of their width, clipped verdicts, a late bottom line and sideways code fail; a fitting page passes."
    import check_site as cs
    ok = {'figs': [{'src': 'a.png', 'natural': 1000, 'shown': 672}], 'verdicts': [{'visible': True, 'right': 600, 'boxRight': 900}],
          'bottomLine': True, 'beforeBottomLine': [], 'codeBlocks': 3, 'codeOverflowing': 0, 'codeChars': 88,
          'blFirst': 'bl-result', 'blVerdicts': True, 'blSentences': ['`rope` minus `sinusoidal`: ... because ...'],
          'blHiddenTables': 0, 'blEmptyRows': 0}
    assert cs.layout_failures('index.html', ok) == [] and cs.layout_failures('24_speed.html', ok) == []
    bad = {**ok, 'figs': [{'src': 'b.png', 'natural': 4379, 'shown': 672}], 'verdicts': [{'visible': False, 'right': 1000, 'boxRight': 900}],
           'beforeBottomLine': ['H2 Results'], 'codeOverflowing': 2, 'codeChars': 70}
    f = cs.layout_failures('29_claims.html', bad)
    assert len(f) == 4 and '0.15 < 0.6' in f[0] and 'verdict columns clipped' in f[1]
    assert any('does not start with its bottom line' in x for x in cs.layout_failures('25_xl_translation.html', bad))
    assert 'without a bottom line' in cs.layout_failures('30_length.html', {**ok, 'bottomLine': False})[0]
    assert 'no table with a verdict column' in cs.layout_failures('index.html', {**ok, 'verdicts': []})[0]


def test_api_block_data_values_are_yaml_safe():
    "A data value's repr goes into a directive option: quotes, apostrophes and truncation must not break the YAML."
    import yaml
    for v in ("RoPE makes BERT's learned positions converge " * 5, 'a "quoted" word', 3.5, {'k': "it's"}):
        b = bs.api_block(v, 'X', 'posenc_nb.claims', lambda t: t)
        opt = next(l for l in b.splitlines() if l.startswith(':value: '))
        assert isinstance(yaml.safe_load(opt[len(':value: '):]), str)


def test_notebook_tests_leave_the_site_its_executed_notebooks(tmp_path, capsys):
    "tools/test_notebooks.py executes as the site build does and caches the result: the build then executes nothing."
    import importlib.util
    spec = importlib.util.spec_from_file_location('tools_test_notebooks', root/'tools'/'test_notebooks.py')
    tn = importlib.util.module_from_spec(spec)                              # not tests/test_notebooks.py
    spec.loader.exec_module(tn)
    nb = nbf.v4.new_notebook()
    nb.cells = [nbf.v4.new_markdown_cell('# T'), nbf.v4.new_code_cell('print(6 * 7)')]
    src, cache = tmp_path/'t.ipynb', tmp_path/'cache'
    nbf.write(nb, str(src))
    assert tn.run_for_site([src], cache, 1, reuse=False) == 0
    (cached,) = cache.glob('t-*.ipynb')
    assert nbf.read(str(cached), as_version=4).cells[1].outputs[0]['text'] == '42\n'
    capsys.readouterr()
    assert bs.execute_all([src], cache, 1) == {src: cached}                 # the site build finds it
    assert '0 notebooks run (1 cached)' in capsys.readouterr().out
    nb.cells.append(nbf.v4.new_code_cell('1 / 0'))                           # a failing notebook fails the tests
    nbf.write(nb, str(src))
    assert tn.run_for_site([src], cache, 1, reuse=False) == 1


def test_bottom_line_failures():
    "The box must open with its result, explain each verdict, show its tables and no arm without records."
    import check_site as cs
    ok = {'bottomLine': True, 'blFirst': 'bl-result', 'blVerdicts': True, 'blHiddenTables': 0, 'blEmptyRows': 0,
          'blSentences': ['`b` minus `a` on BLEU: +1.0 [-0.1, +2.1]: **inconclusive**, because p = 0.07 after Holm']}
    assert cs.bottom_line_failures('21_multi30k.html', ok) == []
    assert cs.bottom_line_failures('24_speed.html', {**ok, 'blVerdicts': False, 'blSentences': []}) == []
    assert 'does not open with its result' in cs.bottom_line_failures('21_multi30k.html', {**ok, 'blFirst': ''})[0]
    assert 'without a result sentence' in cs.bottom_line_failures('21_multi30k.html', {**ok, 'blSentences': []})[0]
    bare = {**ok, 'blSentences': ['x: no verdict']}
    assert 'without its reason' in cs.bottom_line_failures('21_multi30k.html', bare)[0]
    assert 'collapsed' in cs.bottom_line_failures('21_multi30k.html', {**ok, 'blHiddenTables': 1})[0]
    assert 'n=0' in cs.bottom_line_failures('21_multi30k.html', {**ok, 'blEmptyRows': 2})[0]
    assert cs.bottom_line_failures('21_multi30k.html', {'bottomLine': False}) == []


def test_course_and_phone_failures():
    "The course page needs every part of each lecture's plan and a short path; at 390 px nothing may be cut."
    import check_site as cs
    full = ' '.join(cs.COURSE_PARTS)
    good = [{'title': 'Lecture 1: Positions in attention', 'text': full},
            {'title': 'A three-lecture short path', 'text': ''}]
    assert cs.course_failures(good) == []
    f = cs.course_failures([{'title': 'Lecture 2: RoPE', 'text': full.replace('Takeaway.', '')}])
    assert "lacks Takeaway." in f[0] and 'no three-lecture short path' in f[1]
    assert cs.course_failures([]) [0].startswith('course.html: no lecture sections')
    assert cs.phone_failures('course.html', []) == []
    assert cs.phone_failures('course.html', ['a table (lecture | notebooks) ends at 512 px']) == [
        'course.html: at 390 px a table (lecture | notebooks) ends at 512 px']


def test_course_lecture_titles_from_headings(tmp_path):
    "Lecture titles come from the course's `## Lecture N: title` headings (or the older table rows)."
    nb = nbf.v4.new_notebook()
    nb.cells = [nbf.v4.new_markdown_cell('## Lecture 1: Positions\n\ntext'),
                nbf.v4.new_markdown_cell('| 2. Rotary | x |'),
                nbf.v4.new_code_cell("LECTURES = {1: ('00_core',), 2: ('10_rope',), 'after': ('17_hf',)}")]
    p = tmp_path/'course.ipynb'
    nbf.write(nb, str(p))
    assert bs.course_lectures(p) == [('Lecture 1: Positions', ['00_core']), ('Lecture 2: Rotary', ['10_rope']),
                                     ('Afterwards', ['17_hf'])]


def test_glossary_links_first_use_only(tmp_path):
    "Each glossary term's first use on a page links to its entry; code, math, links and headings are left alone."
    terms = bs.glossary_terms()
    assert {'arm', 'gate', 'ledger', 'registered', 'hook', 'Holm', 'post hoc'} <= set(terms)
    assert terms['post hoc'] == 'post-hoc' and terms['Holm'] == 'holm'
    link = bs.make_glossary_linker({'gate': 'gate', 'arm': 'arm', 'post hoc': 'post-hoc'})
    out = link('## The gate\n\n`gate` and $gate$ and [gate](x.md) stay; the Gate fails, the gate again; two arms; '
               'harmless alarm; post hoc.')
    assert out.startswith('## The gate\n\n`gate` and $gate$ and [gate](x.md) stay; '
                          'the [Gate](glossary.ipynb#gate) fails')
    assert out.count('glossary.ipynb#gate') == 1 and '[arms](glossary.ipynb#arm)' in out and 'alarm;' in out
    assert '[post hoc](glossary.ipynb#post-hoc)' in out
    assert 'glossary.ipynb' not in link('the gate once more, on the same page')


def test_figures_get_captions_and_alt_text_from_their_code():
    "A figure's caption is what its code titles it, its alt text adds the axes; the check fails file names as alt."
    import check_site as cs
    cap, alt = bs.figure_text("ax.plot(x)\nax.set(xlabel='length', ylabel='loss', title=f'Loss at {n} seeds')")
    assert cap == 'Loss at … seeds' and alt == 'Loss at … seeds (x: length; y: loss)'
    assert bs.figure_text('axes = plot_xl(runs)') == ('Drawn by `plot_xl`', 'Drawn by plot_xl')
    fig = {'src': 'a.png', 'natural': 600, 'shown': 600}
    good = {**fig, 'alt': 'Loss (x: length)', 'caption': 'Figure 2: Loss'}
    assert cs.layout_failures('10_rope.html', {'figs': [good], 'verdicts': [], 'codeOverflowing': 0, 'codeBlocks': 0,
                                               'codeChars': None}) == []
    bad = cs.layout_failures('10_rope.html', {'figs': [{**fig, 'alt': '_images/0411.png', 'caption': ''}],
                                              'verdicts': [], 'codeOverflowing': 0, 'codeBlocks': 0, 'codeChars': None})
    assert len(bad) == 2 and 'alt text' in bad[0] and 'numbered caption' in bad[1]


# ---- one colour per encoding, legends a phone can read (posenc_nb.palette) ---------------------------------------
def test_every_registered_encoding_has_a_colour_of_its_own():
    "Each registered encoding has a fixed colour in the palette, none shared; the table names no unknown encoding."
    import importlib
    from posenc_nb.core import list_posencs
    from posenc_nb.palette import ENCODING_COLORS
    for m in ('baselines', 'rope', 'floater', 'recipe', 'xlpe', 'fire', 'dpb', 'kerple', 'prope', 'scaled_sinusoidal'):
        importlib.import_module(f'posenc_nb.{m}')
    registered = set(list_posencs())
    assert registered <= set(ENCODING_COLORS), sorted(registered - set(ENCODING_COLORS))
    assert len(set(ENCODING_COLORS.values())) == len(ENCODING_COLORS)


def _line_colors(fig) -> dict:
    "{legend label: colour} of every labelled line, bar and marker of `fig`."
    from matplotlib.colors import to_hex
    from posenc_nb.palette import _artist_color
    out = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if _artist_color(h) is not None: out[lab] = to_hex(_artist_color(h))   # lines and markers; not bar groups
    return out


def test_two_pages_draw_an_encoding_in_one_colour(tmp_path):
    """The plotting helpers of three pages (06_cli's comparison, 21_multi30k's learning curves, 22_extrapolation's
    length bins), given the encodings in different orders, draw each encoding in its palette colour, with legends a
    phone can read (`figure_failures` finds nothing)."""
    import json as js
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from posenc_nb.cli import plot_compare
    from posenc_nb.exp_extrapolation import plot_length_bins
    from posenc_nb.exp_multi30k import plot_learning_curves
    from posenc_nb.palette import encoding_color, figure_failures
    encs = ['t5', 'rope', 'sinusoidal', 'alibi', 'learned', 'shaw']
    bins = [{'encoding': e, 'seed': 0, 'length_bins': {'1-10': {'bleu': 30. - k}, '11-20': {'bleu': 20. - k}}}
            for k, e in enumerate(encs)]
    runs = []
    for k, e in enumerate(reversed(encs)):
        d = tmp_path/e
        d.mkdir()
        (d/'curve.jsonl').write_text(''.join(js.dumps({'step': s, 'loss': 5. - s / 10 - k, 'wall': s}) + '\n'
                                             for s in (10, 20)))
        runs.append({'dir': d, 'encoding': e, 'seed': 0})
    figs = {'22': plot_length_bins(bins).figure, '21': plot_learning_curves(runs, keys=('loss',))[0].figure,
            '06': plot_compare([], {e: [(1, 2.), (2, 1.)] for e in encs[1:] + encs[:1]})}
    for page, fig in figs.items():
        colors = _line_colors(fig)
        assert {colors[e] for e in encs} and all(colors[e] == encoding_color(e).lower() for e in encs), (page, colors)
        assert figure_failures(fig, page) == [], figure_failures(fig, page)
    plt.close('all')


def test_the_build_audits_every_figure(tmp_path):
    "The executor checks each figure as it renders; the browser check fails on it, except as a note on a pending page."
    import check_site as cs
    nb = nbf.v4.new_notebook()
    nb.cells = [nbf.v4.new_code_cell('import matplotlib.pyplot as plt'),
                nbf.v4.new_code_cell("fig, ax = plt.subplots(figsize=(9, 3))\nax.plot([1, 2], label='rope')\n"
                                     "ax.legend(fontsize=8)\nplt.show()"),
                nbf.v4.new_code_cell("from posenc_nb.palette import encoding_color, readable_legend\n"
                                     "fig, ax = plt.subplots(figsize=(9, 3))\n"
                                     "ax.plot([1, 2], color=encoding_color('rope'), label='rope')\n"
                                     "readable_legend(ax)\nplt.show()")]
    src, out = tmp_path/'99_figs.ipynb', tmp_path/'out.ipynb'
    nbf.write(nb, str(src))
    r = subprocess.run([sys.executable, str(root/'tools'/'build_site.py'), '--execute-one', str(src), str(out)],
                       capture_output=True, text=True, env={**os.environ, 'MPLBACKEND': 'Agg'})
    assert r.returncode == 0, r.stderr
    audit = bs.write_figure_audit({src: out}, tmp_path)
    assert audit['checked'] == 2 and len(audit['failures']['99_figs']) == 2, audit           # the first figure only
    assert "99_figs: figure 1: 'rope' drawn in #1f77b4" in audit['failures']['99_figs'][1]
    fails, notes = cs.figure_audit_failures(audit)
    assert len(fails) == 2 and notes == []
    assert cs.figure_audit_failures(audit, pending={'99_figs': 'x'}) == ([], audit['failures']['99_figs'])
    assert 'missing' in cs.figure_audit_failures(None)[0][0]

"""Slides per lecture (tools/slides.py): a slide per heading, a subslide per shown cell, nothing from the network."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location('slides', ROOT / 'tools' / 'slides.py')
slides = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slides)


def test_a_deck_keeps_the_shown_cells_with_slide_types():
    d = slides.deck(['09_exercises'], 'Lecture 1: x')
    kinds = [c['metadata']['slideshow']['slide_type'] for c in d['cells']]
    text = [''.join(c['source']) for c in d['cells']]
    assert kinds[0] == 'slide' and text[0] == '# Lecture 1: x'
    assert all(k == ('slide' if t.startswith(('# ', '## ')) else 'subslide') for k, t in zip(kinds[1:], text[1:]))
    code = [''.join(c['source']) for c in d['cells'] if c['cell_type'] == 'code']
    assert code and not any('#|' in t or 'nbdev_export' in t or 'slopes_12 =' in t for t in code)
    assert any(t.startswith('## Exercises of lecture 1') for t in text)


def test_network_loads_are_found_and_links_are_not():
    page = ('<script src="https://cdn.example/reveal.js"></script><link href="https://fonts.example/a.css" rel="x">'
            '<a href="https://github.com/x">source</a><img src="data:image/png;base64,AA"><script src="reveal.js/x.js">'
            '<style>@import url("https://fonts.example/b.css");</style>')
    assert slides.external_urls(page) == ['https://cdn.example/reveal.js', 'https://fonts.example/a.css',
                                          'https://fonts.example/b.css']


def test_the_deck_gets_mathjax_3_configured():
    "nbconvert writes MathJax 2's configuration; the deck loads the site's MathJax 3, configured for $...$."
    import pytest
    page = '<script src="mathjax/tex-chtml.js"> </script>x if(MathJax.Hub.getAllJax(Reveal.getCurrentSlide())){'
    out = slides.mathjax3(page)
    assert out.startswith("<script>window.MathJax = {tex: {inlineMath: [['$', '$']") and 'Hub' not in out
    assert out.count('src="mathjax/tex-chtml.js"') == 1
    with pytest.raises(SystemExit, match='template changed'): slides.mathjax3('<script src="cdn/MathJax.js"></script>')

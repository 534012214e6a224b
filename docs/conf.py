"""Sphinx configuration for the Quarto-free site (`make site`, tools/build_site.py).

The sources are the processed notebooks and generated API pages in `_site/src/`. The notebooks carry the outputs of
the build's own execution step (tools/build_site.py runs them, cached, the way nbdev_test does), so MyST-NB executes
nothing itself; nothing is fetched from the network: MathJax is served from `_static/mathjax` (copied from a pinned
PyPI package)."""
import json
from pathlib import Path

project = 'posenc_nb'
author = 'posenc_nb developers'
copyright = '2026 onwards, posenc_nb developers'

extensions = ['myst_nb', 'sphinx.ext.mathjax', 'sphinx_copybutton']
root_doc = 'index'
exclude_patterns = ['_build', '**.ipynb_checkpoints', '_pages.json', '_extra', '_files']

# notebooks: outputs from the build's execution step (not MyST-NB's), markdown outputs parsed as MyST (tables, math)
nb_execution_mode = 'off'
nb_render_markdown_format = 'myst'
nb_merge_streams = True
myst_enable_extensions = ['dollarmath', 'amsmath', 'attrs_block', 'attrs_inline', 'colon_fence']
myst_dmath_double_inline = True
myst_heading_anchors = 3
suppress_warnings = ['myst.header', 'mystnb.unknown_mime_type']

# math from the site itself
mathjax_path = 'mathjax/tex-chtml.js'
# (MathJax finds its fonts and extensions next to tex-chtml.js, so pages in subfolders work too)
mathjax3_config = {'tex': {'inlineMath': [['\\(', '\\)']], 'displayMath': [['\\[', '\\]']]}}

html_theme = 'furo'
html_title = 'posenc_nb'
html_favicon = 'favicon.svg'
html_static_path = [str(Path(__file__).resolve().parents[1] / '_site' / 'src' / '_static')]  # written by the build
_extra = Path(__file__).resolve().parents[1] / '_site' / 'src' / '_extra'      # files raw HTML in notebooks points to
html_extra_path = [str(_extra)] if _extra.is_dir() else []
html_css_files = ['styles.css', 'site.css']
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {'navigation_with_keys': True, 'top_of_page_buttons': []}
pygments_style = 'friendly'

copybutton_prompt_text = r'>>> |\.\.\. |\$ '
copybutton_prompt_is_regexp = True
copybutton_exclude = '.linenos, .gp, .go'

add_module_names = False
python_display_short_literal_types = True
toc_object_entries_show_parents = 'hide'


def _page_meta(app, pagename, templatename, context, doctree):
    "A description meta tag for each page, from the notebook's summary line (nbdev's front matter)."
    pages = getattr(app, '_posenc_pages', None)
    if pages is None:
        f = Path(app.srcdir) / '_pages.json'
        pages = app._posenc_pages = json.loads(f.read_text()) if f.exists() else {}
    desc = (pages.get(pagename) or {}).get('description')
    if desc:
        from html import escape
        context['metatags'] = context.get('metatags', '') + f'\n    <meta name="description" content="{escape(desc)}" />'


def setup(app):
    app.connect('html-page-context', _page_meta)

# figures get a caption (tools/build_site.py: from the titles their code writes) and a number
numfig = True
numfig_format = {'figure': 'Figure %s'}

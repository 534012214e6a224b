#!/usr/bin/env python3
"""Check the built site (`_site/html`) as a reader sees it: every page opened in headless Chromium.

The pages are served from 127.0.0.1 and driven over the DevTools protocol (`websocket-client`). For every page
reachable from the index it fails when:
- math is not typeset: a math element without MathJax output, a MathJax error, or raw `$$`/`$\\cmd$` text left
  in the rendered DOM (outside code);
- the page has no title, or its `<title>` does not start with its H1; a notebook or API page lacks its description;
- nbdev markup leaks into the page: `{target=`, `{.description}`, `:::` fences, or `#|` directives in code cells;
- a local link or anchor is broken (the file must exist, the `#id` must exist in the target page), or any
  request made by the page fails (HTTP >= 400 or a network error);
- the page requests anything that is not on the local server (a CDN, fonts, analytics: the site must work offline);
- a numbered page (`NN_name`) shows no cell output, or an experiment page (21-28, 30) no figure: the pages are
  executed when the site is built, so an empty page means a page with nothing computed, or records gone missing;
- an experiment page does not start with its bottom line (the `posenc_nb.utils.BottomLine` box before any heading,
  table or figure of the page);
- at 1,280 px: a figure renders below 0.6 of its natural width (drawn too wide for the 672 px column); a table's
  verdict column lies outside the visible part of the table (index, 29_claims: the ledger must be readable without
  scrolling); shown code overflows sideways or its column holds fewer than 80 characters (code wraps at about 88);
- a figure's alt text is a file name (or under two words), or the figure has no numbered caption ("Figure N");
- at 390 px (a phone): display or inline math is clipped (it must fit, or scroll inside a box that fits); on the
  course and the experiment pages, the page scrolls sideways, or a course table or an experiment page's bottom line
  is wider than the screen or hides part of itself in a sideways scroll;
- an experiment page's bottom line does not open with its result, gives a verdict without a sentence that says why
  ('because'), collapses its table or shows a row for an arm without records (n=0);
- a figure breaks the palette or is unreadable on a phone: the site build checks every figure as it renders
  (`posenc_nb.palette.figure_failures`, collected in `_site/figures.json`): a legend entry that names an encoding
  drawn in another colour than `encoding_color` gives it, or legend text under `MIN_LEGEND_PX` at 390 px;
- the course page lacks a lecture section, a part of a lecture's plan (objectives, takeaway, prerequisites, the
  80-minute outline, must-read and optional sections, time, exercises, compute and data) or the short path.
It also runs one search (search.html?q=...) and fails when it finds nothing, and saves screenshots of the index,
10_rope and the API reference at 1280 px (and the index at 1920 px) under `_site/screenshots/`.
Counts (also cells with outputs, figures and pages without any output, as rendered) and failures go to
`_site/check.json`; the exit status is 1 on any failure.

Usage: python tools/check_site.py [--chromium PATH] [--search rotary]
"""
import argparse, base64, functools, http.server, json, os, re, shutil, socketserver, subprocess, sys, tempfile, threading, time
from pathlib import Path
from urllib.parse import urljoin, urlsplit, unquote
from urllib.request import urlopen

root = Path(__file__).resolve().parents[1]
out_root = root/'_site'
html_dir = out_root/'html'
shots = out_root/'screenshots'

# ---- a minimal DevTools protocol client ----------------------------------------------------------------------

class Chrome:
    "Headless Chromium with one tab, driven over the DevTools protocol."
    def __init__(self, exe):
        import websocket
        self.prof = tempfile.mkdtemp(prefix='site-check-')
        args = [exe, '--headless=new', '--disable-gpu', '--remote-debugging-port=0', f'--user-data-dir={self.prof}',
                '--no-first-run', '--no-default-browser-check', '--disable-background-networking', '--disable-sync',
                '--disable-component-update', '--disable-default-apps', '--disable-extensions', '--mute-audio',
                '--hide-scrollbars', '--remote-allow-origins=*', '--window-size=1280,900', 'about:blank']
        if hasattr(os, 'geteuid') and os.geteuid() == 0: args.insert(1, '--no-sandbox')
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self.prof)/'DevToolsActivePort'
        for _ in range(300):
            if port_file.exists() and port_file.read_text().strip(): break
            if self.proc.poll() is not None: raise SystemExit(f'{exe} exited with {self.proc.returncode} before it listened')
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        for _ in range(50):
            try:
                tabs = json.load(urlopen(f'http://127.0.0.1:{port}/json/list', timeout=5)); break
            except OSError: time.sleep(0.1)
        tab = next(t for t in tabs if t['type'] == 'page')
        self.ws = websocket.create_connection(tab['webSocketDebuggerUrl'], timeout=60, suppress_origin=True)
        self.n, self.events = 0, []

    def send(self, method, **params):
        self.n += 1
        my = self.n
        self.ws.send(json.dumps({'id': my, 'method': method, 'params': params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get('id') == my:
                if 'error' in msg: raise RuntimeError(f'{method}: {msg["error"]}')
                return msg.get('result', {})
            if 'method' in msg: self.events.append(msg)

    def wait_event(self, name, timeout=60):
        t0 = time.time()
        while time.time() - t0 < timeout:
            for i, e in enumerate(self.events):
                if e['method'] == name: return self.events.pop(i)
            self.ws.settimeout(max(0.1, timeout - (time.time() - t0)))
            try: msg = json.loads(self.ws.recv())
            except Exception: break
            if 'method' in msg: self.events.append(msg)
        raise TimeoutError(name)

    def eval(self, expr):
        r = self.send('Runtime.evaluate', expression=expr, awaitPromise=True, returnByValue=True)
        if 'exceptionDetails' in r: raise RuntimeError(f'page script failed: {r["exceptionDetails"]}')
        return r['result'].get('value')

    def close(self):
        try: self.ws.close()
        except Exception: pass
        self.proc.terminate()
        try: self.proc.wait(10)
        except subprocess.TimeoutExpired: self.proc.kill()
        shutil.rmtree(self.prof, ignore_errors=True)

# ---- what is measured in each page ---------------------------------------------------------------------------

PAGE_JS = r"""
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  await (document.fonts ? document.fonts.ready : Promise.resolve());
  const h1 = document.querySelector('article h1, h1');
  let h1t = '';
  if (h1) { const c = h1.cloneNode(true); c.querySelectorAll('.headerlink').forEach(e => e.remove()); h1t = c.textContent.trim(); }
  const maths = [...document.querySelectorAll('span.math, div.math')];
  const untypeset = maths.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80));
  const skip = new Set(['PRE', 'CODE', 'SCRIPT', 'STYLE', 'TEXTAREA', 'MJX-CONTAINER', 'KBD', 'SAMP']);
  const raw = [], markup = [];
  const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {acceptNode: n => {
    for (let p = n.parentElement; p; p = p.parentElement) if (skip.has(p.tagName)) return NodeFilter.FILTER_REJECT;
    return NodeFilter.FILTER_ACCEPT; }});
  for (let n; (n = w.nextNode());) {
    const t = n.textContent;
    if (t.includes('$$') || /\$[^$\n]*\\[A-Za-z]+[^$\n]*\$/.test(t)) raw.push(t.trim().slice(0, 100));
    if (/\{target=|\{\.description\}|\{\.cell-flag\}|^\s*:::/.test(t)) markup.push(t.trim().slice(0, 100));
  }
  document.querySelectorAll('div.cell_input pre').forEach(p => { if (/^\s*#\|/m.test(p.textContent)) markup.push(p.textContent.slice(0, 100)); });
  const links = [];
  document.querySelectorAll('a[href], link[href], script[src], img[src], iframe[src], source[src]').forEach(e => {
    const u = e.href || e.src; if (u) links.push(u); });
  const ids = [...document.querySelectorAll('[id]')].map(e => e.id).concat([...document.querySelectorAll('a[name]')].map(e => e.name));
  const desc = document.querySelector('meta[name="description"]');
  const cellsShown = document.querySelectorAll('div.cell').length;
  const outputs = document.querySelectorAll('div.cell div.cell_output').length;
  const figures = document.querySelectorAll('div.cell_output img').length;
  return {title: document.title, h1: h1t, cells: cellsShown, outputs, figures, description: desc ? desc.content : '', math: maths.length,
          typeset: document.querySelectorAll('mjx-container').length, untypeset,
          merror: document.querySelectorAll('mjx-merror').length, raw, markup, links, ids,
          search: !!document.querySelector('form[action*="search"] input, input[name="q"]'),
          sidebar: !!document.querySelector('.sidebar-tree'),
          tocVisible: (() => { const t = document.querySelector('.toc-drawer'); if (!t) return false;
                               const b = t.getBoundingClientRect(); return b.width > 0 && b.right <= innerWidth + 1; })(), toc: document.querySelectorAll('.toc-tree a').length,
          width: Math.round(((document.querySelector('article p') || {}).getBoundingClientRect || (() => ({width: 0}))).call(document.querySelector('article p')).width)};
})()
"""

SEARCH_JS = r"""
(async () => {
  for (let i = 0; i < 100; i++) {
    const n = document.querySelectorAll('#search-results li').length;
    if (n) return n;
    await new Promise(r => setTimeout(r, 100));
  }
  return 0;
})()
"""

class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass

def serve(directory):
    h = functools.partial(Quiet, directory=str(directory))
    srv = socketserver.ThreadingTCPServer(('127.0.0.1', 0), h)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f'http://127.0.0.1:{srv.server_address[1]}/'

def find_chromium(given=None):
    for c in [given, os.environ.get('CHROMIUM'), 'chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable']:
        if c and shutil.which(c): return shutil.which(c)
    raise SystemExit('no Chromium found: install it (Debian: apt-get install -y chromium) or pass --chromium PATH')

EXPERIMENT_PAGE = re.compile(r'(2[1-8]_[\w-]+|30_length)\.html')   # 30_extend is a method page
NUMBERED_PAGE = re.compile(r'\d\d_[\w-]+\.html')
VERDICT_PAGES = ('index.html', '29_claims.html')
MIN_FIGURE_SCALE = 0.6                        # rendered / natural width of a figure at 1,280 px
MIN_CODE_CHARS = 80                           # characters a line of shown code holds before it wraps

# Measured after PAGE_JS, at 1,280 px: figures, verdict columns, the bottom line, shown code.
LAYOUT_JS = r"""
(async () => {
  const imgs = [...document.querySelectorAll('div.cell_output img')];
  await Promise.all(imgs.map(i => i.complete ? 0 : new Promise(r => { i.onload = i.onerror = r; })));
  // natural: the width the figure was drawn for, in CSS px (a retina PNG's metadata width, which MyST-NB writes into
  // the img's style), else its pixel width
  const drawn = i => { const s = i.style.width || i.getAttribute('width') || '';
                       return /^[\d.]+(px)?$/.test(s) ? parseFloat(s) : i.naturalWidth; };
  const figs = imgs.map(i => { const f = i.closest('figure'), cap = f && f.querySelector('figcaption');
    return {src: (i.getAttribute('src') || '').split('/').pop().slice(-40), natural: drawn(i),
            shown: Math.round(i.getBoundingClientRect().width), alt: i.getAttribute('alt') || '',
            caption: cap ? cap.textContent.trim().slice(0, 80) : ''}; });
  const verdicts = [];
  document.querySelectorAll('article table').forEach(t => {
    const th = [...t.querySelectorAll('th')].find(h => h.textContent.trim().toLowerCase() === 'verdict');
    if (!th) return;
    let box = {left: 0, right: innerWidth};
    for (let p = th.parentElement; p && p !== document.documentElement; p = p.parentElement)
      if (getComputedStyle(p).overflowX !== 'visible') { box = p.getBoundingClientRect(); break; }
    const b = th.getBoundingClientRect();
    verdicts.push({visible: b.width > 0 && b.left >= box.left - 1 && b.right <= Math.min(box.right, innerWidth) + 1,
                   right: Math.round(b.right), boxRight: Math.round(Math.min(box.right, innerWidth))});
  });
  const bl = document.querySelector('.bottom-line');
  const before = bl ? [...document.querySelectorAll('article h2, article table, div.cell_output img')]
    .filter(e => !bl.contains(e) && (e.compareDocumentPosition(bl) & Node.DOCUMENT_POSITION_FOLLOWING))
    .map(e => e.tagName + ' ' + e.textContent.trim().slice(0, 40)) : [];
  const pres = [...document.querySelectorAll('div.cell_input pre')];
  let chars = null;
  if (pres.length) {
    const p = pres[0], cs = getComputedStyle(p), ctx = document.createElement('canvas').getContext('2d');
    ctx.font = `${cs.fontSize} ${cs.fontFamily}`;
    const cw = ctx.measureText('0'.repeat(100)).width / 100;
    chars = Math.floor((p.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)) / cw);
  }
  const blTitle = bl && bl.querySelector('.bl-title');
  const blFirst = blTitle && blTitle.nextElementSibling ? blTitle.nextElementSibling.className : '';
  const blVerdicts = bl ? [...bl.querySelectorAll('p')].some(p => /^Verdicts/.test(p.textContent.trim())) : false;
  const blSentences = bl ? [...bl.querySelectorAll('ul.bl-result li')].map(li => li.textContent.trim()) : [];
  const blHiddenTables = bl ? [...bl.querySelectorAll('table')].filter(t => !t.offsetHeight).length : 0;
  const blEmptyRows = bl ? [...bl.querySelectorAll('td')].filter(td => /\(n=0\)/.test(td.textContent)).length : 0;
  return {figs, verdicts, bottomLine: !!bl, beforeBottomLine: before, codeBlocks: pres.length,
          blFirst, blVerdicts, blSentences, blHiddenTables, blEmptyRows,
          codeOverflowing: pres.filter(p => p.scrollWidth > p.clientWidth + 1).length, codeChars: chars};
})()
"""

# At 390 px: every typeset formula in the article must fit the screen, or sit in a box that scrolls and fits (a display
# formula's own box, a table that scrolls sideways). Math outside the article (the table of contents, a drawer kept
# off-screen at this width) is not the page's text. Scrolling boxes outside the article (the theme's content column)
# do not count: a formula that only they reach makes the whole page move sideways.
MATH_JS = r"""
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const clipped = [];
  document.querySelectorAll('article mjx-container').forEach(m => {
    const b = m.getBoundingClientRect();
    if (!b.width) return;
    const article = m.closest('article');
    let right = innerWidth, box = b;
    for (let p = m.hasAttribute('display') ? m : m.parentElement; p && article.contains(p); p = p.parentElement) {
      const ox = getComputedStyle(p).overflowX;
      if (ox === 'auto' || ox === 'scroll') { box = p.getBoundingClientRect(); break; }
      if (ox !== 'visible') right = Math.min(right, p.getBoundingClientRect().right);
    }
    if (box.right > right + 1 || box.left < -1) {
      const s = m.closest('section');
      clipped.push(`${m.hasAttribute('display') ? 'display' : 'inline'} math ${Math.round(b.width)} px wide` +
                   ` in #${s ? s.id : '?'}`);
    }
  });
  return clipped;
})()
"""

# The rule's own check, on a page of the site at 390 px: a formula in an over-wide box is clipped, one in a box that
# scrolls is not. It runs before the pages are judged, so a rule that can no longer fail is itself a failure.
MATH_RULE_PROBE_JS = r"""
(() => {
  const at = document.querySelector('article section') || document.querySelector('article');
  const wide = document.createElement('div');
  wide.style.width = '700px';
  wide.innerHTML = '<span style="margin-left:500px">a</span><mjx-container>x</mjx-container>';
  const scroll = document.createElement('div');
  scroll.style.overflowX = 'auto';
  scroll.innerHTML = '<div style="width:700px"><span style="margin-left:500px">a</span>' +
                     '<mjx-container>y</mjx-container></div>';
  at.append(wide, scroll);
  return 1;
})()
"""

def math_rule_failures(clipped: list) -> list:
    "Failures of the 390 px rule on its probe page: exactly the over-wide box's formula must be reported."
    if len(clipped) == 1: return []
    return [f'the 390 px math rule reported {len(clipped)} clipped formulas on its probe (one expected): {clipped}']

# pages whose figures the palette check reports without failing, each with what is left to change there
PALETTE_PENDING: dict = {}     # page -> what it still has to change (its audit's failures reported as notes)

def figure_audit_failures(audit, pending=PALETTE_PENDING):
    "(failures, notes) from the build's figure audit (_site/figures.json); a pending page's failures are notes."
    if audit is None: return ['_site/figures.json missing: build the site with tools/build_site.py'], []
    fails, notes = [], []
    for page, fs in sorted(audit['failures'].items()):
        (notes if page in pending else fails).extend(fs)
    fails += [f'{p}: executed without the figure audit (an old cache entry)' for p in audit.get('unaudited', [])]
    return fails, notes

def output_failures(name, outputs, figures):
    "Failures of a page's rendered outputs: a numbered page shows an output, an experiment page (21-28, 30) a figure."
    fails = []
    if NUMBERED_PAGE.fullmatch(name) and not outputs:
        fails.append(f'{name}: a numbered page without any cell output (nothing computed, or not executed)')
    if EXPERIMENT_PAGE.fullmatch(name) and not figures: fails.append(f'{name}: an experiment page without a figure')
    return fails

def layout_failures(name, lay):
    "Failures of what LAYOUT_JS measured on page `name` at 1,280 px."
    fails = []
    for f in lay['figs']:
        if f['natural'] and f['shown'] < MIN_FIGURE_SCALE * f['natural']:
            fails.append(f"{name}: a figure ({f['src']}) renders at {f['shown']} of its {f['natural']} px "
                         f"({f['shown'] / f['natural']:.2f} < {MIN_FIGURE_SCALE}): draw it for the 672 px column")
    for f in lay['figs']:
        alt = f.get('alt', '')
        if 'alt' in f and (len(alt.split()) < 2 or re.search(r'\.(png|jpe?g|svg|gif)$|_images/', alt)):
            fails.append(f"{name}: a figure ({f['src']}) whose alt text does not say what it shows: {alt[:50]!r}")
        if 'caption' in f and not re.match(r'Figure \d+', f.get('caption', '')):
            fails.append(f"{name}: a figure ({f['src']}) without a numbered caption")
    if name in VERDICT_PAGES:
        if not lay['verdicts']: fails.append(f'{name}: no table with a verdict column')
        hid = [v for v in lay['verdicts'] if not v['visible']]
        if hid: fails.append(f"{name}: {len(hid)} of {len(lay['verdicts'])} verdict columns clipped at 1,280 px "
                             f"(e.g. ending at {hid[0]['right']} px, visible to {hid[0]['boxRight']} px)")
    if EXPERIMENT_PAGE.fullmatch(name):
        if not lay['bottomLine']: fails.append(f'{name}: an experiment page without a bottom line box')
        elif lay['beforeBottomLine']:
            fails.append(f"{name}: the page does not start with its bottom line ({lay['beforeBottomLine'][0]!r} before it)")
        fails += bottom_line_failures(name, lay)
    if lay['codeOverflowing']:
        fails.append(f"{name}: {lay['codeOverflowing']} of {lay['codeBlocks']} code blocks overflow sideways (code must wrap)")
    if lay['codeChars'] is not None and lay['codeChars'] < MIN_CODE_CHARS:
        fails.append(f"{name}: shown code holds {lay['codeChars']} characters a line (< {MIN_CODE_CHARS})")
    return fails

def bottom_line_failures(name, lay):
    """Failures of an experiment page's bottom line: it opens with its result; with ledger entries, one sentence per
    experiment that gives the verdict's reason ('because'); its tables are shown (not collapsed); no row of an arm
    without records."""
    if not lay.get('bottomLine'): return []
    fails = []
    if 'bl-result' not in lay.get('blFirst', '').split():
        first = lay.get('blFirst') or 'nothing'
        fails.append(f"{name}: the bottom line does not open with its result (first: {first!r})")
    if lay.get('blVerdicts'):
        if not lay.get('blSentences'): fails.append(f'{name}: ledger verdicts without a result sentence')
        unexplained = [t for t in lay.get('blSentences', []) if ' because ' not in t]
        if unexplained: fails.append(f'{name}: a result sentence without its reason: {unexplained[0][:80]!r}')
    if lay.get('blHiddenTables'): fails.append(f"{name}: {lay['blHiddenTables']} bottom-line tables collapsed")
    if lay.get('blEmptyRows'): fails.append(f"{name}: {lay['blEmptyRows']} bottom-line cells of an arm with n=0")
    return fails

# At 390 px, on the course and the experiment pages: the page never scrolls sideways; the course's tables and the
# experiment pages' bottom line fit the screen with nothing hidden in a sideways scroll (a phone reader cannot see what
# is cut; other tables of numbers may scroll inside their own box). PHONE_FIT_JS % selector.
PHONE_FIT_JS = r"""
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const cut = [];
  const page = document.documentElement.scrollWidth;
  if (page > innerWidth + 1) cut.push(`the page is ${page} px wide`);
  document.querySelectorAll('%s').forEach(e => {
    const b = e.getBoundingClientRect();
    if (!b.width) return;
    const what = e.classList.contains('bottom-line') ? 'the bottom line' :
                 `a table (${[...e.querySelectorAll('th')].map(h => h.textContent.trim()).join(' | ').slice(0, 60)})`;
    if (b.right > innerWidth + 1) cut.push(`${what} ends at ${Math.round(b.right)} px`);
    else if (e.scrollWidth > e.clientWidth + 1) cut.push(`${what} hides ${e.scrollWidth - e.clientWidth} px sideways`);
  });
  return cut;
})()
"""

def phone_failures(name, cut):
    "Failures of what PHONE_FIT_JS found on page `name` at 390 px."
    return [f'{name}: at 390 px {c}' for c in cut]

# The course page as a syllabus: every lecture section holds each part of a lecture's plan, and a short path exists.
COURSE_PARTS = ('Objectives.', 'Takeaway.', 'Prerequisites.', 'In class (80 minutes).', 'Must read.', 'Optional.',
                'Time.', 'Exercises.', 'Compute and data.')
COURSE_JS = r"""
(() => [...document.querySelectorAll('article section')].filter(s => {
    const h = s.querySelector(':scope > h2');
    return h && /^(Lecture \d+:|A three-lecture short path)/.test(h.textContent);
  }).map(s => ({title: s.querySelector(':scope > h2').textContent.replace('#', '').trim(), text: s.textContent})))()
"""

def course_failures(sections):
    "Failures of the course page: at least one lecture, each with every part of its plan, and the short path."
    lectures = [s for s in sections if s['title'].startswith('Lecture ')]
    fails = [] if lectures else ['course.html: no lecture sections (## Lecture N: ...)']
    for s in lectures:
        missing = [p for p in COURSE_PARTS if p not in s['text']]
        if missing: fails.append(f"course.html: {s['title']!r} lacks {', '.join(missing)}")
    if not any(s['title'].startswith('A three-lecture short path') for s in sections):
        fails.append('course.html: no three-lecture short path')
    return fails

def local_file(url, base):
    "The file under html/ that a local URL names (a directory means its index.html)."
    rel = unquote(urlsplit(url).path)[len(urlsplit(base).path):]
    p = html_dir/rel
    return p/'index.html' if (p.is_dir() or rel == '') else p

def check(chromium=None, query='rotary', meta_file=out_root/'src'/'_pages.json'):
    if not (html_dir/'index.html').exists(): raise SystemExit(f'{html_dir}/index.html missing: run tools/build_site.py first')
    pages_meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    audit_file = out_root/'figures.json'
    audit = json.loads(audit_file.read_text()) if audit_file.exists() else None
    fig_fails, fig_notes = figure_audit_failures(audit) if audit is None or audit['executed'] else ([], [])
    srv, base = serve(html_dir)
    ch = Chrome(find_chromium(chromium))
    fails, res, requests = list(fig_fails), {}, []
    try:
        for dom in ('Page', 'Network', 'Runtime'): ch.send(f'{dom}.enable')
        ch.send('Emulation.setDeviceMetricsOverride', width=1280, height=900, deviceScaleFactor=1, mobile=False)
        todo, seen = [base + 'index.html'], set()
        while todo:
            url = todo.pop(0)
            if url in seen: continue
            seen.add(url)
            ch.events.clear()
            ch.send('Page.navigate', url=url)
            ch.wait_event('Page.loadEventFired')
            r = ch.eval(PAGE_JS)
            time.sleep(0.05)
            ch.send('Runtime.evaluate', expression='1')      # drain events of late requests (fonts)
            name = url[len(base):]
            for e in ch.events:
                p = e['params']
                if e['method'] == 'Network.requestWillBeSent':
                    u = p['request']['url']
                    requests.append(u)
                    if not (u.startswith(base) or u.split(':', 1)[0] in ('data', 'blob', 'about')):
                        fails.append(f'{name}: requests {u} from the network (the site must work offline)')
                elif e['method'] == 'Network.responseReceived' and p['response']['status'] >= 400:
                    fails.append(f'{name}: {p["response"]["url"]} answered {p["response"]["status"]}')
                elif e['method'] == 'Network.loadingFailed' and not p.get('canceled'):
                    fails.append(f'{name}: a request failed ({p.get("errorText")})')
            res[name] = r
            stem = name[:-5] if name.endswith('.html') else name
            if not r['title'].strip() or r['title'].strip().lower() in ('notebook', 'untitled'):
                fails.append(f'{name}: no page title')
            elif not r['h1']:
                if stem not in ('search', 'genindex', 'py-modindex'): fails.append(f'{name}: no H1 heading')
            elif not r['title'].startswith(r['h1']): fails.append(f'{name}: <title> {r["title"]!r} does not start with the H1 {r["h1"]!r}')
            if stem in pages_meta and pages_meta[stem].get('description') and not r['description']:
                fails.append(f'{name}: no meta description')
            if r['untypeset']: fails.append(f'{name}: {len(r["untypeset"])} math elements not typeset, e.g. {r["untypeset"][0]!r}')
            if r['merror']: fails.append(f'{name}: {r["merror"]} MathJax errors')
            if r['raw']: fails.append(f'{name}: raw TeX in the page, e.g. {r["raw"][0]!r}')
            if r['markup']: fails.append(f'{name}: nbdev/Quarto markup shown as text, e.g. {r["markup"][0]!r}')
            if not (r['search'] and r['sidebar']) and stem not in ('search',): fails.append(f'{name}: no sidebar or search box')
            fails += output_failures(name, r['outputs'], r['figures'])
            r['layout'] = ch.eval(LAYOUT_JS)
            fails += layout_failures(name, r['layout'])
            if name == '10_rope.html' and not r['tocVisible']: fails.append(f'{name}: the page contents are not visible at 1280 px')
            if name == 'course.html': fails += course_failures(ch.eval(COURSE_JS))
            for u in r['links']:
                if u.startswith(base):
                    clean = u.split('#')[0].split('?')[0]
                    if clean.endswith('.html') and clean not in seen and clean not in todo: todo.append(clean)
        # links and anchors, against the pages as rendered
        ids = {n: set(r['ids']) for n, r in res.items()}
        n_links = n_anchors = 0
        for name, r in res.items():
            for u in sorted(set(r['links'])):
                if not u.startswith(base): continue
                n_links += 1
                page, _, frag = u.partition('#')
                page = page.split('?')[0]
                f = local_file(page, base)
                if not f.exists(): fails.append(f'{name}: broken link {u[len(base):]}'); continue
                if frag:
                    n_anchors += 1
                    target = page[len(base):] or 'index.html'
                    tids = ids.get(target)
                    if tids is None: tids = set(re.findall(r'\bid="([^"]+)"', f.read_text(errors='replace')))
                    if unquote(frag) not in tids: fails.append(f'{name}: broken anchor {u[len(base):]}')
        # a phone: math must not be clipped
        ch.send('Emulation.setDeviceMetricsOverride', width=390, height=844, deviceScaleFactor=1, mobile=True)
        n_phone = 0
        ch.send('Page.navigate', url=base + 'index.html')
        ch.wait_event('Page.loadEventFired')
        if not ch.eval(MATH_JS):                      # the index fits: probe the rule there
            ch.eval(MATH_RULE_PROBE_JS)
            fails += math_rule_failures(ch.eval(MATH_JS))
        for name, r in res.items():
            if not r['math']: continue
            ch.send('Page.navigate', url=base + name)
            ch.wait_event('Page.loadEventFired')
            clipped = ch.eval(MATH_JS)
            n_phone += 1
            r['clipped_math_390'] = clipped
            if clipped: fails.append(f'{name}: at 390 px {len(clipped)} formulas clipped, e.g. {clipped[0]}')
        # a phone: the course and the experiment pages fit, nothing cut sideways
        for name in [n for n in res if n == 'course.html' or EXPERIMENT_PAGE.fullmatch(n)]:
            ch.send('Page.navigate', url=base + name)
            ch.wait_event('Page.loadEventFired')
            cut = ch.eval(PHONE_FIT_JS % ('article table' if name == 'course.html' else '.bottom-line'))
            res[name]['cut_at_390'] = cut
            fails += phone_failures(name, cut)
        # screenshots
        shots.mkdir(parents=True, exist_ok=True)
        taken = []
        for page, w in [('index.html', 1280), ('10_rope.html', 1280), ('api/index.html', 1280), ('api/rope.html', 1280), ('index.html', 1920)]:
            if not (html_dir/page).exists(): continue
            ch.send('Emulation.setDeviceMetricsOverride', width=w, height=1000, deviceScaleFactor=1, mobile=False)
            ch.send('Page.navigate', url=base + page)
            ch.wait_event('Page.loadEventFired')
            ch.eval(PAGE_JS)
            png = base64.b64decode(ch.send('Page.captureScreenshot', format='png')['data'])
            f = shots/f'{page[:-5].replace("/", "_")}-{w}.png'
            f.write_bytes(png)
            taken.append(str(f.relative_to(root)))
        # search works offline (after the screenshots: a search leaves its highlighting switched on)
        ch.send('Emulation.setDeviceMetricsOverride', width=1280, height=900, deviceScaleFactor=1, mobile=False)
        ch.send('Page.navigate', url=f'{base}search.html?q={query}')
        ch.wait_event('Page.loadEventFired')
        hits = ch.eval(SEARCH_JS)
        if not hits: fails.append(f'search.html?q={query}: no results')
    finally:
        ch.close()
        srv.shutdown()
    nb_pages = {n: r for n, r in res.items() if r['cells']}
    summary = {'pages': len(res), 'math_elements': sum(r['math'] for r in res.values()),
               'cells_with_output': sum(r['outputs'] for r in nb_pages.values()),
               'code_cells': sum(r['cells'] for r in nb_pages.values()),
               'figures': sum(r['figures'] for r in nb_pages.values()),
               'pages_without_output': sorted(n for n, r in nb_pages.items() if not r['outputs']),
               'typeset_equations': sum(r['typeset'] for r in res.values()),
               'links_checked': n_links, 'anchors_checked': n_anchors, 'requests': len(requests),
               'search_hits': hits, 'screenshots': taken,
               'prose_width_px_1280': {k: res[k]['width'] for k in ('index.html', '10_rope.html') if k in res},
               'pages_checked_at_390': n_phone,
               'smallest_figure_scale': min((f['shown'] / f['natural'] for r in res.values()
                                             for f in r.get('layout', {}).get('figs', []) if f['natural']), default=None),
               'figures_audited': audit['checked'] if audit else 0, 'palette_pending': fig_notes,
               'failures': fails}
    (out_root/'check.json').write_text(json.dumps({**summary, 'pages_detail': {k: {kk: v for kk, v in r.items() if kk not in ('links', 'ids')} for k, r in res.items()}}, indent=1))
    print(f"browser check: {summary['pages']} pages, {summary['typeset_equations']} typeset equations "
          f"({summary['math_elements']} math elements), {n_links} local links and {n_anchors} anchors checked, "
          f"{len(requests)} requests (all local), search '{query}': {hits} hits; screenshots in {shots.relative_to(root)}/")
    print(f"layout: {n_phone} pages with math checked at 390 px; smallest figure scale at 1,280 px: "
          f"{summary['smallest_figure_scale'] or 0:.2f} (at least {MIN_FIGURE_SCALE})")
    print(f"notebook pages: {summary['cells_with_output']} of {summary['code_cells']} cells with output, {summary['figures']} figures; "
          f"without output: {', '.join(summary['pages_without_output']) or 'none'}")
    print(f"figures: {audit['checked'] if audit else 0} checked against the palette and the phone legend size"
          f"{'' if audit and audit['executed'] else ' (none: the pages were not executed)'}; "
          f"{len(fig_notes)} reported on pages still to change ({', '.join(PALETTE_PENDING)})")
    for f in fails[:60]: print('FAIL', f)
    if len(fails) > 60: print(f'... and {len(fails) - 60} more (see _site/check.json)')
    return 1 if fails else 0

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--chromium', help='browser executable (default: chromium on PATH)')
    ap.add_argument('--search', default='rotary', help='a word the search must find')
    a = ap.parse_args()
    sys.exit(check(a.chromium, a.search))

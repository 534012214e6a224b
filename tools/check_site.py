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
- an experiment page (21-28) shows no cell output or no figure: its tables and plots are computed from the committed
  records when the build executes the notebook, so an empty page means the records or the execution went missing.
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

EXPERIMENT_PAGE = re.compile(r'2[1-8]_[\w-]+\.html')

def output_failures(name, outputs, figures):
    "Failures of a page's rendered outputs: an experiment page (21-28) must show at least one output and one figure."
    if not EXPERIMENT_PAGE.fullmatch(name): return []
    fails = []
    if not outputs: fails.append(f'{name}: an experiment page without any cell output (were the notebooks executed?)')
    if not figures: fails.append(f'{name}: an experiment page without a figure')
    return fails

def local_file(url, base):
    "The file under html/ that a local URL names (a directory means its index.html)."
    rel = unquote(urlsplit(url).path)[len(urlsplit(base).path):]
    p = html_dir/rel
    return p/'index.html' if (p.is_dir() or rel == '') else p

def check(chromium=None, query='rotary', meta_file=out_root/'src'/'_pages.json'):
    if not (html_dir/'index.html').exists(): raise SystemExit(f'{html_dir}/index.html missing: run tools/build_site.py first')
    pages_meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    srv, base = serve(html_dir)
    ch = Chrome(find_chromium(chromium))
    fails, res, requests = [], {}, []
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
            if name == '10_rope.html' and not r['tocVisible']: fails.append(f'{name}: the page contents are not visible at 1280 px')
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
               'failures': fails}
    (out_root/'check.json').write_text(json.dumps({**summary, 'pages_detail': {k: {kk: v for kk, v in r.items() if kk not in ('links', 'ids')} for k, r in res.items()}}, indent=1))
    print(f"browser check: {summary['pages']} pages, {summary['typeset_equations']} typeset equations "
          f"({summary['math_elements']} math elements), {n_links} local links and {n_anchors} anchors checked, "
          f"{len(requests)} requests (all local), search '{query}': {hits} hits; screenshots in {shots.relative_to(root)}/")
    print(f"notebook pages: {summary['cells_with_output']} of {summary['code_cells']} cells with output, {summary['figures']} figures; "
          f"without output: {', '.join(summary['pages_without_output']) or 'none'}")
    for f in fails[:60]: print('FAIL', f)
    if len(fails) > 60: print(f'... and {len(fails) - 60} more (see _site/check.json)')
    return 1 if fails else 0

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--chromium', help='browser executable (default: chromium on PATH)')
    ap.add_argument('--search', default='rotary', help='a word the search must find')
    a = ap.parse_args()
    sys.exit(check(a.chromium, a.search))

#!/usr/bin/env python3
"""Check that opening a notebook in JupyterLab (as `make lab` starts it) does not mark it modified.

Copies the notebook to a temporary folder, starts JupyterLab there with tools/jupyter_lab_config.py, opens the
notebook in headless Chromium, waits for its kernel to be idle, and fails when the notebook's tab is marked
modified or the file on disk changed. Needs Chromium (see tools/check_site.py) and JupyterLab (`make lab` installs it).

Usage: python tools/check_lab.py [nbs/00_core.ipynb] [--plain]   (--plain: without the config, to see the problem)
"""
import argparse, hashlib, os, shutil, socket, subprocess, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from check_site import Chrome, find_chromium

root = Path(__file__).resolve().parents[1]
TABS_JS = """(() => { const t = [...document.querySelectorAll('.lm-TabBar-tab')].filter(e => e.textContent.includes('.ipynb'));
  const k = document.querySelector('[data-status]');
  return {tabs: t.map(e => e.className), kernel: k ? k.getAttribute('data-status') : null}; })()"""

def free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

def check(nb, plain=False, wait=180):
    tmp = Path(tempfile.mkdtemp(prefix='lab-check-'))
    f = tmp/Path(nb).name
    shutil.copy(nb, f)
    before = hashlib.sha256(f.read_bytes()).hexdigest()
    port, token = free_port(), 'check'
    cmd = [str(Path(sys.executable).parent/'jupyter'), 'lab', '--no-browser', f'--port={port}', f'--IdentityProvider.token={token}',
           f'--ServerApp.root_dir={tmp}', '--ServerApp.port_retries=0']
    if not plain: cmd.append(f'--config={root/"tools"/"jupyter_lab_config.py"}')
    if os.geteuid() == 0: cmd.append('--allow-root')
    lab = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(root)))
    ch, state = None, None
    try:
        time.sleep(5)
        ch = Chrome(find_chromium())
        ch.send('Page.enable'); ch.send('Runtime.enable')
        ch.send('Page.navigate', url=f'http://127.0.0.1:{port}/lab/tree/{f.name}?token={token}')
        t0 = time.time()
        while time.time() - t0 < wait:
            time.sleep(3)
            state = ch.eval(TABS_JS)
            if state['tabs'] and state['kernel'] == 'idle': break
        time.sleep(5)                                   # anything the kernel's first reply changes has happened by now
        state = ch.eval(TABS_JS)
    finally:
        if ch: ch.close()
        lab.terminate()
        try: lab.wait(30)
        except subprocess.TimeoutExpired: lab.kill()
    changed = hashlib.sha256(f.read_bytes()).hexdigest() != before
    shutil.rmtree(tmp, ignore_errors=True)
    if not state or not state['tabs']: print(f'FAIL {nb}: the notebook did not open in JupyterLab'); return 1
    dirty = any('jp-mod-dirty' in c for c in state['tabs'])
    print(f"{nb}: kernel {state['kernel']}, tab {'MODIFIED' if dirty else 'not modified'}, file {'CHANGED' if changed else 'unchanged'}")
    return 1 if (dirty or changed or state['kernel'] != 'idle') else 0

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('nb', nargs='?', default=str(root/'nbs'/'00_core.ipynb'))
    ap.add_argument('--plain', action='store_true', help='start JupyterLab without tools/jupyter_lab_config.py')
    a = ap.parse_args()
    sys.exit(check(a.nb, a.plain))

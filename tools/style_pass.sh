#!/usr/bin/env bash
# Issue 39 step 6, applied once: module splits (core -> core + attention; rope -> rope + rotary + rotary_kernel;
# cli -> cli + args; data -> data + batches; floater -> dynamics + floater), then
# the style fixer on every notebook, export, clean, README. Run from the repository root with the venv on PATH.
set -euo pipefail
python tools/split_notebook.py nbs/00_core.ipynb nbs/01_attention.ipynb attention \
  --start '## One attention that calls the hooks' \
  --title 'Attention: one layer that calls the hooks' \
  --summary 'The attention layer where hooks 2-5 meet: masks, a KV cache, a bias by rows or inside FlexAttention.'
python tools/export_def.py nbs/10_rope.ipynb 'def rotation_matrix('
python tools/split_notebook.py nbs/10_rope.ipynb nbs/10_rotary.ipynb rotary --provider \
  --start $'#| export\nSTYLES' --stop '`rope_inv_freq` gives' \
  --start $'#| export\ndef rotation_matrix(' --stop '## The properties, checked' \
  --start '## A rotary library' --stop '## RoPE in the core interface' \
  --title 'Rotary: frequencies and cached tables' \
  --summary 'RoPE frequencies, YaRN and friends, and cos/sin tables computed in fp32 from integer positions, cached.'
python tools/split_notebook.py nbs/10_rotary.ipynb nbs/10_rotary_kernel.ipynb rotary_kernel \
  --start '### The kernel, and what makes it fast' \
  --title 'Rotary kernel: applying the rotation fast' \
  --summary '`apply_rotary`: q and k rotated by cached tables instead of a dense product, fused, chunked, compile-clean.'
python tools/split_notebook.py nbs/06_cli.ipynb nbs/06_args.ipynb args --provider \
  --start '## Errors and input files' --stop '## `main`' --setup 'tmp = Path(tempfile.mkdtemp())' \
  --title 'Arguments: typed commands, overrides, devices' \
  --summary 'What the command line needs besides its commands: one-line errors, typed commands, --set overrides, devices.'
python tools/split_notebook.py nbs/03_data.ipynb nbs/03_batches.ipynb batches \
  --start '## Batches' --stop $'if HAVE_DATA:\n    t0 = time.time()' \
  --title 'Batches: padding, collation, token budgets' \
  --summary 'Padded batches of pairs with their positions and streams, and a sampler that fills a token budget.'
python tools/split_notebook.py nbs/11_floater.ipynb nbs/11_dynamics.ipynb dynamics --provider \
  --start '## The dynamics $h$' --stop '## The encoding' \
  --title 'Dynamics: the neural ODE under FLOATER' \
  --summary 'The dynamics h, an RK4 solve with its own backward, and the sinusoidal encoding as one solution of an ODE.'
python tools/format_notebooks.py
ruff check --fix --select E703,W291,W293 nbs
nbdev_export
nbdev_clean
python tools/make_readme.py
python tools/style_report.py
# two lines the fixer leaves (an f-string's expression longer than a line), by hand
python - <<'PY'
import json
def edit(nb, old, new):
    d = json.load(open(nb))
    hits = [c for c in d['cells'] if old in ''.join(c['source'])]
    if len(hits) != 1:
        print(f'{nb}: the long line is not there any more ({len(hits)} cells)')
        return
    c = hits[0]
    c['source'] = ''.join(c['source']).replace(old, new).splitlines(keepends=True)
    open(nb, 'w').write(json.dumps(d, indent=1, ensure_ascii=False) + '\n')
edit('nbs/24_speed.ipynb',
     '''        f"{', '.join(f'L={L} {r.time_ratio:.2f} [{r.time_ratio_min:.2f}..{r.time_ratio_max:.2f}]' for L, r in tw.iterrows())}"''',
     '''        + ', '.join(f'L={L} {r.time_ratio:.2f} [{r.time_ratio_min:.2f}..{r.time_ratio_max:.2f}]'
                    for L, r in tw.iterrows())''')
edit('nbs/28_linear_lm.ipynb',
     '''                    f"{bench['peak_mem_mb'][f'linear-rope@{L}'] / max(bench['peak_mem_mb'][f'softmax-rope@{L}'], 1e-9):.2f}",''',
     '''                    format(bench['peak_mem_mb'][f'linear-rope@{L}']
                           / max(bench['peak_mem_mb'][f'softmax-rope@{L}'], 1e-9), '.2f'),''')
PY
nbdev_export
nbdev_clean
# module aliases the import rewrite left unused in the scripts it touched
ruff check --isolated --select F401 --fix -q $(git diff --name-only -- tests benchmarks tools | grep '\.py$' | grep -v 'tools/') || true
ruff check nbs posenc_nb
python tools/style_report.py --check

#!/usr/bin/env python
"""The CUDA checks of the package in one script, each written as a record under `--out` (default results/gpu/).

    python tools/gpu_check.py                      # on a CUDA machine: about 5 to 10 minutes
    python tools/gpu_check.py --smoke --out DIR    # CPU only, tiny sizes: the same code paths, so the script does not rot

On CUDA it runs: every `#| gpu` notebook cell (`nbdev_test --flags gpu`); the encoding contract tests; `synthetic-tiny`
trained under fp16 and bf16 autocast, each checked for exact resume (a run killed after its first checkpoint and resumed
ends with the same weights as a straight run); the throughput benchmark against `torch.nn.Transformer`; the RoPE and
FLOATER benchmarks; issue 17's table in one run (`benchmarks/issue17.py --device cuda`); and issue 37's bias-cost
table (`benchmarks/biascost.py --device cuda`: ALiBi, T5 and Shaw through FlexAttention, record `biascost-cuda.json`;
the `#| gpu` cell of 01_baselines checks their values and gradients against the dense bias).
Each step's outcome (pass/fail, its figures or output tail, the exact command) goes to one JSON
record with the commit, hardware, torch version and precision, so a GPU session commits what it measured. A failing
step does not stop the others; the exit status is 1 when any step failed.
"""
import argparse, json, os, shlex, shutil, subprocess, sys, tempfile, time
from pathlib import Path
import torch
from posenc_nb.utils import atomic_write, provenance

ROOT = Path(__file__).resolve().parents[1]


def run_cmd(cmd: list, timeout: int, env=None) -> dict:
    "Run a subprocess from the repository root: its exit status, seconds and the tail of its output."
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = 124, f"timed out after {timeout} s\n{(e.stdout or b'')[-4000:]}"
    text = str(text)   # the head keeps the first error where exit-time noise (e.g. torch._dynamo's ignored exceptions) fills the tail
    return dict(ok=rc == 0, rc=rc, seconds=round(time.time() - t0, 1), command=' '.join(shlex.quote(c) for c in cmd),
                output_head=text[:4000] if len(text) > 6000 else '', output_tail=text[-6000:])


class _Kill(RuntimeError): pass


def check_resume(device: torch.device, amp, work: Path, smoke: bool) -> dict:
    "`synthetic-tiny` under `amp`: a straight run against one killed after its first checkpoint and resumed; same weights?"
    from posenc_nb.train import config_from_name, train
    steps = 8 if smoke else 60
    cfg = config_from_name('synthetic-tiny', max_steps=steps, ckpt_every=steps // 2, eval_every=steps // 2, dropout=0.1,
                           amp=amp, data_options={'n': 1500}, eval_bleu_sents=10, test_max_sents=20, beam=2, log_every=2)
    t0 = time.time()
    straight = train(cfg, work / 'straight', resume=False, device=str(device), progress=False)
    def kill(step):
        if step == steps // 2 + 1: raise _Kill()
    try: train(cfg, work / 'killed', resume=False, device=str(device), progress=False, on_step=kill)
    except _Kill: pass
    resumed = train(cfg, work / 'killed', resume=True, device=str(device), progress=False)
    a, b = straight['model'].state_dict(), resumed['model'].state_dict()
    max_diff = max(float((a[k].float() - b[k].float()).abs().max()) for k in a if a[k].is_floating_point())
    return dict(ok=max_diff == 0.0, max_abs_weight_diff=max_diff, steps=steps, amp=amp, valid_loss=straight.get('valid_loss'),
                bleu=straight.get('bleu'), tok_s=straight.get('tok_s'), seconds=round(time.time() - t0, 1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', default=str(ROOT / 'results' / 'gpu'), help='folder of the JSON records')
    ap.add_argument('--smoke', action='store_true', help='CPU, tiny sizes: check that every step still runs (no records worth keeping)')
    ap.add_argument('--no-bench', action='store_true', help='the correctness checks only (notebook cells, contract tests, resume): for a GPU shared with other runs, where timings mean nothing')
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not a.smoke:
        print("gpu_check: no CUDA device here; run it on a CUDA machine, or pass --smoke to exercise its CPU path", file=sys.stderr)
        return 2
    device = torch.device('cuda' if cuda and not a.smoke else 'cpu')
    out, py, failed = Path(a.out), sys.executable, []
    def save(name, rec, precision='fp32'):
        rec.update(provenance(precision=precision, device=device), cuda=torch.version.cuda, check=name, smoke=a.smoke)
        path = atomic_write(out / f'{name}.json', json.dumps(rec, indent=1, default=str))
        print(f"{name}: {'ok' if rec['ok'] else 'FAILED'}  -> {path}", flush=True)
        if not rec['ok']: failed.append(name)

    if device.type == 'cuda':
        nbs = sorted(p.name for p in (ROOT / 'nbs').glob('*.ipynb') if '#| gpu' in p.read_text())
        nbt = shutil.which('nbdev_test') or str(Path(py).with_name('nbdev_test'))
        nbt = [nbt] if Path(nbt).exists() else [py, '-c', 'from nbdev.test import nbdev_test; nbdev_test()']   # wheels installed with --target have no scripts
        runs = [run_cmd([*nbt, '--flags', 'gpu', '--path', f'nbs/{nb}'], timeout=300) for nb in nbs]
        save('notebooks_gpu_cells', dict(ok=all(r['ok'] for r in runs), notebooks=dict(zip(nbs, runs))))
    if device.type == 'cuda' and (ROOT / 'tests' / 'test_contract.py').exists():   # on CPU, `make test` runs them
        save('contract_tests', run_cmd([py, '-m', 'pytest', '-q', '-x', 'tests/test_contract.py'], timeout=600,
                                       env={'POSENC_TEST_DEVICE': device.type}))
    amps = ['fp16', 'bf16'] if device.type == 'cuda' else [None]
    with tempfile.TemporaryDirectory() as tmp:
        for amp in amps:
            try: rec = check_resume(device, amp, Path(tmp) / str(amp), a.smoke)
            except Exception as e: rec = dict(ok=False, error=f"{type(e).__name__}: {e}")
            save(f'train_resume_{amp or "fp32"}', rec, precision=amp or 'fp32')
    def done(note=''):
        print(f"gpu_check: {'all checks passed' if not failed else 'FAILED: ' + ', '.join(failed)}{note}")
        return 1 if failed else 0
    if a.no_bench: return done(' (benchmarks skipped: --no-bench)')
    dev = ['--device', device.type]
    tiny = ['--steps', '1', '--reps', '1', '--warmup', '0', '--max-tokens', '256', '--d-model', '32', '--layers', '1', '--ff', '64', '--vocab', '200']
    save('throughput_vs_nn_transformer', run_cmd([py, 'benchmarks/throughput.py', *dev, *(tiny if a.smoke else [])], timeout=600))
    save('throughput_bf16', run_cmd([py, 'benchmarks/throughput.py', '--mode', 'amp', *dev, *(tiny if a.smoke else [])], timeout=600),
         precision='bf16')
    # rope_bench times CPU kernels (no device option yet); the GPU's RoPE path is checked by 10_rope's `#| gpu` cell above
    save('rope_bench', run_cmd([py, 'benchmarks/rope_bench.py'] + (['--quick'] if a.smoke else ['--reps', '5']), timeout=600))
    fl = [py, 'benchmarks/floater_bench.py', *dev] + (['--d', '32', '--layers', '1', '--vocab', '200', '--batch', '4', '--lens', '8', '--reps', '1', '--decode-steps', '2']
                                                      if a.smoke else ['--reps', '5', '--out', str(out / 'floater-cuda.json')])
    save('floater_bench', run_cmd(fl, timeout=600))
    i17 = [py, 'benchmarks/issue17.py', *dev] + (['--reps', '1', '--train-reps', '1', '--vs-reps', '1', '--vs-steps', '1'] if a.smoke else
                                                 ['--reps', '11', '--train-reps', '11', '--vs-reps', '5', '--out', str(out / 'issue17-cuda.json')])
    save('issue17_bench', run_cmd(i17, timeout=600))    # issue 17's ratios in one run, on this device
    bc = [py, 'benchmarks/biascost.py', *dev] + (['--quick'] if a.smoke else ['--out', str(out / 'biascost-cuda.json')])
    save('biascost_bench', run_cmd(bc, timeout=600))    # issue 37: ALiBi, T5, Shaw over sinusoidal (FlexAttention)
    return done()


if __name__ == '__main__':
    sys.exit(main())

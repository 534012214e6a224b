"""Rotary speed on CPU: posenc_nb.rope against its peers and the memory floor, forward and training, in one run.

Run: python benchmarks/rope_bench.py [--reps 21] [--threads 1] [--out results/speed/rope.json] [--quick]

How it measures, so that ratios survive a shared, noisy machine:
* CPU time of this process (`time.process_time`), one torch thread: time stolen by other processes is not counted.
* Contenders interleaved: each round times every method once, in turn, so allocator state and background load
  hit all of them alike; the figure is the median over rounds.
* Only ratios against a reference measured in the same run are reported (copy of q and k for the forward,
  HF Llama's `rotate_half` formula for training); no absolute goal, and nothing here is asserted.

Sections: forward without grad (fp32 and bf16), the model's real (B,1,L) positions (first layer: a fresh positions
tensor per call; later layers: the same tensor again), and training (forward + backward of q and k).
Peers are optional: transformers (Llama `apply_rotary_pos_emb`), rotary-embedding-torch."""
import argparse, json, os, platform, statistics, subprocess, sys, time
from datetime import datetime, timezone
import torch
from posenc_nb.rotary import RotaryCache
from posenc_nb.rotary_kernel import apply_rotary

FWD_SHAPES = [(4, 8, 2048, 64), (1, 32, 4096, 128)]
TRAIN_SHAPES = [(32, 4, 128, 64), (4, 8, 2048, 64)]

def cpu_time(fn) -> float:
    t = time.process_time(); fn(); return time.process_time() - t

def run_interleaved(ms: dict, reps: int) -> dict:
    "Median CPU seconds per method, the methods timed in turn within every round."
    for f in ms.values(): f(); f()                  # warm-up: tables, allocator, lazy imports
    ts = {n: [] for n in ms}
    for _ in range(reps):
        for n, f in ms.items(): ts[n].append(cpu_time(f))
    return {n: statistics.median(v) for n, v in ts.items()}

def llama_tables(L, D, dtype, device='cpu'):
    "HF Llama's cos/sin: (1, L, D), angles in fp32, cast to the input dtype (what LlamaRotaryEmbedding returns)."
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float, device=device) / D))
    f = torch.arange(L, dtype=torch.float, device=device)[None, :, None] * inv
    emb = torch.cat([f, f], -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)

def complex_autograd(x, fc):
    "The plain complex multiply under autograd (Meta's Llama reference `apply_rotary_emb`), interleaved pairs."
    return torch.view_as_real(torch.view_as_complex(x.float().unflatten(-1, (-1, 2))) * fc).flatten(-2).type_as(x)

def peers():
    out = {}
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        out['hf'] = apply_rotary_pos_emb
    except ImportError: print('transformers not installed: HF Llama skipped')
    try:
        from rotary_embedding_torch import RotaryEmbedding
        out['ret'] = RotaryEmbedding
    except ImportError: print('rotary-embedding-torch not installed: skipped')
    return out

def forward_methods(q, k, P, with_pos: bool):
    B, H, L, D = q.shape
    cache = RotaryCache(D)
    ms = {'copy of q and k (floor)': lambda: (q.clone(), k.clone())}
    qo, ko = torch.empty_like(q), torch.empty_like(k)
    ms['copy into preallocated q, k (no allocation)'] = lambda: (qo.copy_(q), ko.copy_(k))
    for st in ('interleaved', 'half'):
        ms[f'posenc_nb {st}'] = lambda st=st: (apply_rotary(q, None, cache, style=st), apply_rotary(k, None, cache, style=st, key=True))
    if with_pos:        # the model's positions: Positions.pos[:, None], (B,1,L)
        base = torch.arange(L)[None, None].expand(B, 1, L).contiguous()
        for st in ('interleaved', 'half'):
            def fresh(st=st):
                pos = base.clone()          # a new positions tensor: what the first layer of a forward sees
                return apply_rotary(q, pos, cache, style=st), apply_rotary(k, pos, cache, style=st, key=True)
            ms[f'posenc_nb {st}, (B,1,L) positions, first layer'] = fresh
            ms[f'posenc_nb {st}, (B,1,L) positions, later layers'] = lambda st=st: (
                apply_rotary(q, base, cache, style=st), apply_rotary(k, base, cache, style=st, key=True))
    if 'hf' in P:
        cos, sin = llama_tables(L, D, q.dtype)
        ms['HF Llama apply_rotary_pos_emb (half)'] = lambda: P['hf'](q, k, cos, sin)
    if 'ret' in P and q.dtype == torch.float32:
        rot = P['ret'](D)
        ms['rotary-embedding-torch (interleaved)'] = lambda: (rot.rotate_queries_or_keys(q), rot.rotate_queries_or_keys(k))
    return ms

def train_methods(q, k, P):
    "Forward + backward of the rotation of q and k with a fixed upstream gradient (torch.autograd.grad: nothing accumulates)."
    B, H, L, D = q.shape
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    cache = RotaryCache(D)
    step = lambda f: (lambda: torch.autograd.grad(f(), (q, k), (gq, gk)))
    ms = {}
    if 'hf' in P:
        cos, sin = llama_tables(L, D, q.dtype, q.device)
        ms['HF Llama apply_rotary_pos_emb (half)'] = step(lambda: P['hf'](q, k, cos, sin))
    for st in ('interleaved', 'half'):
        ms[f'posenc_nb {st}'] = step(lambda st=st: (apply_rotary(q, None, cache, style=st), apply_rotary(k, None, cache, style=st, key=True)))
    ang = torch.arange(L, dtype=torch.float64)[:, None] * (1.0 / 10000 ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    fc = torch.polar(torch.ones_like(ang), ang).to(q.device, torch.complex64)
    ms['complex multiply under autograd (interleaved)'] = step(lambda: (complex_autograd(q, fc), complex_autograd(k, fc)))
    if 'ret' in P and q.dtype == torch.float32:
        rot = P['ret'](D).to(q.device)
        ms['rotary-embedding-torch (interleaved)'] = step(lambda: (rot.rotate_queries_or_keys(q), rot.rotate_queries_or_keys(k)))
    return ms

def section(name, shape, dtype, med, ref):
    base = med[ref]
    print(f'\n{name}: q, k {shape} {str(dtype).replace("torch.", "")} (ratio to {ref})')
    print(f"{'method':58s} {'ms':>8s} {'ratio':>7s}")
    rows = []
    for n, t in med.items():
        print(f'{n:58s} {t * 1e3:8.2f} {t / base:7.2f}')
        rows.append(dict(section=name, shape=list(shape), dtype=str(dtype).replace('torch.', ''), method=n,
                         cpu_ms=round(t * 1e3, 4), ratio=round(t / base, 4), reference=ref))
    return rows

def provenance(argv, threads):
    try: commit = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()
    except OSError: commit = None
    try: dirty = bool(subprocess.run(['git', 'status', '--porcelain', '--', 'posenc_nb', 'benchmarks'], capture_output=True, text=True).stdout.strip())
    except OSError: dirty = None
    cpu = next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')), platform.processor()) \
        if os.path.exists('/proc/cpuinfo') else platform.processor()
    return dict(command='python ' + ' '.join(argv), git_commit=commit, git_dirty=dirty, torch_version=torch.__version__,
                hardware=f'CPU {cpu} ({os.cpu_count()} cores, {threads} torch threads)', platform=platform.platform(),
                timer='time.process_time (CPU time of this process), contenders interleaved per round, median over rounds',
                started_utc=datetime.now(timezone.utc).isoformat(timespec='seconds'), loadavg_at_start=list(os.getloadavg()))

def main(argv=None):
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser()
    ap.add_argument('--reps', type=int, default=21, help='rounds; every method is timed once per round')
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--quick', action='store_true', help='small shapes, 3 rounds: a smoke test of the script')
    ap.add_argument('--out', default=None, help='write the JSON record here (e.g. results/speed/rope.json)')
    a = ap.parse_args(argv[1:])
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    prov = provenance(argv, a.threads)
    fwd, train, reps = (FWD_SHAPES, TRAIN_SHAPES, a.reps) if not a.quick else ([(2, 2, 64, 16)], [(2, 2, 32, 16)], 3)
    print(f'torch {torch.__version__}, threads={a.threads}, rounds={reps}, CPU time, medians')
    P, rows = peers(), []
    for dtype in (torch.float32, torch.bfloat16):
        for shape in fwd:
            q, k = torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)
            with torch.no_grad():
                med = run_interleaved(forward_methods(q, k, P, with_pos=dtype == torch.float32), reps)
            rows += section('forward, no grad', shape, dtype, med, 'copy of q and k (floor)')
    for dtype in (torch.float32, torch.bfloat16):
        for shape in train:
            q, k = (torch.randn(shape, dtype=dtype, requires_grad=True) for _ in range(2))
            med = run_interleaved(train_methods(q, k, P), reps)
            ref = 'HF Llama apply_rotary_pos_emb (half)' if 'hf' in P else 'complex multiply under autograd (interleaved)'
            rows += section('training, forward + backward', shape, dtype, med, ref)
    rec = dict(provenance=prov, rounds=reps, threads=a.threads, precision=['float32', 'bfloat16'], rows=rows,
               loadavg_at_end=list(os.getloadavg()))
    if a.out:
        os.makedirs(os.path.dirname(a.out) or '.', exist_ok=True)
        with open(a.out, 'w') as f: json.dump(rec, f, indent=1)
        print(f'\nwrote {a.out}')
    return rec

if __name__ == '__main__': main()

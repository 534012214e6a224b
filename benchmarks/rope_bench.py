"""Rotary speed on CPU: posenc_nb.rope vs peers vs the memory floor (a plain copy of q and k).

Run: python benchmarks/rope_bench.py [--reps 5] [--threads 1]
Prints median milliseconds and ratios to the copy floor, measured in the same run (never absolute goals).
Peers are optional: rotary-embedding-torch, transformers (Llama-style apply_rotary_pos_emb)."""
import argparse, time, statistics
import torch
from posenc_nb.rope import RotaryCache, apply_rotary

def timeit(fn, reps):
    fn()                                      # warm-up: tables, allocator
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)

def methods(q, k):
    B, H, L, D = q.shape
    out = {'copy (floor)': lambda: (q.clone(), k.clone())}
    cache = RotaryCache(D)
    for style in ('interleaved', 'half'):
        out[f'posenc_nb {style}'] = lambda style=style: (apply_rotary(q, None, cache, style=style), apply_rotary(k, None, cache, style=style, key=True))
    qi, ki = q.clone(), k.clone()
    for style in ('interleaved', 'half'):
        out[f'posenc_nb {style} inplace'] = lambda style=style: (apply_rotary(qi, None, cache, style=style, inplace=True),
                                                                  apply_rotary(ki, None, cache, style=style, inplace=True))
    try:
        from rotary_embedding_torch import RotaryEmbedding
        rot = RotaryEmbedding(D)
        out['rotary-embedding-torch (interleaved)'] = lambda: (rot.rotate_queries_or_keys(q), rot.rotate_queries_or_keys(k))
    except ImportError: print('rotary-embedding-torch not installed: skipped')
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float) / D))
        f = torch.arange(L, dtype=torch.float)[None, :, None] * inv
        emb = torch.cat([f, f], -1)
        cos, sin = emb.cos(), emb.sin()
        out['HF Llama apply_rotary_pos_emb (half)'] = lambda: apply_rotary_pos_emb(q, k, cos, sin)
    except ImportError: print('transformers not installed: skipped')
    return out

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--compile', action='store_true', help='also time torch.compile of the half-style kernel (slow to compile)')
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f'torch {torch.__version__}, threads={a.threads}, reps={a.reps}, fp32, CPU')
    for shape in [(4, 8, 2048, 64), (1, 32, 4096, 128)]:
        q, k = torch.randn(shape), torch.randn(shape)
        ms = methods(q, k)
        if a.compile:
            from posenc_nb.rope import rotate_with_table
            cache = RotaryCache(shape[-1]); cs = cache.range(0, shape[2], fmt='planes')
            fn = torch.compile(lambda x, cs: rotate_with_table(x, cs, 'half'), fullgraph=True, dynamic=False)
            ms['posenc_nb half (torch.compile)'] = lambda: (fn(q, cs), fn(k, cs))
        # interleave methods across rounds so background load hits all of them alike
        ts = {n: [] for n in ms}
        for f in ms.values(): f()
        for _ in range(a.reps):
            for n, f in ms.items(): ts[n].append(timeit(f, 1))
        med = {n: statistics.median(v) for n, v in ts.items()}
        base = med['copy (floor)']
        print(f'\nq, k of shape {shape}')
        print(f"{'method':45s} {'ms':>8s} {'x copy':>8s}")
        for n, t in med.items(): print(f'{n:45s} {t * 1e3:8.2f} {t / base:8.2f}')
        # same pair layout, same semantics (out of place): peer time / our time
        for ours_n, peer_n in [('posenc_nb interleaved', 'rotary-embedding-torch (interleaved)'),
                               ('posenc_nb half', 'HF Llama apply_rotary_pos_emb (half)')]:
            if peer_n in med: print(f'{ours_n} is {med[peer_n] / med[ours_n]:.2f}x faster than {peer_n}')
        peers = [t for n, t in med.items() if 'rotary-embedding' in n or 'HF' in n]
        ours = min(med['posenc_nb interleaved'], med['posenc_nb half'])
        if peers: print(f'fastest posenc_nb (out of place) vs fastest peer: {min(peers) / ours:.2f}x faster')

if __name__ == '__main__': main()

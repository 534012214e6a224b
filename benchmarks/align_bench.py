"""Aligner benchmark: time and AER of posenc_nb.align (vectorized fast_align) against eflomal.

    POSENC_DATA=../shared/data python benchmarks/align_bench.py --n 50000 --n-synth 10000

Times the full pipeline (both directions, Viterbi, grow-diag-final-and) on the first --n pairs of
small_parallel_enja (en-ja), and AER against gold links on --n-synth pairs of the synthetic corpus.
eflomal (optional: pip install eflomal) runs on the same data as the reference; ratios are printed, nothing is asserted.
"""
import argparse, os, resource, time
import numpy as np
from posenc_nb.align import fast_align, symmetrize, alignment_scores, read_parallel, eflomal_align
from posenc_nb.data import data_dir
from posenc_nb.synthetic import synthetic_corpus

def cpu():
    "CPU seconds of this process and its finished children (eflomal runs a C binary)."
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime

def ours(src, tgt, **kw):
    c0 = cpu(); t0 = time.perf_counter()
    fm = fast_align(src, tgt, **kw); t1 = time.perf_counter()
    rm = fast_align(src, tgt, reverse=True, **kw); t2 = time.perf_counter()
    fw, rv = fm.align(src, tgt), rm.align(src, tgt); t3 = time.perf_counter()
    sym = symmetrize(fw, rv); t4 = time.perf_counter()
    return fw, rv, sym, dict(train_fwd=t1 - t0, train_rev=t2 - t1, viterbi=t3 - t2, symmetrize=t4 - t3, total=t4 - t0, cpu=cpu() - c0)

def peer(src, tgt):
    try: import eflomal  # noqa
    except ImportError: return None
    c0 = cpu(); t0 = time.perf_counter(); fw, rv = eflomal_align(src, tgt); t1 = time.perf_counter()
    sym = symmetrize(fw, rv)
    return fw, rv, sym, dict(total=t1 - t0, cpu=cpu() - c0)

if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--n', type=int, default=50000, help='en-ja pairs to time (needs POSENC_DATA)')
    ap.add_argument('--n-synth', type=int, default=10000, help='synthetic pairs for AER')
    ap.add_argument('--iters', type=int, default=5)
    ap.add_argument('--threads', type=int, default=1)
    a = ap.parse_args()
    try:
        import torch; torch.set_num_threads(a.threads)
    except ImportError: pass
    C = synthetic_corpus(a.n_synth, seed=0)
    src, tgt, gold = [p.src for p in C], [p.tgt for p in C], [p.align for p in C]
    print(f'== synthetic corpus, {len(src)} pairs, gold links as sure ==')
    for name, kw in [('ours p0=.08', {}), ('ours p0=.2', dict(p0=0.2))]:
        fw, rv, sym, t = ours(src, tgt, iters=a.iters, **kw)
        r = {k: alignment_scores(x, gold) for k, x in [('fwd', fw), ('rev', rv), ('gdfa', sym)]}
        print(f"{name:12s} AER fwd {r['fwd']['aer']:.4f} rev {r['rev']['aer']:.4f} gdfa {r['gdfa']['aer']:.4f}  "
              f"P {r['gdfa']['precision']:.3f} R {r['gdfa']['recall']:.3f}  time {t['total']:.1f}s (cpu {t['cpu']:.1f}s)")
    ref_t = t['total']
    p = peer(src, tgt)
    if p is None: print('eflomal not installed: peer skipped')
    else:
        fw, rv, sym, t = p
        r = {k: alignment_scores(x, gold) for k, x in [('fwd', fw), ('rev', rv), ('gdfa', sym)]}
        print(f"{'eflomal':12s} AER fwd {r['fwd']['aer']:.4f} rev {r['rev']['aer']:.4f} gdfa {r['gdfa']['aer']:.4f}  "
              f"P {r['gdfa']['precision']:.3f} R {r['gdfa']['recall']:.3f}  time {t['total']:.1f}s (cpu {t['cpu']:.1f}s; wall x{t['total'] / ref_t:.2f} of ours)")
    d = data_dir()
    if d is None or not (d / 'small_parallel_enja').exists():
        print('POSENC_DATA not set: en-ja timing skipped'); raise SystemExit
    en, ja = read_parallel(d / 'small_parallel_enja' / 'train.en', d / 'small_parallel_enja' / 'train.ja', a.n)
    cells = sum(len(e) * (len(j) + 1) + len(j) * (len(e) + 1) for e, j in zip(en, ja))
    print(f'== en-ja, {len(en)} pairs, {cells / 1e6:.1f}M cells (both directions) ==')
    fw, rv, sym, t = ours(en, ja, iters=a.iters)
    print('ours   ', {k: round(v, 2) for k, v in t.items()})
    q = max(1, len(en) // 4)   # linear scaling: CPU time per cell at a quarter of the pairs against all of them
    cells_q = sum(len(e) * (len(j) + 1) + len(j) * (len(e) + 1) for e, j in zip(en[:q], ja[:q]))
    tq = ours(en[:q], ja[:q], iters=a.iters)[3]
    print(f"scaling: cpu per Mcell {tq['cpu'] / cells_q * 1e6:.2f}s at {q} pairs, {t['cpu'] / cells * 1e6:.2f}s at {len(en)} "
          f"(ratio {(t['cpu'] / cells) / (tq['cpu'] / cells_q):.2f}; 1 = linear)")
    p = peer(en, ja)
    if p is not None:
        _, _, esym, et = p
        print(f"eflomal total {et['total']:.1f}s, cpu {et['cpu']:.1f}s (wall x{et['total'] / t['total']:.2f}, cpu x{et['cpu'] / t['cpu']:.2f} of ours); "
              f"gdfa agreement (AER of ours against eflomal links) {alignment_scores(sym, esym)['aer']:.3f}")

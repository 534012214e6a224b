"""BTG reorderer benchmark: oracle extraction, training time and Kendall's tau / FRS on en-ja dev, CKY decoding time.

    POSENC_DATA=../shared/data python benchmarks/btg_bench.py --n 50000 --epochs 4

1. aligns the first --n training pairs plus the 500 dev pairs of small_parallel_enja (both directions, --sym links),
2. turns links into oracle permutations for English in Japanese order and Japanese in English order,
3. trains a BTGReorderer per direction on the training part (time reported) and scores dev against the oracles,
   next to the monotone baseline,
4. times CKY decoding of a 40-word sentence against a plain-Python triple-loop CKY measured in the same run.
Nothing is asserted; ratios are printed. With --out, the en-ja figures (both symmetrizations' monotone tau, the share
of BTG-separable oracles, and per direction the dev scores and training time) go to a JSON record with provenance,
which notebook 13 renders.
"""
import argparse, json, random, resource, time
import numpy as np
from posenc_nb.align import fast_align, symmetrize, read_parallel
from posenc_nb.btg import BTGReorderer, alignment_to_permutation, reordering_scores, cky, _flat_table, parse_separable
from posenc_nb.utils import atomic_write, provenance
from posenc_nb.data import data_dir
from posenc_nb.synthetic import synthetic_corpus

def cky_loops(sI, n):
    fl = _flat_table(n); best = {(i, i + 1): 0.0 for i in range(n)}
    for L in range(2, n + 1):
        for i in range(n - L + 1):
            j = i + L
            best[i, j] = max(best[i, k] + best[k, j] + max(sI[fl[i, k, j]], 0.) for k in range(i + 1, j))
    return best[0, n]

def timeit(f, reps):
    "Best wall time of `reps` calls (least disturbed by other processes)."
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return min(ts)

if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--n', type=int, default=50000)
    ap.add_argument('--epochs', type=int, default=4)
    ap.add_argument('--sym', default='intersection')
    ap.add_argument('--p0', type=float, default=0.08)
    ap.add_argument('--n-synth', type=int, default=10000)
    ap.add_argument('--out', help='write the en-ja figures as a JSON record here')
    a = ap.parse_args()
    try:
        import torch; torch.set_num_threads(1)
    except ImportError: pass

    print(f'== synthetic corpus: train {a.n_synth}, test 1000, gold permutations ==')
    tr, te = synthetic_corpus(a.n_synth, seed=0), synthetic_corpus(1000, seed=1)
    c0, t0 = time.process_time(), time.perf_counter()
    r = BTGReorderer(epochs=a.epochs).fit([p.src for p in tr], [p.perm for p in tr])
    print(f'train {time.perf_counter() - t0:.1f}s wall, {time.process_time() - c0:.1f}s cpu;',
          {k: round(v, 4) for k, v in reordering_scores(r.predict_batch([p.src for p in te]), [p.perm for p in te]).items()})

    print('== CKY decoding, 40-word sentence ==')
    n = 40; N3 = n * (n * n - 1) // 6
    sI = np.random.default_rng(0).normal(size=(1, N3))
    t_vec = timeit(lambda: cky(sI), 20)
    t_loop = timeit(lambda: cky_loops(sI[0], n), 3)
    sB = np.random.default_rng(1).normal(size=(64, N3))
    t_batch = timeit(lambda: cky(sB), 5) / 64
    sent = ' '.join(f'w{i % 17}' for i in range(n))
    t_pred = timeit(lambda: r.predict(sent), 20)
    print(f'vectorized cky {t_vec * 1e3:.1f} ms, full predict (features + cky + readout) {t_pred * 1e3:.1f} ms, '
          f'python triple loop {t_loop * 1e3:.1f} ms (x{t_loop / t_vec:.1f} of vectorized); '
          f'batched 64 sentences: {t_batch * 1e3:.2f} ms per sentence (x{t_loop / t_batch:.0f} faster than the loop)')

    d = data_dir()
    if d is None or not (d / 'small_parallel_enja').exists():
        print('POSENC_DATA not set: en-ja skipped'); raise SystemExit
    D = d / 'small_parallel_enja'
    en, ja = read_parallel(D / 'train.en', D / 'train.ja', a.n)
    den, dja = read_parallel(D / 'dev.en', D / 'dev.ja')
    E, J = en + den, ja + dja
    t0 = time.perf_counter()
    fm, rm = fast_align(E, J, p0=a.p0), fast_align(E, J, p0=a.p0, reverse=True)
    links = symmetrize(fm.align(E, J), rm.align(E, J), a.sym)
    print(f'== en-ja: aligned {len(E)} pairs ({a.sym}) in {time.perf_counter() - t0:.1f}s ==')
    N = len(en)
    other = 'grow-diag-final-and' if a.sym == 'intersection' else 'intersection'
    links_other = symmetrize(fm.align(E, J), rm.align(E, J), other)
    rec = dict(n_train=N, n_dev=len(den), epochs=a.epochs, p0=a.p0, sym=a.sym, directions={},
               tau_mono_dev={}, **provenance(seed=0, precision='fp64 numpy'))
    for sym, L in ((a.sym, links), (other, links_other)):     # how far the oracles move from monotone, per symmetrization
        perms = [alignment_to_permutation(len(s), l, attach='right') for s, l in zip(E, L)]
        rec['tau_mono_dev'][sym] = reordering_scores(perms[N:], perms[N:])['tau_mono']
    for name, S, L, att in [('English in Japanese order', E, links, 'right'),
                            ('Japanese in English order', J, [[(j, i) for i, j in l] for l in links], 'left')]:
        perms = [alignment_to_permutation(len(s), l, attach=att) for s, l in zip(S, L)]
        c0, t0 = time.process_time(), time.perf_counter()
        r = BTGReorderer(epochs=a.epochs).fit(S[:N], perms[:N])
        tw, tc = time.perf_counter() - t0, time.process_time() - c0
        sc = reordering_scores(r.predict_batch(S[N:]), perms[N:])
        sep = float(np.mean([parse_separable(p) is not None for p in perms if p]))
        rec['directions'][name] = dict(sc, train_cpu_s=tc, updates=[l['updates'] for l in r.log], separable_share=sep)
        print(f'{name}: train {tw:.1f}s wall / {tc:.1f}s cpu ({a.epochs} epochs, updates {[l["updates"] for l in r.log]}); dev '
              f"tau {sc['tau']:.4f} (monotone {sc['tau_mono']:.4f})  FRS {sc['frs']:.4f} (monotone {sc['frs_mono']:.4f})")
    if a.out: atomic_write(a.out, json.dumps(rec, indent=1)); print('record:', a.out)

"""FLOATER cost benchmark (one run, not a timed test): training-step and inference time of FLOATER vs sinusoidal
at the same model size, and how the ODE solve grows with the maximum length. Prints ratios against the sinusoidal
reference measured in the same run (interleaved repetitions, median), never asserts a wall time.

    python benchmarks/floater_bench.py                 # d=256, 3+3 layers, 64 x 32 tokens, 1 thread
    python benchmarks/floater_bench.py --reps 5 --batch 128
"""
import argparse, statistics, time
import torch
from posenc_nb.core import Positions, make_posenc
from posenc_nb.model import ModelConfig, Seq2Seq, label_smoothed_nll

def build(name, args, **opts):
    torch.manual_seed(0)
    return Seq2Seq(ModelConfig(src_vocab=args.vocab, tgt_vocab=args.vocab, d_model=args.d, n_heads=args.heads, n_enc=args.layers,
                               n_dec=args.layers, d_ff=4 * args.d, dropout=0.1, enc_pe=name, pe_options=opts, max_len=1024))

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--d', type=int, default=256); ap.add_argument('--heads', type=int, default=4)
    ap.add_argument('--layers', type=int, default=3); ap.add_argument('--vocab', type=int, default=8000)
    ap.add_argument('--batch', type=int, default=64); ap.add_argument('--len', type=int, default=32)
    ap.add_argument('--reps', type=int, default=3); ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--lengths', default='16,64,256')
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    B, L = args.batch, args.len
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(4, args.vocab, (B, L), generator=g), torch.randint(4, args.vocab, (B, L + 1), generator=g)
    sp, tp = Positions.arange(B, L), Positions.arange(B, L)
    variants = {'sinusoidal': ('sinusoidal', {}), 'floater (default: rk4/1)': ('floater', {}),
                'floater (rk4/5, direct)': ('floater', {'substeps': 5}),
                'floater (paper: rk4/5 adj)': ('floater', {'substeps': 5, 'adjoint': True}),
                'floater (refresh_every=4)': ('floater', {'refresh_every': 4}), 'floater-input': ('floater-input', {})}
    models = {k: build(n, args, **o) for k, (n, o) in variants.items()}
    opts = {k: torch.optim.Adam(m.parameters(), lr=1e-4) for k, m in models.items()}
    train_t = {k: [] for k in models}
    def step(k):
        m, o = models[k], opts[k]; m.train()
        t0 = time.perf_counter()
        logits = m(src, sp, tgt[:, :-1], tp)
        loss, _, n = label_smoothed_nll(logits, tgt[:, 1:], 0.1)
        o.zero_grad(); (loss / n).backward(); o.step()
        return time.perf_counter() - t0
    for k in models: step(k)                                   # warm-up (allocations, first solves)
    for r in range(args.reps + (4 if args.reps < 4 else 0)):   # >= 4 steps so refresh_every=4 is amortised fairly
        for k in models: train_t[k].append(step(k))
    infer_t, dec_t = {k: [] for k in models}, {k: [] for k in models}
    def infer(k):
        m = models[k].eval()
        with torch.no_grad():
            t0 = time.perf_counter(); m(src, sp, tgt[:, :-1], tp); t1 = time.perf_counter()
            mem = m.encode(src, sp); cache = m.new_cache()
            for t in range(16): m.decode(tgt[:, t:t + 1], Positions.arange(B, 1, offset=t), mem, sp, cache=cache)
            return t1 - t0, time.perf_counter() - t1
    for k in models: infer(k)                                   # warm-up: the trajectory is solved here, once
    solves = {k: getattr(models[k].enc_pe, 'n_solves', 0) + getattr(models[k].dec_pe, 'n_solves', 0) for k in models}
    for r in range(args.reps):
        for k in models:
            a, b = infer(k); infer_t[k].append(a); dec_t[k].append(b)
    for k in models:   # no solve in inference once cached
        assert getattr(models[k].enc_pe, 'n_solves', 0) + getattr(models[k].dec_pe, 'n_solves', 0) == solves[k]
    med = lambda v: statistics.median(v)
    ref = 'sinusoidal'
    print(f"model d={args.d} heads={args.heads} layers={args.layers}+{args.layers} d_ff={4 * args.d} vocab={args.vocab}; "
          f"batch {B} x {L} tokens; threads={args.threads}; median of {len(train_t[ref])} train / {args.reps} inference reps")
    print(f"{'variant':28s} {'train step':>11s} {'ratio':>6s} {'eval fwd':>9s} {'ratio':>6s} {'16 dec steps':>12s} {'ratio':>6s}")
    for k in models:
        print(f"{k:28s} {med(train_t[k]) * 1e3:9.1f}ms {med(train_t[k]) / med(train_t[ref]):6.3f} "
              f"{med(infer_t[k]) * 1e3:7.1f}ms {med(infer_t[k]) / med(infer_t[ref]):6.3f} "
              f"{med(dec_t[k]) * 1e3:10.1f}ms {med(dec_t[k]) / med(dec_t[ref]):6.3f}")
    # ODE cost against the maximum length: decoder encoding (dec + cross sites), forward + backward of the trajectory
    print(f"\nODE solve (decoder encoding, N={6 * args.layers} initial values, d={args.d}): forward+backward vs max length")
    settings = {'rk4/1 direct (default)': {}, 'rk4/5 direct': {'substeps': 5}, 'rk4/5 adjoint (paper)': {'substeps': 5, 'adjoint': True}}
    print(f"{'T':>5s} " + ' '.join(f"{k:>24s} {'per pos':>8s}" for k in settings))
    for T in [int(x) for x in args.lengths.split(',')]:
        row = []
        for kw in settings.values():
            pe = make_posenc('floater', args.d, args.heads, n_layers=args.layers, causal=True, **kw).train()
            pe.trajectory(16).sum().backward()                      # warm-up
            pe.zero_grad(); t0 = time.perf_counter(); pe.trajectory(T).sum().backward(); row.append(time.perf_counter() - t0)
        print(f"{T:5d} " + ' '.join(f"{r * 1e3:22.1f}ms {r / T * 1e3:6.2f}ms" for r in row))

if __name__ == '__main__': main()

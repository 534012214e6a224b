"""FLOATER cost benchmark (one run, not a timed test): each variant's training-step and greedy-decode time as a ratio to
sinusoidal at the same model size, written as a small JSON record (notebook 11 renders it).

How it measures, so that ratios survive a shared, loaded machine: on CPU, time is process CPU time (`time.process_time`,
one thread unless `--threads`), so time the process spends waiting for a core is not counted; on CUDA, wall time
between `torch.cuda.synchronize()` calls. Variants are interleaved (one step of each in turn, the order rotated every
repetition) and each figure is the median over repetitions, so a burst of load hits all variants alike.

Decoding is timed after the training repetitions, with the trajectory of the final parameters already solved (an
untimed warm-up), which is how a trained model decodes; the timed loop covers the decoder steps only, not `encode`.

Variants: `floater` with this package's defaults (from scratch, a solve with gradient every update), `floater` with
the official configuration `FLOATER_OFFICIAL` (sinusoidal input kept, Xavier init, separate cross k/v flow, rk4 at
delta/5 with the adjoint, refresh every 400 forward passes with the detached cache in between; its amortised ratio
counts one refresh step per 400) and `floater-input`. Options the installed package does not know are reported as
skipped, so the same script measures an older checkout (`PYTHONPATH=old_checkout python benchmarks/floater_bench.py`).

    python benchmarks/floater_bench.py                                   # CPU: 3+3 layers, d=256, batch 32 x {32, 128}
    python benchmarks/floater_bench.py --device cuda --out results/speed/floater-cuda.json
"""
import argparse, json, os, platform, shlex, statistics, subprocess, sys, time
from datetime import datetime, timezone
import torch
from posenc_nb.core import Positions
from posenc_nb.model import ModelConfig, Seq2Seq, label_smoothed_nll

def variants():
    "name -> (encoding, options); FLOATER_OFFICIAL is None on a checkout that predates it."
    try: from posenc_nb.recipe import FLOATER_OFFICIAL
    except ImportError: FLOATER_OFFICIAL = None
    return {'sinusoidal': ('sinusoidal', {}), 'floater (default: scratch, refresh every update)': ('floater', {}),
            'floater (official, refresh every 400)': ('floater', FLOATER_OFFICIAL), 'floater-input': ('floater-input', {})}

def build(name, opts, args, device):
    torch.manual_seed(0)
    return Seq2Seq(ModelConfig(src_vocab=args.vocab, tgt_vocab=args.vocab, d_model=args.d, n_heads=args.heads, n_enc=args.layers,
                               n_dec=args.layers, d_ff=4 * args.d, dropout=0.1, enc_pe=name, pe_options=dict(opts), max_len=1024)).to(device)

def timer(device):
    "A clock for `device`: CPU time of this process, or wall time after synchronising CUDA."
    if device.type == 'cuda':
        def now(): torch.cuda.synchronize(device); return time.perf_counter()
        return now
    return time.process_time

def force_refresh(model):
    "Make the next training step of a refresh-every-N FLOATER re-solve (to time that step)."
    for pe in (model.enc_pe, model.dec_pe):
        if hasattr(pe, '_ref'): pe._ref = None

def measure(args, L, device):
    "Median train-step and decode times (seconds) per variant at source/target length L."
    B, g, now = args.batch, torch.Generator().manual_seed(0), timer(device)
    src = torch.randint(4, args.vocab, (B, L), generator=g).to(device)
    tgt = torch.randint(4, args.vocab, (B, L + 1), generator=g).to(device)
    sp, tp = Positions.arange(B, L, device=device), Positions.arange(B, L, device=device)
    models, skipped = {}, {}
    for k, (name, opts) in variants().items():
        if opts is None: skipped[k] = 'FLOATER_OFFICIAL not in this checkout'; continue
        try: models[k] = build(name, opts, args, device)
        except ValueError as e: skipped[k] = str(e)
    optims = {k: torch.optim.Adam(m.parameters(), lr=1e-4) for k, m in models.items()}
    def step(k):
        m, o = models[k], optims[k]; m.train()
        t0 = now()
        loss, _, n = label_smoothed_nll(m(src, sp, tgt[:, :-1], tp), tgt[:, 1:], 0.1)
        o.zero_grad(); (loss / n).backward(); o.step()
        return now() - t0
    def decode(k):
        m = models[k].eval()
        with torch.no_grad():
            mem = m.encode(src, sp); cache = m.new_cache(); y = tgt[:, :1]
            t0 = now()
            for t in range(args.decode_steps):
                y = m.decode(y, Positions.arange(B, 1, offset=t, device=device), mem, sp, cache=cache)[:, -1].argmax(-1, keepdim=True)
            return now() - t0
    keys = list(models)
    rotated = lambda r: keys[r % len(keys):] + keys[:r % len(keys)]      # rotate the order every repetition
    for k in keys: step(k); step(k)                                       # warm-up: allocations, first solves
    train, dec, refresh = ({k: [] for k in keys} for _ in range(3))
    for r in range(args.reps):
        for k in rotated(r): train[k].append(step(k))
        for k in rotated(r):
            if k.startswith('floater (official'): force_refresh(models[k]); refresh[k].append(step(k))
    for k in keys: decode(k)                    # warm-up: the trained parameters' trajectory is solved here, once
    for r in range(args.reps):                  # decoding with the trajectory cached, as after training
        for k in rotated(r): dec[k].append(decode(k))
    med = {k: statistics.median(v) for k, v in train.items()}
    ref_t, ref_d = med['sinusoidal'], statistics.median(dec['sinusoidal'])
    rows = {}
    for k in keys:
        d = statistics.median(dec[k])
        row = dict(train_ms=med[k] * 1e3, train_ratio=med[k] / ref_t, decode_ms=d * 1e3, decode_ratio=d / ref_d)
        for what, runs in (('train', train), ('decode', dec)):            # per-repetition ratios: the noise next to the effect
            paired = [a / b for a, b in zip(runs[k], runs['sinusoidal'])]
            row.update({what + '_ratio_paired': statistics.median(paired), what + '_ratio_min': min(paired), what + '_ratio_max': max(paired)})
        if refresh[k]:                                                    # one refresh step per `refresh_every` steps
            n = models[k].enc_pe.refresh_every; tr = statistics.median(refresh[k])
            row.update(refresh_step_ms=tr * 1e3, refresh_every=n, train_ratio_amortised=((n - 1) * med[k] + tr) / n / ref_t)
        rows[k] = row
    return rows, skipped

def commit():
    try:
        sha = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', '--', 'posenc_nb', 'benchmarks'], capture_output=True, text=True).stdout.strip()
        return sha + ('+dirty' if dirty else '')
    except (OSError, subprocess.CalledProcessError): return None

def hardware(device):
    if device.type == 'cuda': return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try: name = next(l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name'))
    except (OSError, StopIteration): pass
    return f"{name}, {os.cpu_count()} cores visible"

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--d', type=int, default=256); ap.add_argument('--heads', type=int, default=4)
    ap.add_argument('--layers', type=int, default=3); ap.add_argument('--vocab', type=int, default=8000)
    ap.add_argument('--batch', type=int, default=32)
    ap.add_argument('--lens', '--len', '--lengths', default='32,128', help='comma-separated source/target lengths (--len, --lengths: older names)')
    ap.add_argument('--reps', type=int, default=7); ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--decode-steps', type=int, default=16)
    ap.add_argument('--device', default='cpu', help="'cpu' or 'cuda' (then timed with synchronisation)")
    ap.add_argument('--out', default=None, help='write the JSON record here (default: print only)')
    args = ap.parse_args()
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        sys.exit("--device cuda asked but torch.cuda.is_available() is False; run on a CUDA machine or use --device cpu")
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    results, skipped = {}, {}
    for L in [int(x) for x in args.lens.split(',')]:
        results[str(L)], sk = measure(args, L, device); skipped.update(sk)
    record = dict(
        benchmark='floater_bench', reference='sinusoidal', metrics=results, skipped=skipped,
        command='python ' + ' '.join(shlex.quote(a) for a in ['benchmarks/floater_bench.py'] + sys.argv[1:]),
        commit=commit(), hardware=hardware(device), device=device.type, torch=torch.__version__, precision='float32',
        threads=args.threads, timer='cuda-synchronised wall time' if device.type == 'cuda' else 'time.process_time (CPU time)',
        method='variants interleaved, order rotated per repetition; medians over reps; *_ratio_paired: median over reps of the ratio to sinusoidal in the same rep, *_ratio_min/max: their range', reps=args.reps,
        model=dict(d_model=args.d, n_heads=args.heads, layers=f'{args.layers}+{args.layers}', d_ff=4 * args.d, vocab=args.vocab,
                   batch=args.batch, decode_steps=args.decode_steps, dropout=0.1, optimizer='Adam'),
        load_average_at_start=[round(x, 2) for x in load], date=datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%MZ'))
    for L, rows in results.items():
        print(f"batch {args.batch} x {L} tokens ({record['timer']}, median of {args.reps})")
        print(f"  {'variant':50s} {'train ms':>9s} {'ratio':>6s} {'amortised':>9s} {'decode ms':>9s} {'ratio':>6s}")
        for k, r in rows.items():
            am = f"{r['train_ratio_amortised']:9.3f}" if 'train_ratio_amortised' in r else ' ' * 9
            print(f"  {k:50s} {r['train_ms']:9.1f} {r['train_ratio']:6.3f} {am} {r['decode_ms']:9.1f} {r['decode_ratio']:6.3f}"
                  f"   per-rep train {r['train_ratio_min']:.3f}..{r['train_ratio_max']:.3f}, decode {r['decode_ratio_min']:.3f}..{r['decode_ratio_max']:.3f}")
    for k, why in skipped.items(): print(f"skipped {k}: {why}")
    if args.out:
        os.makedirs(os.path.dirname(args.out) or '.', exist_ok=True)
        with open(args.out, 'w') as f: json.dump(record, f, indent=1)
        print('wrote', args.out)

if __name__ == '__main__': main()

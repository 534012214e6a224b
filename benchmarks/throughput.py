#!/usr/bin/env python
"""Training-step throughput of `posenc_nb.model.Seq2Seq` against a plain `torch.nn.Transformer` of the same size.

Two modes, both measured in ONE process with interleaved repetitions, reported as medians and ratios:

* default (`--mode ref`): Seq2Seq with sinusoidal positions vs `nn.Transformer` + embeddings + sinusoidal table +
  tied output projection, same width/depth/heads/ff, pre-norm, same batches (~4k tokens, padded, length-bucketed).
  One step = forward + label-smoothed loss + backward + Adam step; throughput = non-pad target tokens / s. The reference
  uses `F.cross_entropy(label_smoothing=0.1)`; Seq2Seq uses the package's `label_smoothed_nll` (`--loss ce`: the same
  `F.cross_entropy`, to compare the models alone). Both use the same `torch.optim.Adam`; Seq2Seq's dropout is the
  package's `model.dropout` (on CPU a mask from raw random integers), the reference keeps `nn.Transformer`'s.
  Prints `ratio = posenc / reference` (goal >= 1.0).
* `--mode amp`: Seq2Seq in fp32 vs the same model under bf16 autocast (what `TrainConfig.amp_cpu` turns on for CPU
  training; on CUDA what `amp='bf16'` does). Prints `ratio = bf16 / fp32` and the loss gap on a fixed batch.
* `--mode vs-transformer`: every registered encoding (or `--encodings`) against `nn.Transformer` of the same size, in
  one run: contenders interleaved (order rotated each repetition), timed in process CPU time (`time.process_time`:
  other processes on a shared machine do not count; on CUDA wall time after a synchronize), medians of the per-repetition
  ratios to nn.Transformer measured in the same repetition, with their min..max. `--out` writes a JSON record with
  provenance (`posenc_nb.utils.provenance`).
* `--mode encodings`: every registered encoding (`core.list_posencs()`): train-step tokens/s, incremental greedy
  inference tokens/s (KV cache, fixed length), and memory: peak CUDA memory on GPU; on CPU the bytes of tensors saved
  for backward (captured with `torch.autograd.graph.saved_tensors_hooks`, a device-independent proxy for activation
  memory) plus parameter bytes. Everything relative to 'sinusoidal'.

Never used in tests; run e.g. `python benchmarks/throughput.py --threads 2 --steps 6 --reps 5`.
"""
import argparse, json, math, statistics, sys, time, warnings
import torch, torch.nn as nn, torch.nn.functional as F

from posenc_nb.core import Positions, list_posencs
from posenc_nb.model import ModelConfig, Seq2Seq, label_smoothed_nll
from posenc_nb.utils import atomic_write, provenance

PAD, BOS, EOS = 0, 1, 2


def sinusoid(n, d):
    "Standard sinusoidal table (Vaswani et al., 2017, arXiv:1706.03762), (n, d) float32."
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    t = torch.zeros(n, d, dtype=torch.float64)
    t[:, 0::2], t[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return t.float()


class RefTransformer(nn.Module):
    "Reference: shared embedding * sqrt(d) + sinusoidal, `nn.Transformer` (pre-norm, batch_first), tied output layer."
    def __init__(self, vocab, d=256, heads=4, n_enc=3, n_dec=3, ff=1024, dropout=0.1, max_len=1024):
        super().__init__()
        self.d = d
        self.emb = nn.Embedding(vocab, d, padding_idx=PAD)
        nn.init.normal_(self.emb.weight, std=d ** -0.5)
        self.register_buffer('pe', sinusoid(max_len, d), persistent=False)
        warnings.filterwarnings('ignore', message='enable_nested_tensor')
        self.tf = nn.Transformer(d, heads, n_enc, n_dec, ff, dropout, batch_first=True, norm_first=True)
        self.drop = nn.Dropout(dropout)

    def embed(self, x):
        return self.drop(self.emb(x) * math.sqrt(self.d) + self.pe[:x.shape[1]])

    def forward(self, src, tgt_in):
        T = tgt_in.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=src.device).triu(1)     # True = masked, like the pad masks
        spad, tpad = src == PAD, tgt_in == PAD
        h = self.tf(self.embed(src), self.embed(tgt_in), tgt_mask=causal, src_key_padding_mask=spad,
                    tgt_key_padding_mask=tpad, memory_key_padding_mask=spad, tgt_is_causal=True)
        return F.linear(h, self.emb.weight)


def make_batches(vocab, max_tokens, n_batches, seed=0):
    """Padded batches of a realistic length mix: sentence lengths ~ lognormal (median ~14 tokens, long tail, clipped
    3..80, like Multi30k / WMT subwords), target length ~ source length +- 15%, sorted into length buckets and cut to
    `max_tokens` padded tokens per side, as a token-bucketing sampler does."""
    g = torch.Generator().manual_seed(seed)
    n = 20_000                                                        # a corpus-sized pool, so buckets are dense
    sl = torch.exp(torch.randn(n, generator=g) * 0.5 + math.log(14)).round().clamp(3, 80).long()
    tl = (sl.float() * (1 + 0.15 * torch.randn(n, generator=g))).round().clamp(2, 80).long()
    order = torch.argsort(sl * 100 + tl + torch.rand(n, generator=g))   # bucket by (source, target) length
    batches, cur, L = [], [], 0
    for i in order.tolist():
        li = max(sl[i].item(), tl[i].item() + 1)
        if cur and (len(cur) + 1) * max(L, li) > max_tokens:
            batches.append(cur); cur, L = [], 0
        cur.append(i); L = max(L, li)
    if cur: batches.append(cur)
    pick = torch.randperm(len(batches), generator=g)[:n_batches].tolist()
    out = []
    for b in (batches[k] for k in pick):
        S, T = max(sl[j].item() for j in b), max(tl[j].item() for j in b) + 1
        src = torch.full((len(b), S), PAD); tin = torch.full((len(b), T), PAD); tout = torch.full((len(b), T), PAD)
        for r, j in enumerate(b):
            s, t = sl[j].item(), tl[j].item()
            src[r, :s] = torch.randint(4, vocab, (s,), generator=g)
            y = torch.randint(4, vocab, (t,), generator=g)
            tin[r, 0], tin[r, 1:t + 1] = BOS, y
            tout[r, :t], tout[r, t] = y, EOS
        out.append((src, tin, tout))
    return out


def posenc_step_fn(model, opt, eps=0.1, loss='own', bf16=False):
    """One training step of Seq2Seq; loss 'own' = the package's label_smoothed_nll (as in training), 'ce' = F.cross_entropy;
    `bf16`: forward under bf16 autocast (loss in fp32, as `train` does)."""
    def step(src, tin, tout):
        sp, tp = Positions.from_mask(src != PAD), Positions.from_mask(tin != PAD)
        with torch.autocast(src.device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, sp, tin, tp)
        logits = logits.float()
        if loss == 'ce': l = F.cross_entropy(logits.flatten(0, 1), tout.flatten(), ignore_index=PAD, label_smoothing=eps)
        else:
            l, _, n = label_smoothed_nll(logits, tout, eps=eps, ignore_index=PAD); l = l / n
        opt.zero_grad(set_to_none=True)
        l.backward()
        opt.step()
    return step


def ref_step_fn(model, opt, eps=0.1):
    def step(src, tin, tout):
        logits = model(src, tin)
        loss = F.cross_entropy(logits.flatten(0, 1), tout.flatten(), ignore_index=PAD, label_smoothing=eps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def sync(dev):
    if dev.type == 'cuda': torch.cuda.synchronize()


def time_steps(step, batches, dev, clock=time.perf_counter):
    "Target tokens per second of `clock` over one pass of `batches` (each a step)."
    ntok = sum(int((tout != PAD).sum()) for _, _, tout in batches)
    sync(dev); t0 = clock()
    for src, tin, tout in batches: step(src, tin, tout)
    sync(dev)
    return ntok / (clock() - t0)


def n_params(m): return sum(p.numel() for p in m.parameters())


def build_posenc(args, vocab, enc='sinusoidal', dev='cpu'):
    cfg = ModelConfig(src_vocab=vocab, tgt_vocab=vocab, d_model=args.d_model, n_heads=args.heads, n_enc=args.layers,
                      n_dec=args.layers, d_ff=args.ff, dropout=0.1, enc_pe=enc, max_len=1024)
    return Seq2Seq(cfg).to(dev)


def interleaved(fns, batches, reps, warmup, dev, clock=time.perf_counter, rotate=False):
    "Median tokens/s of each named step function; the functions take turns so drift hits them all alike."
    for name, f in fns.items():
        time_steps(f, batches[:warmup], dev, clock)
    res = {k: [] for k in fns}
    for r in range(reps):
        items = list(fns.items())
        if rotate: items = items[r % len(items):] + items[:r % len(items)]   # each contender goes first in turn
        elif r % 2: items = items[::-1]                                 # alternate who goes first
        for name, f in items: res[name].append(time_steps(f, batches, dev, clock))
    return {k: (statistics.median(v), v) for k, v in res.items()}


def mode_ref(args, dev):
    torch.manual_seed(0)
    ours = build_posenc(args, args.vocab, dev=dev)
    ref = RefTransformer(args.vocab, args.d_model, args.heads, args.layers, args.layers, args.ff).to(dev)
    batches = [tuple(t.to(dev) for t in b) for b in make_batches(args.vocab, args.max_tokens, args.steps)]
    fns = {'posenc_nb.Seq2Seq': posenc_step_fn(ours.train(), torch.optim.Adam(ours.parameters(), 1e-4), loss=args.loss),
           'nn.Transformer': ref_step_fn(ref.train(), torch.optim.Adam(ref.parameters(), 1e-4))}
    ntok = sum(int((b[2] != PAD).sum()) for b in batches); npad = sum(b[2].numel() for b in batches)
    print(f"device={dev} threads={torch.get_num_threads()} d={args.d_model} heads={args.heads} layers={args.layers}+{args.layers} "
          f"ff={args.ff} vocab={args.vocab}; {len(batches)} batches/rep, {ntok / len(batches):.0f} target tokens/batch "
          f"({100 * (1 - ntok / npad):.0f}% padding); params: ours {n_params(ours) / 1e6:.2f}M, ref {n_params(ref) / 1e6:.2f}M")
    res = interleaved(fns, batches, args.reps, args.warmup, dev)
    for k, (med, v) in res.items():
        print(f"{k:20s} median {med:9.0f} tgt tok/s   reps: {' '.join(f'{x:.0f}' for x in v)}")
    ratio = res['posenc_nb.Seq2Seq'][0] / res['nn.Transformer'][0]
    paired = statistics.median(a / b for a, b in zip(res['posenc_nb.Seq2Seq'][1], res['nn.Transformer'][1]))
    print(f"ratio posenc_nb/nn.Transformer = {ratio:.3f} (ratio of medians), {paired:.3f} (median of per-rep ratios)  (goal >= 1.0)")
    return ratio


def mode_amp(args, dev):
    batches = [tuple(t.to(dev) for t in b) for b in make_batches(args.vocab, args.max_tokens, args.steps)]
    fns, models = {}, {}
    for name, bf16 in (('fp32', False), ('bf16 autocast', True)):
        torch.manual_seed(0)
        models[name] = build_posenc(args, args.vocab, dev=dev).train()
        fns[name] = posenc_step_fn(models[name], torch.optim.Adam(models[name].parameters(), 1e-4), bf16=bf16)
    src, tin, tout = batches[0]
    with torch.no_grad():                                             # same weights, eval mode: the autocast loss gap
        m = build_posenc(args, args.vocab, dev=dev).eval(); sp, tp = Positions.from_mask(src != PAD), Positions.from_mask(tin != PAD)
        l32 = label_smoothed_nll(m(src, sp, tin, tp), tout, eps=0.1, ignore_index=PAD)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            l16 = label_smoothed_nll(m(src, sp, tin, tp).float(), tout, eps=0.1, ignore_index=PAD)
    res = interleaved(fns, batches, args.reps, args.warmup, dev)
    print(f"device={dev} threads={torch.get_num_threads()} d={args.d_model} layers={args.layers}+{args.layers}; {len(batches)} batches/rep")
    for k, (med, v) in res.items(): print(f"{k:14s} median {med:9.0f} tgt tok/s   reps: {' '.join(f'{x:.0f}' for x in v)}")
    print(f"ratio bf16/fp32 = {res['bf16 autocast'][0] / res['fp32'][0]:.3f}; loss per token fp32 {float(l32[0] / l32[2]):.5f}, "
          f"bf16 {float(l16[0] / l16[2]):.5f}")


@torch.no_grad()
def infer_tps(model, batches, steps, dev):
    "Incremental greedy decoding with the KV cache for a fixed number of steps: generated tokens / s."
    model.eval()
    sync(dev); t0 = time.perf_counter(); n = 0
    for src, _, _ in batches:
        sp = Positions.from_mask(src != PAD)
        mem = model.encode(src, sp)
        cache = model.new_cache()
        y = torch.full((src.shape[0], 1), BOS, device=src.device)
        for t in range(steps):
            logits = model.decode(y, Positions.arange(src.shape[0], 1, offset=t, device=src.device), mem, sp, cache)
            y = logits[:, -1].argmax(-1, keepdim=True)
            n += src.shape[0]
    sync(dev)
    model.train()
    return n / (time.perf_counter() - t0)


def saved_bytes(model, batch):
    "Bytes of tensors autograd saves for backward in one training forward (activation-memory proxy, any device)."
    seen, total = set(), [0]
    def pack(t):
        key = (t.data_ptr(), t.shape, t.dtype) if t.device.type != 'meta' else id(t)
        if key not in seen:
            seen.add(key); total[0] += t.numel() * t.element_size()
        return t
    src, tin, tout = batch
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(src, Positions.from_mask(src != PAD), tin, Positions.from_mask(tin != PAD))
        loss = label_smoothed_nll(logits, tout, eps=0.1, ignore_index=PAD)[0]
    loss.backward(); model.zero_grad(set_to_none=True)
    return total[0]


def mode_encodings(args, dev):
    names = args.encodings.split(',') if args.encodings else list_posencs()
    if 'sinusoidal' not in names: names = ['sinusoidal'] + names
    batches = [tuple(t.to(dev) for t in b) for b in make_batches(args.vocab, args.max_tokens, args.steps)]
    models, fns, mem, failed = {}, {}, {}, {}
    for name in names:
        torch.manual_seed(0)
        try:
            m = build_posenc(args, args.vocab, name, dev)
            fns[name] = posenc_step_fn(m.train(), torch.optim.Adam(m.parameters(), 1e-4))
            fns[name](*batches[0])                                   # fail early on an encoding that cannot train
            models[name] = m
        except Exception as e:                                       # report, keep benchmarking the others
            failed[name] = f'{type(e).__name__}: {e}'.splitlines()[0][:100]; fns.pop(name, None)
    for name, m in models.items():
        if dev.type == 'cuda':
            torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            fns[name](*batches[0]); torch.cuda.synchronize()
            mem[name] = (torch.cuda.max_memory_allocated() - base, 'peak CUDA alloc over step')
        else:
            mem[name] = (saved_bytes(m, batches[0]) + sum(p.numel() * p.element_size() for p in m.parameters()),
                         'saved-for-backward + params')
    res = interleaved(fns, batches, args.reps, args.warmup, dev)
    inf = {}
    for r in range(max(1, args.reps // 2)):                           # interleaved inference reps too
        for name, m in models.items():
            inf.setdefault(name, []).append(infer_tps(m, batches[:2], args.infer_len, dev))
    inf = {k: statistics.median(v) for k, v in inf.items()}
    s_tr, s_inf, s_mem = res['sinusoidal'][0], inf['sinusoidal'], mem['sinusoidal'][0]
    print(f"device={dev} threads={torch.get_num_threads()} d={args.d_model} heads={args.heads} layers={args.layers}+{args.layers} "
          f"ff={args.ff}; {len(batches)} batches of ~{args.max_tokens} tokens; memory = {mem['sinusoidal'][1]}")
    print(f"{'encoding':14s} {'params':>8s} {'train tok/s':>12s} {'x sin':>6s} {'infer tok/s':>12s} {'x sin':>6s} {'mem MB':>8s} {'x sin':>6s}")
    for name in models:
        print(f"{name:14s} {n_params(models[name]) / 1e6:7.2f}M {res[name][0]:12.0f} {res[name][0] / s_tr:6.2f} "
              f"{inf[name]:12.0f} {inf[name] / s_inf:6.2f} {mem[name][0] / 2**20:8.1f} {mem[name][0] / s_mem:6.2f}")
    for name, err in failed.items(): print(f"{name:14s} FAILED: {err}")


def mode_vs_transformer(args, dev):
    "Training tokens/s of Seq2Seq with each encoding / nn.Transformer of the same size, in one interleaved run."
    names = args.encodings.split(',') if args.encodings else list_posencs()
    batches = [tuple(t.to(dev) for t in b) for b in make_batches(args.vocab, args.max_tokens, args.steps)]
    fns = {}
    for name in ['nn.Transformer'] + (['nn.Transformer (twin)'] if args.twin else []):   # the twin: an identical reference, the run's noise floor
        torch.manual_seed(0)
        ref = RefTransformer(args.vocab, args.d_model, args.heads, args.layers, args.layers, args.ff).to(dev)
        fns[name] = ref_step_fn(ref.train(), torch.optim.Adam(ref.parameters(), 1e-4))
    for name in names:
        torch.manual_seed(0)
        m = build_posenc(args, args.vocab, name, dev)
        fns[name] = posenc_step_fn(m.train(), torch.optim.Adam(m.parameters(), 1e-4), loss=args.loss)
    clock = time.process_time if dev.type == 'cpu' else time.perf_counter
    rec = provenance(None, precision='fp32', device=str(dev))
    res = interleaved(fns, batches, args.reps, args.warmup, dev, clock, rotate=True)
    ref_v = res['nn.Transformer'][1]
    ntok = sum(int((b[2] != PAD).sum()) for b in batches)
    def ratio_row(name):
        r = [a / b for a, b in zip(res[name][1], ref_v)]
        return dict(encoding=name, tok_s=res[name][0], ratio=statistics.median(r), ratio_min=min(r), ratio_max=max(r), reps=res[name][1])
    rows = [ratio_row(name) for name in names]
    print(f"device={dev} threads={torch.get_num_threads()} clock={clock.__name__} d={args.d_model} heads={args.heads} "
          f"layers={args.layers}+{args.layers} ff={args.ff} vocab={args.vocab}; {len(batches)} batches/rep ({ntok / len(batches):.0f} target "
          f"tokens/batch), {args.reps} reps; loss={args.loss}")
    print(f"{'nn.Transformer':14s} {res['nn.Transformer'][0]:9.0f} tok/s")
    for row in rows:
        print(f"{row['encoding']:14s} {row['tok_s']:9.0f} tok/s  ratio {row['ratio']:.3f} ({row['ratio_min']:.3f}..{row['ratio_max']:.3f})")
    twin_row = ratio_row('nn.Transformer (twin)') if 'nn.Transformer (twin)' in res else None
    if twin_row: print(f"{'twin (noise)':14s} {twin_row['tok_s']:9.0f} tok/s  ratio {twin_row['ratio']:.3f} ({twin_row['ratio_min']:.3f}..{twin_row['ratio_max']:.3f})")
    out = dict(benchmark='throughput --mode vs-transformer', reference='nn.Transformer', reference_tok_s=res['nn.Transformer'][0],
                   reference_reps=ref_v, rows=rows, twin=twin_row, timer=f"time.{clock.__name__}", threads=torch.get_num_threads(),
                   method='contenders interleaved, order rotated per repetition; ratio = median over repetitions of tok/s / nn.Transformer tok/s in the same repetition',
                   model=dict(d_model=args.d_model, n_heads=args.heads, layers=f"{args.layers}+{args.layers}", d_ff=args.ff, vocab=args.vocab,
                              max_tokens=args.max_tokens, steps=args.steps, reps=args.reps, warmup=args.warmup, dropout=0.1, loss=args.loss,
                              optimizer='Adam'), **rec)
    if args.out: atomic_write(args.out, json.dumps(out, indent=1) + '\n')
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--mode', choices=('ref', 'amp', 'encodings', 'vs-transformer'), default='ref')
    ap.add_argument('--threads', type=int, default=None, help='torch.set_num_threads (CPU)')
    ap.add_argument('--steps', type=int, default=6, help='training steps (batches) per repetition')
    ap.add_argument('--twin', action='store_true', help='vs-transformer: also time an identical second nn.Transformer (the noise floor)')
    ap.add_argument('--reps', type=int, default=5, help='interleaved repetitions; the median is reported')
    ap.add_argument('--warmup', type=int, default=2, help='untimed warm-up steps per model')
    ap.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    ap.add_argument('--max-tokens', type=int, default=4096, help='padded tokens per batch side')
    ap.add_argument('--d-model', type=int, default=256); ap.add_argument('--heads', type=int, default=4)
    ap.add_argument('--layers', type=int, default=3); ap.add_argument('--ff', type=int, default=1024)
    ap.add_argument('--vocab', type=int, default=8000)
    ap.add_argument('--loss', choices=('own', 'ce'), default='own',
                    help="Seq2Seq's loss in --mode ref: 'own' = posenc_nb.model.label_smoothed_nll (what training uses), "
                         "'ce' = F.cross_entropy like the reference (compares the models alone)")
    ap.add_argument('--encodings', default=None, help='comma list for --mode encodings (default: all registered)')
    ap.add_argument('--infer-len', type=int, default=20, help='decoding steps per batch for inference tokens/s')
    ap.add_argument('--out', default=None, help='--mode vs-transformer: write the JSON record here')
    args = ap.parse_args(argv)
    if args.threads: torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if dev.type == 'cuda': torch.backends.cuda.matmul.allow_tf32 = True
    {'ref': mode_ref, 'amp': mode_amp, 'encodings': mode_encodings, 'vs-transformer': mode_vs_transformer}[args.mode](args, dev)
    return 0


if __name__ == '__main__': sys.exit(main())

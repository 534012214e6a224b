"""Issue 17's table in one run (CPU, or a CUDA device with `--device cuda`): RoPE's half-split forward and training path, FLOATER's training step and greedy
decoding, training tokens/s against `nn.Transformer`, host reads per decoding step, the package's dropout against
`F.dropout`; before (from the committed records)
and after (this run), written as one JSON record.

    python benchmarks/issue17.py --out results/speed/issue17.json

How it measures, so that ratios survive a shared, loaded machine:
* on the CPU, process CPU time (`time.process_time`), one torch thread: time other processes take from the core is not counted;
  on CUDA, wall time between two device synchronisations (the kernels run asynchronously, so CPU time would miss them);
* contenders interleaved, the order rotated every repetition, so a burst of load or a cold cache hits all of them;
* every figure is a ratio to a reference timed in the same repetition; the record keeps the ratio of the medians, the
  median of the per-repetition ratios and their min..max (the noise next to the effect);
* a second, identical sinusoidal model is timed as a contender too: its ratio to the first is the run's noise floor;
* the decoding section runs in rounds of 8 repetitions, every model deep-copied to new memory between rounds (`in_rounds`):
  where a model's weights sit in memory would otherwise stay fixed for the whole run;
* the RoPE forward section runs last, after glibc is told to serve every allocation from the heap and never trim it
  (`mallopt`), so freed buffers are reused and no contender pays page faults: the copy floor is then memory traffic,
  not the allocator's history (it moved 4-10x between runs of `rope_bench.py`, whose records the 'before' column
  quotes: those ran with the default allocator, as the model-level sections of this script still do).
"""
import argparse, copy, ctypes, importlib.util, json, random, statistics, sys, time
from pathlib import Path
import torch
import torch.nn.functional as F
from posenc_nb.core import HostReads, Positions, list_posencs
from posenc_nb.model import ModelConfig, Seq2Seq, label_smoothed_nll, dropout
from posenc_nb.rotary import RotaryCache
from posenc_nb.rotary_kernel import apply_rotary
import posenc_nb.rotary_kernel as rotary_kernel_mod
from posenc_nb.recipe import FLOATER_OFFICIAL
from posenc_nb.utils import atomic_write, provenance
from posenc_nb.decode import _step_logprobs

HERE, ROOT = Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent
DEV, clock = torch.device('cpu'), time.process_time   # every section's device (`--device`) and its clock (`floater_bench.timer`)

def _script(name):
    spec = importlib.util.spec_from_file_location(name, HERE / f'{name}.py'); m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m); return m

def warm_allocator() -> bool:
    "glibc only: M_MMAP_THRESHOLD (-3) and M_TRIM_THRESHOLD (-1) raised to 1 GiB, so large buffers are reused, never re-faulted."
    try: libc = ctypes.CDLL('libc.so.6')
    except OSError: return False
    return libc.mallopt(-3, 1 << 30) == 1 and libc.mallopt(-1, 1 << 30) == 1

def interleaved(fns: dict, reps: int, warmup: int = 2) -> dict:
    "CPU seconds per repetition of each contender, the order rotated every repetition."
    for f in fns.values():
        for _ in range(warmup): f()
    keys, ts = list(fns), {k: [] for k in fns}
    for r in range(reps):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            t = clock(); fns[k](); ts[k].append(clock() - t)
    return ts

def in_rounds(models: dict, fns: dict, reps: int, per_round: int = 8, seed: int = 0) -> dict:
    """`interleaved` in rounds of `per_round` repetitions; before every round after the first, each model is replaced by a deep
    copy, made in a shuffled order after a spacer of random size: its weights move, so no model keeps one memory layout (a
    lucky or an unlucky one) for the whole run."""
    rng, spacers, ts = random.Random(seed), [], {k: [] for k in fns}
    for r in range(0, reps, per_round):
        if r:
            for k in rng.sample(list(models), len(models)):
                spacers.append(torch.empty(rng.randrange(1, 1 << 16), device=DEV))
                models[k] = copy.deepcopy(models[k])
        for k, v in interleaved(fns, min(per_round, reps - r)).items(): ts[k] += v
    return ts

def ratio(ts: dict, k: str, ref: str) -> dict:
    p = [a / b for a, b in zip(ts[k], ts[ref])]
    return dict(ratio=statistics.median(ts[k]) / statistics.median(ts[ref]), ratio_paired=statistics.median(p), ratio_min=min(p),
                ratio_max=max(p), ms=statistics.median(ts[k]) * 1e3, ref_ms=statistics.median(ts[ref]) * 1e3, reps=len(p))

def rope_forward(reps):
    "Half-split (and interleaved) rotation of q and k, no grad, fp32, as a ratio to copying q and k; eager, the one-pass `compiled=True` kernel, and its one-table form."
    out = {}
    for shape in [(4, 8, 2048, 64), (1, 32, 4096, 128)]:
        torch.manual_seed(0)
        q, k = torch.randn(shape, device=DEV), torch.randn(shape, device=DEV)
        cache = RotaryCache(shape[-1])
        half = lambda x, key=False, **kw: apply_rotary(x, None, cache, style='half', key=key, **kw)
        planes = cache.range(0, shape[2], fmt='planes', device=DEV)       # the (L, 2, h) table the one-table kernel reads for every head
        one = lambda x: rotary_kernel_mod._compiled_half(x.unflatten(-1, (2, shape[-1] // 2)), planes).flatten(-2)
        fns = {'copy': lambda: (q.clone(), k.clone()),
               'half': lambda: (half(q), half(k, True)),
               'interleaved': lambda: (apply_rotary(q, None, cache), apply_rotary(k, None, cache, key=True)),
               'half, compiled=True': lambda: (half(q, compiled=True), half(k, True, compiled=True)),
               'half, compiled, one table': lambda: (one(q), one(k))}
        with torch.no_grad():
            t = time.time(); y = half(q, compiled=True)              # the first call compiles (once per pair width and dtype): wall time,
            if DEV.type == 'cuda': torch.cuda.synchronize(DEV)       # since the compiler runs in other processes
            compile_s = time.time() - t
            err = (y - half(q)).abs().max().item()
            err_one = (one(q) - half(q)).abs().max().item()
            ts = interleaved(fns, reps)
        out[str(shape)] = {k_: ratio(ts, k_, 'copy') for k_ in fns if k_ != 'copy'}
        out[str(shape)]['half, compiled=True'].update(first_call_s=compile_s, max_abs_diff_to_eager=err,
                                                      kernel='eager fallback' if rotary_kernel_mod._COMPILED_HALF.get('failed') else
                                                      'compiled, angle addition' if rotary_kernel_mod._COMPILED_HALF.get(2) else 'compiled, one table')
        out[str(shape)]['half, compiled, one table'].update(max_abs_diff_to_eager=err_one)
    return out

def rope_training(reps):
    "Forward + backward of the rotation of q and k (fp32), ratio to HF Llama's `apply_rotary_pos_emb`, both layouts."
    rb = _script('rope_bench'); P = rb.peers()
    if 'hf' not in P: return {'skipped': 'transformers not installed'}
    out = {}
    for shape in rb.TRAIN_SHAPES:
        torch.manual_seed(0)
        q, k = (torch.randn(shape, device=DEV, requires_grad=True) for _ in range(2))
        ms = rb.train_methods(q, k, P)
        ts = interleaved(ms, reps)
        ref = 'HF Llama apply_rotary_pos_emb (half)'
        out[str(shape)] = {n: ratio(ts, n, ref) for n in ms if n.startswith('posenc_nb')}
    return out

def _seq2seq(pe, opts=None):
    torch.manual_seed(0)
    return Seq2Seq(ModelConfig(src_vocab=8000, tgt_vocab=8000, d_model=256, n_heads=4, n_enc=3, n_dec=3, d_ff=1024, dropout=0.1,
                               enc_pe=pe, pe_options=dict(opts or {}), max_len=1024)).to(DEV)

def floater(train_reps, decode_reps, B=32, L=32, steps=16):
    "FLOATER's training step (a solve with gradient every update) and greedy decoding, ratios to sinusoidal; a twin sinusoidal model as noise control."
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(4, 8000, (B, L), generator=g).to(DEV), torch.randint(4, 8000, (B, L + 1), generator=g).to(DEV)
    sp, tp = Positions.arange(B, L, device=DEV), Positions.arange(B, L, device=DEV)
    models = {'sinusoidal': _seq2seq('sinusoidal'), 'sinusoidal (twin)': _seq2seq('sinusoidal'), 'floater': _seq2seq('floater'),
              'floater (FLOATER_OFFICIAL)': _seq2seq('floater', FLOATER_OFFICIAL)}
    opt = {k: torch.optim.Adam(m.parameters(), 1e-4) for k, m in models.items()}
    def step(k):
        m = models[k].train()
        loss, _, n = label_smoothed_nll(m(src, sp, tgt[:, :-1], tp), tgt[:, 1:], 0.1)
        opt[k].zero_grad(); (loss / n).backward(); opt[k].step()
    def decode(k):
        m = models[k].eval()
        with torch.no_grad():
            mem, cache, y = m.encode(src, sp), m.new_cache(), tgt[:, :1]
            for t in range(steps): y = _step_logprobs(m, y, t, mem, sp, cache, 1, 2, 0, None).argmax(-1, keepdim=True)   # the decoders' step: its position noted, no read
    train = [k for k in models if 'OFFICIAL' not in k]     # the official option set refreshes every 400 steps: not this row
    tt = interleaved({k: (lambda k=k: step(k)) for k in train}, train_reps)
    td = in_rounds(models, {k: (lambda k=k: decode(k)) for k in models}, decode_reps)
    return dict(train={k: ratio(tt, k, 'sinusoidal') for k in train if k != 'sinusoidal'},
                decode={k: ratio(td, k, 'sinusoidal') for k in models if k != 'sinusoidal'},
                setup=dict(batch=B, length=L, decode_steps=steps, d_model=256, layers='3+3', d_ff=1024, vocab=8000, optimizer='Adam', dropout=0.1,
                           decode_timing='in_rounds: 8 repetitions a round, models deep-copied to new memory between rounds'))

def vs_transformer(reps, steps=2):
    "Training tokens/s of every registered encoding / nn.Transformer of the same size (benchmarks/throughput.py --mode vs-transformer), with a twin nn.Transformer as the noise floor."
    tpm = _script('throughput')
    a = argparse.Namespace(encodings=None, vocab=8000, max_tokens=512, steps=steps, d_model=256, heads=4, layers=3, ff=1024, loss='own',
                           reps=reps, warmup=1, out=None, twin=True)
    return tpm.mode_vs_transformer(a, DEV)

def dropout_speed(reps):
    "posenc_nb.model.dropout / F.dropout, forward + backward at p=0.1, on the two activation widths of the nn.Transformer section (512 tokens)."
    out = {}
    for shape in [(16, 32, 256), (16, 32, 1024)]:
        torch.manual_seed(0)
        x, g = torch.randn(shape, device=DEV, requires_grad=True), torch.randn(shape, device=DEV)
        fns = {'F.dropout': lambda: F.dropout(x, 0.1, True).backward(g), 'posenc_nb': lambda: dropout(x, 0.1, True).backward(g)}
        out[str(shape)] = ratio(interleaved(fns, reps), 'posenc_nb', 'F.dropout')
    return out

def host_reads_per_step():
    "Host reads per incremental decoding step (3 layers, steps 1-3 after the first), every registered encoding."
    out = {}
    src = torch.tensor([[5, 6, 7, 0], [8, 9, 10, 11]], device=DEV)
    for pe in list_posencs():
        torch.manual_seed(0)
        m = Seq2Seq(ModelConfig(20, 20, d_model=32, n_heads=4, n_enc=3, n_dec=3, d_ff=64, enc_pe=pe, max_len=64, dropout=0.0)).to(DEV).eval()
        sp = Positions.from_mask(src != 0, streams={'xl': torch.stack([torch.randperm(4), torch.randperm(4)]).to(DEV)})
        with torch.no_grad():
            mem, cache, tok, cap = m.encode(src, sp), m.new_cache(), torch.full((2, 1), 1, device=DEV), torch.tensor([2, 50], device=DEV)
            _step_logprobs(m, tok, 0, mem, sp, cache, 1, 2, 0, 0 >= cap)
            with HostReads() as hr:
                for t in (1, 2, 3): _step_logprobs(m, tok, t, mem, sp, cache, 1, 2, 0, t >= cap)
        out[pe] = hr.n / 3
    return out

def before():
    "The 'before' column: the committed records of the last session (results/speed)."
    rd = lambda n: json.loads((ROOT / 'results' / 'speed' / n).read_text())
    rope, fl, vs = rd('rope.json'), rd('floater-cpu.json'), rd('vs-transformer.json')
    r = {(tuple(x['shape']), x['section'], x['dtype'], x['method']): x['ratio'] for x in rope['rows']}
    f = fl['metrics']['32']
    return dict(
        rope_half_fwd={str(s): r[(s, 'forward, no grad', 'float32', 'posenc_nb half')] for s in [(4, 8, 2048, 64), (1, 32, 4096, 128)]},
        rope_train={str(s): {st: r[(s, 'training, forward + backward', 'float32', f'posenc_nb {st}')] for st in ('interleaved', 'half')}
                    for s in [(32, 4, 128, 64), (4, 8, 2048, 64)]},
        floater_train=f['floater (default: scratch, refresh every update)']['train_ratio'],
        floater_decode=f['floater (default: scratch, refresh every update)']['decode_ratio'],
        floater_official_decode=f['floater (official, refresh every 400)']['decode_ratio'],
        vs_transformer={x['encoding']: x['ratio'] for x in vs['rows']},
        records=dict(rope=dict(file='results/speed/rope.json', command=rope['provenance']['command'], commit=rope['provenance']['git_commit']),
                     floater=dict(file='results/speed/floater-cpu.json', command=fl['command'], commit=fl['commit']),
                     vs_transformer=dict(file='results/speed/vs-transformer.json', command=vs['command'], commit=vs['git_commit'])))

def table(rec: dict) -> str:
    "The issue's table as Markdown, from a record."
    b, a, T = rec['before'], rec['after'], rec['targets']
    fmt = lambda x: f"{x['ratio']:.3f} (per rep {x['ratio_min']:.2f}..{x['ratio_max']:.2f})"
    rows = [f"| path | before (CPU records) | after (this run, {rec.get('device', 'cpu')}) | target | met |", '|---|---|---|---|---|']
    for s, v in a['rope_forward'].items():
        rows.append(f"| RoPE half-split forward, no grad, / copy, {s}, eager | {b['rope_half_fwd'][s]:.2f} | {fmt(v['half'])} | <= {T['rope_half_fwd']} | {v['half']['ratio'] <= T['rope_half_fwd']} |")
        c = v['half, compiled=True']
        rows.append(f"| same, `compiled=True` (first call {c['first_call_s']:.1f} s, {c['kernel']}) | | {fmt(c)} | <= {T['rope_half_fwd']} | {c['ratio'] <= T['rope_half_fwd']} |")
        if 'half, compiled, one table' in v: rows.append(f"| same, compiled kernel reading the (L, r) table (the previous `compiled=True`) | | {fmt(v['half, compiled, one table'])} | | |")
    for s, v in a['rope_training'].items():
        if s == 'skipped': continue
        for st in ('interleaved', 'half'):
            x = v[f'posenc_nb {st}']
            rows.append(f"| RoPE training (fwd+bwd) / HF Llama, {s}, {st} | {b['rope_train'][s][st]:.2f} | {fmt(x)} | <= {T['rope_train']} | {x['ratio'] <= T['rope_train']} |")
    fl = a['floater']
    rows.append(f"| FLOATER train step / sinusoidal (solve with gradient every update) | {b['floater_train']:.3f} | {fmt(fl['train']['floater'])} | <= {T['floater_train']} | {fl['train']['floater']['ratio'] <= T['floater_train']} |")
    rows.append(f"| noise floor: identical sinusoidal twin, train | | {fmt(fl['train']['sinusoidal (twin)'])} | | |")
    rows.append(f"| FLOATER greedy decode / sinusoidal | {b['floater_decode']:.3f} | {fmt(fl['decode']['floater'])} | <= {T['floater_decode']} | {fl['decode']['floater']['ratio'] <= T['floater_decode']} |")
    rows.append(f"| same, FLOATER_OFFICIAL | {b['floater_official_decode']:.3f} | {fmt(fl['decode']['floater (FLOATER_OFFICIAL)'])} | <= {T['floater_decode']} | {fl['decode']['floater (FLOATER_OFFICIAL)']['ratio'] <= T['floater_decode']} |")
    rows.append(f"| noise floor: identical sinusoidal twin, decode | | {fmt(fl['decode']['sinusoidal (twin)'])} | | |")
    for x in a['vs_transformer']['rows']:
        rows.append(f"| training tok/s / nn.Transformer, {x['encoding']} | {b['vs_transformer'].get(x['encoding'], float('nan')):.3f} | "
                    f"{x['ratio']:.3f} (per rep {x['ratio_min']:.2f}..{x['ratio_max']:.2f}) | >= 1{' (not FLOATER)' if x['encoding'].startswith('floater') else ''} | "
                    f"{x['ratio'] >= 1 if not x['encoding'].startswith('floater') else ''} |")
    tw = a['vs_transformer'].get('twin')
    if tw: rows.append(f"| noise floor: identical nn.Transformer twin, training tok/s | | {tw['ratio']:.3f} (per rep {tw['ratio_min']:.2f}..{tw['ratio_max']:.2f}) | | |")
    for sh, x in a.get('dropout', {}).items():
        rows.append(f"| dropout forward+backward / F.dropout, {sh} | | {fmt(x)} | | |")
    rows.append(f"| host reads per incremental decoding step, max over encodings | | {max(a['host_reads_per_step'].values()):.0f} | 0 | {max(a['host_reads_per_step'].values()) == 0} |")
    return '\n'.join(rows)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--reps', type=int, default=15, help='repetitions of the RoPE and FLOATER-decode sections')
    ap.add_argument('--train-reps', type=int, default=11, help='repetitions of the FLOATER training section')
    ap.add_argument('--vs-reps', type=int, default=5, help='repetitions of the nn.Transformer section')
    ap.add_argument('--vs-steps', type=int, default=2, help='training steps per repetition in the nn.Transformer section')
    ap.add_argument('--out', default=None, help='write the JSON record here')
    ap.add_argument('--device', default='cpu', help="'cpu' (the default) or a CUDA device, e.g. 'cuda'")
    a = ap.parse_args(argv)
    global DEV, clock
    DEV = torch.device(a.device)
    if DEV.type not in ('cpu', 'cuda'): ap.error(f"--device must be 'cpu' or a CUDA device, got {a.device!r}")
    if DEV.type == 'cuda' and not torch.cuda.is_available(): ap.error(f"--device {a.device}: no CUDA device here; run on a CUDA machine or use --device cpu")
    clock = _script('floater_bench').timer(DEV)         # CPU time of this process, or wall time after synchronising CUDA
    torch.set_num_threads(1)
    rec = dict(benchmark='issue17', device=str(DEV), **provenance(None, precision='fp32', device=DEV,
                                                                   command='python ' + ' '.join(['benchmarks/issue17.py'] + (sys.argv[1:] if argv is None else list(argv)))),
               timer='time.process_time (CPU time of this process), 1 torch thread' if DEV.type == 'cpu' else
                     'time.perf_counter between torch.cuda.synchronize calls (wall time of the device work), 1 torch thread on the host',
               method='contenders interleaved, order rotated every repetition; ratio = median / median of the reference; '
                      'ratio_paired, ratio_min, ratio_max: median and range over repetitions of the ratio within one repetition',
               targets=dict(rope_half_fwd=1.5, rope_train=1.0, floater_train=1.10, floater_decode=1.02, vs_transformer=1.0),
               reps=dict(rope=a.reps, floater_train=a.train_reps, floater_decode=a.reps, vs_transformer=a.vs_reps))
    rec['before'] = before()
    t0 = time.time()
    after = dict(rope_training=rope_training(a.reps), floater=floater(a.train_reps, a.reps), vs_transformer=vs_transformer(a.vs_reps, a.vs_steps),
                 host_reads_per_step=host_reads_per_step(), dropout=dropout_speed(a.reps))
    rec['warm_allocator'] = warm_allocator() if DEV.type == 'cpu' else 'not needed: the CUDA caching allocator reuses freed blocks'   # from here on (RoPE forward): freed memory reused
    rec['after'] = dict(rope_forward=rope_forward(a.reps), **after)
    rec['measure_s'] = round(time.time() - t0, 1)
    print(table(rec))
    if a.out: atomic_write(a.out, json.dumps(rec, indent=1) + '\n'); print('wrote', a.out)
    return rec

if __name__ == '__main__': main()

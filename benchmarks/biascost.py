"""Issue 37's table: what a bias encoding (ALiBi, T5 buckets, Shaw) costs over sinusoidal at long lengths, in one run.

    nice python benchmarks/biascost.py --threads 1 --out results/speed/biascost.json

The setup: the package's encoder `Classifier` (width 256, 4 heads, 2 layers, FFN 1,024, dropout 0) trained on a fixed
number of tokens per update (8,192: batch = tokens / L); one training update is a forward, a cross-entropy loss and a
backward.
* time: process CPU time on the CPU (one torch thread with --threads 1), or wall time between device synchronisations
  on CUDA; every encoding timed in the same run, interleaved with the order rotated every repetition, medians of --reps
  repetitions; a second, identical sinusoidal model is timed as a contender too: its ratio to the first is the run's
  noise floor;
* memory: on the CPU, in a fresh process per (encoding, length), the rise of resident memory above its level before one
  update, at the update's peak (after a warm-up update, so gradients exist); on CUDA, the peak allocated memory of one
  update.
Every figure is also a ratio to sinusoidal at the same length; the JSON record keeps the raw figures and the provenance.
"""
import argparse, json, os, statistics, subprocess, sys, time
from pathlib import Path
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
ARMS = ('sinusoidal', 'alibi', 't5', 'shaw')
TWIN = 'sinusoidal (twin)'


def build(enc: str, length: int, device, seed: int = 0, vocab: int = 1000):
    "The benchmark's Classifier with encoding `enc`, for inputs of `length` tokens."
    from posenc_nb.model import ModelConfig, Classifier
    torch.manual_seed(seed)
    cfg = ModelConfig(src_vocab=vocab, tgt_vocab=vocab, d_model=256, n_heads=4, n_enc=2, n_dec=0, d_ff=1024,
                      dropout=0.0, enc_pe=enc, max_len=max(1024, length))
    return Classifier(cfg).to(device).train()


def batch(length: int, tokens: int, device, vocab: int = 1000):
    "Token ids (tokens // length, length) without padding, and one label per row."
    g = torch.Generator().manual_seed(0)
    rows = max(1, tokens // length)
    x, y = torch.randint(4, vocab, (rows, length), generator=g), torch.randint(0, 2, (rows,), generator=g)
    return x.to(device), y.to(device)


def update(model, x, y):
    "One training update's forward and backward (gradients set to None first)."
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()


def _sync(device):
    if device.type == 'cuda': torch.cuda.synchronize(device)


def time_length(length: int, tokens: int, reps: int, device, encodings) -> dict:
    "Seconds per update of every encoding (and a sinusoidal twin), interleaved with the order rotated every repetition."
    x, y = batch(length, tokens, device)
    models = {e: build(e, length, device) for e in encodings}
    models[TWIN] = build('sinusoidal', length, device)
    clock = time.process_time if device.type == 'cpu' else time.perf_counter
    for m in models.values(): update(m, x, y)            # warm-up: gradients, tables, allocator
    _sync(device)
    keys, ts = list(models), {k: [] for k in models}
    for r in range(reps):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            _sync(device); t = clock(); update(models[k], x, y); _sync(device); ts[k].append(clock() - t)
    return ts


_PROBE = """
import json, sys, torch
sys.path.insert(0, sys.argv[2])
torch.set_num_threads(int(sys.argv[3]))
import biascost as b
a = json.loads(sys.argv[1])
dev = torch.device('cpu')
m = b.build(a['enc'], a['length'], dev); x, y = b.batch(a['length'], a['tokens'], dev)
b.update(m, x, y)
def status():
    d = {}
    for line in open('/proc/self/status'):
        if line.startswith(('VmRSS:', 'VmHWM:')): k, v = line.split(':'); d[k] = int(v.split()[0])
    return d
with open('/proc/self/clear_refs', 'w') as f: f.write('5')    # reset the high-water mark to the current RSS
s0 = status(); b.update(m, x, y); s1 = status()
print(json.dumps({'rss_kb': s0['VmRSS'], 'hwm_kb': s1['VmHWM']}))
"""


def cpu_memory_mb(enc: str, length: int, tokens: int, threads: int) -> float:
    "Rise of resident memory (MiB) at one update's peak above its level before it, in a fresh process (Linux)."
    if not Path('/proc/self/clear_refs').exists():
        raise RuntimeError("the CPU memory probe needs Linux /proc/self/clear_refs; pass --no-memory")
    env = {**os.environ, 'OMP_NUM_THREADS': str(threads), 'MALLOC_MMAP_THRESHOLD_': '65536',
           'MALLOC_TRIM_THRESHOLD_': '0'}
    args = [json.dumps(dict(enc=enc, length=length, tokens=tokens)), str(Path(__file__).parent), str(threads)]
    r = subprocess.run([sys.executable, '-c', _PROBE, *args], capture_output=True, text=True, env=env)
    if r.returncode:
        last = (r.stderr.strip().splitlines() or [r.returncode])[-1]
        raise RuntimeError(f"memory probe for {enc!r} at L={length} failed: {last}")
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return (d['hwm_kb'] - d['rss_kb']) / 1024


def cuda_memory_mb(enc: str, length: int, tokens: int, device) -> float:
    "Peak allocated CUDA memory (MiB) of one update above the allocation before it."
    m = build(enc, length, device); x, y = batch(length, tokens, device)
    update(m, x, y); torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device); torch.cuda.reset_peak_memory_stats(device)
    update(m, x, y); torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2 ** 20


def run(lengths, tokens: int, reps: int, threads: int, device, encodings=ARMS, memory: bool = True, done=None) -> dict:
    "Rows (one per length and encoding) of ms per update, memory, and their ratios to sinusoidal; `done(rows)` per length."
    rows = []
    for L in lengths:
        ts = time_length(L, tokens, reps, device, encodings)
        ref = statistics.median(ts['sinusoidal'])
        mem = {}
        for e in encodings if memory else ():
            on_cpu = device.type == 'cpu'
            mem[e] = cpu_memory_mb(e, L, tokens, threads) if on_cpu else cuda_memory_mb(e, L, tokens, device)
        for e in list(encodings) + [TWIN]:
            paired = [a / b for a, b in zip(ts[e], ts['sinusoidal'])]
            med = statistics.median(ts[e])
            row = dict(length=L, batch=max(1, tokens // L), encoding=e, ms=med * 1e3, time_ratio=med / ref,
                       time_ratio_min=min(paired), time_ratio_max=max(paired), reps=len(ts[e]))
            if e in mem: row.update(mem_mb=mem[e], mem_ratio=mem[e] / mem['sinusoidal'])
            rows.append(row)
            print(format_row(row), flush=True)
        if done is not None: done(rows)
    return dict(rows=rows)


def format_row(r: dict) -> str:
    mem = f"{r['mem_mb']:8.1f} MiB {r['mem_ratio']:5.2f}x" if 'mem_mb' in r else ' ' * 21
    return (f"L={r['length']:5d} B={r['batch']:3d} {r['encoding']:18s} {r['ms']:9.1f} ms {r['time_ratio']:5.2f}x "
            f"[{r['time_ratio_min']:.2f}..{r['time_ratio_max']:.2f}] {mem}")


def format_table(rec: dict) -> str:
    "Markdown table of a record: time and memory ratios to sinusoidal per length and encoding."
    out = ['| L | encoding | ms / update | time ratio | MiB | memory ratio |', '|---|---|---|---|---|---|']
    for r in rec['rows']:
        mem = (f"{r['mem_mb']:.0f} | {r['mem_ratio']:.2f}") if 'mem_mb' in r else '– | –'
        out.append(f"| {r['length']} | {r['encoding']} | {r['ms']:.0f} | {r['time_ratio']:.2f} | {mem} |")
    return '\n'.join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--lengths', type=int, nargs='+', default=[512, 1024, 2048, 4096])
    ap.add_argument('--tokens', type=int, default=8192, help='tokens per update (batch = tokens // length)')
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--encodings', nargs='+', default=list(ARMS))
    ap.add_argument('--no-memory', action='store_true')
    ap.add_argument('--quick', action='store_true', help='tiny sizes (L = 64, 128; 1 repetition): checks that it runs')
    ap.add_argument('--label', default=None, help="what the record measures, e.g. 'before' or 'after'")
    ap.add_argument('--out', default=None, help='JSON record to write (e.g. results/speed/biascost.json)')
    a = ap.parse_args(argv)
    if 'sinusoidal' not in a.encodings: ap.error("--encodings must include sinusoidal (every ratio is to it)")
    if a.quick: a.lengths, a.tokens, a.reps = [64, 128], 256, 1
    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device here; run on a CUDA machine or use --device cpu")
    from posenc_nb.utils import provenance, atomic_write
    rec = dict(experiment='biascost', label=a.label, tokens=a.tokens, reps=a.reps, threads=a.threads,
               setup='Classifier d_model=256 n_heads=4 n_enc=2 d_ff=1024 dropout=0; update = forward + loss + backward',
               clock='process CPU time' if device.type == 'cpu' else 'wall time between CUDA synchronisations',
               memory='rise of RSS at one update (fresh process)' if device.type == 'cpu' else 'peak CUDA allocation')
    rec['provenance'] = provenance(precision='fp32', device=device)     # before the run: the code that was measured
    def write(rows, complete=False):
        "The record so far (every finished length), rewritten after each length: a stopped run keeps what it measured."
        if not a.out: return
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(a.out, json.dumps(dict(rec, rows=rows, complete=complete), indent=1) + '\n')
    rec.update(run(a.lengths, a.tokens, a.reps, a.threads, device, a.encodings, memory=not a.no_memory, done=write))
    write(rec['rows'], complete=True)
    print(format_table(rec))
    return 0


if __name__ == '__main__':
    sys.exit(main())

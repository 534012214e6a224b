"""One training step of the package's causal LM, eager against `torch.compile` (inductor), for every encoding.

    nice python benchmarks/compile_step.py --threads 1 --out results/speed/compile.json

The model is `CausalLM` (width 128, 4 heads, 4 layers, FFN 512, the length lab's shape) on (8, 256) token ids; a step
is the forward, the cross-entropy, the backward and an AdamW update (eager, the same on both sides; the update matters:
without it the weights never change and an encoding that caches what it computes from them, FLOATER's trajectory,
would skip that work in eager mode only). The
compiled side is `torch.compile(model, fullgraph=True)` (any graph break is an error). Per encoding:
* compile_s: wall seconds of the first compiled step (tracing, AOTAutograd, inductor's code generation), cold: the
  run compiles into a fresh inductor cache folder of its own (a warm cache would turn most of this into reads);
* the steady state: process CPU time per step (one torch thread with --threads 1), eager and compiled interleaved with
  the order alternating every repetition, medians of --reps repetitions; ratio = compiled median / eager median, and
  the largest absolute difference of the loss between the two (they compute the same function).
Every encoding runs in the same process, one after another; the record keeps the raw figures and the provenance.
"""
import argparse, json, os, statistics, sys, tempfile, time
from pathlib import Path
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent


def causal_encodings() -> list:
    "Registered encodings a causal LM over plain text takes (those that read no extra position streams)."
    from posenc_nb.core import list_posencs, make_posenc
    return [n for n in list_posencs() if not make_posenc(n, 16, 2, causal=True, max_len=64).reads_streams]


def build(enc: str, length: int):
    from posenc_nb.causal_lm import CausalLM, CausalLMConfig
    torch.manual_seed(0)
    return CausalLM(CausalLMConfig(pe=enc, max_len=length)).train()


def step(model, opt, ids) -> float:
    "Forward, next-token cross-entropy, backward, an optimizer update (gradients set to None first); the loss."
    opt.zero_grad(set_to_none=True)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    opt.step()
    return loss.item()


def measure(enc: str, ids, reps: int) -> dict:
    "Compile time, then eager and compiled steps interleaved: medians of CPU seconds per step and their ratio."
    eager, compiled = build(enc, ids.shape[1]), build(enc, ids.shape[1])
    compiled.load_state_dict(eager.state_dict())
    torch._dynamo.reset()                     # a fresh cache per encoding: no recompile limit carried over
    fast = torch.compile(compiled, fullgraph=True)
    opts = {m: torch.optim.AdamW(m.parameters(), lr=1e-4) for m in (eager, compiled)}
    t0 = time.perf_counter()
    loss_c = step(fast, opts[compiled], ids)
    compile_s = time.perf_counter() - t0
    loss_e = step(eager, opts[eager], ids)
    times = {'eager': [], 'compiled': []}
    for r in range(reps):
        for side in (('eager', 'compiled') if r % 2 == 0 else ('compiled', 'eager')):
            m, opt = (eager, opts[eager]) if side == 'eager' else (fast, opts[compiled])
            t = time.process_time()
            step(m, opt, ids)
            times[side].append(time.process_time() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    return dict(encoding=enc, compile_s=round(compile_s, 2), eager_s=round(med['eager'], 5),
                compiled_s=round(med['compiled'], 5), ratio=round(med['compiled'] / med['eager'], 4),
                loss_difference=abs(loss_c - loss_e), times=times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--encodings', nargs='+', default=None, help='default: every causal encoding')
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--length', type=int, default=256)
    ap.add_argument('--reps', type=int, default=7)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--quick', action='store_true', help='(2, 32) tokens, 1 repetition: checks that it runs')
    ap.add_argument('--out', default=None, help='JSON record to write (e.g. results/speed/compile.json)')
    a = ap.parse_args(argv)
    if a.quick: a.batch, a.length, a.reps = 2, 32, 1
    if min(a.batch, a.length - 1, a.reps, a.threads) < 1:
        ap.error('--batch, --reps and --threads must be at least 1 and --length at least 2')
    torch.set_num_threads(a.threads)
    os.environ['TORCHINDUCTOR_CACHE_DIR'] = tempfile.mkdtemp(prefix='compile-step-')     # cold compiles, every run
    from posenc_nb.utils import provenance, atomic_write
    encs = a.encodings or causal_encodings()
    ids = torch.randint(0, 65, (a.batch, a.length + 1), generator=torch.Generator().manual_seed(0))
    rec = dict(experiment='compile-step', batch=a.batch, length=a.length, reps=a.reps, threads=a.threads,
               setup='CausalLM d_model=128 n_heads=4 n_layers=4 d_ff=512; step: forward, loss, backward, AdamW',
               compiled="torch.compile(model, fullgraph=True), inductor", clock='process CPU time per step, medians',
               provenance=provenance(precision='fp32', device=torch.device('cpu')), rows=[], complete=False)
    for enc in encs:
        row = measure(enc, ids, a.reps)
        rec['rows'].append(row)
        print(f"{enc:12s} compile {row['compile_s']:6.1f} s  eager {row['eager_s'] * 1e3:8.1f} ms  compiled "
              f"{row['compiled_s'] * 1e3:8.1f} ms  ratio {row['ratio']:.2f}  |loss diff| {row['loss_difference']:.1e}",
              flush=True)
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            atomic_write(a.out, json.dumps(rec, indent=1) + '\n')
    rec['complete'] = True
    if a.out: atomic_write(a.out, json.dumps(rec, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())

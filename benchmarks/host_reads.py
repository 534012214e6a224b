"""Host reads (device syncs on an accelerator) per incremental decoding step and per training forward+backward, for every
registered encoding, as a markdown table. Self-contained (its own counter), so the same script measures an older checkout:
`PYTHONPATH=old_checkout python benchmarks/host_reads.py`. On the CPU, RoPE reads positions where that is free (no sync)."""
import torch, traceback
from torch.utils._python_dispatch import TorchDispatchMode
from posenc_nb.core import list_posencs, Positions
from posenc_nb.model import ModelConfig, Seq2Seq
import posenc_nb.decode as D
torch.set_num_threads(1)
OPS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default, torch.ops.aten.masked_select.default}
class Reads(TorchDispatchMode):
    def __init__(self): super().__init__(); self.n = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in OPS or (func is torch.ops.aten.index.Tensor and any(i is not None and i.dtype == torch.bool for i in args[1])): self.n += 1
        return func(*args, **(kwargs or {}))
    def __enter__(self):
        self._tl, me = torch.Tensor.tolist, self
        torch.Tensor.tolist = lambda t: (setattr(me, 'n', me.n + 1), me._tl(t))[1]
        return super().__enter__()
    def __exit__(self, *e): torch.Tensor.tolist = self._tl; return super().__exit__(*e)
def model(pe, layers):
    torch.manual_seed(0)
    return Seq2Seq(ModelConfig(20, 20, d_model=32, n_heads=4, n_enc=layers, n_dec=layers, d_ff=64, enc_pe=pe, max_len=64, dropout=0.0))
src = torch.tensor([[5, 6, 7, 0], [8, 9, 10, 11]]); mask = src != 0
print('| encoding | reads per decoding step (3 layers) | reads per training forward+backward, 2 layers / 4 layers |')
print('|---|---:|---:|')
for pe in list_posencs():
    m = model(pe, 3).eval()
    sp = Positions.from_mask(mask)
    with torch.no_grad():
        mem, cache, tok, cap = m.encode(src, sp), m.new_cache(), torch.full((2, 1), 1), torch.tensor([2, 50])
        D._step_logprobs(m, tok, 0, mem, sp, cache, 1, 2, 0, 0 >= cap)
        with Reads() as r:
            for t in (1, 2, 3): D._step_logprobs(m, tok, t, mem, sp, cache, 1, 2, 0, t >= cap)
    fw = []
    for L in (2, 4):
        m = model(pe, L).train()
        for _ in range(2):
            with Reads() as f: m(src, Positions.from_mask(mask.clone()), src, Positions.from_mask(mask.clone())).sum().backward()
        fw.append(f.n)
    print(f'| {pe} | {r.n / 3:.0f} | {fw[0]} / {fw[1]} |')

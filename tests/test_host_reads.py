"""Host reads (device syncs on an accelerator) on the hot paths, checked for every registered encoding on the CPU.

`HostReads` lists every read of a tensor value into Python (`.item()`, `int(t)`, `bool(t)`, `nonzero`, boolean-mask
indexing, `tolist`). On the CPU these cost nothing, so RoPE takes a cheaper CPU-only branch (a table slice for a plain
range of positions, decided by reading the positions); `accelerator_path` switches that branch off so the code that runs
on a GPU is the code checked here.

- The decoder's incremental step (`decode._step_logprobs`: `Seq2Seq.decode` with a cache, then the log-probabilities)
  reads nothing, for every encoding: the step's position is noted on the host (`note_fact`), the source mask was read
  once at the first step, and forcing EOS is a `torch.where`.
- A training forward+backward reads the positions once per forward, never per layer: the count is the same for two
  and four layers. What it reads: whether each padding mask pads anything (`_dense`, which buys the fused causal
  kernel) and, for encodings that size a table or check a limit by the largest position, that position. FLOATER also
  checks each new trajectory for NaN/inf (a clear `FloaterDivergence` instead of silent NaN losses), once per solve.
"""
import pytest, torch
import posenc_nb.rotary as rotary_mod
from posenc_nb.core import HostReads, Positions, list_posencs
from posenc_nb.model import ModelConfig, Seq2Seq
from posenc_nb.decode import _step_logprobs, greedy_decode

torch.set_num_threads(1)
ENCODINGS = list_posencs()


@pytest.fixture(params=['cpu', 'accelerator'])
def accelerator_path(request, monkeypatch):
    "Run each test on the CPU branch and on the branch an accelerator takes (no reads decided on the CPU)."
    if request.param == 'accelerator': monkeypatch.setattr(rotary_mod, '_reads_free', lambda t: False)
    return request.param


def _model(pe: str, layers: int = 2, train: bool = False) -> Seq2Seq:
    torch.manual_seed(0)
    cfg = ModelConfig(20, 20, d_model=32, n_heads=4, n_enc=layers, n_dec=layers, d_ff=64, enc_pe=pe, max_len=64, dropout=0.0)
    return Seq2Seq(cfg).train(train)


def _batch():
    src = torch.tensor([[5, 6, 7, 0], [8, 9, 10, 11]])
    mask = src != 0
    xl = torch.stack([torch.randperm(4), torch.randperm(4)])        # a second stream for the encodings that read one
    return src, Positions.from_mask(mask, streams={'xl': xl})


@pytest.mark.parametrize('pe', ENCODINGS)
def test_incremental_step_reads_nothing(pe, accelerator_path):
    m, (src, sp) = _model(pe), _batch()
    with torch.no_grad():
        mem, cache, tok = m.encode(src, sp), m.new_cache(), torch.full((2, 1), 1)
        maxl = torch.tensor([2, 50])
        _step_logprobs(m, tok, 0, mem, sp, cache, 1, 2, 0, 0 >= maxl)          # first step: projects and reads the source once
        with HostReads() as hr:
            for t in (1, 2, 3): lp = _step_logprobs(m, tok, t, mem, sp, cache, 1, 2, 0, t >= maxl)
    assert hr.n == 0, f"{pe}: the incremental step read {hr.n} values to the host; first at\n{hr.reads[0][1]}"
    assert torch.isinf(lp[0]).sum() == lp.shape[1] - 1 and torch.isfinite(lp[0, 2])   # row 0 is past its cap: EOS only
    assert torch.isfinite(lp[1]).sum() == lp.shape[1] - 2                               # row 1: all but BOS and PAD


def _reads(pe: str, layers: int) -> list:
    m, (src, sp) = _model(pe, layers, train=True), _batch()
    for _ in range(2):                                                   # the second step: tables and caches warm
        src_p, tgt_p = Positions(sp.pos.clone(), sp.mask.clone(), {k: v.clone() for k, v in sp.streams.items()}), Positions.from_mask(src != 0)
        with HostReads() as hr: m(src, src_p, src, tgt_p).sum().backward()
    return [r[0] for r in hr.reads]


@pytest.mark.parametrize('pe', ENCODINGS)
def test_forward_reads_positions_once_not_per_layer(pe, accelerator_path):
    one, three = _reads(pe, 2), _reads(pe, 4)
    assert one == three, f"{pe}: host reads grow with depth ({len(one)} with two layers, {len(three)} with four)"
    assert len(one) <= 10, f"{pe}: {len(one)} host reads in one training forward+backward: {one}"


def test_greedy_loop_reads_once_per_step():
    "The decoding loop itself reads one flag per step (did any sentence end?) plus the rows of sentences that ended."
    m, (src, sp) = _model('sinusoidal'), _batch()
    with HostReads() as hr: out = greedy_decode(m, src, sp, max_len=6)
    steps = max(len(o) for o in out) + 1
    assert hr.n <= 3 * steps + 8, (hr.n, steps)


@pytest.mark.parametrize('pe', ['rope', 'xl-rope'])
def test_rotary_tables_resolved_once_per_positions_tensor(pe, accelerator_path, monkeypatch):
    "RoPE's cos/sin for a positions tensor are built once and shared by q, k and every layer (2 and 4 layers alike)."
    calls = []
    orig = rotary_mod.RotaryCache._resolve
    monkeypatch.setattr(rotary_mod.RotaryCache, '_resolve', lambda self, pos, *a: (calls.append(tuple(pos.shape)), orig(self, pos, *a))[1])
    counts = []
    for layers in (2, 4):
        m, (src, sp) = _model(pe, layers, train=True), _batch()
        calls.clear()
        m(src, sp, src, Positions.from_mask(src != 0)).sum().backward()
        counts.append(len(calls))
    assert counts[0] == counts[1], counts
    assert counts[0] <= (3 if pe == 'xl-rope' else 2), calls      # encoder and decoder positions (+ the XL heads' positions)

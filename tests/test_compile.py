"""Compile everywhere (issue 48, item 2): every registered encoding's hooks, and a small GPT's training step with each,
trace into one graph (`torch._dynamo.explain` finds 0 graph breaks) with tensor positions, left padding and per-row
offsets, and the compiled step (AOTAutograd, forward and backward) equals eager."""
import warnings
import pytest, torch, torch.nn as nn, torch.nn.functional as F
from posenc_nb.core import Positions, Site, bias_inputs, list_posencs, make_posenc
from posenc_nb.attention import Attention

torch.set_num_threads(1)
D, H, N_LAYERS, V, B, L = 16, 2, 2, 23, 2, 7


class TinyGPT(nn.Module):
    "A decoder-only Transformer on the package's `Attention(kind='dec')`: every hook of the encoding is called."
    def __init__(self, pe):
        super().__init__()
        self.pe, self.tok = pe, nn.Embedding(V, D)
        self.att = nn.ModuleList(Attention(D, H, 'dec', layer=i) for i in range(N_LAYERS))
        self.ln = nn.ModuleList(nn.LayerNorm(D) for _ in range(N_LAYERS))
        self.head = nn.Linear(D, V)

    def forward(self, ids, pos, mask):
        p = Positions(pos, mask)
        x = self.pe.embed(self.tok(ids), p)
        for ln, att in zip(self.ln, self.att):
            x = x + att(ln(x), p, self.pe)
        nll = F.cross_entropy(self.head(x).flatten(0, 1), ids.flatten(), reduction='none')
        return (nll * mask.flatten()).sum() / mask.sum()                  # no boolean indexing: a data-dependent shape


def hooks(pe, x, q, k, pos, mask):
    "Every hook of `pe` once, as `Attention` calls them at a decoder layer, summed into one number."
    p, site = Positions(pos, mask), Site('dec', 1, H, D // H)
    out = [pe.embed(x, p)]
    out += [t for t in (pe.qkv_bias(p, p, site) or ()) if t is not None]
    hp = pe.head_positions(p, site)
    values = pe.token_values(x, p, site)                            # hook 3b: None unless the encoding has it
    if values is not None: out.append(values)
    out += list(pe.transform_qk(q, k, hp, hp, site))
    bias = pe.logit_bias(q, hp, hp, site, **bias_inputs(pe, k, values))   # keys and values where bias_reads asks
    if bias is not None: out.append(bias)
    return sum(o.float().sum() for o in out)


def inputs(length=L, seed=0):
    "Token ids, positions (row 1 left-padded by 2, row 0 continuing at offset 3) and the padding mask."
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, length, dtype=torch.bool)
    mask[1, :2] = False
    pos = Positions.from_mask(mask, offset=torch.tensor([3, 0])).pos
    return torch.randint(1, V, (B, length), generator=g), pos, mask


def build(name):
    torch.manual_seed(0)
    return make_posenc(name, D, H, n_layers=N_LAYERS, causal=True, max_len=64)


def breaks(fn, *args) -> int:
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return torch._dynamo.explain(fn)(*args).graph_break_count


ENCODINGS = list_posencs()


@pytest.mark.parametrize('name', ENCODINGS)
def test_hooks_trace_whole(name):
    pe = build(name).train()
    ids, pos, mask = inputs()
    g = torch.Generator().manual_seed(1)
    x, q, k = torch.randn(B, L, D, generator=g), *torch.randn(2, B, H, L, D // H, generator=g).unbind(0)
    assert breaks(lambda *a: hooks(pe, *a), x, q, k, pos, mask) == 0


def compiled_equals_eager(model, backend):
    "The compiled forward and backward equal eager at two lengths, one graph for both (dynamic shapes)."
    torch._dynamo.reset()
    step = torch.compile(model, fullgraph=True, dynamic=True, backend=backend)
    for length in (L, L + 2):
        args = inputs(length, seed=length)
        ref = model(*args)
        ref_grads = torch.autograd.grad(ref, list(model.parameters()), allow_unused=True)
        got = step(*args)
        grads = torch.autograd.grad(got, list(model.parameters()), allow_unused=True)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        for a, b in zip(grads, ref_grads):
            assert (a is None) == (b is None)
            if a is not None: torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


@pytest.mark.parametrize('name', ENCODINGS)
def test_gpt_step_compiles(name):
    """0 graph breaks in a training forward; the traced graph (run eagerly: the `eager` backend keeps the test short)
    and its backward equal eager."""
    model = TinyGPT(build(name)).train()
    assert breaks(model, *inputs()) == 0
    compiled_equals_eager(model, 'eager')


@pytest.mark.parametrize('name', ENCODINGS)
def test_training_steps_compile_once(name):
    """Training steps (forward, backward, an optimizer update) reuse the first step's graph: no state the encoding
    changes per step (a counter, a cache key) is guarded on, which would recompile every step."""
    torch._dynamo.reset()
    model = TinyGPT(build(name)).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(model, fullgraph=True, backend='eager')
    step(*inputs()).backward()
    opt.step()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(3):
            opt.zero_grad()
            step(*inputs()).backward()
            opt.step()
    torch._dynamo.reset()


@pytest.mark.parametrize('name', ['floater'])
def test_gpt_step_through_aot_autograd(name):
    "Through AOTAutograd too (FLOATER's solve is a custom operator with its own backward)."
    compiled_equals_eager(TinyGPT(build(name)).train(), 'aot_eager')


def test_compiled_bound_is_checked_on_the_device():
    "A learned table's limit still holds in a compiled graph: checked by an on-device assert, not a host read."
    pe = make_posenc('learned', D, H, max_len=8)
    f = torch.compile(lambda x, pos: pe.embed(x, Positions(pos)), fullgraph=True, backend='aot_eager')
    f(torch.zeros(1, 4, D), torch.arange(4)[None])
    with pytest.raises(RuntimeError, match='max_len=8'):
        f(torch.zeros(1, 4, D), torch.arange(6, 10)[None])
    torch._dynamo.reset()

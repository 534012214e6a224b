"""posenc_nb.rope against real peers (test-only extras, each skipped when absent):
HuggingFace transformers (RoFormer sinusoidal rotary, Llama-style apply_rotary_pos_emb) and rotary-embedding-torch.
Run with -s to see the max abs differences."""
import pytest, torch
from posenc_nb.rope import permute_rotary_weights, rotary_permutation
from posenc_nb.rotary import RotaryCache
from posenc_nb.rotary_kernel import apply_rotary

torch.manual_seed(0)
B, H, L, D = 2, 4, 700, 64

def report(name, diff): print(f'\n{name}: max abs diff {diff:.2e}')

def test_roformer_sinusoidal():
    pytest.importorskip('transformers')
    from transformers.models.roformer.modeling_roformer import RoFormerSinusoidalPositionalEmbedding, RoFormerSelfAttention
    emb = RoFormerSinusoidalPositionalEmbedding(1024, D)
    with torch.no_grad(): emb.weight.copy_(emb.create_weight())
    q, k = torch.randn(2, B, H, L, D).unbind(0)
    sin_pos = emb((B, L))[None, None]                             # (1,1,L,D): sin | cos halves, fp64 angles
    rq, rk = RoFormerSelfAttention.apply_rotary_position_embeddings(sin_pos, q, k)
    cache = RotaryCache(D, angle_dtype='float64')                 # RoFormer builds angles in fp64 (numpy)
    diff = max((apply_rotary(q, None, cache) - rq).abs().max().item(), (apply_rotary(k, None, cache) - rk).abs().max().item())
    report('HF RoFormer sinusoidal rotary (interleaved, fp64 angles)', diff)
    assert diff < 1e-5

def test_llama_apply_rotary_pos_emb():
    pytest.importorskip('transformers')
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
    cfg = LlamaConfig(hidden_size=H * D, num_attention_heads=H, head_dim=D, max_position_embeddings=4096)
    rope = LlamaRotaryEmbedding(cfg)
    q, k = torch.randn(2, B, H, L, D).unbind(0)
    pos = torch.stack([torch.arange(L), torch.arange(L) + 1000])        # per-row positions, one row offset (KV cache)
    cos, sin = rope(q, pos)
    rq, rk = apply_rotary_pos_emb(q, k, cos, sin)
    c32 = RotaryCache(D, angle_dtype='float32')                          # HF's fp32 angles, bit for bit
    ours_q, ours_k = apply_rotary(q, pos, c32, style='half'), apply_rotary(k, pos, c32, style='half', key=True)
    diff = max((ours_q - rq).abs().max().item(), (ours_k - rk).abs().max().item())
    report('HF Llama apply_rotary_pos_emb (half, fp32)', diff)
    assert diff < 1e-6
    # the default (fp64 angles) is closer to the fp64 truth than HF
    truth = apply_rotary(q.double(), pos, RotaryCache(D, angle_dtype='float64'), style='half')
    assert (apply_rotary(q, pos, style='half').double() - truth).abs().max() < (rq.double() - truth).abs().max()
    # (B,L,H,D) layout, the other unsqueeze_dim
    rq2, _ = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin, unsqueeze_dim=2)
    assert (apply_rotary(q.transpose(1, 2), pos, c32, style='half', layout='blhd') - rq2).abs().max() < 1e-6
    # converter: Llama (half) q rows permuted to interleaved, rotated by the paper's layout, equal logits
    W = torch.randn(H * D, 32); x = torch.randn(1, L, 32)
    qh = (x @ W.T).view(1, L, H, D).transpose(1, 2)
    qi = (x @ permute_rotary_weights(W, H, to='interleaved').T).view(1, L, H, D).transpose(1, 2)
    cos1, sin1 = rope(qh, pos[:1])
    rh, _ = apply_rotary_pos_emb(qh, qh, cos1, sin1)
    ri = apply_rotary(qi, pos[:1], c32)
    assert (ri[..., rotary_permutation(D)] - rh).abs().max() < 1e-5

def test_llama_bf16_inputs():
    "HF casts cos/sin to bf16 and multiplies in bf16; we rotate in fp32 and round once: closer to the fp64 truth."
    pytest.importorskip('transformers')
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
    rope = LlamaRotaryEmbedding(LlamaConfig(hidden_size=H * D, num_attention_heads=H, head_dim=D))
    q = torch.randn(1, H, L, D).bfloat16(); pos = torch.arange(L)[None] + 3000
    truth = apply_rotary(q.double(), pos, RotaryCache(D, angle_dtype='float64'), style='half')
    cos, sin = rope(q, pos)
    hf, _ = apply_rotary_pos_emb(q, q, cos, sin)
    ours = apply_rotary(q, pos, style='half')
    e_hf, e_ours = (hf.double() - truth).abs().max().item(), (ours.double() - truth).abs().max().item()
    print(f'\nbf16 inputs at positions 3000..{3000 + L}: max abs error vs fp64, HF {e_hf:.2e}, ours {e_ours:.2e}')
    assert e_ours <= e_hf

def test_rotary_embedding_torch():
    ret = pytest.importorskip('rotary_embedding_torch')
    rot = ret.RotaryEmbedding(D)
    q = torch.randn(B, H, L, D)
    c32 = RotaryCache(D, angle_dtype='float32')                          # the peer's fp32 angles
    diff = (apply_rotary(q, None, c32) - rot.rotate_queries_or_keys(q)).abs().max().item()
    report('rotary-embedding-torch (interleaved, fp32)', diff)
    assert diff < 1e-5
    # offset (its KV-cache argument) and partial rotary (dim < head dim)
    assert (apply_rotary(q, 37, c32) - rot.rotate_queries_or_keys(q, offset=37)).abs().max() < 1e-5
    part = ret.RotaryEmbedding(32)
    assert (apply_rotary(q, None, RotaryCache(32, angle_dtype='float32')) - part.rotate_queries_or_keys(q)).abs().max() < 1e-5

def test_rotary_embedding_torch_bf16_positions():
    "rotary-embedding-torch builds positions in the input dtype: bf16 inputs collapse neighbouring positions. Ours doesn't."
    ret = pytest.importorskip('rotary_embedding_torch')
    rot = ret.RotaryEmbedding(D, cache_if_possible=False)
    Lb = 2048
    q = torch.randn(1, 1, Lb, D).bfloat16()
    truth = apply_rotary(q.double(), None, RotaryCache(D, angle_dtype='float64'))
    e_peer = (rot.rotate_queries_or_keys(q).double() - truth).abs().max().item()
    e_ours = (apply_rotary(q, None).double() - truth).abs().max().item()
    print(f'\nbf16 inputs, L={Lb}: max abs error vs fp64, rotary-embedding-torch {e_peer:.2e}, ours {e_ours:.2e}')
    assert e_ours < 0.05 and e_peer > 10 * e_ours

def _peer_grads(f, x, g):
    x = x.detach().requires_grad_()
    y = f(x)
    return y, torch.autograd.grad(y, x, g)[0]

@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_training_path_matches_peers(dtype):
    "Forward and backward (our custom autograd op) against the peers' autograd graphs, both pair layouts, fp32 and bf16."
    pytest.importorskip('transformers'); ret = pytest.importorskip('rotary_embedding_torch')
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
    rope = LlamaRotaryEmbedding(LlamaConfig(hidden_size=H * D, num_attention_heads=H, head_dim=D))
    x, g = torch.randn(2, B, H, L, D).unbind(0)
    x, g = x.to(dtype), g.to(dtype)
    pos = torch.arange(L)[None]
    cos, sin = rope(x.float(), pos)                               # fp32 tables: the peer computed in fp32, rounded once
    c32 = RotaryCache(D, angle_dtype='float32')
    tol = 1e-5 if dtype == torch.float32 else 2 ** -7             # bf16: both round an fp32 value once, at most an ulp apart
    peers = {'half': lambda t: apply_rotary_pos_emb(t.float(), t.float(), cos, sin)[0].to(dtype),
             'interleaved': lambda t: ret.RotaryEmbedding(D).rotate_queries_or_keys(t.float()).to(dtype)}
    for style, peer in peers.items():
        y_p, g_p = _peer_grads(peer, x, g)
        y_o, g_o = _peer_grads(lambda t: apply_rotary(t, pos[:, None], c32, style=style), x, g)
        assert y_o.dtype == dtype and g_o.dtype == dtype
        e_y = ((y_o.float() - y_p.float()).abs() / (1 + y_p.float().abs())).max().item()
        e_g = ((g_o.float() - g_p.float()).abs() / (1 + g_p.float().abs())).max().item()
        report(f'training path vs peer ({style}, {dtype}): forward {e_y:.1e}, backward', e_g)
        assert e_y <= tol and e_g <= tol

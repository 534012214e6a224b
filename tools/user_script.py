"""What a user writes: the README's "Use it" examples and notebook 15's (`15_own_model`), as one script that runs and
that `pyright` checks in basic mode (`make typecheck`; pyrightconfig.json lists it beside the public modules).
Run: `python tools/user_script.py` (seconds on a CPU); the Hugging Face part runs where transformers is installed."""
from __future__ import annotations
import importlib.util
from typing import Optional, Union
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from posenc_nb.core import PosEnc, Positions, Site, list_posencs, make_posenc
from posenc_nb.model import ModelConfig, Seq2Seq
from posenc_nb.baselines import (ShawPosEnc, T5PosEnc, alibi_slopes, alibi_score_mod, shaw_score_mod, t5_lut,
                                 t5_score_mod)
from posenc_nb.interop import EncodingPlug, bias_encodings, fused_qkv_bias, position_bias, position_score_mod
from posenc_nb.rotary import RotaryCache
from posenc_nb.rotary_kernel import apply_rotary
from posenc_nb.rope import rotary_from_hf
from posenc_nb.floater import FloaterPE


def readme_use_it() -> None:
    "The README's 'Use it': an encoding on its own, positions of a left-padded batch, the package's Transformer."
    pe = make_posenc('rope', d_model=64, n_heads=4)
    assert isinstance(pe, PosEnc)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]).bool()     # row 0 is left-padded
    p = Positions.from_mask(mask)
    assert p.pos.tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    model = Seq2Seq(ModelConfig(src_vocab=100, tgt_vocab=100, d_model=64, n_heads=4, n_enc=2, n_dec=2, d_ff=128,
                                enc_pe='rope'))
    src = torch.randint(4, 100, (2, 5)).masked_fill(~mask, 0)
    tgt = torch.randint(4, 100, (2, 3))
    logits = model(src, p, tgt, Positions.arange(2, 3))
    assert logits.shape == (2, 3, 100)
    assert 'rope' in list_posencs()
    assert p.slice(3).max() == 4 and p.to('cpu').shape == (2, 5)
    readme_own_model(p)
    readme_hf(src, mask)


def readme_own_model(p: Positions) -> None:
    "The README's own-model calls: a rotation, Hugging Face's rotary, a logit bias and its score_mod, q/k/v biases."
    B, H, L, dh = 2, 4, 5, 16
    q, k = torch.randn(2, B, H, L, dh).unbind(0)
    ids = p.pos
    cache = RotaryCache(dh)
    q_rope, k_rope = apply_rotary(q, ids, cache), apply_rotary(k, ids, cache, key=True)
    llama3 = rotary_from_hf(dict(hidden_size=64, num_attention_heads=H, head_dim=dh, max_position_embeddings=512,
                                 rope_theta=500000.0, rope_scaling=dict(rope_type='llama3', factor=8.0,
                                 low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32)))
    q_hf = apply_rotary(q, ids, llama3, style='half')
    alibi = make_posenc('alibi', d_model=64, n_heads=H, causal=True)
    bias = position_bias(alibi, ids)
    score_mod = position_score_mod(alibi, ids)
    floater = make_posenc('floater', d_model=64, n_heads=H, n_layers=2, causal=True, kinds=('dec',))
    qkv = torch.nn.Linear(64, 192)
    qkv_bias = fused_qkv_bias(floater, ids, qkv.weight, layer=1)
    assert bias.shape == (B, H, L, L) and qkv_bias.shape == (B, L, 192)
    assert q_rope.shape == k_rope.shape == q_hf.shape == q.shape
    b, h, i, j = torch.tensor(1), torch.tensor(2), torch.tensor(3), torch.tensor(1)
    assert torch.allclose(score_mod(torch.zeros(()), b, h, i, j), bias[1, 2, 3, 1])


def readme_hf(src: Tensor, mask: Tensor) -> None:
    """The README's Hugging Face retrofit: one call (typed as the model given), a training step on a left-padded batch,
    the encoding through its typed accessor, save and reload."""
    if importlib.util.find_spec('transformers') is None: return
    import tempfile
    from transformers import LlamaConfig, LlamaForCausalLM
    from posenc_nb.hf import encoding_of, load_encoded, use_encoding
    from posenc_nb.rope import RoPE
    llama = use_encoding(LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128,
                                                      num_hidden_layers=2, num_attention_heads=4,
                                                      num_key_value_heads=2)), 'alibi')
    loss = llama(input_ids=src, attention_mask=mask.long(), labels=src).loss
    loss.backward()
    assert llama.config.vocab_size == 100 and encoding_of(llama).n_heads == 4     # typed as LlamaForCausalLM
    rope = use_encoding(LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128,
                                                     num_hidden_layers=2, num_attention_heads=4)), 'rope')
    assert encoding_of(rope, RoPE).style == 'half'
    with tempfile.TemporaryDirectory() as folder:
        llama.save_pretrained(folder)
        back = load_encoded(folder)
        assert encoding_of(back).n_heads == 4


class Plug(nn.Module):
    "Where a position encoding enters the GPT (notebook 15): each method a no-op; a plug overrides the ones it needs."
    def __init__(self, pe: Optional[nn.Module] = None):
        super().__init__()
        self.pe = pe

    def embed(self, x: Tensor, pos: Tensor) -> Tensor: return x
    def qkv(self, qkv: Tensor, pos: Tensor, layer: int, proj: nn.Linear) -> Tensor: return qkv
    def qk(self, q: Tensor, k: Tensor, pos: Tensor, layer: int) -> tuple: return q, k
    def bias(self, q: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Optional[Tensor]: return None


class Embeds(Plug):
    def __init__(self, pe: PosEnc):
        super().__init__(pe)
        self.enc = pe
    def embed(self, x: Tensor, pos: Tensor) -> Tensor: return self.enc.embed(x, Positions(pos))


class Rotary(Plug):
    def __init__(self, cache: RotaryCache, style: str = 'interleaved'):
        super().__init__()
        self.cache, self.style = cache, style
    def qk(self, q: Tensor, k: Tensor, pos: Tensor, layer: int) -> tuple:
        return (apply_rotary(q, pos, self.cache, style=self.style),
                apply_rotary(k, pos, self.cache, style=self.style, key=True))


class Bias(Plug):
    def __init__(self, pe: PosEnc):
        super().__init__(pe)
        self.enc = pe
    def bias(self, q: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int) -> Optional[Tensor]:
        return position_bias(self.enc, q_pos, k_pos, q=q, layer=layer)


class FusedQKV(Plug):
    def __init__(self, pe: PosEnc):
        super().__init__(pe)
        self.enc = pe
    def qkv(self, qkv: Tensor, pos: Tensor, layer: int, proj: nn.Linear) -> Tensor:
        return qkv + fused_qkv_bias(self.enc, pos, proj.weight, layer)


AnyPlug = Union['Plug', EncodingPlug]        # a hand-written plug, or the package's ready one


class KVCache:
    "Per layer: keys and values (B,H,L,dh) with their position ids and padding flags (B,L), grown by each forward."
    def __init__(self):
        self.layers: dict = {}

    def add(self, layer: int, k: Tensor, v: Tensor, pos: Tensor, mask: Tensor) -> tuple:
        if layer in self.layers:
            old_k, old_v, old_pos, old_mask = self.layers[layer]
            k, v = torch.cat([old_k, k], 2), torch.cat([old_v, v], 2)
            pos, mask = torch.cat([old_pos, pos], 1), torch.cat([old_mask, mask], 1)
        self.layers[layer] = (k, v, pos, mask)
        return k, v, pos, mask


class SelfAttention(nn.Module):
    def __init__(self, d: int, n_heads: int, layer: int, plug: AnyPlug):
        super().__init__()
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.n_heads, self.layer, self.plug = n_heads, layer, plug

    def forward(self, x: Tensor, pos: Tensor, mask: Tensor, cache: Optional[KVCache] = None) -> Tensor:
        B, L, D = x.shape
        qkv = self.plug.qkv(self.qkv(x), pos, self.layer, self.qkv)
        q, k, v = (t.view(B, L, self.n_heads, -1).transpose(1, 2) for t in qkv.chunk(3, -1))
        q, k = self.plug.qk(q, k, pos, self.layer)
        k_pos, k_mask = pos, mask
        if cache is not None:
            k, v, k_pos, k_mask = cache.add(self.layer, k, v, pos, mask)
        allowed = ((k_pos[:, None, :] <= pos[:, :, None]) & k_mask[:, None, :])[:, None]    # (B,1,Lq,Lk)
        bias = self.plug.bias(q, pos, k_pos, self.layer)
        attn_mask = allowed if bias is None else bias.to(q.dtype).masked_fill(~allowed, float('-inf'))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out(y.transpose(1, 2).reshape(B, L, D))


class Block(nn.Module):
    def __init__(self, d: int, n_heads: int, layer: int, plug: AnyPlug):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, n_heads, layer, plug)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: Tensor, pos: Tensor, mask: Tensor, cache: Optional[KVCache] = None) -> Tensor:
        x = x + self.attn(self.ln1(x), pos, mask, cache)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, n_heads: int, n_layers: int, plug: AnyPlug):
        super().__init__()
        self.tok, self.plug = nn.Embedding(vocab, d), plug
        self.blocks = nn.ModuleList(Block(d, n_heads, i, plug) for i in range(n_layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, ids: Tensor, pos: Tensor, mask: Tensor, cache: Optional[KVCache] = None) -> Tensor:
        x = self.plug.embed(self.tok(ids), pos)
        for block in self.blocks:
            x = block(x, pos, mask, cache)
        return self.head(self.ln(x))


V, D, H, N_LAYERS, B, L, PROMPT = 50, 32, 4, 2, 2, 10, 4


def cached_decode(gpt: GPT, ids: Tensor, pos: Tensor, mask: Tensor) -> Tensor:
    "Logits of a prompt of PROMPT tokens, then of one token per step, through a KVCache."
    cache = KVCache()
    out = [gpt(ids[:, :PROMPT], pos[:, :PROMPT], mask[:, :PROMPT], cache)]
    for t in range(PROMPT, ids.shape[1]):
        out.append(gpt(ids[:, t:t + 1], pos[:, t:t + 1], mask[:, t:t + 1], cache))
    return torch.cat(out, 1)


def own_model(ids: Tensor, pos: Tensor, mask: Tensor) -> None:
    "Notebook 15: every kind of encoding in a reader's own GPT, cached decoding equal to full recomputation."
    plugs = {
        'none': lambda: Plug(),
        'sinusoidal': lambda: Embeds(make_posenc('sinusoidal', D, H)),
        'learned': lambda: Embeds(make_posenc('learned', D, H, max_len=64)),
        'rope': lambda: Rotary(RotaryCache(D // H)),
        'alibi': lambda: Bias(make_posenc('alibi', D, H, causal=True)),
        't5': lambda: Bias(make_posenc('t5', D, H, causal=True)),
        'shaw': lambda: Bias(make_posenc('shaw', D, H, n_layers=N_LAYERS, causal=True)),
        'floater': lambda: FusedQKV(make_posenc('floater', D, H, n_layers=N_LAYERS, causal=True, kinds=('dec',))),
        'floater-input': lambda: Embeds(make_posenc('floater-input', D, H, causal=True)),
    }
    for name, make in plugs.items():
        torch.manual_seed(0)
        gpt = GPT(V, D, H, N_LAYERS, make()).eval()
        with torch.no_grad():
            full = gpt(ids, pos, mask)
            err = (cached_decode(gpt, ids, pos, mask) - full)[mask].abs().max().item()
        assert err < 1e-5, (name, err)
    assert {'alibi', 't5', 'shaw'} <= set(bias_encodings())
    for name in ('rope', 'alibi', 't5', 'sinusoidal'):                  # the ready plug: one line per encoding
        gpt = GPT(V, D, H, N_LAYERS, EncodingPlug(make_posenc(name, D, H, causal=True))).eval()
        with torch.no_grad():
            err = (cached_decode(gpt, ids, pos, mask) - gpt(ids, pos, mask))[mask].abs().max().item()
        assert err < 1e-5, (name, err)


def bias_api(pos: Tensor) -> None:
    "Notebook 15: `position_bias` shapes, `fused_qkv_bias`, a FLOATER trajectory."
    alibi = make_posenc('alibi', D, H, causal=True)
    assert position_bias(alibi, torch.arange(5)).shape == (1, H, 5, 5)
    assert position_bias(alibi, torch.arange(3) + 4, torch.arange(7)).shape == (1, H, 3, 7)
    assert position_bias(alibi, torch.tensor([[2], [6]]), torch.arange(7)).shape == (B, H, 1, 7)
    shaw = make_posenc('shaw', D, H, n_layers=2)
    assert position_bias(shaw, torch.arange(5), q=torch.randn(B, H, 5, D // H), layer=1).shape == (B, H, 5, 5)
    gpt_pe = make_posenc('floater', 16, 2, n_layers=2, causal=True, kinds=('dec',))
    fused = nn.Linear(16, 48)
    assert fused_qkv_bias(gpt_pe, torch.arange(4), fused.weight).shape == (1, 4, 48)
    assert isinstance(gpt_pe, FloaterPE)
    assert gpt_pe.trajectory(16).shape[0] >= 16
    assert isinstance(Site('dec', 0, H, D // H).causal, bool)
    assert alibi_slopes(H).shape == (H,)


def score_mods(pos: Tensor) -> None:
    "The FlexAttention score_mod factories, called as a user would: their results equal the dense bias."
    scores = torch.zeros(())
    slopes = alibi_slopes(H)
    mod = alibi_score_mod(slopes, pos, pos, causal=True)                # (B,L) ids, as position_bias takes
    b, h, i, j = torch.tensor(1), torch.tensor(2), torch.tensor(3), torch.tensor(1)
    dense = position_bias(make_posenc('alibi', D, H, causal=True), pos)
    assert torch.allclose(mod(scores, b, h, i, j), dense[1, 2, 3, 1])
    t5 = make_posenc('t5', D, H, causal=True)
    assert isinstance(t5, T5PosEnc)                                     # make_posenc returns a PosEnc: narrow it
    t5_mod = t5_score_mod(t5.bias.weight, t5_lut(t5.num_buckets, t5.max_distance, bidirectional=False), pos, pos,
                          t5.max_distance)
    assert torch.allclose(t5_mod(scores, b, h, i, j), position_bias(t5, pos)[1, 2, 3, 1])
    shaw = make_posenc('shaw', D, H)
    assert isinstance(shaw, ShawPosEnc)
    q = torch.randn(B, H, L, D // H)
    shaw_mod = shaw_score_mod(q @ shaw.rel_k[0].T * (D // H) ** -0.5, pos, pos, shaw.clip)
    assert torch.allclose(shaw_mod(scores, b, h, i, j), position_bias(shaw, pos, q=q)[1, 2, 3, 1], atol=1e-6)


def hf_rotary(ids: Tensor, pos: Tensor, mask: Tensor) -> None:
    "Notebook 15: Hugging Face's llama3 rotary in the reader's GPT, through `rotary_from_hf` and `apply_rotary`."
    llama3 = dict(hidden_size=D, num_attention_heads=H, head_dim=D // H, max_position_embeddings=512,
                  rope_theta=500000.0, rope_scaling=dict(rope_type='llama3', factor=8.0, low_freq_factor=1.0,
                                                         high_freq_factor=4.0, original_max_position_embeddings=32))
    cache = rotary_from_hf(llama3)
    gpt = GPT(V, D, H, N_LAYERS, Rotary(cache, style='half')).eval()
    with torch.no_grad():
        full = gpt(ids, pos, mask)
        assert torch.allclose(cached_decode(gpt, ids, pos, mask)[mask], full[mask], atol=1e-5)
    rope = make_posenc('rope', D, H, rotary=cache, style='half')       # one RoPE path: the encoding takes the cache
    q, k = torch.randn(2, B, H, L, D // H).unbind(0)
    got_q, _ = rope.transform_qk(q, k, pos[:, None], pos[:, None], Site('dec', 0, H, D // H))
    assert torch.allclose(got_q, apply_rotary(q, pos, cache, style='half'), atol=1e-6)


def hf_retrofit() -> None:
    "Notebook 17_hf: a tiny random Hugging Face Llama given ALiBi positions in one call, then one training step."
    if importlib.util.find_spec('transformers') is None: return
    from transformers import LlamaConfig, LlamaForCausalLM
    from posenc_nb.hf import use_encoding
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128)
    model = use_encoding(LlamaForCausalLM(cfg), 'alibi')
    ids = torch.randint(1, 64, (2, 8))
    attention_mask = torch.ones(2, 8, dtype=torch.long)
    attention_mask[1, :3] = 0                                          # left padding
    out = model(input_ids=ids, attention_mask=attention_mask, labels=ids)
    out.loss.backward()


def main() -> None:
    torch.manual_seed(0)
    readme_use_it()
    ids = torch.randint(1, V, (B, L))
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1, :3] = False                                                 # row 1: three padding tokens on the left
    pos = torch.tensor([0, 7])[:, None] + (mask.cumsum(1) - 1).clamp(min=0)
    own_model(ids, pos, mask)
    bias_api(pos)
    score_mods(pos)
    hf_rotary(ids, pos, mask)
    hf_retrofit()
    print('user script: every example ran')


if __name__ == '__main__':
    main()

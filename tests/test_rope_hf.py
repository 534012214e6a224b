"""`rotary_from_hf` against Hugging Face transformers (a test requirement; skipped when absent): every rope type, partial
rotary, both config layouts, config objects and dicts, the length switches of dynamic and longrope, and
`torch.compile(apply_rotary, fullgraph=True)` with (B,L) tensor positions. Run with -s to see the max abs differences."""
import pytest, torch
from posenc_nb.core import HostReads
from posenc_nb.rope import hf_rope_params, rotary_from_hf
from posenc_nb.rotary import RotaryCache, scaled_inv_freq
from posenc_nb.rotary_kernel import apply_rotary

transformers = pytest.importorskip('transformers')
from transformers import LlamaConfig, PhiConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
from transformers.models.phi.modeling_phi import PhiRotaryEmbedding

H, D, MAXPOS = 2, 64, 1024
SHORT = torch.stack([torch.arange(120), torch.arange(120) + 57])          # inside every trained length below
LONG = torch.stack([torch.arange(120), torch.arange(120) + 4000])         # beyond them: dynamic and longrope switch

def _lists(n):                     # longrope factor lists, one per rotated pair
    return dict(short_factor=[1.0 + i / (4 * n) for i in range(n)], long_factor=[1.0 + 3 * i / n for i in range(n)])

CASES = {
    'default': {}, 'linear': dict(factor=4.0), 'dynamic': dict(factor=4.0), 'dynamic-int-factor': dict(factor=3),
    'yarn': dict(factor=8.0, original_max_position_embeddings=128),
    'yarn-mscale': dict(factor=16.0, original_max_position_embeddings=64, mscale=0.707, mscale_all_dim=1.0, beta_fast=16),
    'yarn-attention-factor': dict(factor=4.0, original_max_position_embeddings=256, attention_factor=0.9),
    'yarn-no-truncate': dict(factor=4.0, original_max_position_embeddings=256, truncate=False),
    'yarn-no-factor': dict(factor=None, original_max_position_embeddings=256),
    'longrope': dict(original_max_position_embeddings=256, factor=4.0),
    'longrope-no-factor': dict(original_max_position_embeddings=256),
    'llama3': dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=256),
    'proportional': dict(partial_rotary_factor=0.25, factor=2.0),
}

def _rope_params(case, rotary=1.0):
    kind = case.split('-')[0]
    rp = dict(CASES[case], rope_type=kind, rope_theta=10000.0)
    if rotary < 1: rp['partial_rotary_factor'] = rotary
    if kind == 'longrope': rp.update(_lists(int(D * rp.get('partial_rotary_factor', 1.0)) // 2))
    return rp

def _config(case, rotary=1.0):
    return LlamaConfig(hidden_size=H * D, num_attention_heads=H, head_dim=D, max_position_embeddings=MAXPOS,
                       rope_parameters=_rope_params(case, rotary))

def _hf_rotate(module, q, pos):
    "HF's rotation of q (B,H,L,D): cos/sin from the module, applied to the first r dims, the rest passed (partial rotary)."
    cos, sin = module(q, pos)
    r = cos.shape[-1]
    return torch.cat([apply_rotary_pos_emb(q[..., :r], q[..., :r], cos, sin)[0], q[..., r:]], -1)

def _q(pos, seed=0):
    return torch.randn(pos.shape[0], H, pos.shape[1], D, generator=torch.Generator().manual_seed(seed))

def report(name, diff): print(f'\n{name}: max abs diff {diff:.2e}')

@pytest.mark.parametrize('rotary', [1.0, 0.5])
@pytest.mark.parametrize('case', list(CASES))
def test_every_rope_type(case, rotary):
    if rotary < 1 and case.split('-')[0] in ('default', 'proportional'):
        pytest.skip("Llama's default rule ignores partial_rotary_factor (see the Phi test); proportional sets its own")
    cfg = _config(case, rotary)
    cache = rotary_from_hf(cfg)
    diffs = []
    for pos in (SHORT, LONG):
        q = _q(pos)
        hf = _hf_rotate(LlamaRotaryEmbedding(cfg), q, pos)      # a fresh module per batch: HF's dynamic rule keeps state
        diffs.append((apply_rotary(q, pos, cache, style='half') - hf).abs().max().item())
    report(f'{case} (partial {rotary})', max(diffs))
    assert max(diffs) < 2e-6, diffs

@pytest.mark.parametrize('case', list(CASES))
def test_frequencies_bit_for_bit(case):
    "The frequencies and the factor on cos/sin are HF's fp32 values exactly, for the lengths each switch sees."
    cfg = _config(case)
    cache = rotary_from_hf(cfg)
    for pos in (SHORT, LONG):
        rope = LlamaRotaryEmbedding(cfg)
        rope(_q(pos), pos)                                     # dynamic and longrope update their frequencies here
        assert torch.equal(cache.pos_freqs(pos), rope.inv_freq), case
        assert cache.mscale == rope.attention_scaling, (case, cache.mscale, rope.attention_scaling)

def test_partial_default_against_phi():
    "GPT-NeoX/Phi rotate a fraction of each head with the default rule; the cache rotates the same dims."
    cfg = PhiConfig(hidden_size=H * D, num_attention_heads=H, max_position_embeddings=MAXPOS, partial_rotary_factor=0.375)
    cache = rotary_from_hf(cfg)
    assert cache.dim == int(0.375 * D) == 24
    q = _q(LONG)
    diff = (apply_rotary(q, LONG, cache, style='half') - _hf_rotate(PhiRotaryEmbedding(cfg), q, LONG)).abs().max().item()
    report('Phi partial default (0.375)', diff)
    assert diff < 2e-6

@pytest.mark.parametrize('case', ['yarn', 'longrope', 'llama3', 'dynamic', 'linear'])
def test_older_layout_and_dicts(case):
    "`rope_scaling` + `rope_theta` (older transformers, 'type' key), and the config as a dict, give the same cache."
    rp = _rope_params(case)
    old = dict(hidden_size=H * D, num_attention_heads=H, max_position_embeddings=MAXPOS, rope_theta=5e4,
               rope_scaling={('type' if k == 'rope_type' else k): v for k, v in rp.items() if k != 'rope_theta'})
    cfg = LlamaConfig(**old)                                  # HF converts the old layout itself
    assert 'rope_parameters' not in old and cfg.rope_parameters['rope_theta'] == 5e4
    ref = rotary_from_hf(cfg)
    for c in (rotary_from_hf(old), rotary_from_hf(cfg.to_dict())):
        assert torch.equal(c.inv_freq, ref.inv_freq) and c.mscale == ref.mscale and c.dim == ref.dim
    q = _q(LONG)
    diff = (apply_rotary(q, LONG, rotary_from_hf(old), style='half') - _hf_rotate(LlamaRotaryEmbedding(cfg), q, LONG)).abs().max()
    assert diff < 2e-6

def test_phi3_top_level_original_length():
    "Phi-3 keeps original_max_position_embeddings at the top of its config; it wins over the one in the rope dict, as in HF."
    d = dict(head_dim=D, max_position_embeddings=4096, original_max_position_embeddings=512,
             rope_scaling=dict(type='longrope', original_max_position_embeddings=999, **_lists(D // 2)))
    assert hf_rope_params(d)['original_max_position_embeddings'] == 512

def test_dynamic_prefill_then_decode():
    "Prefill past the trained length, then decoding steps one position at a time: each call's frequencies follow its length."
    cfg = _config('dynamic')
    cache, rope = rotary_from_hf(cfg), LlamaRotaryEmbedding(cfg)        # one HF module, used in order as in generation
    steps = [torch.arange(1500)[None]] + [torch.tensor([[1500 + i]]) for i in range(3)]
    for pos in steps:
        q = _q(pos, seed=int(pos[0, -1]))
        diff = (apply_rotary(q, pos, cache, style='half') - _hf_rotate(rope, q, pos)).abs().max().item()
        assert diff < 2e-6, (pos.shape, diff)
    # the batch decides, not the row: a short row in a long batch gets the long frequencies, as in HF
    assert not torch.equal(cache.pos_freqs(LONG), cache.pos_freqs(SHORT))

def test_float64_angles_keep_hf_frequencies():
    "angle_dtype='float64': the same frequencies, exact angles; closer to the fp64 rotation of HF's frequencies than HF is."
    cfg = _config('yarn')
    c32, c64 = rotary_from_hf(cfg), rotary_from_hf(cfg, angle_dtype='float64')
    assert torch.equal(c64.inv_freq.float(), c32.inv_freq)
    pos = torch.arange(200)[None] + 60000
    q = _q(pos)
    truth = apply_rotary(q.double(), pos, c64, style='half')
    e64 = (apply_rotary(q, pos, c64, style='half').double() - truth).abs().max()
    e_hf = (_hf_rotate(LlamaRotaryEmbedding(cfg), q, pos).double() - truth).abs().max()
    assert e64 < e_hf

def test_yarn_rule_is_hf_and_paper_is_named():
    "scaling='yarn' is HF's index ramp (bit for bit in fp32); the paper's ramp over turns is scaling='yarn-paper'."
    cfg = _config('yarn')
    hf = LlamaRotaryEmbedding(cfg).inv_freq
    assert torch.equal(scaled_inv_freq(D, 10000., 'yarn', 8.0, 128, dtype=torch.float32), hf)
    assert torch.equal(RotaryCache(D, scaling='yarn', factor=8.0, orig_len=128, angle_dtype='float32').inv_freq, hf)
    paper = scaled_inv_freq(D, 10000., 'yarn-paper', 8.0, 128, dtype=torch.float32)
    assert not torch.equal(paper, hf)

def test_length_switch_reads_nothing():
    "Dynamic and longrope pick their frequencies on the device: no value of the positions is read into Python."
    for case in ('dynamic', 'longrope'):
        cache = rotary_from_hf(_config(case))
        with HostReads() as hr: apply_rotary(_q(LONG), LONG, cache, style='half')
        assert hr.reads == [], (case, hr.reads)

@pytest.mark.parametrize('case', ['plain', 'yarn', 'dynamic', 'longrope'])
def test_compile_fullgraph(case):
    "torch.compile(apply_rotary, fullgraph=True) with (B,L) tensor positions: no graph break, equal to eager."
    cache = RotaryCache(D) if case == 'plain' else rotary_from_hf(_config(case))
    torch._dynamo.reset()
    backend = 'inductor' if case in ('plain', 'dynamic') else 'eager'     # inductor twice (the slow part), dynamo for the rest
    f = torch.compile(apply_rotary, fullgraph=True, backend=backend, dynamic=False)
    for pos in (SHORT, LONG):
        q = _q(pos)
        for kw in (dict(style='half'), dict(style='interleaved'), dict(style='half', layout='blhd')):
            x = q.transpose(1, 2).contiguous() if kw.get('layout') == 'blhd' else q
            eager = apply_rotary(x, pos, cache, **kw)
            diff = (f(x, pos, cache, **kw) - eager).abs().max().item()
            assert diff < 2e-6, (case, kw, diff)
    report(f'compiled ({backend}) vs eager, {case}', diff)
    # negative positions under compile are rotated backwards (no table is indexed): still only differences count;
    # eager keeps its one-line error
    if case == 'plain':
        qk = torch.randn(2, 1, H, 3, D).unbind(0)
        neg = torch.tensor([[-3, -2, -1]])
        score = lambda rot, p: (rot(qk[0], p, cache, style='half') * rot(qk[1], p.flip(-1), cache, style='half')).sum(-1)
        assert (score(f, neg) - score(apply_rotary, neg + 10)).abs().max() < 1e-4
        with pytest.raises(ValueError, match='>= 0'): apply_rotary(qk[0], neg, cache, style='half')

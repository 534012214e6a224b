"""The bias API as a user meets it (issue 48, frictions 5-7): score_mod factories that take `position_bias`'s position
shapes and need no private helpers, `bias_encodings()` built once, `has_hook` / `own_hooks` to ask an encoding what it
does, FLOATER's sites, a range error that names the option the user set, parameter meanings in `help()`."""
import pydoc
import pytest, torch
import posenc_nb.interop as interop
from posenc_nb.core import _REGISTRY, PosEnc, Positions, list_posencs, make_posenc
from posenc_nb.baselines import alibi_score_mod, alibi_slopes, pos_at, shaw_score_mod, t5_lut, t5_score_mod
from posenc_nb.interop import bias_encodings, position_bias, position_score_mod, fused_qkv_bias
from posenc_nb.model import ModelConfig, Seq2Seq
from posenc_nb.hf import use_encoding
from posenc_nb.rope import rotary_from_hf
from posenc_nb.rotary_kernel import apply_rotary

torch.set_num_threads(1)
B, H, D, L = 2, 4, 32, 6
POS = torch.arange(L)[None] + torch.tensor([[0], [7]])            # (B,L): row 1 continues a document at position 7


def dense(mod, n_rows=B, lq=L, lk=L):
    "A score_mod evaluated on every (b, h, i, j) at once (its index tensors broadcast), from zero scores."
    b = torch.arange(n_rows)[:, None, None, None]
    h = torch.arange(H)[None, :, None, None]
    i, j = torch.arange(lq)[None, None, :, None], torch.arange(lk)[None, None, None, :]
    return mod(torch.zeros(()), b, h, i, j).expand(n_rows, H, lq, lk)


def test_factories_take_position_bias_shapes():
    alibi = make_posenc('alibi', D, H, causal=True)
    want = position_bias(alibi, POS).expand(B, H, L, L)
    torch.testing.assert_close(dense(alibi_score_mod(alibi_slopes(H), POS, POS, causal=True)), want)
    torch.testing.assert_close(dense(alibi_score_mod(alibi_slopes(H), POS[0], POS[0]), 1),
                               position_bias(make_posenc('alibi', D, H), POS[0]))          # (L,) ids too
    t5 = make_posenc('t5', D, H, causal=True)
    lut = t5_lut(t5.num_buckets, t5.max_distance, bidirectional=False)                      # public, no private table
    mod = t5_score_mod(t5.bias.weight, lut, POS, POS, t5.max_distance)
    torch.testing.assert_close(dense(mod), position_bias(t5, POS).expand(B, H, L, L))
    shaw = make_posenc('shaw', D, H)
    q = torch.randn(B, H, L, D // H)
    scores = q @ shaw.rel_k[0].T * (D // H) ** -0.5
    torch.testing.assert_close(dense(shaw_score_mod(scores, POS, POS, shaw.clip)), position_bias(shaw, POS, q=q))


def test_position_score_mod_equals_position_bias_for_every_bias_encoding():
    q = torch.randn(B, H, 4, D // H)
    for name in bias_encodings():
        pe = make_posenc(name, D, H, n_layers=2, causal=True)
        streams = {s: POS for s in pe.reads_streams}
        kw = dict(q=q, layer=1, q_streams={k: v[:, 2:] for k, v in streams.items()} or None, k_streams=streams or None)
        want = position_bias(pe, POS[:, 2:], POS, **kw)
        got = dense(position_score_mod(pe, POS[:, 2:], POS, **kw), lq=4)
        torch.testing.assert_close(got, want.expand_as(got), msg=name)
    with pytest.raises(ValueError, match='adds no attention-logit bias'):
        position_score_mod(make_posenc('rope', D, H), POS)


def test_pos_at_refuses_other_shapes():
    with pytest.raises(ValueError, match=r'\(L,\), \(B,L\) or head positions'):
        pos_at(torch.zeros(1, 1, 1, 3, dtype=torch.long))


def test_bias_encodings_built_once(monkeypatch):
    built = []
    real = interop.make_posenc
    monkeypatch.setattr(interop, 'make_posenc', lambda *a, **k: built.append(a[0]) or real(*a, **k))
    interop._BIAS_NAMES.clear()
    first = bias_encodings()
    n = len(built)
    assert n == len(list_posencs()) and bias_encodings() == first and len(built) == n     # second call: no builds

    class Extra(PosEnc):
        def logit_bias(self, q, q_pos, k_pos, site): return None
    _REGISTRY['test-extra-bias'] = Extra
    try: assert 'test-extra-bias' in bias_encodings()                                    # a new registration is seen
    finally: _REGISTRY.pop('test-extra-bias')
    assert 'test-extra-bias' not in bias_encodings()


def test_has_hook_and_own_hooks():
    rope, alibi, sin = make_posenc('rope', D, H), make_posenc('alibi', D, H), make_posenc('sinusoidal', D, H)
    floater = make_posenc('floater', D, H, causal=True, kinds=('dec',))
    assert rope.has_hook('transform_qk') and not rope.has_hook('logit_bias') and not rope.has_hook('embed')
    assert alibi.has_hook('logit_bias') and 'logit_bias' in alibi.own_hooks and not alibi.has_hook('transform_qk')
    assert sin.has_hook('embed') and not sin.has_hook('qkv_bias') and not sin.own_hooks
    assert floater.has_hook('qkv_bias') and fused_qkv_bias(floater, POS, torch.randn(3 * D, D)).shape == (B, L, 3 * D)
    for pe in (rope, alibi, sin, floater):     # own_hooks is has_hook over hooks 3-5 and decoding_step
        assert pe.own_hooks == {h for h in ('head_positions', 'transform_qk', 'logit_bias', 'logit_bias_rows',
                                            'decoding_step') if pe.has_hook(h)}
    with pytest.raises(ValueError, match="unknown hook 'bias'; use one of"):
        rope.has_hook('bias')


def test_floater_decoder_only_builds_no_cross_sites():
    both = make_posenc('floater', D, H, n_layers=2, causal=True)                # a Seq2Seq decoder: self and cross
    dec = make_posenc('floater', D, H, n_layers=2, causal=True, kinds=('dec',))  # a decoder-only model
    assert dec.sites == ('dec',) and both.sites == ('dec', 'cross')
    assert dec.p0.shape[0] * 2 == both.p0.shape[0] == 2 * 3 * 2


def test_learned_range_error_names_the_option_used():
    pe = make_posenc('learned', D, H, max_len=4)
    with pytest.raises(ValueError) as e:
        pe.check_positions(Positions.arange(1, 6))
    assert 'build it with max_len > 5' in str(e.value) and 'ModelConfig' not in str(e.value)
    model = Seq2Seq(ModelConfig(src_vocab=20, tgt_vocab=20, d_model=D, n_heads=H, n_enc=1, n_dec=1, d_ff=32,
                                enc_pe='learned', max_len=4))
    with pytest.raises(ValueError, match='build it with ModelConfig.max_len > 5'):
        model.encode(torch.ones(1, 6, dtype=torch.long), Positions.arange(1, 6))


@pytest.mark.parametrize('fn, words', [
    (position_bias, ['q_pos', '(L,) or (B,L)', 'layer', 'causal']),
    (position_score_mod, ['q_pos', '(L,) or (B,L)', 'layer']),
    (t5_score_mod, ['weight', 'lut', 't5_lut', 'max_distance', '(B,L)']),
    (alibi_score_mod, ['slopes', 'alibi_slopes', '(B,L)', 'causal']),
    (shaw_score_mod, ['scores', '(B,H,Lq,2*clip+1)', 'clip']),
    (t5_lut, ['num_buckets', 'bidirectional', 'device']),
    (Positions.from_mask, ['mask', 'offset', 'streams']),
    (fused_qkv_bias, ['pe', 'pos', '(L,) or (B,L)', 'weight', 'layer', 'kind']),
    (rotary_from_hf, ['config', 'layer_type', 'angle_dtype', 'max_positions']),
    (apply_rotary, ['pos', 'style', 'key', 'rot_dim', '(B,L)']),
    (use_encoding, ['model', 'name', 'options', 'list_posencs']),
])
def test_help_shows_parameter_meanings(fn, words):
    text = pydoc.render_doc(fn, renderer=pydoc.plaintext)
    missing = [w for w in words if w not in (fn.__doc__ or '')]
    assert not missing, f"{fn.__name__}'s docstring does not explain {missing}"
    assert fn.__doc__.splitlines()[0].strip() in text

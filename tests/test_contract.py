"""The position-encoding contract of `posenc_nb.core`, checked for every registered encoding (`list_posencs()`).

Every check fails (never skips) when an encoding breaks it: building with default options, incremental (cached) decoding
equal to full decoding, padding invariance on the left and on the right, a state-dict round trip, checkpoint averaging,
moving between dtypes and devices, and hook 5 by rows equal to the dense bias (values and gradients). The second half
shows the checks failing on deliberately broken encodings, and an encoding defined and registered only in this file
being found by `list_posencs()` and passing them with no edit elsewhere.
Encodings that read extra position streams declare their names (`PosEnc.reads_streams`) and get a random order of the
source under each of those names from the test's own batch, so no encoding is special-cased by name. The last tests define a
stream provider and a stream-reading encoding in this file and show them found and used by collate, translate and train.
"""
import copy, dataclasses, io, os
import pytest, torch, torch.nn as nn
import posenc_nb.core as core
import posenc_nb.attention as attention_mod
from posenc_nb.core import SITE_KINDS, Positions, PosEnc, list_posencs, make_posenc, register_posenc
import posenc_nb.streams as streams
from posenc_nb.data import word_tokenizer
from posenc_nb.batches import collate
from posenc_nb.streams import StreamProvider, list_stream_providers, make_stream_provider, register_stream_provider
from posenc_nb.decode import translate
from posenc_nb.baselines import sinusoidal_table
from posenc_nb.model import ModelConfig, Seq2Seq
from posenc_nb.engine import CKPT_FORMAT
from posenc_nb.train import average_checkpoints, config_from_name, load_stream_provider, train

torch.set_num_threads(1)                     # tiny tensors: threads only add overhead
CFG = dict(src_vocab=23, tgt_vocab=23, d_model=16, n_heads=2, n_enc=2, n_dec=2, d_ff=32, dropout=0.0, max_len=64)
B, S, T = 2, 6, 5
ENCODINGS = list_posencs()


def make_batch(seed: int = 0):
    "Source and target ids (no pad id 0) and another order of the source (a random permutation of every source row)."
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.randint(3, 23, (B, S), generator=g), torch.randint(3, 23, (B, T), generator=g)
    return src, tgt, torch.stack([torch.randperm(S, generator=g) for _ in range(B)])


def build(name: str, seed: int = 0) -> Seq2Seq:
    "A tiny `Seq2Seq` whose encoder and decoder use `name` with its default options; a failure is an AssertionError."
    torch.manual_seed(seed)
    try: return Seq2Seq(ModelConfig(enc_pe=name, **CFG)).eval()
    except Exception as e: raise AssertionError(f"encoding {name!r} does not build with default options: {e}") from e


def streams_for(model, order, mask):
    "The extra streams the encoder's encoding declares, each filled with `order` (0 on padding)."
    return {n: order.masked_fill(~mask, 0) for n in model.enc_pe.reads_streams}


def logits(model, src, tgt, order=None, src_mask=None, tgt_mask=None):
    "Teacher-forced logits with positions counted over real tokens; `order` fills the source streams the encoding reads."
    dev = next(model.parameters()).device
    sm = torch.ones_like(src, dtype=torch.bool) if src_mask is None else src_mask
    tm = torch.ones_like(tgt, dtype=torch.bool) if tgt_mask is None else tgt_mask
    sp = Positions.from_mask(sm, streams=None if order is None else streams_for(model, order, sm))
    with torch.no_grad(): return model(src.to(dev), sp.to(dev), tgt.to(dev), Positions.from_mask(tm).to(dev))


def close(a, b, tol: float = 1e-5): torch.testing.assert_close(a, b, atol=tol, rtol=tol)


# ---- the checks (plain functions, so that the broken encodings below run exactly the same code)

def check_build(name: str):
    "Builds with defaults, declares where it acts, accepts positions past max_len unless it declares a limit."
    model = build(name)                                                              # in an encoder and a decoder
    try: pe = make_posenc(name, CFG['d_model'], CFG['n_heads'])                       # and with make_posenc's defaults
    except Exception as e: raise AssertionError(f"encoding {name!r} does not build with default options: {e}") from e
    assert set(pe.sites) <= set(SITE_KINDS), f"{name}: sites {pe.sites} must be attention kinds from {SITE_KINDS}"
    assert isinstance(pe.bounded, bool), f"{name}: bounded must be a bool"
    bufs = {n for n, _ in pe.named_buffers()}
    assert set(pe.derived_buffers) <= bufs, f"{name}: derived_buffers {pe.derived_buffers} are not buffers of it"
    far = Positions.arange(B, S, offset=CFG['max_len'] + 5)
    if model.enc_pe.bounded:
        with pytest.raises(ValueError, match='max_len'): model.enc_pe.check_positions(far)
    else:
        model.enc_pe.check_positions(far)
        src, _, _ = make_batch()
        with torch.no_grad(): assert torch.isfinite(model.encode(src, far)).all(), f"{name}: not finite past max_len"
    return model


def check_incremental(name: str):
    "Feeding the target one token at a time through the cache gives the full teacher-forced logits."
    model, (src, tgt, order) = build(name), make_batch()
    mask = torch.ones(B, S, dtype=torch.bool); mask[0, :2] = False                      # row 0 left-padded
    for sp in (Positions.arange(B, S), Positions.from_mask(mask, streams=streams_for(model, order, mask))):
        with torch.no_grad():
            mem = model.encode(src, sp)
            full = model.decode(tgt, Positions.arange(B, T), mem, sp)
            cache = model.new_cache()
            steps = [model.decode(tgt[:, t:t + 1], Positions.arange(B, 1, offset=t), mem, sp, cache=cache) for t in range(T)]
        close(torch.cat(steps, 1), full, 1e-4)


def check_padding(name: str, side: str):
    "Each row's logits on its real tokens equal those of the row alone, whatever the padding of its batch on `side`."
    model, (src, tgt, order) = build(name), make_batch()
    slen, tlen, width = (S, S - 2), (T, T - 1), (S + 2, T + 2)                       # rows of different real lengths
    def pad(rows, lens, w):
        ids, mask = torch.zeros(B, w, dtype=torch.long), torch.zeros(B, w, dtype=torch.bool)
        for i, (r, n) in enumerate(zip(rows, lens)):
            cols = slice(w - n, w) if side == 'left' else slice(0, n)
            ids[i, cols], mask[i, cols] = r[:n], True
        return ids, mask
    ps, sm = pad(src, slen, width[0]); pt, tm = pad(tgt, tlen, width[1]); px, _ = pad(order, slen, width[0])
    got = logits(model, ps, pt, px, sm, tm)
    for i in range(B):
        alone = logits(model, src[i:i + 1, :slen[i]], tgt[i:i + 1, :tlen[i]], order[i:i + 1, :slen[i]])
        close(got[i][tm[i]], alone[0], 1e-4)


def check_state_dict(name: str):
    "Weights saved and loaded (strictly, through bytes) into a differently seeded model give the same outputs."
    model, (src, tgt, order) = build(name), make_batch()
    ref = logits(model, src, tgt, order)
    buf = io.BytesIO(); torch.save(model.state_dict(), buf); buf.seek(0)
    other = build(name, seed=1)
    logits(other, src, tgt, order)                                                      # fills any cache of the old weights
    other.load_state_dict(torch.load(buf, weights_only=True))
    close(logits(other, src, tgt, order), ref, 1e-6)


def check_average(name: str, tmp):
    "`train.average_checkpoints` of identical checkpoints reproduces the outputs (derived buffers are reset, not averaged)."
    model, (src, tgt, order) = build(name), make_batch()
    ref = logits(model, src, tgt, order)
    ck = dict(format=CKPT_FORMAT, step=0, config={}, tokenizer=None, model_config=dataclasses.asdict(model.cfg), model=model.state_dict())
    paths = [tmp / f'{name}-{i}.pt' for i in range(3)]
    for p in paths: torch.save(ck, p)
    other = build(name, seed=2)
    logits(other, src, tgt, order)
    other.load_state_dict(average_checkpoints(paths)['model'])
    close(logits(other, src, tgt, order), ref, 1e-5)


def check_devices(name: str):
    "float64 and back, `meta`, and CUDA when there is one: the encoding moves with the model and stays correct."
    model, (src, tgt, order) = build(name), make_batch()
    ref = logits(model, src, tgt, order)
    m64 = copy.deepcopy(model).double()
    out = logits(m64, src, tgt, order)
    assert out.dtype == torch.float64, f"{name}: float64 model gave {out.dtype} logits"
    close(out.float(), ref, 1e-4)
    close(logits(m64.float(), src, tgt, order), ref, 1e-5)
    meta = copy.deepcopy(model).to('meta')
    assert all(t.is_meta for t in list(meta.parameters()) + list(meta.buffers())), f"{name}: a tensor stayed off the meta device"
    if torch.cuda.is_available():
        close(logits(copy.deepcopy(model).cuda(), src, tgt, order).cpu(), ref, 1e-4)


def check_bias_rows(name: str):
    "Hook 5 by rows (`logit_bias_rows`, where given) gives the dense bias's logits and gradients, padded, in training."
    model, (src, tgt, order) = build(name), make_batch()
    with torch.no_grad():
        for t in model.parameters(): t.add_(torch.randn_like(t) * 0.3)           # a trained-looking model: biases not 0
    sm = torch.ones(B, S, dtype=torch.bool); sm[0, :2] = False
    tm = torch.ones(B, T, dtype=torch.bool); tm[1, :1] = False
    sp = Positions.from_mask(sm, streams=streams_for(model, order, sm))
    def run():
        model.zero_grad(set_to_none=True)
        out = model(src, sp, tgt, Positions.from_mask(tm))
        (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
        return [out.detach()] + [t.grad for t in model.parameters() if t.grad is not None]
    rows = run()
    with attention_mod.dense_logit_bias(): dense = run()
    assert len(rows) == len(dense), f"{name}: the row path and the dense path give gradients to different parameters"
    for a, b in zip(rows, dense): close(a, b, 1e-4)


CHECKS = {'build': check_build, 'incremental': check_incremental, 'pad-left': lambda n: check_padding(n, 'left'),
          'pad-right': lambda n: check_padding(n, 'right'), 'state_dict': check_state_dict, 'devices': check_devices,
          'bias-rows': check_bias_rows}


def run_all(name: str, tmp):
    for check in CHECKS.values(): check(name)
    check_average(name, tmp)


# ---- every registered encoding

def test_registry_lists_every_encoding():
    assert len(ENCODINGS) >= 12, ENCODINGS
    assert {'none', 'sinusoidal', 'learned', 'shaw', 't5', 'alibi', 'rope', 'floater', 'xl-input'} <= set(ENCODINGS)


@pytest.mark.parametrize('check', list(CHECKS))
@pytest.mark.parametrize('name', ENCODINGS)
def test_contract(name, check): CHECKS[check](name)


@pytest.mark.parametrize('name', ENCODINGS)
def test_checkpoint_average(name, tmp_path): check_average(name, tmp_path)


# ---- an encoding defined here, and broken ones: registered for one test only (the CLI tests compare the list)

@pytest.fixture
def register(monkeypatch):
    "Register encodings with the ordinary decorator into a copy of the registry that is dropped after the test."
    list_posencs()                                                  # discover the package's own first
    monkeypatch.setattr(core, '_REGISTRY', dict(core._REGISTRY))
    return lambda name, cls: register_posenc(name)(cls)


class ToyOffsetPosEnc(PosEnc):
    "Defined only in this file: a learned slope per head times the clipped offset j-i, added to the logits."
    def __init__(self, d_model, n_heads, n_layers=1, max_len=None, causal=False, clip: int = 4):
        super().__init__(d_model, n_heads, n_layers, max_len, causal)
        self.clip, self.slope = clip, nn.Parameter(torch.randn(n_heads) * 0.5)

    def logit_bias(self, q, q_pos, k_pos, site):
        rel = (k_pos[..., None, :] - q_pos[..., :, None]).clamp(-self.clip, self.clip)
        return rel.to(q.dtype) * self.slope.to(q.dtype)[:, None, None]


def test_new_encoding_is_found_and_passes(register, tmp_path):
    assert 'toy-offset' not in list_posencs()
    register('toy-offset', ToyOffsetPosEnc)
    assert 'toy-offset' in list_posencs()
    assert isinstance(make_posenc('toy-offset', 16, 2), ToyOffsetPosEnc)
    run_all('toy-offset', tmp_path)


class ColumnCodes(ToyOffsetPosEnc):
    "Broken: sinusoidal codes of the column index of the current chunk (`torch.arange(L)`) instead of the positions."
    def embed(self, x, p): return x + sinusoidal_table(torch.arange(x.shape[1], device=x.device), x.shape[-1]).to(x.dtype)


class UnsavedState(ToyOffsetPosEnc):
    "Broken: its slopes are a plain tensor attribute, outside the state dict."
    def __init__(self, d_model, n_heads, n_layers=1, max_len=None, causal=False, clip: int = 4):
        PosEnc.__init__(self, d_model, n_heads, n_layers, max_len, causal)
        self.clip, self.slope = clip, torch.randn(n_heads) * 0.5


class NeedsOption(ToyOffsetPosEnc):
    "Broken: cannot be built without an option nobody can guess."
    def __init__(self, d_model, n_heads, n_layers=1, max_len=None, causal=False, table=None):
        if table is None: raise ValueError("pass table=...")
        super().__init__(d_model, n_heads, n_layers, max_len, causal)


class RowsDisagree(ToyOffsetPosEnc):
    "Broken: its bias by rows forgets the clip that its dense `logit_bias` applies."
    def logit_bias_rows(self, q, q_pos, k_pos, site):
        def rows(qr, s, e, k0=0, k1=None):
            rel = k_pos[..., None, k0:k1] - q_pos[..., s:e, None]
            return rel.to(qr.dtype) * self.slope.to(qr.dtype)[:, None, None]
        return core.BiasRows(rows, (self.slope,))


def test_checks_fail_on_broken_encodings(register):
    broken = (('broken-columns', ColumnCodes), ('broken-unsaved', UnsavedState), ('broken-options', NeedsOption),
              ('broken-rows', RowsDisagree))
    for name, cls in broken:
        register(name, cls)
    for check in ('pad-left', 'incremental'):
        with pytest.raises(AssertionError): CHECKS[check]('broken-columns')
    CHECKS['pad-right']('broken-columns')           # right padding keeps the columns of real tokens: only left padding shows it
    with pytest.raises(AssertionError): check_state_dict('broken-unsaved')
    with pytest.raises(AssertionError, match='does not build'): check_build('broken-options')
    with pytest.raises(AssertionError): check_bias_rows('broken-rows')


def test_third_party_entry_point(tmp_path):
    "Another package adds an encoding through the `posenc_nb.encodings` entry-point group, with no edit of this package."
    import subprocess, sys, textwrap
    from pathlib import Path
    (tmp_path / 'plug_enc.py').write_text(textwrap.dedent('''
        from posenc_nb.core import PosEnc
        class PlugPosEnc(PosEnc):
            "A third-party encoding: hooks all default."
    '''))
    info = tmp_path / 'plug_enc-0.1.dist-info'; info.mkdir()
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: plug-enc\nVersion: 0.1\n')
    (info / 'entry_points.txt').write_text('[posenc_nb.encodings]\nplug = plug_enc:PlugPosEnc\n')
    code = ("from posenc_nb.core import list_posencs, make_posenc; names = list_posencs(); "
            "assert 'plug' in names and 'sinusoidal' in names, names; print(type(make_posenc('plug', 16, 2)).__name__)")
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                       env={**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [str(tmp_path), str(root), os.environ.get('PYTHONPATH')]))})   # keep the caller's path (packages installed with --target)
    assert r.returncode == 0 and r.stdout.strip() == 'PlugPosEnc', r.stderr[-2000:]


# ---- a stream provider and an encoding that reads its stream, both defined only here

class ReverseProvider(StreamProvider):
    "Defined only in this file: the stream 'rev' counts every source sentence's tokens backwards."
    names = ('rev',)
    def fit(self, src, tgt, **options): self.n_fit = len(src); return self
    def streams(self, src, tokenizer): return {'rev': [list(range(len(tokenizer.encode(s))))[::-1] for s in src]}
    def state_dict(self): return {'n_fit': self.n_fit}
    def load_state_dict(self, state): self.n_fit = state['n_fit']


class RevCodes(PosEnc):
    "Defined only in this file: sinusoidal codes of the 'rev' stream, of the absolute positions without one."
    reads_streams = ('rev',)
    def embed(self, x, p): return x + sinusoidal_table(p.streams.get('rev', p.pos), x.shape[-1]).to(x.dtype)


@pytest.fixture
def providers(monkeypatch):
    "Register stream providers with the ordinary decorator into a copy of the registry that is dropped after the test."
    list_stream_providers()
    monkeypatch.setattr(streams, 'STREAM_PROVIDERS', dict(streams.STREAM_PROVIDERS))
    return lambda name, cls: register_stream_provider(name)(cls)


def test_new_stream_provider_is_found_and_used(register, providers, tmp_path):
    "collate, translate and train use a provider and an encoding defined here, through their names only; nothing in the package changes."
    assert 'test-reverse' not in list_stream_providers()
    providers('test-reverse', ReverseProvider); register('test-rev', RevCodes)
    assert 'test-reverse' in list_stream_providers()
    run_all('test-rev', tmp_path)                                     # the encoding passes the contract with its stream
    tok = word_tokenizer(['a', 'b', 'c'])
    sents = ['a b c', 'c a', 'b']
    st = make_stream_provider('test-reverse').fit(sents, sents).streams(sents, tok)
    b = collate([(tok.encode(s), []) for s in sents], streams=st)
    assert b.src_p.streams['rev'].tolist() == [[2, 1, 0, 3], [1, 0, 2, 0], [0, 1, 0, 0]]     # EOS continues, padding 0
    torch.manual_seed(0)
    model = Seq2Seq(ModelConfig(**{**CFG, 'src_vocab': tok.vocab_size, 'tgt_vocab': tok.vocab_size, 'enc_pe': 'test-rev'})).eval()
    seen = []
    encode = model.encode
    model.encode = lambda src, sp: (seen.append(sp.streams['rev'].tolist()), encode(src, sp))[1]
    assert len(translate(model, tok, sents, beam=2, max_len=3, streams=st)) == 3
    got = {tuple(r[:len(s.split()) + 1]) for rows in seen for r, s in zip(rows, sorted(sents, key=lambda s: -len(s.split())))}
    assert got == {(2, 1, 0, 3), (1, 0, 2), (0, 1)}, seen            # each sentence's stream reached the encoder
    with pytest.raises(ValueError, match='one per sentence'): translate(model, tok, sents, streams={'rev': st['rev'][:2]})
    cfg = config_from_name('synthetic-tiny', enc_pe='test-rev', streams='test-reverse', max_steps=2, eval_every=2, ckpt_every=2,
                           log_every=1, eval_bleu_sents=0, test_max_sents=4, beam=1, data_options={'n': 200})
    res = train(cfg, tmp_path / 'run', progress=False)
    assert res['step'] == 2
    back = load_stream_provider(tmp_path / 'run')                     # the run folder's JSON rebuilds it for new input
    assert isinstance(back, ReverseProvider) and back.n_fit > 0 and back.streams(['a b'], tok) == {'rev': [[1, 0]]}

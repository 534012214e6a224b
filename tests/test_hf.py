"""`posenc_nb.hf.use_encoding`: every registered encoding in tiny random Llama, Qwen2, Mistral and Phi models built here
(no download): left padding exact, cached generation equal to recomputation, a few training steps; the support matrix
over every causal-LM architecture of the installed transformers (exact or refused in one line, the model unchanged);
calls it refuses; state that belongs to its model (deepcopy, a shared config); save and reload."""
import copy, json, os
from pathlib import Path
import pytest, torch
from posenc_nb.core import encoding_streams, list_posencs
from posenc_nb.utils import results_dir

transformers = pytest.importorskip('transformers')
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, PhiConfig,  # noqa: E402
                          PhiForCausalLM, Qwen2Config, Qwen2ForCausalLM)
from posenc_nb.hf import ATTN_NAME, Refusal, encoding_of, load_encoded, use_encoding  # noqa: E402
from posenc_nb.hf_matrix import causal_lm_types, support_cell, tiny_causal_lm  # noqa: E402

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128)
FAMILIES = {
    'llama': lambda: LlamaForCausalLM(LlamaConfig(**TINY, num_key_value_heads=2)),
    'qwen2': lambda: Qwen2ForCausalLM(Qwen2Config(**TINY, num_key_value_heads=2)),
    'mistral': lambda: MistralForCausalLM(MistralConfig(**TINY, num_key_value_heads=1, sliding_window=64)),
    'phi': lambda: PhiForCausalLM(PhiConfig(**TINY, partial_rotary_factor=0.5)),
}
HF_NAMES = [n for n in list_posencs() if not encoding_streams(n)]      # the xl-* ones need a stream HF cannot give
G = torch.Generator().manual_seed(0)
IDS = torch.randint(3, 61, (2, 9), generator=G)
MASK = torch.ones(2, 9, dtype=torch.long)
MASK[1, :3] = 0


def tiny(family, seed=0):
    torch.manual_seed(seed)
    return FAMILIES[family]().eval()


def logits(model, **kw):
    with torch.no_grad(): return model(IDS, attention_mask=MASK, **kw).logits


@pytest.mark.parametrize('family', FAMILIES)
def test_rope_keeps_the_model(family):
    "'rope' without options is the model's own rotary: the same logits, padded rows included."
    before, after = logits(tiny(family)), logits(use_encoding(tiny(family), 'rope'))
    torch.testing.assert_close(after[MASK.bool()], before[MASK.bool()], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('name', HF_NAMES)
@pytest.mark.parametrize('family', FAMILIES)
def test_every_encoding(family, name):
    model = use_encoding(tiny(family), name)
    gen = lambda cache: model.generate(IDS, attention_mask=MASK, max_new_tokens=4, do_sample=False, use_cache=cache,
                                       output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    with torch.no_grad():
        padded, alone = model(IDS, attention_mask=MASK).logits[1, 3:], model(IDS[1:, 3:]).logits[0]
        torch.testing.assert_close(padded, alone, rtol=1e-5, atol=1e-5)          # left padding: positions from the mask
        cached, full = gen(True), gen(False)
    assert torch.equal(cached.sequences, full.sequences)
    for a, b in zip(cached.logits, full.logits): torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # a few training steps: the loss is finite and falls, and the encoding's own parameters get gradients
    model.train()
    opt, x, losses = torch.optim.Adam(model.parameters(), lr=1e-2), torch.randint(3, 61, (4, 12), generator=G), []
    for _ in range(4):
        loss = model(x, attention_mask=torch.ones_like(x), labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses
    own = [p for p in model.posenc.parameters() if p.requires_grad]
    assert all(p.grad is not None for p in own), name


def test_options_and_refusals():
    model = use_encoding(tiny('llama'), 'rope', scaling='yarn', factor=4., orig_len=32)
    assert encoding_of(model).cache.scaling == 'yarn'
    with pytest.raises(ValueError, match='already has'): use_encoding(model, 'alibi')
    with pytest.raises(ValueError, match='unknown position encoding'): use_encoding(tiny('llama'), 'nope')
    with pytest.raises(ValueError, match='has no posenc_nb encoding'): encoding_of(tiny('llama'))
    for name in list_posencs():
        if encoding_streams(name):
            with pytest.raises(Refusal, match=f"LlamaForCausalLM the encoding '{name}' exactly: it reads the position"):
                use_encoding(tiny('llama'), name)


# The support matrix: every model type with a causal-LM class in the installed transformers.
RECORD = json.loads((results_dir(Path(__file__).parent) / 'hf' / 'support_matrix.json').read_text())
RECORDED = {r['type']: r for r in RECORD['rows']} if RECORD['transformers_version'] == transformers.__version__ else {}


# the default run: the architectures a practitioner reaches for first, those once silently wrong among them (Bloom,
# Falcon, GPT-J, Cohere, SmolLM3, Gemma 2, GPT-2, OPT); POSENC_SLOW=1 (make test-slow): every causal-LM type
FIRST_TYPES = ('llama', 'qwen2', 'mistral', 'phi', 'qwen3', 'gemma', 'olmo2', 'starcoder2', 'stablelm', 'granite',
               'mixtral', 'cohere', 'gptj', 'smollm3', 'gemma2', 'opt', 'gemma3_text', 'gemma3', 'gpt2', 'phi3', 'bloom',
               'falcon')
MATRIX_TYPES = sorted(causal_lm_types()) if os.environ.get('POSENC_SLOW') else \
    sorted(t for t in causal_lm_types() if t in FIRST_TYPES)


def test_the_default_matrix_covers_the_first_types():
    assert set(FIRST_TYPES) <= set(causal_lm_types()) and set(FIRST_TYPES) <= set(MATRIX_TYPES)


@pytest.mark.parametrize('model_type', MATRIX_TYPES)
def test_support_matrix(model_type):
    """Every encoding on a tiny model of this type is exact (left padding, cache, own rotary) or refused in one line;
    the row is the committed record's (tools/hf_matrix.py) where the installed transformers is the record's version."""
    try: tiny_causal_lm(model_type)
    except ValueError as e:
        assert 'skipped' in RECORDED.get(model_type, {'skipped': ''}), f'{model_type} was in the matrix: {e}'
        pytest.skip(f'{model_type}: {e}')
    row = {}
    for name in list_posencs():
        verdict, why = row[name] = support_cell(model_type, name)
        assert verdict in ('exact', 'refused'), (model_type, name, why)
        assert (verdict == 'exact') == (why == '') and '\n' not in why, (model_type, name, why)
    if model_type in RECORDED:
        recorded = RECORDED[model_type]['cells']
        assert {n: list(v) for n, v in row.items() if n in recorded} == recorded


# (model type, encoding) -> the verdict, and a word of the reason where refused: the silent cases found before
KNOWN = {('bloom', 'alibi'): 'does not dispatch', ('falcon', 'rope'): 'does not dispatch',
         ('gpt2', 'learned'): 'exact', ('opt', 'sinusoidal'): 'exact', ('gptj', 'rope'): 'exact',
         ('cohere', 'rope'): 'exact', ('smollm3', 'rope'): 'exact', ('gemma2', 'rope'): 'exact',
         ('gemma2', 'alibi'): 'exact', ('llama', 'xl-rope'): 'position streams', ('gpt2', 'floater'): 'q_proj'}


@pytest.mark.parametrize('cell', KNOWN)
def test_known_cells(cell):
    verdict, why = support_cell(*cell)
    assert verdict == 'exact' if KNOWN[cell] == 'exact' else (verdict == 'refused' and KNOWN[cell] in why), why


def test_refused_model_is_unchanged():
    "A refusal leaves the model as it was: no hooks, no `posenc`, the same attention implementation and logits."
    model = tiny_causal_lm('bloom')
    ids = torch.randint(3, 61, (1, 7), generator=G)
    impl, before = model.config._attn_implementation, model(ids).logits
    with pytest.raises(Refusal, match='BloomForCausalLM'): use_encoding(model, 'alibi')
    assert not hasattr(model, 'posenc') and model.config._attn_implementation == impl
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    torch.testing.assert_close(model(ids).logits, before, rtol=0, atol=0)


def test_every_layer_calls_the_package_attention():
    "After the retrofit a forward goes through `posenc_attention` once in every attention layer."
    model = use_encoding(tiny('qwen2'), 't5')
    state = model.model.layers[0].self_attn.__dict__['_posenc_state']
    state.calls = []
    logits(model)
    assert sorted(c[0] for c in state.calls) == list(range(model.config.num_hidden_layers))


@pytest.mark.parametrize('name', ['sinusoidal', 'learned', 'floater-input'])
def test_inputs_embeds(name):
    "Hook 1 is added to `inputs_embeds` as to the token embeddings."
    model = use_encoding(tiny('llama'), name)
    with torch.no_grad():
        by_embeds = model(inputs_embeds=model.get_input_embeddings()(IDS), attention_mask=MASK).logits
    torch.testing.assert_close(by_embeds, logits(model), rtol=1e-6, atol=1e-6)


def test_position_ids_and_refused_calls():
    model = use_encoding(tiny('llama'), 'learned')
    shifted = torch.arange(5, 14)[None].expand(2, -1)
    with torch.no_grad(): moved = model(IDS, position_ids=shifted).logits
    state = model.model.layers[0].self_attn.__dict__['_posenc_state']
    assert torch.equal(state.pos, shifted)                   # the caller's positions are the ones used
    assert not torch.allclose(moved, model(IDS).logits)
    with torch.no_grad(): out = model(IDS, use_cache=True)
    with pytest.raises(ValueError, match='cannot continue a cache'):
        model(IDS[:, :1], past_key_values=out.past_key_values, position_ids=torch.full((2, 1), 40))
    with pytest.raises(ValueError, match='output_attentions'): model(IDS, output_attentions=True)
    model.set_attn_implementation('sdpa')
    with pytest.raises(ValueError, match="implementation is now 'sdpa'"): model(IDS)
    model.set_attn_implementation(ATTN_NAME)
    assert model(IDS).logits.shape == (2, 9, 61)


def test_shared_config_and_deepcopy():
    "A model built from the same config stays native; a deep copy reads its own positions and its own encoding."
    config = LlamaConfig(**TINY, num_key_value_heads=2)
    torch.manual_seed(0)
    a, b = LlamaForCausalLM(config).eval(), LlamaForCausalLM(config).eval()
    before = logits(b)
    use_encoding(a, 'learned')
    torch.testing.assert_close(logits(b), before, rtol=0, atol=0)
    assert config._attn_implementation != ATTN_NAME
    for name in ('learned', 'floater', 't5'):
        model = use_encoding(tiny('llama'), name)
        twin = copy.deepcopy(model)
        assert encoding_of(twin) is not encoding_of(model)
        with torch.no_grad():
            twin(IDS[:, :4])                                  # another length through the copy first
            torch.testing.assert_close(logits(twin), logits(model), rtol=0, atol=0)
            for p in encoding_of(twin).parameters(): p.add_(0.5)
        assert not torch.allclose(logits(twin), logits(model)), name   # the copy's encoding, not the original's


@pytest.mark.parametrize('name', HF_NAMES)
def test_save_and_reload(tmp_path, name):
    "save_pretrained records the encoding in config.json; load_encoded gives back the same model, its weights too."
    model = use_encoding(tiny('llama'), name)
    with torch.no_grad():
        for p in encoding_of(model).parameters(): p.add_(0.1)      # trained-like weights, not the initial ones
    model.save_pretrained(tmp_path)
    back = load_encoded(tmp_path).eval()
    assert back.config.posenc == dict(name=name, options={})
    torch.testing.assert_close(logits(back)[MASK.bool()], logits(model)[MASK.bool()], rtol=1e-6, atol=1e-6)
    native = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert not hasattr(native, 'posenc')                              # from_pretrained alone: the native model
    with pytest.raises(ValueError, match='no posenc_nb encoding'):
        tiny('llama').save_pretrained(tmp_path / 'plain') or load_encoded(tmp_path / 'plain')


def test_layer_type_rope():
    "A config with one rope setting per layer type: 'rope' keeps each layer's own; layer_type= picks one for all."
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    config = Gemma3TextConfig(**TINY, num_key_value_heads=2, head_dim=8, sliding_window=4,
                              layer_types=['sliding_attention', 'full_attention'])
    make = lambda: torch.manual_seed(0) and Gemma3ForCausalLM(config).eval()
    ids = torch.randint(3, 61, (1, 12), generator=G)
    model = make()
    with torch.no_grad(): before = model(ids).logits
    pe = encoding_of(use_encoding(model, 'rope'))
    assert sorted(pe.ropes) == ['full_attention', 'sliding_attention'] and pe.layer_types == config.layer_types
    with torch.no_grad(): torch.testing.assert_close(model(ids).logits, before, rtol=1e-5, atol=1e-5)
    one = encoding_of(use_encoding(make(), 'rope', layer_type='full_attention'))
    torch.testing.assert_close(one.cache.inv_freq, pe.ropes['full_attention'].cache.inv_freq)


@pytest.mark.parametrize('name', HF_NAMES)
def test_gradient_checkpointing(name):
    "Gradient checkpointing gives the gradients of the plain backward, for every encoding."
    grads = []
    for checkpointing in (False, True):
        model = use_encoding(tiny('llama'), name).train()
        if checkpointing: model.gradient_checkpointing_enable()
        x = torch.randint(3, 61, (2, 10), generator=torch.Generator().manual_seed(1))
        model(x, labels=x, use_cache=False).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]: torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-5, atol=1e-6, msg=n)


@pytest.mark.parametrize('name', ['floater', 'learned', 't5'])
def test_peft_lora(name):
    "LoRA with modules_to_save=['posenc']: the encoding trains, its trained copy is the one used, merging keeps logits."
    peft = pytest.importorskip('peft')
    model = use_encoding(tiny('llama'), name)
    start = {k: v.clone() for k, v in encoding_of(model).state_dict().items()}
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=['q_proj', 'k_proj', 'v_proj'],
                                                      modules_to_save=['posenc']))
    x = torch.randint(3, 61, (4, 12), generator=torch.Generator().manual_seed(2))
    opt = torch.optim.Adam([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        loss = lora(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad(): tuned = lora.eval()(x).logits
    merged = lora.merge_and_unload()
    trained = encoding_of(merged).state_dict()
    assert any(not torch.equal(trained[k], start[k]) for k in start), 'the encoding did not train'
    with torch.no_grad(): torch.testing.assert_close(merged(x).logits, tuned, rtol=1e-5, atol=1e-5)


def test_softcapping_kept():
    "Gemma 2's attention logit soft-capping is kept: with a cap small enough to matter, 'rope' gives the same logits."
    from transformers import Gemma2Config, Gemma2ForCausalLM
    def make(cap):
        torch.manual_seed(0)
        model = Gemma2ForCausalLM(Gemma2Config(**TINY, num_key_value_heads=2, head_dim=8, attn_logit_softcapping=cap,
                                               final_logit_softcapping=None)).eval()
        with torch.no_grad():                       # logits large enough for the cap and for attention to matter
            for name, p in model.named_parameters():
                if name.endswith(('q_proj.weight', 'k_proj.weight', 'v_proj.weight', 'o_proj.weight')): p.mul_(20)
        return model
    capped, uncapped = logits(make(0.05)), logits(make(None))
    assert (capped - uncapped)[MASK.bool()].abs().max() > 1e-3                 # the cap changes this model
    retro = logits(use_encoding(make(0.05), 'rope'))
    torch.testing.assert_close(retro[MASK.bool()], capped[MASK.bool()], rtol=1e-5, atol=1e-5)

"""`posenc_nb.hf.use_encoding` (issue 48, item 1): every registered encoding in tiny random Llama, Qwen2, Mistral and
Phi models built here (no download): left padding exact, cached generation equal to recomputation, a few training
steps."""
import pytest, torch
from posenc_nb.core import list_posencs

transformers = pytest.importorskip('transformers')
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, PhiConfig,  # noqa: E402
                          PhiForCausalLM, Qwen2Config, Qwen2ForCausalLM)
from posenc_nb.hf import use_encoding  # noqa: E402

torch.set_num_threads(1)
TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128)
FAMILIES = {
    'llama': lambda: LlamaForCausalLM(LlamaConfig(**TINY, num_key_value_heads=2)),
    'qwen2': lambda: Qwen2ForCausalLM(Qwen2Config(**TINY, num_key_value_heads=2)),
    'mistral': lambda: MistralForCausalLM(MistralConfig(**TINY, num_key_value_heads=1, sliding_window=64)),
    'phi': lambda: PhiForCausalLM(PhiConfig(**TINY, partial_rotary_factor=0.5)),
}
G = torch.Generator().manual_seed(0)
IDS = torch.randint(3, 61, (2, 9), generator=G)
MASK = torch.ones(2, 9, dtype=torch.long)
MASK[1, :3] = 0


def tiny(family, seed=0):
    torch.manual_seed(seed)
    return FAMILIES[family]().eval()


@pytest.mark.parametrize('family', FAMILIES)
def test_rope_keeps_the_model(family):
    "'rope' without options is the model's own rotary: the same logits, padded rows included."
    with torch.no_grad():
        before = tiny(family)(IDS, attention_mask=MASK).logits
        after = use_encoding(tiny(family), 'rope')(IDS, attention_mask=MASK).logits
    torch.testing.assert_close(after[MASK.bool()], before[MASK.bool()], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('name', list_posencs())
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
    assert model.posenc.cache.scaling == 'yarn'
    with pytest.raises(ValueError, match='already has'): use_encoding(model, 'alibi')
    with pytest.raises(ValueError, match='unknown position encoding'): use_encoding(tiny('llama'), 'nope')

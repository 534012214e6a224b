"""The bias by rows keeps long windows small, for every registered encoding that gives one (`logit_bias_rows`): a
no-grad forward of a causal LM over one window of 2,048 tokens creates no tensor larger than one block of the bias
without gradients (`BIAS_BLOCK_ELEMENTS_NO_GRAD`), where the dense bias alone would be eight times that (2,048^2 x 2
heads), and an MLP over every pair (FIRE, dynamic position bias) 32 times more. The check counts the elements of every
floating-point tensor an operator returns."""
import pytest, torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from posenc_nb.core import list_posencs, make_posenc
from posenc_nb.attention import BIAS_BLOCK_ELEMENTS_NO_GRAD
from posenc_nb.causal_lm import CausalLM, CausalLMConfig

torch.set_num_threads(1)
L, H = 2048, 2
BY_ROWS = [n for n in list_posencs() if make_posenc(n, 16, H, causal=True).has_hook('logit_bias_rows')]


class LargestTensor(TorchDispatchMode):
    """Within it, `largest` is the element count of the largest floating-point tensor any operator returned (the boolean
    causal mask, (1,1,L,L) for every encoding, RoPE's too, is not the bias)."""
    largest = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point(): self.largest = max(self.largest, t.numel())
        return out


def test_dense_bias_would_be_larger():
    assert L * L * H > BIAS_BLOCK_ELEMENTS_NO_GRAD
    assert {'fire', 'dpb', 'kerple_log', 'kerple_power', 'alibi', 'cope', 'forget'} <= set(BY_ROWS)


@pytest.mark.parametrize('name', BY_ROWS)
def test_long_window_holds_one_block_at_most(name):
    torch.manual_seed(0)
    model = CausalLM(CausalLMConfig(vocab=11, d_model=16, n_heads=H, n_layers=1, d_ff=32, pe=name, max_len=64)).eval()
    ids = torch.randint(0, 11, (1, L))
    with torch.no_grad(), LargestTensor() as probe: logits = model(ids)
    assert torch.isfinite(logits).all()
    assert probe.largest <= BIAS_BLOCK_ELEMENTS_NO_GRAD, f"{name}: a tensor of {probe.largest} elements at length {L}"

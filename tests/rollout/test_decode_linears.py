"""The decoding loop's linear layers: MKL-shaped float32 products, and oneDNN's bf16 products on packed (and, for
sibling projections, stacked) weights, which must give the bits `F.linear` gives under autocast."""

import contextlib

import pytest
import torch
from test_rollout_decode import PROMPTS, TOK  # the decoding loop's own test prompts

from ppokit.rollout import decode as decode_module
from ppokit.rollout.decode import decode
from ppokit.rollout.decode_linears import (
    PackedLinears,
    decoding_linears,
    onednn_runs_bf16,
    packable,
    packed_groups,
    skinny_linear,
    skinny_rows,
)
from ppokit.testing import tiny_causal_lm

needs_onednn_bf16 = pytest.mark.skipif(not onednn_runs_bf16(), reason="this CPU has no native bf16 for oneDNN "
                                       "(AVX2 only): decoding keeps torch's own F.linear there")


def bf16_autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def test_skinny_rows_pad_to_four_and_multiples_of_sixteen_and_leave_five_to_eight_to_linear():
    assert [skinny_rows(n) for n in (1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33)] == [1, 2, 4, 4, 0, 0, 16, 16, 32, 32, 48]


@pytest.mark.parametrize("rows", [1, 3, 5, 9, 17, 64, 65])
def test_skinny_linear_equals_linear(rows):
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 40)
    x = torch.randn(rows, 1, 24)
    out = skinny_linear(layer, x)
    assert out.shape == (rows, 1, 40) and out.is_contiguous()
    torch.testing.assert_close(out, layer(x), rtol=1e-5, atol=1e-5)


def test_float32_products_take_the_skinny_path_inside_the_block_only():
    model = tiny_causal_lm(TOK, seed=0)
    layer = model.model.layers[0].mlp.up_proj
    with decoding_linears(model):
        assert layer.forward.func is skinny_linear
    assert "forward" not in layer.__dict__  # the class's forward again
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False), decoding_linears(model):
        assert layer.forward.func is skinny_linear


def test_bf16_products_are_packed_where_onednn_runs_bf16_and_left_alone_elsewhere():
    model = tiny_causal_lm(TOK, seed=0)
    layer = model.model.layers[0].mlp.up_proj
    with bf16_autocast(), decoding_linears(model):
        if onednn_runs_bf16():
            assert isinstance(layer.forward.func, PackedLinears)
        else:
            assert "forward" not in layer.__dict__
    assert "forward" not in layer.__dict__
    with torch.autocast("cpu", dtype=torch.float16), decoding_linears(model):  # no packed fp16 path
        assert "forward" not in layer.__dict__


def test_weights_off_the_cpu_are_never_packed():
    """A meta weight stands for a CUDA one: decoding on a GPU keeps the vendor's GEMM."""
    with torch.device("meta"):
        layer = torch.nn.Linear(8, 8)
    with bf16_autocast():
        assert not packable(layer)
        assert not packable(torch.nn.Linear(8, 8).to(torch.float16))


@needs_onednn_bf16
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 24), (3, 24), (8, 1, 24), (17, 24), (32, 1, 24), (4, 88, 24), (352, 24)])
def test_packed_product_gives_the_bits_of_linear_under_autocast(shape, bias):
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 40, bias=bias)
    x = torch.randn(*shape)
    with bf16_autocast():
        expected = torch.nn.functional.linear(x, layer.weight, layer.bias)
        out = PackedLinears()((layer,), layer, x)
    assert out.dtype == expected.dtype == torch.bfloat16
    assert torch.equal(out, expected)


@needs_onednn_bf16
@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2: q/k/v with biases
def test_sibling_projections_computed_as_one_product_give_each_ones_bits(arch):
    model = tiny_causal_lm(TOK, arch=arch, seed=1)
    attention, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    with bf16_autocast():
        groups = packed_groups(model)
    assert (attention.q_proj, attention.k_proj, attention.v_proj) in groups and (mlp.gate_proj, mlp.up_proj) in groups
    assert (model.lm_head,) in groups and len(groups) == 4 * len(model.model.layers) + 1  # q/k/v, o, gate/up, down
    x, other = torch.randn(5, 1, 64), torch.randn(5, 1, 64)
    with bf16_autocast():
        plain = [torch.nn.functional.linear(x, m.weight, m.bias) for m in (attention.q_proj, attention.k_proj,
                                                                            attention.v_proj)]
        plain_other = torch.nn.functional.linear(other, attention.v_proj.weight, attention.v_proj.bias)
        with decoding_linears(model):
            fused = [attention.q_proj(x), attention.k_proj(x)]
            alone = attention.v_proj(other)  # another input: v's own product, not q's kept output
            fused.append(attention.v_proj(x))  # called after another input: computed alone, the same bits
    assert all(torch.equal(a, b) for a, b in zip(fused, plain))
    assert torch.equal(alone, plain_other)


@needs_onednn_bf16
def test_a_weight_changed_in_place_is_packed_again():
    """A switch of weights between tokens (partial rollouts) copies new weights in place: the next product uses them."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 40)
    x = torch.randn(4, 24)
    packed = PackedLinears()
    with bf16_autocast(), torch.no_grad():
        before = packed((layer,), layer, x)
        layer.weight.mul_(2.0)
        after = packed((layer,), layer, x)
        expected = torch.nn.functional.linear(x, layer.weight, layer.bias)
    assert not torch.equal(before, after)
    assert torch.equal(after, expected)


@needs_onednn_bf16
@pytest.mark.parametrize("arch,seed", [("llama", 0), ("qwen2", 2)])
def test_decoding_with_packed_linears_gives_the_tokens_and_logprobs_of_plain_linears(arch, seed, monkeypatch):
    """The whole loop, sampled, under bf16 autocast: packed and stacked products change nothing but the time."""
    model = tiny_causal_lm(TOK, arch=arch, seed=seed, hidden=64, layers=2)

    def run():
        torch.manual_seed(7)
        with bf16_autocast():
            return decode(model, PROMPTS, 4, 12, [TOK.eos_token_id], TOK.pad_token_id, return_logprobs=True)

    packed_tokens, packed_logprobs = run()
    monkeypatch.setattr(decode_module, "decoding_linears", lambda model: contextlib.nullcontext())
    plain_tokens, plain_logprobs = run()
    assert torch.equal(packed_tokens, plain_tokens)
    assert torch.equal(packed_logprobs, plain_logprobs)
    assert all("forward" not in m.__dict__ for m in model.modules())  # every forward restored

"""Linear layers on oneDNN-packed weights (gramgen.hf.packed_linear): the same products as
nn.Linear up to summation order, the fallbacks, re-packing after an in-place change, and
load_model's option."""

from __future__ import annotations

import os

import pytest
import torch

import gramgen
from gramgen.hf import pack_linears, unpack_linears
from gramgen.hf.packed_linear import _Packed, packed_linear_available

NATIVE = packed_linear_available()
needs_onednn = pytest.mark.skipif(not NATIVE and not os.environ.get("GRAMGEN_REQUIRE_NATIVE"),
                                  reason="this PyTorch has no oneDNN packed linear")


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.GELU(), torch.nn.Linear(40, 7, bias=False))


@needs_onednn
@pytest.mark.parametrize("shape", [(1, 24), (2, 24), (6, 24), (3, 5, 24), (24,), (0, 24)])
def test_packed_layers_compute_what_nn_linear_computes(shape):
    net = _net()
    x = torch.randn(*shape)
    with torch.inference_mode():
        want = net(x)
        assert pack_linears(net) == 2
        assert all(isinstance(m.__dict__.get("forward"), _Packed) for m in net if isinstance(m, torch.nn.Linear))
        got = net(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert pack_linears(net) == 0   # already packed


@needs_onednn
def test_an_in_place_change_of_the_weight_is_seen():
    net = _net()
    pack_linears(net)
    x = torch.randn(4, 24)
    with torch.no_grad():
        net[0].weight.mul_(-2.0)
        got = net(x)
    assert unpack_linears(net) == 2
    with torch.no_grad():
        want = net(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_autograd_and_other_dtypes_take_nn_linear():
    net = _net()
    pack_linears(net)
    x = torch.randn(3, 24)
    net(x).sum().backward()   # the packed op records no gradient: nn.Linear's forward ran
    assert net[0].weight.grad is not None and net[0].weight.grad.abs().sum() > 0
    frozen = _net()
    pack_linears(frozen)
    for p in frozen.parameters():
        p.requires_grad_(False)
    leaf = torch.randn(3, 24, requires_grad=True)
    frozen(leaf).sum().backward()   # frozen weights, an input that wants its gradient
    assert leaf.grad is not None and leaf.grad.abs().sum() > 0
    double = _net().double()
    assert pack_linears(double) == 0   # float32 layers only
    with torch.inference_mode():
        half_input = net(x.double().float())
    assert half_input.dtype == torch.float32


@needs_onednn
def test_state_dict_and_tied_weights_are_untouched():
    lin = torch.nn.Linear(8, 16, bias=False)
    emb = torch.nn.Embedding(16, 8)
    lin.weight = emb.weight   # tied, as an LM head and its embedding are
    net = torch.nn.ModuleDict({"emb": emb, "head": lin})
    keys = sorted(net.state_dict())
    pack_linears(net)
    assert sorted(net.state_dict()) == keys and net["head"].weight is emb.weight


def test_load_model_option_is_checked():
    with pytest.raises(gramgen.ConfigurationError, match="packed_linears"):
        gramgen.load_model("smollm2", packed_linears="yes")


@needs_onednn
def test_smollm2_logits_and_greedy_tokens_with_and_without_packing():
    """The default load packs SmolLM2's linear layers; its logits over a prompt and its
    greedy continuation match the unpacked model's."""
    packed = gramgen.load_model("smollm2", device="cpu")
    plain = gramgen.load_model("smollm2", device="cpu", packed_linears=False)
    layers = [m for m in packed.hf_model.modules() if isinstance(m, torch.nn.Linear)]
    assert layers and all(isinstance(m.__dict__.get("forward"), _Packed) for m in layers)
    assert not any(isinstance(m.__dict__.get("forward"), _Packed) for m in plain.hf_model.modules())
    ids = torch.tensor([plain.prompt_ids("Name three colours.")])
    with torch.inference_mode():
        a = packed.hf_model(ids).logits
        b = plain.hf_model(ids).logits
    torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
    outs = [gramgen.generate(m, "Name three colours.", regex=r"[a-z ,]{1,40}", max_new_tokens=12,
                             temperature=0.0) for m in (packed, plain)]
    assert outs[0].tokens == outs[1].tokens


@needs_onednn
def test_a_deep_copy_or_pickle_of_a_packed_model_runs_packed_on_its_own_weights():
    import copy
    import io

    net = _net()
    pack_linears(net)
    x = torch.randn(2, 24)
    with torch.no_grad():
        net(x)   # packed now
        twin = copy.deepcopy(net)
        twin[0].weight.zero_()
        assert torch.equal(twin(x), copy.deepcopy(twin)(x))
        assert not torch.equal(twin(x), net(x))
        assert twin[0].forward.layer is twin[0]
        buffer = io.BytesIO()
        torch.save(net, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        torch.testing.assert_close(loaded(x), net(x))

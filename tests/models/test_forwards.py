"""`forwards_replaced`: a module computes through another function inside the block, and afterwards through what it
had before — its class's forward, or an instance-level forward set earlier (blocks nest)."""

import torch

from ppokit.models.forwards import forwards_replaced


def test_forwards_are_replaced_inside_and_restored_after_even_when_nested():
    layer = torch.nn.Linear(3, 3)
    x = torch.ones(1, 3)
    plain = layer(x)
    with forwards_replaced({layer: lambda t: t * 2}):
        assert torch.equal(layer(x), x * 2)
        with forwards_replaced({layer: lambda t: t * 3}):
            assert torch.equal(layer(x), x * 3)
        assert torch.equal(layer(x), x * 2)  # the outer block's forward, not the class's
    assert "forward" not in layer.__dict__ and torch.equal(layer(x), plain)


def test_hooks_still_run_around_the_replacement():
    layer = torch.nn.Linear(3, 3)
    seen = []
    layer.register_forward_hook(lambda module, args, out: seen.append(out.sum().item()))
    with forwards_replaced({layer: lambda t: torch.zeros_like(t)}):
        layer(torch.ones(1, 3))
    assert seen == [0.0]

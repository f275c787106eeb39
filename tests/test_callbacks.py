"""Training callbacks that change the optimisation: AdagradReset."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from entailment_lab.callbacks import AdagradReset


def adagrad_after_one_step(initial: float) -> tuple[torch.optim.Adagrad, torch.nn.Parameter]:
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adagrad([weight], lr=0.1, initial_accumulator_value=initial)
    (weight * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    optimizer.step()
    return optimizer, weight


@pytest.mark.parametrize("initial", [0.0, 0.1])
def test_adagrad_reset_restores_the_initial_sums_every_n_epochs(initial):
    optimizer, weight = adagrad_after_one_step(initial)
    grown = optimizer.state[weight]["sum"].clone()
    assert torch.equal(grown, initial + torch.tensor([1.0, 4.0, 9.0]))
    callback = AdagradReset(every_n_epochs=5)
    for epoch in range(5):  # epochs 0-4 (0-based) start: nothing happens
        callback.on_train_epoch_start(
            SimpleNamespace(current_epoch=epoch, optimizers=[optimizer]), None)
        assert torch.equal(optimizer.state[weight]["sum"], grown)
    # after five epochs, as the sixth starts (also where a resumed run starts)
    callback.on_train_epoch_start(SimpleNamespace(current_epoch=5, optimizers=[optimizer]), None)
    assert torch.equal(optimizer.state[weight]["sum"], torch.full((3,), initial))


def test_adagrad_reset_leaves_other_optimisers_alone():
    weight = torch.nn.Parameter(torch.ones(2))
    adam = torch.optim.Adam([weight])
    weight.sum().backward()
    adam.step()
    before = {k: v.clone() for k, v in adam.state[weight].items() if torch.is_tensor(v)}
    AdagradReset(1).on_train_epoch_start(SimpleNamespace(current_epoch=1, optimizers=[adam]),
                                         None)
    assert all(torch.equal(adam.state[weight][k], v) for k, v in before.items())
    with pytest.raises(ValueError, match="every_n_epochs"):
        AdagradReset(0)

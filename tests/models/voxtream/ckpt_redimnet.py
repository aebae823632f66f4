"""Random ReDimNet speaker encoders in the on-disk format of IDRnD's release files
(``M-vb2+vox2+cnc-ft_mix.pt``): ``torch.save({"model_config": ..., "state_dict":
...})``, the config as ``ReDimNetWrap``'s keyword arguments (stages as lists of
tuples, ``spec_params`` with SpecAugment's tuples), the state an ``OrderedDict`` of
every tensor the network holds (the front end's window, filter matrix and
pre-emphasis taps, batch norms' statistics and ``num_batches_tracked`` counters).

``TINY`` is small (24 mel bins, 4 channels, three stages: a time-context block of
each kind the M model uses, a stride of 3 and an expanded stage) but keeps the real
front end and the 192-wide embedding. Weights start from PyTorch's initialisation
under a seed, then norms, batch-norm statistics and the stage mixes are spread so
that none of them is the identity.
"""

from __future__ import annotations

from pathlib import Path

import torch

from models.blocks.redimnet import ReDimNet, ReDimNetConfig, Stage

SPEC_PARAMS = {"do_spec_aug": False, "freq_mask_width": (0, 6), "time_mask_width": (0, 8)}
"""``ReDimNetWrap``'s default ``spec_params`` (training-only settings)."""

TINY = ReDimNetConfig(
    freqs=24,
    channels=4,
    stages=(
        Stage(1, 1, 1, ((3, 3),), 4),
        Stage(2, 1, 1, ((3, 3),), None),
        Stage(3, 1, 2, ((3, 3),), 8),
    ),
    group_divisor=2,
    spec_params=SPEC_PARAMS,
)


def redimnet_state(cfg: ReDimNetConfig, seed: int) -> dict[str, torch.Tensor]:
    """A seeded random state of the network ``cfg`` describes, keyed as stored."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        net = ReDimNet(cfg)
    state = net.state_dict()
    with torch.no_grad():
        for key, value in state.items():
            if key.startswith("spec.torchfbank"):
                continue  # the front end's fixed filters, as the reference computes them
            noise = torch.randn(value.shape, generator=gen) if value.is_floating_point() else None
            if key.endswith("num_batches_tracked"):
                value.fill_(int(torch.randint(1_000, 100_000, (), generator=gen)))
            elif key.endswith("running_var"):
                value.copy_(0.5 + torch.rand(value.shape, generator=gen) * 1.5)
            elif key.endswith("running_mean"):
                value.copy_(0.1 * noise)
            elif key.endswith(".w"):  # stage mixes: softmax weights away from uniform
                value.copy_(noise)
            elif value.dim() == 1 and key.endswith("weight"):  # norms' gains
                value.copy_(1.0 + 0.1 * noise)
            elif value.dim() == 1 and key.endswith("bias"):
                value.copy_(0.05 * noise)
    return state


def write_redimnet(path: Path, cfg: ReDimNetConfig = TINY, seed: int = 0) -> Path:
    """Write the ``.pt`` file of a random ``cfg`` network to ``path``; ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model_config": cfg.model_config(), "state_dict": redimnet_state(cfg, seed)}, path)
    return path

"""Per-minibatch random streams.

Every minibatch draws from its own ``torch.Generator`` seeded from (seed, epoch, batch
index). That is what makes bulk sampling reproducible: sampling k minibatches in one
call consumes each minibatch's stream exactly as k single calls would, so the result
does not depend on the bulk size, on the order batches are produced in, or on which
rank of a distributed run samples them.
"""

from __future__ import annotations

import numpy as np
import torch

# Stream tags keep the seed-permutation stream apart from the sampling streams.
_SAMPLE, _SHUFFLE = 0, 1


def _derive(seed: int, epoch: int, index: int, tag: int) -> int:
    """A 63-bit seed from the tuple, well mixed (SeedSequence hashes its entropy)."""
    words = np.random.SeedSequence([seed, epoch, index, tag]).generate_state(2, np.uint32)
    return (int(words[0]) << 31) ^ int(words[1])


def batch_generator(
    seed: int, epoch: int, index: int, device: torch.device | str = "cpu"
) -> torch.Generator:
    """The sampling stream of minibatch ``index`` of ``epoch``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(_derive(seed, epoch, index, _SAMPLE))
    return gen


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The order the training seeds are visited in during ``epoch`` (CPU int64)."""
    gen = torch.Generator()
    gen.manual_seed(_derive(seed, epoch, 0, _SHUFFLE))
    return torch.randperm(n, generator=gen)

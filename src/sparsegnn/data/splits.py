"""Train/validation/test masks for datasets that ship without a split."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sparsegnn.errors import InvalidValueError


def stratified_split(
    y: torch.Tensor | np.ndarray,
    fractions: Sequence[float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """Boolean masks, one per fraction, drawn at random within each class.

    Stratifying keeps rare classes present in every split, so validation accuracy is not
    skewed by a split that happened to miss one. Done with one lexsort over
    (class, random key) rather than a loop over classes, so 10^6 nodes and 10^3 classes
    cost the same as a handful. Each class's node count is divided by cumulative rounding,
    so the masks are disjoint and together cover every node when fractions sum to 1.
    """
    fracs = np.asarray(fractions, dtype=np.float64)
    if fracs.ndim != 1 or fracs.size == 0 or (fracs < 0).any() or fracs.sum() > 1 + 1e-9:
        raise InvalidValueError(
            f"fractions must be non-negative and sum to at most 1, got {list(fractions)}"
        )
    labels = np.asarray(y.cpu() if isinstance(y, torch.Tensor) else y, dtype=np.int64)
    n = labels.shape[0]
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(n), labels))
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    sizes = np.diff(np.r_[starts, n])
    class_start = np.repeat(starts, sizes)
    class_size = np.repeat(sizes, sizes)
    rank = np.arange(n) - class_start
    # bounds[k] = how many of a class's nodes fall in splits 0..k-1.
    bounds = np.rint(np.cumsum(np.r_[0.0, fracs])[:, None] * class_size[None, :])
    masks = []
    for k in range(fracs.size):
        mask = np.zeros(n, dtype=bool)
        mask[order[(rank >= bounds[k]) & (rank < bounds[k + 1])]] = True
        masks.append(torch.from_numpy(mask))
    return tuple(masks)

"""Values derived from a CSR pattern, kept for as long as the pattern's index tensors live.

Attention multiplies one pattern many times an epoch (every head, layer and backward), and
patterns made by ``with_values`` share their index tensors, so what is derived from the
indices alone (narrower copies, a validity check) is worth keeping per pair of index
tensors rather than per matrix. Keys are the tensors' ids, confirmed by weak references
(an id can be reused once a tensor is freed), and an entry goes with its columns.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from sparsegnn.sparse.csr import CSRMatrix

T = TypeVar("T")
Store = dict[tuple[int, int], tuple[weakref.ref, weakref.ref, Any]]


def per_pattern(store: Store, a: CSRMatrix, make: Callable[[], T]) -> T:
    """``make()``'s value for ``a``'s ``(crow, col)`` pair: made once, kept in ``store``
    until the columns are freed."""
    key = (id(a.crow), id(a.col))
    hit = store.get(key)
    if hit is not None and hit[0]() is a.crow and hit[1]() is a.col:
        return hit[2]
    value = make()
    store[key] = (weakref.ref(a.crow), weakref.ref(a.col), value)
    weakref.finalize(a.col, store.pop, key, None)
    return value

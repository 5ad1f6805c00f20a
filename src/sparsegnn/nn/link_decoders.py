"""Edge decoders and the encoder-decoder model of link prediction.

An encoder (:class:`~sparsegnn.nn.GCN`, :class:`~sparsegnn.nn.GraphSAGE`) embeds every
node once per step with its usual SpMMs over the message-edge operator; a decoder then
scores a batch of candidate pairs from their endpoint rows: the values of the sampled
product ``Z Z^T`` on the pattern of the queries (an SDDMM), with a learnt pair function
in place of the dot product for the MLP decoder. Scores are logits.

The dot and (untyped) DistMult decoders run that SDDMM (:func:`~sparsegnn.sparse.sddmm_dot`)
on the pairs' pattern (:func:`pair_pattern`) instead of gathering ``z[src]`` and
``z[dst]``: the gathers, their product and the scatter-add of their backward wrote four
``pairs x channels`` tensors per step, about half the full-graph epoch on a 2^15-vertex
graph; the SDDMM computes each dot in place and its backward is two SpMMs.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from sparsegnn.errors import InvalidValueError, ShapeError
from sparsegnn.nn.operator import Operator
from sparsegnn.sparse import CSRMatrix, sddmm_dot

DecoderKind = Literal["dot", "mlp", "distmult"]
DECODERS: tuple[DecoderKind, ...] = ("dot", "mlp", "distmult")


def pair_pattern(pairs: torch.Tensor, num_rows: int) -> tuple[CSRMatrix, torch.Tensor]:
    """The query pairs ``[2, Q]`` as a ``num_rows x num_rows`` pattern (row = source,
    column = target) and ``order``, the pair each stored entry is: entry ``e`` is pair
    ``order[e]``. Entries are sorted by (source, target), so the SDDMM reads each source
    row once and its targets in ascending order. A pair listed twice is stored twice
    (each keeps its own score): the pattern breaks CSRMatrix's unique-column invariant,
    which the SDDMM and its backward (gathers and embedding-bag sums) never rely on."""
    if pairs.numel() and (int(pairs.min()) < 0 or int(pairs.max()) >= num_rows):
        raise ShapeError(f"a pair names node {int(pairs.max())} or {int(pairs.min())}, "
                         f"outside the {num_rows} embedded rows")
    src, dst = pairs[0], pairs[1]
    order = torch.argsort(src * max(num_rows, 1) + dst, stable=True)
    rows, cols = src[order], dst[order]
    crow = torch.zeros(num_rows + 1, dtype=torch.long, device=pairs.device)
    torch.cumsum(torch.bincount(rows, minlength=num_rows), 0, out=crow[1:])
    ones = torch.ones(pairs.shape[1], device=pairs.device)
    return CSRMatrix(crow, cols, ones, (num_rows, num_rows), unit_values=True), order


def pair_dot(left: torch.Tensor, right: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """``<left[s], right[t]>`` for every pair ``(s, t)``, in the pairs' order, as an SDDMM
    on their pattern (module docstring); ``left`` and ``right`` have the same rows."""
    if pairs.shape[1] == 0:
        return (left[:0] * right[:0]).sum(-1)
    pattern, order = pair_pattern(pairs, left.shape[0])
    scores = sddmm_dot(pattern, left, right)
    return torch.empty_like(scores).scatter(0, order, scores)


class DotDecoder(nn.Module):
    """``<z_s, z_t>``: no weights (PyG's link-prediction example)."""

    def forward(self, z: torch.Tensor, pairs: torch.Tensor,
                relation: torch.Tensor | None = None) -> torch.Tensor:
        return pair_dot(z, z, pairs)


class MLPDecoder(nn.Module):
    """An MLP on ``z_s * z_t`` (OGB's baseline link predictor): symmetric in the pair,
    like the dot product, but free to weigh dimensions and combine them non-linearly."""

    def __init__(self, channels: int, hidden: int, num_layers: int = 2, dropout: float = 0.0):
        super().__init__()
        if num_layers < 1:
            raise InvalidValueError(f"an MLP decoder needs at least 1 layer, got {num_layers}")
        widths = [channels] + [hidden] * (num_layers - 1) + [1]
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))
        self.dropout = dropout

    def reset_parameters(self) -> None:
        for lin in self.lins:
            lin.reset_parameters()

    def forward(self, z: torch.Tensor, pairs: torch.Tensor,
                relation: torch.Tensor | None = None) -> torch.Tensor:
        h = z[pairs[0]] * z[pairs[1]]
        for lin in self.lins[:-1]:
            h = nn.functional.dropout(torch.relu(lin(h)), self.dropout, self.training)
        return self.lins[-1](h).squeeze(-1)


class DistMultDecoder(nn.Module):
    """``sum_d z_s[d] r[d] z_t[d]`` with one learnt diagonal ``r`` per relation (Yang et
    al., DistMult): typed edges, e.g. knowledge graphs. Untyped pairs use relation 0."""

    def __init__(self, channels: int, num_relations: int = 1):
        super().__init__()
        if num_relations < 1:
            raise InvalidValueError(f"DistMult needs at least 1 relation, got {num_relations}")
        self.relations = nn.Parameter(torch.empty(num_relations, channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.relations)

    def forward(self, z: torch.Tensor, pairs: torch.Tensor,
                relation: torch.Tensor | None = None) -> torch.Tensor:
        if relation is None:
            return pair_dot(z * self.relations[0], z, pairs)
        if relation.numel() and int(relation.max()) >= self.relations.shape[0]:
            raise InvalidValueError(f"relation id {int(relation.max())} for a DistMult "
                                    f"of {self.relations.shape[0]} relations")
        rel = self.relations[relation]
        return (z[pairs[0]] * rel * z[pairs[1]]).sum(-1)


def make_decoder(kind: DecoderKind, channels: int, *, hidden: int = 256,
                 num_relations: int = 1) -> nn.Module:
    """A decoder of ``kind`` for ``channels``-wide embeddings."""
    if kind == "dot":
        return DotDecoder()
    if kind == "mlp":
        return MLPDecoder(channels, hidden)
    if kind == "distmult":
        return DistMultDecoder(channels, num_relations)
    raise InvalidValueError(f"unknown decoder {kind!r}; choose one of {', '.join(DECODERS)}")


class LinkModel(nn.Module):
    """An encoder and a decoder: ``encode`` once per step, ``decode`` any number of batches
    of pairs from the same embeddings."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def encode(self, x: torch.Tensor, adj: Operator | Sequence[Operator]) -> torch.Tensor:
        return self.encoder(x, adj)

    def decode(self, z: torch.Tensor, pairs: torch.Tensor,
               relation: torch.Tensor | None = None) -> torch.Tensor:
        return self.decoder(z, pairs, relation)

    def forward(self, x: torch.Tensor, adj: Operator | Sequence[Operator], pairs: torch.Tensor,
                relation: torch.Tensor | None = None) -> torch.Tensor:
        return self.decode(self.encode(x, adj), pairs, relation)

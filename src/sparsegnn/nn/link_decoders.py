"""Edge decoders and the encoder-decoder model of link prediction.

An encoder (:class:`~sparsegnn.nn.GCN`, :class:`~sparsegnn.nn.GraphSAGE`) embeds every
node once per step with its usual SpMMs over the message-edge operator; a decoder then
scores a batch of candidate pairs from their endpoint rows: the values of the sampled
product ``Z Z^T`` on the pattern of the queries (an SDDMM), with a learnt pair function
in place of the dot product for the MLP and DistMult decoders. Scores are logits.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from sparsegnn.errors import InvalidValueError
from sparsegnn.nn.operator import Operator

DecoderKind = Literal["dot", "mlp", "distmult"]
DECODERS: tuple[DecoderKind, ...] = ("dot", "mlp", "distmult")


class DotDecoder(nn.Module):
    """``<z_s, z_t>``: no weights (PyG's link-prediction example)."""

    def forward(self, z: torch.Tensor, pairs: torch.Tensor,
                relation: torch.Tensor | None = None) -> torch.Tensor:
        return (z[pairs[0]] * z[pairs[1]]).sum(-1)


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
            rel = self.relations[0]
        else:
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

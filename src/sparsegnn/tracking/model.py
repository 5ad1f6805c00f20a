"""Interaction Network edge classifier written on sparsegnn's CSR SpMM.

Each message-passing iteration (Battaglia et al. 2016; the Exa.TrkX variant) does

    m_in  = S_dst @ e          (sum of the messages of edges entering each node)
    m_out = S_src @ e          (sum of the messages of edges leaving each node)
    h     = h + phi_node([h, m_in, m_out])
    e     = e + phi_edge([h[src], h[dst], e])

where ``S_dst`` / ``S_src`` are the ``[N, E]`` incidence matrices with a 1 at (dst_e, e) /
(src_e, e). Aggregating in both directions lets a hit hear about its inner and outer
neighbours separately, which is what tells a track's continuation from a crossing. The
decoder maps ``[h[src], h[dst], e]`` to one logit per edge.

Two pieces of algebra make it cheaper than the textbook form, with the same function and
weights. The first layer of an edge MLP is linear in ``[h[src], h[dst], e]``, so
``W [h[src], h[dst], e] = (h W_s)[src] + (h W_d)[dst] + e W_e``: the node parts are
projected once per node instead of once per edge (hit graphs have several edges per
node) and the ``[E, 3 hidden]`` concatenation is never built. And all four sparse
products of an iteration are one matrix: with two slots per node (``2i`` for node
``i`` as an edge's destination, ``2i + 1`` as its source), the ``[E, 2N]`` incidence
matrix ``B`` with ones at ``(e, 2 dst_e)`` and ``(e, 2 src_e + 1)`` gathers
``(h W_d)[dst] + (h W_s)[src]`` from the ``[N, 2 hidden]`` projection read as ``[2N,
hidden]`` rows, and ``B^T`` sums edge rows into ``[m_in | m_out]`` per node. One unit-valued
SpMM each way, no concatenation, and the backward of each is the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.sparse import CSRMatrix, native, spmm

# Edges per chunk of chunked inference: a [chunk, hidden=64] float32 tensor is 2 MB.
INFER_CHUNK = 8192


@dataclass(frozen=True)
class INConfig:
    """Sizes of the Interaction Network (Exa.TrkX uses hidden 128 and 8 iterations)."""

    node_features: int = 3
    edge_features: int = 4
    hidden: int = 64
    iterations: int = 6
    mlp_layers: int = 2


class EdgeOperators:
    """Gather node rows onto edges and sum edge rows into nodes, for one edge list.

    Holds the slot incidence matrix ``B`` of the module docstring, built once per graph
    (already in CSR order: two nonzeros per edge row, no sort); its transpose is built on
    first use and cached, so a training step costs one unit-valued SpMM per gather and
    per aggregation, forward and backward alike.
    """

    def __init__(self, edge_index: torch.Tensor, num_nodes: int,
                 dtype: torch.dtype = torch.float32):
        self.src, self.dst = edge_index[0].long(), edge_index[1].long()
        self.num_nodes = num_nodes
        to_dst, from_src = 2 * self.dst, 2 * self.src + 1
        cols = torch.stack([torch.minimum(to_dst, from_src), torch.maximum(to_dst, from_src)], 1)
        n_edges = int(self.src.numel())
        crow = torch.arange(0, 2 * n_edges + 1, 2, device=edge_index.device)
        self.incidence = CSRMatrix.from_csr(crow, cols.reshape(-1), None, (n_edges, 2 * num_nodes),
                                            check=False).to(dtype=dtype)

    def gather(self, p: torch.Tensor, edges: slice | None = None) -> torch.Tensor:
        """``p[dst, :k] + p[src, k:]`` per edge (or per edge of ``edges``), ``p`` ``[N, 2k]``."""
        width = p.shape[1] // 2
        b = self.incidence
        if edges is not None:  # two nonzeros per row: a row range is a plain slice
            lo, hi, _ = edges.indices(b.shape[0])
            b = CSRMatrix(b.crow[:hi - lo + 1], b.col[2 * lo:2 * hi], b.val[2 * lo:2 * hi],
                          (hi - lo, b.shape[1]), unit_values=True)
        return spmm(b, p.reshape(2 * self.num_nodes, width))

    def aggregate(self, e: torch.Tensor) -> torch.Tensor:
        """``[sum of e over incoming edges | sum over outgoing edges]`` per node: ``[N, 2k]``."""
        return spmm(self.incidence.t(), e).reshape(self.num_nodes, 2 * e.shape[1])


def mlp(inp: int, hidden: int, out: int, layers: int, final_act: bool = True) -> nn.Sequential:
    """``layers`` linear layers with LayerNorm + ReLU between (and after, if final_act)."""
    mods: list[nn.Module] = []
    width = inp
    for i in range(layers):
        last = i == layers - 1
        mods.append(nn.Linear(width, out if last else hidden))
        if not last or final_act:
            # In place: LayerNorm's backward keeps its input, not the output ReLU overwrites.
            mods += [nn.LayerNorm(out if last else hidden), nn.ReLU(inplace=True)]
        width = hidden
    return nn.Sequential(*mods)


def forward_layers(layers: Iterable[nn.Module], z: torch.Tensor) -> torch.Tensor:
    """``layers`` applied to ``z`` in turn. Without autograd, each LayerNorm and the ReLU
    after it run as one in-place pass over the rows (:func:`native.layer_norm_`) where the
    native kernels run: torch makes two streaming passes of them, the largest cost of
    scoring a pileup-200 event. ``z`` is overwritten: callers pass a temporary."""
    mods = list(layers)
    i = 0
    while i < len(mods):
        norm = mods[i]
        if (isinstance(norm, nn.LayerNorm) and not torch.is_grad_enabled()
                and norm.weight is not None and norm.bias is not None
                and norm.normalized_shape == (z.shape[-1],) and native.norm_usable(z)):
            relu = i + 1 < len(mods) and isinstance(mods[i + 1], nn.ReLU)
            z = native.layer_norm_(z, norm.weight, norm.bias, norm.eps, relu)
            i += 2 if relu else 1
        else:
            z = norm(z)
            i += 1
    return z


class InteractionNetwork(nn.Module):
    """Edge classifier: encoders, ``iterations`` residual IN steps, edge decoder -> logits.

    Shapes:
        x: ``[N, node_features]``, edge_attr: ``[E, edge_features]`` -> ``[E]`` logits.
    """

    def __init__(self, cfg: INConfig = INConfig()):
        super().__init__()
        self.cfg = cfg
        h, k = cfg.hidden, cfg.mlp_layers
        self.node_encoder = mlp(cfg.node_features, h, h, k)
        self.edge_encoder = mlp(cfg.edge_features, h, h, k)
        self.node_updates = nn.ModuleList(mlp(3 * h, h, h, k) for _ in range(cfg.iterations))
        self.edge_updates = nn.ModuleList(mlp(3 * h, h, h, k) for _ in range(cfg.iterations))
        self.decoder = mlp(3 * h, h, 1, k, final_act=False)

    def forward(self, x: torch.Tensor, edge_attr: torch.Tensor, ops: EdgeOperators) -> torch.Tensor:
        if not torch.is_grad_enabled():
            return self._infer(x, edge_attr, ops)
        h = self.node_encoder(x)
        e = self.edge_encoder(edge_attr)
        for node_update, edge_update in zip(self.node_updates, self.edge_updates, strict=True):
            h = h + node_update(torch.cat([h, ops.aggregate(e)], dim=1))
            e = e + edge_mlp(edge_update, h, e, ops)
        return edge_mlp(self.decoder, h, e, ops).squeeze(1)

    def _infer(self, x: torch.Tensor, edge_attr: torch.Tensor, ops: EdgeOperators) -> torch.Tensor:
        """The same function without autograd, its per-edge work done ``INFER_CHUNK`` edges
        at a time and in place.

        On a whole pileup-200 event (~0.5M edges) every per-edge tensor is ~128 MB, so
        LayerNorm, ReLU, residual adds and the copies inside ``addmm`` each stream it
        through memory; in chunks an edge MLP's intermediates stay in cache, and no
        ``[E, hidden]`` temporary is made beyond the edge state itself.

        The states take the dtype of the message-passing weights: a copy whose iterations
        and decoder are bfloat16 (:func:`sparsegnn.tracking.infer.scoring_model`) passes
        messages in bfloat16, while the encoders read the hit coordinates in their own
        float32 (bfloat16's 8-bit mantissa would place a hit at r = 1 m only to ~4 mm).
        """
        chunks = [slice(lo, lo + INFER_CHUNK) for lo in range(0, edge_attr.shape[0], INFER_CHUNK)]
        node_chunks = [slice(lo, lo + INFER_CHUNK) for lo in range(0, x.shape[0], INFER_CHUNK)]
        h = forward_layers(self.node_encoder, x).to(self.decoder[0].weight.dtype)
        e = h.new_empty(edge_attr.shape[0], h.shape[1])
        for c in chunks:
            e[c] = forward_layers(self.edge_encoder, edge_attr[c])
        for node_update, edge_update in zip(self.node_updates, self.edge_updates, strict=True):
            m = ops.aggregate(e)
            for c in node_chunks:
                h[c] += forward_layers(node_update, torch.cat([h[c], m[c]], dim=1))
            p = node_projection(edge_update[0], h)
            for c in chunks:
                e[c] += edge_rest(edge_update, p, e[c], ops, c)
        p = node_projection(self.decoder[0], h)
        out = e.new_empty(e.shape[0])
        for c in chunks:
            out[c] = edge_rest(self.decoder, p, e[c], ops, c).squeeze(1)
        return out


def edge_mlp(seq: nn.Sequential, h: torch.Tensor, e: torch.Tensor, ops: EdgeOperators
             ) -> torch.Tensor:
    """``seq(cat([h[src], h[dst], e]))`` with the first layer split by input block:
    node projections are made per node and gathered, never per edge (module docstring)."""
    return edge_rest(seq, node_projection(seq[0], h), e, ops)


def node_projection(first: nn.Linear, h: torch.Tensor) -> torch.Tensor:
    """``[h W_d^T + b | h W_s^T]``: the node blocks of an edge MLP's first layer, ``[N, 2k]``.

    ``[W_d; W_s]`` so that the halves line up with the incidence matrix's (dst, src)
    slots; the bias rides on the destination half, which every edge gathers exactly once.
    """
    width = h.shape[1]
    w = first.weight
    bias = torch.cat([first.bias, torch.zeros_like(first.bias)])
    return torch.addmm(bias, h, torch.cat([w[:, width:2 * width], w[:, :width]]).t())


def edge_rest(seq: nn.Sequential, p: torch.Tensor, e: torch.Tensor, ops: EdgeOperators,
              edges: slice | None = None) -> torch.Tensor:
    """The edge MLP from the gathered node projection ``p`` and the edge block ``e``
    (the rows ``edges`` of the edge list, when given)."""
    width = p.shape[1] // 2
    w = seq[0].weight
    z = ops.gather(p, edges).addmm_(e, w[:, 2 * width:].t())
    return forward_layers(list(seq)[1:], z)


def weighted_bce(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor,
                 pos_weight: float) -> torch.Tensor:
    """BCE with per-edge ``weight`` (0 drops an edge) and ``pos_weight`` on positives.

    Targets are rare (a few percent of a module-map graph's edges), so positives are
    up-weighted; true edges of non-target particles get weight 0 in training so the
    model is neither rewarded nor punished on them.
    """
    per_edge = F.binary_cross_entropy_with_logits(
        logits, target.to(logits.dtype), reduction="none",
        pos_weight=torch.tensor(pos_weight, dtype=logits.dtype, device=logits.device),
    )
    return (per_edge * weight).sum() / weight.sum().clamp_min(1e-12)

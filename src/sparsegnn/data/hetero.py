"""Typed (heterogeneous) graphs, and the relational form R-GCN trains on.

A :class:`HeteroGraph` keeps what PyG's ``HeteroData`` and DGL's heterographs keep: node
types, each with its own count and optional feature matrix, and edge types
``(src_type, relation, dst_type)``, each with an ``edge_index`` of ids *local to its node
types*. Labels and split masks live on one target node type. Every reader returns one,
validated, so a bad id or a feature matrix of the wrong height is one line naming the type
instead of an index error inside a layer.

:meth:`HeteroGraph.to_relational` flattens it into the homogeneous relational graph that
R-GCN multiplies by: node types laid end to end (type ``t`` occupies global ids
``offsets[t] .. offsets[t] + num_nodes[t]``), one relation id per edge type, and
optionally an inverse relation per edge type (``rev_<relation>``), as R-GCN practice and
PyG's ``ToUndirected`` add them, so that information flows both ways along every typed
edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sparsegnn.errors import DataFormatError, IndexOutOfRangeError, InvalidValueError

EdgeType = tuple[str, str, str]
_SPLITS = ("train", "val", "test")


@dataclass
class HeteroGraph:
    """A typed graph: node types with counts and optional features, typed edge lists.

    ``edge_index[(s, r, d)]`` is ``[2, E]`` int64, row 0 ids of type ``s``, row 1 ids of
    type ``d``. ``y`` and the masks have one entry per node of ``target``.
    """

    num_nodes: dict[str, int]
    edge_index: dict[EdgeType, torch.Tensor]
    x: dict[str, torch.Tensor] = field(default_factory=dict)
    target: str | None = None
    y: torch.Tensor | None = None
    train_mask: torch.Tensor | None = None
    val_mask: torch.Tensor | None = None
    test_mask: torch.Tensor | None = None
    name: str = "hetero"
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def node_types(self) -> list[str]:
        return list(self.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        return list(self.edge_index)

    @property
    def num_classes(self) -> int:
        return 0 if self.y is None or not self.y.numel() else int(self.y.max()) + 1

    def validate(self) -> HeteroGraph:
        """Check every id, shape and type name; one :class:`DataFormatError` line per fault
        (``IndexOutOfRangeError`` for ids), naming the graph and the type. Returns self."""
        where = f"heterogeneous graph {self.name!r}"
        for ntype, n in self.num_nodes.items():
            if not isinstance(ntype, str) or not ntype or int(n) < 0:
                raise DataFormatError(f"{where}: node type {ntype!r} needs a non-empty name "
                                      f"and a count >= 0, got {n}")
        for etype, ei in self.edge_index.items():
            _check_edges(where, etype, ei, self.num_nodes)
        for ntype, x in self.x.items():
            _check_rows(where, f"features of node type {ntype!r}", x, self.num_nodes, ntype)
            if x.dim() != 2:
                raise DataFormatError(f"{where}: features of node type {ntype!r} must be 2-d "
                                      f"[nodes, features], got shape {list(x.shape)}")
            if x.is_floating_point() and not bool(torch.isfinite(x).all()):
                raise InvalidValueError(f"{where}: features of node type {ntype!r} hold a "
                                        "NaN or infinity")
        self._validate_target(where)
        return self

    def _validate_target(self, where: str) -> None:
        labelled = {"y": self.y, **{f"{s}_mask": getattr(self, f"{s}_mask") for s in _SPLITS}}
        given = {k: v for k, v in labelled.items() if v is not None}
        if not given:
            return
        if self.target is None:
            raise DataFormatError(f"{where}: has {', '.join(given)} but no target node type")
        for key, value in given.items():
            _check_rows(where, f"{key} of target {self.target!r}", value, self.num_nodes,
                        self.target)
            if value.dim() != 1:
                raise DataFormatError(f"{where}: {key} must be 1-d, got shape "
                                      f"{list(value.shape)}")
        if self.y is not None and (self.y.is_floating_point() or
                                   (self.y.numel() and int(self.y.min()) < 0)):
            raise DataFormatError(f"{where}: y must hold class ids >= 0 (mask out unlabelled "
                                  "nodes instead)")

    def counts(self) -> dict[str, object]:
        """What ``data info`` shows: nodes and features per type, edges per edge type."""
        out: dict[str, object] = {
            "name": self.name,
            "num_nodes": sum(self.num_nodes.values()),
            "num_edges": sum(int(e.shape[1]) for e in self.edge_index.values()),
            "node_types": {t: {"num_nodes": n, "num_features":
                               int(self.x[t].shape[1]) if t in self.x else 0}
                           for t, n in self.num_nodes.items()},
            "edge_types": {"__".join(et): int(ei.shape[1])
                           for et, ei in self.edge_index.items()},
            "target": self.target,
            "num_classes": self.num_classes,
        }
        for split in _SPLITS:
            mask = getattr(self, f"{split}_mask")
            if mask is not None:
                out[f"num_{split}"] = int(mask.sum())
        return out

    def to_relational(self, *, inverse: bool = True) -> RelationalGraph:
        """The homogeneous relational graph (global ids, one relation id per edge).

        ``inverse`` adds relation ``(d, 'rev_' + r, s)`` with every edge reversed, for each
        edge type, a self-typed one (``s == d``) too, since R-GCN's relations are directed.
        Graphs that list both directions already (``meta['reverse_edges']``) want False.
        """
        self.validate()
        offsets, start = {}, 0
        for ntype, n in self.num_nodes.items():
            offsets[ntype] = start
            start += int(n)
        relations: list[EdgeType] = []
        parts: list[torch.Tensor] = []
        for (s, r, d), ei in self.edge_index.items():
            glob = torch.stack([ei[0].long() + offsets[s], ei[1].long() + offsets[d]])
            relations.append((s, r, d))
            parts.append(glob)
            if inverse:
                relations.append((d, f"rev_{r}", s))
                parts.append(glob.flip(0))
        types = [torch.full((p.shape[1],), i, dtype=torch.int64) for i, p in enumerate(parts)]
        node_type = torch.cat([torch.full((int(n),), i, dtype=torch.int64)
                               for i, n in enumerate(self.num_nodes.values())]
                              or [torch.zeros(0, dtype=torch.int64)])
        return RelationalGraph(
            edge_index=torch.cat(parts, 1) if parts else torch.zeros(2, 0, dtype=torch.int64),
            edge_type=torch.cat(types) if types else torch.zeros(0, dtype=torch.int64),
            num_nodes=start, relations=relations, node_types=self.node_types,
            node_type=node_type, offsets=offsets, x=self._stacked_features(),
            target=self.target, y=self.y, train_mask=self.train_mask,
            val_mask=self.val_mask, test_mask=self.test_mask, name=self.name)

    def _stacked_features(self) -> torch.Tensor | None:
        """Every type's features stacked in global order, when all types have features of
        one width; otherwise None (the model then learns an input per node or per type)."""
        if set(self.x) != set(self.num_nodes):
            return None
        widths = {int(x.shape[1]) for x in self.x.values()}
        if len(widths) != 1:
            return None
        return torch.cat([self.x[t].to(torch.float32) for t in self.num_nodes])


@dataclass
class RelationalGraph:
    """A typed graph in R-GCN's homogeneous form.

    ``edge_index`` uses global ids; ``edge_type[e]`` indexes ``relations``; nodes of type
    ``node_types[k]`` have ``node_type == k`` and global ids from ``offsets[type]``. ``x``
    is the stacked features when every type has features of one width, else None. ``y``
    and the masks are over the target type's nodes (:meth:`target_ids` are their global
    ids).
    """

    edge_index: torch.Tensor
    edge_type: torch.Tensor
    num_nodes: int
    relations: list[EdgeType]
    node_types: list[str]
    node_type: torch.Tensor
    offsets: dict[str, int]
    x: torch.Tensor | None = None
    target: str | None = None
    y: torch.Tensor | None = None
    train_mask: torch.Tensor | None = None
    val_mask: torch.Tensor | None = None
    test_mask: torch.Tensor | None = None
    name: str = "relational"

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    def target_ids(self) -> torch.Tensor:
        """Global ids of the target type's nodes, in the order of ``y`` and the masks."""
        if self.target is None:
            raise InvalidValueError(f"relational graph {self.name!r} has no target node type")
        count = int((self.node_type == self.node_types.index(self.target)).sum())
        return torch.arange(count) + self.offsets[self.target]

    def check_trainable(self) -> None:
        """Refuse, in one line, a graph node classification would train on NaN."""
        missing = [k for k in ("y", "train_mask", "val_mask", "test_mask")
                   if getattr(self, k) is None]
        if self.target is None or missing:
            raise InvalidValueError(
                f"relational graph {self.name!r} needs a target node type with labels and "
                f"train/val/test masks (missing: {', '.join(missing) or 'target'})")
        for split in _SPLITS:
            if not bool(getattr(self, f"{split}_mask").any()):
                raise InvalidValueError(f"relational graph {self.name!r}: the {split} split "
                                        "is empty")


def _check_edges(where: str, etype: object, ei: torch.Tensor, num_nodes: dict[str, int]) -> None:
    if not (isinstance(etype, tuple) and len(etype) == 3 and all(isinstance(p, str)
                                                                 for p in etype)):
        raise DataFormatError(f"{where}: edge type {etype!r} must be a (src_type, relation, "
                              "dst_type) tuple of strings")
    src, _, dst = etype
    for ntype in (src, dst):
        if ntype not in num_nodes:
            raise DataFormatError(f"{where}: edge type {etype} names unknown node type "
                                  f"{ntype!r} (node types: {', '.join(num_nodes) or 'none'})")
    if (not isinstance(ei, torch.Tensor) or ei.dim() != 2 or ei.shape[0] != 2
            or ei.dtype.is_floating_point or ei.dtype == torch.bool):
        shape = list(ei.shape) if isinstance(ei, torch.Tensor) else type(ei).__name__
        raise DataFormatError(f"{where}: edge_index of {etype} must be an integer [2, E] "
                              f"tensor, got {shape}")
    for row, ntype in ((0, src), (1, dst)):
        ids = ei[row]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes[ntype]):
            bad = int(ids[(ids < 0) | (ids >= num_nodes[ntype])][0])
            side = "source" if row == 0 else "destination"
            raise IndexOutOfRangeError(
                f"{where}: edge type {etype} has {side} id {bad}, outside node type "
                f"{ntype!r} (0..{num_nodes[ntype] - 1})")


def _check_rows(where: str, what: str, value: torch.Tensor, num_nodes: dict[str, int],
                ntype: str) -> None:
    if ntype not in num_nodes:
        raise DataFormatError(f"{where}: {what}: unknown node type {ntype!r} (node types: "
                              f"{', '.join(num_nodes) or 'none'})")
    if not isinstance(value, torch.Tensor) or value.shape[0] != num_nodes[ntype]:
        rows = value.shape[0] if isinstance(value, torch.Tensor) else type(value).__name__
        raise DataFormatError(f"{where}: {what} has {rows} rows for {num_nodes[ntype]} nodes")

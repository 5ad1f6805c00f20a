"""The in-memory graph every loader and generator returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class GraphData:
    """A graph with optional node features, labels and split masks.

    ``edge_index`` is PyG-style ``[2, E]`` int64 (source, target); undirected graphs store
    both directions and no self-loops. Masks are boolean ``[num_nodes]`` tensors.
    """

    edge_index: torch.Tensor
    num_nodes: int
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    train_mask: torch.Tensor | None = None
    val_mask: torch.Tensor | None = None
    test_mask: torch.Tensor | None = None
    name: str = "graph"
    texts: list[str] | None = None
    node_ids: list[str] | None = None
    class_names: list[str] | None = None
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def num_classes(self) -> int:
        return 0 if self.y is None else int(self.y.max()) + 1

    def summary(self) -> dict[str, object]:
        """Counts a user wants to see first (the `data info` output)."""
        out: dict[str, object] = {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
        }
        for split in ("train", "val", "test"):
            mask = getattr(self, f"{split}_mask")
            if mask is not None:
                out[f"num_{split}"] = int(mask.sum())
        return out

"""The hit graph of one event, its construction quality and its file.

:class:`HitGraph` is what graph construction hands the edge classifier, the track
builder and the metrics: hits as nodes with (r, phi, z) features, candidate segments as
directed edges with (dr, dphi, dz, deta) features and truth labels, and the event's
segment counts that :class:`GraphStats` measures efficiency against. Its ``.npz`` file is
read without pickles (:func:`read_arrays`, which the module map's file uses too) and
checked whole before anything indexes it. It is apart from graph construction because
most of the pipeline (training, inference, metrics, the stores) only reads graphs and
needs none of the search.
"""

from __future__ import annotations

import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sparsegnn.data.io import atomic_write
from sparsegnn.errors import DataFormatError

NODE_SCALE = np.array([1000.0, np.pi, 1000.0])  # r [mm], phi [rad], z [mm]
EDGE_SCALE = np.array([100.0, 0.1, 100.0, 0.1])  # dr, dphi, dz, deta


@dataclass
class HitGraph:
    """One event's graph: hits are nodes, candidate segments are directed edges (inner -> outer)."""

    name: str
    edge_index: np.ndarray  # [2, E] int64
    node_features: np.ndarray  # [N, 3] float32: r, phi, z (scaled)
    edge_features: np.ndarray  # [E, 4] float32: dr, dphi, dz, deta (scaled)
    y: np.ndarray  # [E] bool: consecutive hits of one particle
    target: np.ndarray  # [E] bool: true and the particle passes the TargetConfig
    num_true_segments: int  # segments of all particles in the event
    num_target_segments: int  # segments of target particles in the event

    @property
    def num_nodes(self) -> int:
        return int(self.node_features.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    def keep_edges(self, mask: np.ndarray) -> HitGraph:
        """The same graph with only the edges where ``mask`` is true; the segment counts stay,
        so ``stats().efficiency`` charges the dropped target segments to the graph."""
        keep = np.flatnonzero(mask) if mask.dtype == bool else mask  # found once, not per array
        return HitGraph(self.name, self.edge_index[:, keep], self.node_features,
                        self.edge_features[keep], self.y[keep], self.target[keep],
                        self.num_true_segments, self.num_target_segments)

    def stats(self) -> GraphStats:
        kept_target = int(self.target.sum())
        return GraphStats(
            num_nodes=self.num_nodes, num_edges=self.num_edges,
            efficiency=kept_target / max(self.num_target_segments, 1),
            true_efficiency=int(self.y.sum()) / max(self.num_true_segments, 1),
            purity=int(self.y.sum()) / max(self.num_edges, 1),
            target_purity=kept_target / max(self.num_edges, 1),
        )

    def save(self, path: str | Path) -> None:
        """Written whole (temp file + rename) to exactly ``path``."""
        atomic_write(path, lambda f: np.savez_compressed(
            f, name=np.array(self.name), edge_index=self.edge_index,
            node_features=self.node_features, edge_features=self.edge_features, y=self.y,
            target=self.target,
            counts=np.array([self.num_true_segments, self.num_target_segments]),
        ))

    @classmethod
    def load(cls, path: str | Path) -> HitGraph:
        names = ("name", "edge_index", "node_features", "edge_features", "y", "target", "counts")
        d = read_arrays(path, names, "hit graph")
        _check_hit_graph(path, d)
        return cls(str(d["name"]), d["edge_index"].astype(np.int64), d["node_features"],
                   d["edge_features"], d["y"].astype(bool), d["target"].astype(bool),
                   int(d["counts"][0]), int(d["counts"][1]))


def read_arrays(path: str | Path, names: tuple[str, ...], what: str,
                 optional: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The named arrays of an ``.npz`` (no pickles) and those of ``optional`` it holds, or
    one error naming the file."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            missing = [n for n in names if n not in data]
            if missing:
                raise DataFormatError(f"{path}: not a {what}, missing arrays {missing}")
            return {n: data[n] for n in (*names, *optional) if n in data}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        if isinstance(err, DataFormatError):
            raise
        raise DataFormatError(f"{path}: not a readable {what} file ({err})") from err


def _check_hit_graph(path: str | Path, d: dict[str, np.ndarray]) -> None:
    """Refuse a graph file whose arrays do not fit together, naming the file.

    The arrays are only indexed deep inside training and scoring, where an edge pointing
    past the last hit or a short label array is a torch traceback (or a silently wrong
    loss) rather than a message about the file that caused it.
    """
    edges, nodes, feats = d["edge_index"], d["node_features"], d["edge_features"]

    def bad(why: str) -> DataFormatError:
        return DataFormatError(f"{path}: not a valid hit graph ({why})")

    if d["name"].ndim != 0 or d["name"].dtype.kind != "U":
        raise bad("'name' is not a string")
    if edges.ndim != 2 or edges.shape[0] != 2 or edges.dtype.kind not in "iu":
        raise bad(f"edge_index has shape {edges.shape} and dtype {edges.dtype}, "
                  "expected integers of shape (2, E)")
    num_edges = edges.shape[1]
    for key, width in (("node_features", NODE_SCALE.size), ("edge_features", EDGE_SCALE.size)):
        a = d[key]
        if a.ndim != 2 or a.shape[1] != width or a.dtype.kind != "f":
            raise bad(f"{key} has shape {a.shape} and dtype {a.dtype}, expected floats "
                      f"with {width} columns")
        if not np.isfinite(a).all():
            raise bad(f"{key} holds NaN or infinite values")
    if feats.shape[0] != num_edges:
        raise bad(f"{feats.shape[0]} edge_features rows for {num_edges} edges")
    for key in ("y", "target"):
        if d[key].shape != (num_edges,) or d[key].dtype.kind not in "biu":
            raise bad(f"{key} has shape {d[key].shape}, expected ({num_edges},) labels")
    if num_edges and (edges.min() < 0 or edges.max() >= nodes.shape[0]):
        raise bad(f"edge_index values span {edges.min()}..{edges.max()}, but there are "
                  f"{nodes.shape[0]} hits")
    counts = d["counts"]
    if counts.shape != (2,) or counts.dtype.kind not in "iu" or (counts < 0).any():
        raise bad(f"counts is {counts.tolist()}, expected two segment counts >= 0")


@dataclass(frozen=True)
class GraphStats:
    """Graph-construction quality: efficiency = target segments kept / target segments."""

    num_nodes: int
    num_edges: int
    efficiency: float
    true_efficiency: float  # over the segments of all particles
    purity: float  # true edges / edges
    target_purity: float  # target edges / edges

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

"""What track building takes and gives: edge scores, hit geometry and track labels.

:class:`EdgeScores` (the edge classifier's output on one event's graph) and
:class:`HitGeometry` (where each hit is, and its layer) go in; :class:`Tracks` (a track
label per hit) comes out, and is what the metrics, the CKF comparison and the stores
read. They are apart from the builders (:mod:`sparsegnn.tracking.reco`,
:mod:`sparsegnn.tracking.triplets`) because most of the pipeline exchanges these
records and needs none of the building.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EdgeScores:
    """Per-edge probabilities for one event's graph (``edge_index`` oriented inner -> outer)."""

    name: str
    edge_index: np.ndarray  # [2, E] int64
    scores: np.ndarray  # [E] float in [0, 1]
    num_nodes: int


@dataclass(frozen=True)
class HitGeometry:
    """Where each hit is (``positions`` ``[N, 3]`` x, y, z in mm) and the layer it is on
    (``layer`` ``[N]``, one id per detector layer): what geometric track building and the
    distinct-layer requirement need beside the edge scores."""

    positions: np.ndarray
    layer: np.ndarray

    @classmethod
    def from_event(cls, event: object) -> HitGeometry:
        """An :class:`~sparsegnn.tracking.events.Event`'s hits (layer: volume and layer)."""
        positions = np.stack([event.x, event.y, event.z], axis=1).astype(np.float64)
        return cls(positions, np.asarray(event.volume, np.int64) * 1000 + event.layer)


@dataclass(frozen=True)
class Tracks:
    """``hit_track[i]``: track label of hit ``i`` (0..T-1), or -1 when it is on no track."""

    name: str
    hit_track: np.ndarray  # [N] int64

    @property
    def num_tracks(self) -> int:
        return int(self.hit_track.max()) + 1 if self.hit_track.size else 0

    def sizes(self) -> np.ndarray:
        """Hits per track, ``[T]``."""
        return np.bincount(self.hit_track[self.hit_track >= 0], minlength=self.num_tracks)

    def with_singletons(self) -> Tracks:
        """Every hit on a track: unassigned hits become one-hit tracks (TrackML's convention)."""
        labels = self.hit_track.copy()
        loose = labels < 0
        labels[loose] = labels.max(initial=-1) + 1 + np.arange(int(loose.sum()))
        return Tracks(self.name, labels)

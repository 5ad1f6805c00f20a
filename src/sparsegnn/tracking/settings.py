"""How a trained model is used: the settings a model file carries beside its weights.

:class:`RecoConfig` is every choice between an event and its tracks: how the graph is
built (truth, or a module map at some level plus doublet cuts), how edges are scored
(whole events, or ShaDow subgraphs with the fan-outs and seed order the model was trained
with), and how tracks are built (score cut, method, minimum length). A model file written
with them (:func:`sparsegnn.tracking.infer.save_model`) reconstructs the way it was
tuned with no other input; files written before these settings existed load with the
defaults below. No torch here, so the command line can build one cheaply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.names import SCORING_PRECISIONS
from sparsegnn.tracking.doublet_cuts import NO_CUTS, DoubletCuts
from sparsegnn.tracking.reco import METHODS, MIN_TRACK_HITS
from sparsegnn.tracking.triplets import TRIPLET_MISFIT

GRAPH_KINDS = ("module-map", "truth")
MAP_LEVELS = ("module", "layer")
# Doublet cuts chosen on pileup-50 ttbar training events (docs/results/tracking.md): pT >~ 0.5 GeV,
# |z0| < 200 mm, pairs under 10 mm apart in r (overlapping modules) skip the slope cuts.
TTBAR_CUTS = DoubletCuts(dphi=0.08, phi_slope=0.0006, z0=200.0, min_dr=10.0)


@dataclass(frozen=True)
class RecoConfig:
    """Graph construction, edge scoring and track building of one reconstruction."""

    graph: str = "module-map"  # "module-map" or "truth" (edges between consecutive hits)
    map_level: str = "module"  # level of a module map learnt for this reconstruction
    cuts: DoubletCuts = field(default_factory=lambda: NO_CUTS)
    # ShaDow sampling: what the model was trained with (train_sample_nodes None: whole
    # events), and the subgraph bound used to score (sample_nodes None: whole events)
    train_sample_nodes: int | None = None
    fanouts: tuple[int, ...] = (4, 2)
    seed_order: str = "random"
    sample_nodes: int | None = None
    # "bf16": the Interaction Network scores in bfloat16 after float32 encoders
    precision: str = "fp32"
    cut: float = 0.5
    method: str = "components"
    min_track_hits: int = MIN_TRACK_HITS
    # walkthrough/triplets only: extend chains / merge pieces through edges down to these
    extend_cut: float | None = None
    merge_cut: float | None = None
    # tracks crossing fewer distinct layers are dropped (1: no requirement)
    min_layers: int = 1
    # triplets only: the largest geometric misfit of a triplet kept (triplets.TRIPLET_MISFIT)
    max_misfit: float = TRIPLET_MISFIT
    # triplets only: join pieces / attach free hits through edges down to this score
    # where the helix geometry agrees (reco.build_tracks; None: no linking)
    link_cut: float | None = None
    # triplets only: cut chains where they bend by a triplet misfit above this (None: never)
    max_kink: float | None = None
    # triplets only: a second pass over the hits left on no track, triplets and links up
    # to this misfit through every edge between them (None: no second pass)
    second_misfit: float | None = None
    # triplets only: join chains across a missing segment (no edge) where the helix fits
    # up to this misfit, for chains too short alone (reco.build_tracks; None: never)
    bridge_misfit: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON, or a ``weights_only`` checkpoint)."""
        out = asdict(self)
        out["fanouts"] = list(self.fanouts)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "settings") -> RecoConfig:
        """The inverse of :meth:`to_dict`; fields it lacks take their defaults (files of
        older versions), unknown ones are refused."""
        try:
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(data) - known)
            if unknown:
                raise ValueError(f"unknown fields {unknown}")
            given = dict(data)
            if "cuts" in given:
                given["cuts"] = DoubletCuts(**given["cuts"])
            if "fanouts" in given:
                given["fanouts"] = tuple(int(f) for f in given["fanouts"])
            return replace(cls(), **given).checked()
        except (TypeError, ValueError, AttributeError) as err:
            raise DataFormatError(f"{source}: unusable reconstruction settings ({err})") from err

    def checked(self) -> RecoConfig:
        """``self``, if every choice is one this library knows."""
        for name, value, allowed in (("graph", self.graph, GRAPH_KINDS),
                                     ("map_level", self.map_level, MAP_LEVELS),
                                     ("method", self.method, METHODS),
                                     ("precision", self.precision, SCORING_PRECISIONS)):
            if value not in allowed:
                raise ValueError(f"{name} {value!r} is not one of {allowed}")
        if not 0.0 <= self.cut <= 1.0 or self.min_track_hits < 1 or self.min_layers < 1:
            raise ValueError(f"cut {self.cut} outside [0, 1], or min_track_hits "
                             f"{self.min_track_hits} or min_layers {self.min_layers} below 1")
        if not self.max_misfit > 0.0:
            raise ValueError(f"max_misfit {self.max_misfit} must be positive")
        if self.link_cut is not None and (self.method != "triplets"
                                          or not 0.0 <= self.link_cut <= 1.0):
            raise ValueError(f"link_cut {self.link_cut} needs the triplets and a value in [0, 1]")
        if self.max_kink is not None and (self.method != "triplets" or not self.max_kink > 0):
            raise ValueError(f"max_kink {self.max_kink} needs the triplets and a positive value")
        if self.second_misfit is not None and (self.method != "triplets"
                                               or not self.second_misfit > 0):
            raise ValueError(f"second_misfit {self.second_misfit} needs the triplets and a "
                             "positive value")
        if self.bridge_misfit is not None and (self.method != "triplets"
                                               or not self.bridge_misfit > 0):
            raise ValueError(f"bridge_misfit {self.bridge_misfit} needs the triplets and a "
                             "positive value")
        for name in ("extend_cut", "merge_cut"):
            value = getattr(self, name)
            if value is not None and (self.method == "components" or not 0.0 <= value <= 1.0):
                raise ValueError(f"{name} {value} needs the walkthrough or triplets and a "
                                 "value in [0, 1]")
        return self

    def overridden(self, **given: Any) -> RecoConfig:
        """A copy with the given fields replaced; ``None`` values and cut fields of ``None``
        (nothing given on the command line) keep this config's. A method other than the
        triplets drops the triplets' own refinements (kinks, links, second pass) not given
        with it: ``--method walkthrough`` on a model tuned with them then still runs."""
        cuts = {k: given.pop(k) for k in list(given) if k in _CUT_FIELDS}
        cuts = {k: v for k, v in cuts.items() if v is not None}
        keep = {k: v for k, v in given.items() if v is not None}
        if keep.get("method", self.method) != "triplets":
            keep = {**dict.fromkeys(_TRIPLETS_ONLY), **keep}
        try:
            return replace(self, cuts=replace(self.cuts, **cuts), **keep).checked()
        except ValueError as err:  # given values, not a file: the caller's error to fix
            raise InvalidValueError(f"reconstruction settings: {err}") from err


_CUT_FIELDS = {f.name for f in fields(DoubletCuts)}
_TRIPLETS_ONLY = ("link_cut", "max_kink", "second_misfit", "bridge_misfit")


def walkthrough_settings(cfg: Any, cuts: DoubletCuts = TTBAR_CUTS) -> RecoConfig:
    """How a model trained with ``cfg`` (a ``TrackTrainConfig``) reconstructs on a
    module-level map with ``cuts``: whole-event scoring, the ShaDow sampling of training
    recorded, walkthrough track building (score cut and length still to tune, see
    :func:`sparsegnn.tracking.pipeline.tune`)."""
    return RecoConfig(map_level="module", cuts=cuts, train_sample_nodes=cfg.max_sample_nodes,
                      fanouts=tuple(cfg.fanouts), seed_order=cfg.seed_order,
                      method="walkthrough")

"""How a trained model is used: the settings a model file carries beside its weights.

:class:`RecoConfig` is every choice between an event and its tracks: how the graph is
built (truth, or a module map at some level plus doublet cuts), how edges are scored
(whole events, or ShaDow subgraphs with the fan-outs and seed order the model was trained
with), and how tracks are built (a :mod:`~sparsegnn.tracking.building` method with
its score cut and minimum length). A model file written
with them (:func:`sparsegnn.tracking.infer.save_model`) reconstructs the way it was
tuned with no other input; files written before these settings existed load with the
defaults below. No torch here, so the command line can build one cheaply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.names import SCORING_PRECISIONS
from sparsegnn.tracking.building import (
    BUILDING_FIELDS,
    Components,
    TrackBuilding,
    Walkthrough,
    building_fields,
    building_from_fields,
    rebuilt,
)
from sparsegnn.tracking.doublet_cuts import NO_CUTS, DoubletCuts

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
    # score cut, method and its parameters, minimum track length
    building: TrackBuilding = field(default_factory=Components)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON, or a ``weights_only`` checkpoint); the building method's
        fields stand flat beside the others, as in files of every version."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "building"}
        return {**out, "cuts": asdict(self.cuts), "fanouts": list(self.fanouts),
                **building_fields(self.building)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "settings") -> RecoConfig:
        """The inverse of :meth:`to_dict`; fields it lacks take their defaults (files of
        older versions), unknown ones are refused."""
        try:
            known = {f.name for f in fields(cls)} - {"building"}
            unknown = sorted(set(data) - known - BUILDING_FIELDS)
            if unknown:
                raise ValueError(f"unknown fields {unknown}")
            given = {k: v for k, v in data.items() if k in known}
            if "cuts" in given:
                given["cuts"] = DoubletCuts(**given["cuts"])
            if "fanouts" in given:
                given["fanouts"] = tuple(int(f) for f in given["fanouts"])
            building = building_from_fields({k: v for k, v in data.items()
                                             if k in BUILDING_FIELDS})
            return replace(cls(), **given, building=building).checked()
        except (TypeError, ValueError, AttributeError) as err:
            raise DataFormatError(f"{source}: unusable reconstruction settings ({err})") from err

    def checked(self) -> RecoConfig:
        """``self``, if every choice is one this library knows (the building method checks
        its own when made)."""
        for name, value, allowed in (("graph", self.graph, GRAPH_KINDS),
                                     ("map_level", self.map_level, MAP_LEVELS),
                                     ("precision", self.precision, SCORING_PRECISIONS)):
            if value not in allowed:
                raise ValueError(f"{name} {value!r} is not one of {allowed}")
        return self

    def overridden(self, **given: Any) -> RecoConfig:
        """A copy with the given flat fields replaced; ``None`` values (nothing given on
        the command line) keep this config's. Cut fields go to the doublet cuts, building
        fields to the method (:func:`~sparsegnn.tracking.building.rebuilt`: another method
        keeps the parameters it shares and drops the others)."""
        cuts = {k: v for k, v in given.items() if k in _CUT_FIELDS and v is not None}
        building = {k: given.pop(k) for k in list(given) if k in BUILDING_FIELDS}
        keep = {k: v for k, v in given.items()
                if k not in _CUT_FIELDS and v is not None}
        try:
            return replace(self, cuts=replace(self.cuts, **cuts),
                           building=rebuilt(self.building, **building), **keep).checked()
        except ValueError as err:  # given values, not a file: the caller's error to fix
            raise InvalidValueError(f"reconstruction settings: {err}") from err


_CUT_FIELDS = {f.name for f in fields(DoubletCuts)}


def walkthrough_settings(cfg: Any, cuts: DoubletCuts = TTBAR_CUTS) -> RecoConfig:
    """How a model trained with ``cfg`` (a ``TrackTrainConfig``) reconstructs on a
    module-level map with ``cuts``: whole-event scoring, the ShaDow sampling of training
    recorded, walkthrough track building (score cut and length still to tune, see
    :func:`sparsegnn.tracking.pipeline.tune`)."""
    return RecoConfig(map_level="module", cuts=cuts, train_sample_nodes=cfg.max_sample_nodes,
                      fanouts=tuple(cfg.fanouts), seed_order=cfg.seed_order,
                      building=Walkthrough())

"""How tracks are built from scored edges: one method object, carrying its own parameters.

Every method keeps the edges scored at or above ``cut`` and drops the tracks shorter than
``min_track_hits`` hits or crossing fewer than ``min_layers`` distinct layers; beyond
that each takes only what it uses, and checks it when made, so a combination that
cannot be honoured (a linking cut on connected components) is not expressible:

* :class:`Components`: every connected group of kept hits is one track.
* :class:`Walkthrough`: junctions resolved greedily by score, then optional looser passes
  (``extend_cut``, ``merge_cut``; :mod:`sparsegnn.tracking.reco`).
* :class:`Triplets`: junctions resolved by score and helix geometry, with the refinements
  of :mod:`sparsegnn.tracking.triplets` (links, kinks, a second pass, bridges).

Settings files and the command line spell a method as flat fields beside ``method``
(:func:`building_fields`, :func:`building_from_fields`, :func:`rebuilt`), the format model
files have always had. No torch here, so the command line can build one cheaply.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar

from sparsegnn.tracking.triplets import TRIPLET_MISFIT

# The default minimum track length, for every caller (library, command line, benchmarks):
# keep every track of two or more hits. Dense events want more (5-7; the rule in
# sparsegnn.tracking.pipeline.tune chooses it on training events).
MIN_TRACK_HITS = 1


def _check_score(name: str, value: float | None) -> None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} {value} must lie in [0, 1]")


def _check_positive(name: str, value: float | None) -> None:
    if value is not None and not value > 0.0:
        raise ValueError(f"{name} {value} must be positive")


@dataclass(frozen=True)
class TrackBuilding:
    """What every method shares: the score cut and the length requirements."""

    method: ClassVar[str]
    cut: float = 0.5
    min_track_hits: int = MIN_TRACK_HITS
    min_layers: int = 1  # tracks crossing fewer distinct layers are dropped

    def __post_init__(self) -> None:
        _check_score("cut", self.cut)
        if self.min_track_hits < 1 or self.min_layers < 1:
            raise ValueError(f"min_track_hits and min_layers must be >= 1, got "
                             f"{self.min_track_hits}, {self.min_layers}")

    @property
    def needs_geometry(self) -> bool:
        """Whether building reads the hits' positions and layers."""
        return self.min_layers > 1


@dataclass(frozen=True)
class Components(TrackBuilding):
    """Connected components of the edges scored >= ``cut``: right while tracks do not
    touch; one wrongly kept edge between two tracks merges them."""

    method: ClassVar[str] = "components"


@dataclass(frozen=True)
class Walkthrough(TrackBuilding):
    """One way in and one way out per hit, greedy by score; chains then extended through
    edges down to ``extend_cut`` and pieces merged through edges >= ``merge_cut``."""

    method: ClassVar[str] = "walkthrough"
    extend_cut: float | None = None
    merge_cut: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_score("extend_cut", self.extend_cut)
        _check_score("merge_cut", self.merge_cut)


@dataclass(frozen=True)
class Triplets(Walkthrough):
    """The walkthrough choosing by helix geometry too (:mod:`sparsegnn.tracking.triplets`):
    triplets up to ``max_misfit``; ``link_cut`` joins pieces and attaches free hits
    through edges down to that score where the helix agrees; ``max_kink`` cuts chains
    where they bend more; ``second_misfit`` is a second pass over the hits left on no
    track; ``bridge_misfit`` joins chains too short alone across a missing segment.
    ``None``: that refinement is off."""

    method: ClassVar[str] = "triplets"
    max_misfit: float = TRIPLET_MISFIT
    link_cut: float | None = None
    max_kink: float | None = None
    second_misfit: float | None = None
    bridge_misfit: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_positive("max_misfit", self.max_misfit)
        _check_score("link_cut", self.link_cut)
        for name in ("max_kink", "second_misfit", "bridge_misfit"):
            _check_positive(name, getattr(self, name))

    @property
    def needs_geometry(self) -> bool:
        return True


BUILDERS: dict[str, type[TrackBuilding]] = {
    c.method: c for c in (Components, Walkthrough, Triplets)}
# every flat field a settings file may hold for track building (method included)
BUILDING_FIELDS = frozenset({"method", *(f.name for f in fields(Triplets))})


def building_fields(building: TrackBuilding) -> dict[str, Any]:
    """The method as flat plain data: ``method`` and its own parameters."""
    return {"method": building.method, **asdict(building)}


def rebuilt(building: TrackBuilding, method: str | None = None, **given: Any) -> TrackBuilding:
    """``building`` as ``method`` (default: its own) with the ``given`` parameters
    (``None``: keep). Parameters the new method shares are kept, the others dropped, so
    ``--method walkthrough`` on a model tuned with triplet links still runs; a parameter
    given for a method without it is refused."""
    kind = BUILDERS.get(method or building.method)
    if kind is None:
        raise ValueError(f"unknown track-building method {method!r}; use one of "
                         f"{tuple(BUILDERS)}")
    own = {f.name for f in fields(kind)}
    foreign = sorted(k for k, v in given.items() if v is not None and k not in own)
    if foreign:
        owners = [m for m, c in BUILDERS.items() if set(foreign) <= {f.name for f in fields(c)}]
        raise ValueError(f"{', '.join(foreign)}: only with method="
                         f"{' or '.join(map(repr, owners))}, not {kind.method!r}")
    kept = {k: v for k, v in asdict(building).items() if k in own}
    return kind(**{**kept, **{k: v for k, v in given.items() if v is not None}})


def building_from_fields(data: Mapping[str, Any]) -> TrackBuilding:
    """The method of flat fields (:func:`building_fields`, or a file of an older version
    that wrote every method's fields, unused ones ``None`` and ``max_misfit`` always)."""
    given = {k: v for k, v in data.items() if k != "method"}
    if data.get("method", Components.method) != Triplets.method:
        given.pop("max_misfit", None)
    return rebuilt(Components(), data.get("method", Components.method), **given)


def candidates(base: TrackBuilding, cuts: Sequence[float], lengths: Sequence[int],
               loose: Sequence[float | None] = (None,), **grid: Sequence[Any]
               ) -> list[TrackBuilding]:
    """``base`` with every combination of score cut, minimum track length, looser cut
    (a fraction of the cut taken as both extend and merge cut; ``None``: none) and the
    values of ``grid`` (its own parameters by name), in that order: what
    :func:`sparsegnn.tracking.pipeline.tune` chooses from (ties go to the first)."""
    names = list(grid)
    found = []
    for cut, length, fraction, *values in itertools.product(cuts, lengths, loose,
                                                            *grid.values()):
        looser = {} if fraction is None else {"extend_cut": fraction * cut,
                                              "merge_cut": fraction * cut}
        found.append(replace(base, cut=cut, min_track_hits=length, **looser,
                             **dict(zip(names, values, strict=True))))
    return found

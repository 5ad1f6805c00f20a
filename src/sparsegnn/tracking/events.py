"""Read one TrackML-format event (hits, truth, particles CSV, plain or gzip) into an :class:`Event`.

The Kaggle TrackML format splits an event into ``eventN-hits.csv`` (positions and module
ids), ``eventN-truth.csv`` (the particle behind each hit, 0 for noise, and the hit's
score weight) and ``eventN-particles.csv`` (vertex, momentum, charge). Everything
downstream (graph building, the model's features, the metrics) needs the three joined per
hit, so they are read, cross-checked and joined once here. Only the csv module and numpy
are used: pandas would be a heavy dependency for three flat files.

Every inconsistency raises :class:`~sparsegnn.errors.DataFormatError` naming the file and
the line (line 1 is the header), because a silently dropped hit or particle would bias
every efficiency computed later.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from sparsegnn.errors import DataFormatError

_HIT_COLUMNS = {"hit_id": np.int64, "x": np.float64, "y": np.float64, "z": np.float64,
                "volume_id": np.int64, "layer_id": np.int64, "module_id": np.int64}
_TRUTH_COLUMNS = {"hit_id": np.int64, "particle_id": np.int64, "weight": np.float64}
_PARTICLE_COLUMNS = {"particle_id": np.int64, "vx": np.float64, "vy": np.float64,
                     "vz": np.float64, "px": np.float64, "py": np.float64, "pz": np.float64,
                     "q": np.int64, "nhits": np.int64}
_EVENT_RE = re.compile(r"^(?P<prefix>.+)-hits\.csv(\.gz)?$")


@dataclass(frozen=True)
class Particles:
    """Truth particles of one event; row ``i`` is one particle (units: mm, GeV)."""

    particle_id: np.ndarray  # [P] int64, never 0
    vertex: np.ndarray  # [P, 3] float64, production vertex (x, y, z)
    momentum: np.ndarray  # [P, 3] float64, (px, py, pz)
    charge: np.ndarray  # [P] int64
    nhits: np.ndarray  # [P] int64, hits of this particle present in the event

    @property
    def pt(self) -> np.ndarray:
        return np.hypot(self.momentum[:, 0], self.momentum[:, 1])

    @property
    def eta(self) -> np.ndarray:
        return np.arcsinh(self.momentum[:, 2] / np.maximum(self.pt, 1e-12))

    def __len__(self) -> int:
        return int(self.particle_id.shape[0])


@dataclass(frozen=True)
class Event:
    """One event: hits in ``hit_id`` order joined with their truth particle.

    ``particle_index[i]`` is the row of hit ``i``'s particle in :attr:`particles`, or -1 for
    a noise hit; ``particle_id[i]`` is the raw id (0 for noise). ``r``, ``distance``, ``phi``,
    ``eta`` and ``module_key`` are computed once per event: graph construction and track
    building read them many times per event. The arrays are not to be modified.
    """

    name: str
    hit_id: np.ndarray  # [N] int64, strictly increasing
    position: np.ndarray  # [N, 3] float64 (x, y, z) in mm
    volume: np.ndarray  # [N] int64
    layer: np.ndarray  # [N] int64
    module: np.ndarray  # [N] int64
    particle_id: np.ndarray  # [N] int64, 0 = noise
    particle_index: np.ndarray  # [N] int64, -1 = noise
    weight: np.ndarray  # [N] float64, TrackML score weight of each hit
    particles: Particles

    @property
    def num_hits(self) -> int:
        return int(self.hit_id.shape[0])

    @property
    def x(self) -> np.ndarray:
        return self.position[:, 0]

    @property
    def y(self) -> np.ndarray:
        return self.position[:, 1]

    @property
    def z(self) -> np.ndarray:
        return self.position[:, 2]

    @cached_property
    def r(self) -> np.ndarray:
        """Transverse distance from the beam line."""
        return np.hypot(self.x, self.y)

    @cached_property
    def distance(self) -> np.ndarray:
        """Distance from the origin: what orients every edge outwards."""
        return np.linalg.norm(self.position, axis=1)

    @cached_property
    def phi(self) -> np.ndarray:
        return np.arctan2(self.y, self.x)

    @cached_property
    def eta(self) -> np.ndarray:
        """Pseudorapidity of the hit seen from the origin."""
        return np.arcsinh(self.z / np.maximum(self.r, 1e-12))

    @cached_property
    def module_key(self) -> np.ndarray:
        """One int64 per sensitive module: volume, layer and module packed."""
        return module_key(self.volume, self.layer, self.module)


def module_key(volume: np.ndarray, layer: np.ndarray, module: np.ndarray) -> np.ndarray:
    """Pack (volume, layer, module) into one int64 (16/20/20 bits) for fast lookups."""
    return (np.asarray(volume, np.int64) << 40) | (np.asarray(layer, np.int64) << 20) | np.asarray(
        module, np.int64
    )


def event_files(directory: str | Path) -> list[str]:
    """Event prefixes (``event000000001``) that have a hits file in ``directory``, sorted."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataFormatError(f"{directory}: not a directory of TrackML events")
    found = {m["prefix"] for p in directory.iterdir() if (m := _EVENT_RE.match(p.name))}
    return sorted(found)


def read_event(directory: str | Path, prefix: str) -> Event:
    """Read ``{prefix}-hits``, ``-truth`` and ``-particles`` (``.csv`` or ``.csv.gz``)."""
    directory = Path(directory)
    hits_path, truth_path, parts_path = (
        _find(directory, f"{prefix}-{kind}") for kind in ("hits", "truth", "particles")
    )
    hits = read_columns(hits_path, _HIT_COLUMNS)
    truth = read_columns(truth_path, _TRUTH_COLUMNS)
    parts = read_columns(parts_path, _PARTICLE_COLUMNS)
    particles = _particles(parts, parts_path)
    hit_order = _unique_order(hits["hit_id"], hits_path, "hit_id")
    truth_order = _unique_order(truth["hit_id"], truth_path, "hit_id")
    hit_id = hits["hit_id"][hit_order]
    _check_same_hits(hit_id, truth["hit_id"], truth_path, hits_path)
    pid = truth["particle_id"][truth_order]
    pindex = _particle_index(pid, particles, truth_path, truth_order)
    # nhits counts the hits present here: the file's column describes the full event,
    # which is wrong for subsampled events, and matching needs the hits actually present.
    counts = np.bincount(pindex[pindex >= 0], minlength=len(particles))
    particles = Particles(particles.particle_id, particles.vertex, particles.momentum,
                          particles.charge, counts.astype(np.int64))
    position = np.stack([hits[c][hit_order] for c in ("x", "y", "z")], axis=1)
    return Event(
        name=prefix, hit_id=hit_id, position=position,
        volume=hits["volume_id"][hit_order], layer=hits["layer_id"][hit_order],
        module=hits["module_id"][hit_order], particle_id=pid, particle_index=pindex,
        weight=truth["weight"][truth_order], particles=particles,
    )


def read_events(directory: str | Path, limit: int | None = None) -> list[Event]:
    """Every event in ``directory`` (the first ``limit`` in name order)."""
    prefixes = event_files(directory)[:limit]
    if not prefixes:
        raise DataFormatError(f"{directory}: no '*-hits.csv' or '*-hits.csv.gz' files found")
    return [read_event(directory, p) for p in prefixes]


def _find(directory: Path, stem: str) -> Path:
    for suffix in (".csv", ".csv.gz"):
        path = directory / f"{stem}{suffix}"
        if path.is_file():
            return path
    raise DataFormatError(f"{directory / stem}.csv[.gz]: file not found")


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")  # closed by the caller


def read_columns(path: Path, columns: dict[str, type]) -> dict[str, np.ndarray]:
    """The named columns of a CSV file as typed arrays; other columns are ignored."""
    try:
        with _open_text(path) as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, EOFError, csv.Error) as err:
        raise DataFormatError(f"{path}: cannot be read as CSV ({err})") from err
    if not rows:
        raise DataFormatError(f"{path}: empty file, expected a header line")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in columns if c not in header]
    if missing:
        raise DataFormatError(f"{path}: missing column(s) {missing}; header is {header}")
    body = rows[1:]
    for i, row in enumerate(body):
        if len(row) != len(header):
            raise DataFormatError(
                f"{path}: line {i + 2} has {len(row)} fields, the header has {len(header)}"
            )
    return {name: _column(path, body, header.index(name), name, dtype)
            for name, dtype in columns.items()}


def _column(path: Path, body: list[list[str]], j: int, name: str, dtype: type) -> np.ndarray:
    text = [row[j] for row in body]
    try:
        values = np.array(text, dtype=np.float64 if dtype is np.float64 else np.int64)
    except (ValueError, OverflowError):
        bad = next(i for i, t in enumerate(text) if not _parses(t, dtype))
        raise DataFormatError(
            f"{path}: line {bad + 2}, column {name!r}: cannot parse {text[bad]!r} as "
            f"{'a number' if dtype is np.float64 else 'an integer'}"
        ) from None
    if dtype is np.float64 and not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise DataFormatError(
            f"{path}: line {bad + 2}, column {name!r}: value {text[bad]!r} is not finite"
        )
    return values


def _parses(text: str, dtype: type) -> bool:
    try:
        np.array([text], dtype=np.float64 if dtype is np.float64 else np.int64)
    except (ValueError, OverflowError):
        return False
    return True


def _unique_order(ids: np.ndarray, path: Path, name: str) -> np.ndarray:
    """The permutation sorting ``ids``; duplicated ids are an error naming a line."""
    order = np.argsort(ids, kind="stable")
    dup = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if dup.size:
        line = int(order[dup[0] + 1]) + 2
        value = int(ids[order][dup[0]])
        raise DataFormatError(f"{path}: line {line}: {name} {value} appears twice")
    return order


def _check_same_hits(hit_id: np.ndarray, truth_id: np.ndarray,
                     truth_path: Path, hits_path: Path) -> None:
    """Truth must list exactly the hits of the hits file; name the first offender."""
    missing = np.setdiff1d(truth_id, hit_id)
    if missing.size:
        line = int(np.flatnonzero(truth_id == missing[0])[0]) + 2
        raise DataFormatError(
            f"{truth_path}: line {line}: hit_id {int(missing[0])} is not in {hits_path}"
        )
    if truth_id.size != hit_id.size:
        absent = int(np.setdiff1d(hit_id, truth_id)[0])
        raise DataFormatError(f"{truth_path}: no truth row for hit_id {absent} of {hits_path}")


def _particles(cols: dict[str, np.ndarray], path: Path) -> Particles:
    order = _unique_order(cols["particle_id"], path, "particle_id")
    zero = np.flatnonzero(cols["particle_id"] == 0)
    if zero.size:
        raise DataFormatError(
            f"{path}: line {int(zero[0]) + 2}: particle_id 0 is reserved for noise"
        )
    def stack(*names: str) -> np.ndarray:
        return np.stack([cols[n][order] for n in names], axis=1)

    return Particles(
        particle_id=cols["particle_id"][order], vertex=stack("vx", "vy", "vz"),
        momentum=stack("px", "py", "pz"), charge=cols["q"][order], nhits=cols["nhits"][order],
    )


def _particle_index(pid: np.ndarray, particles: Particles, path: Path,
                    order: np.ndarray) -> np.ndarray:
    """Row in ``particles`` of each hit's particle (-1 for noise); unknown ids are an error."""
    pos = np.zeros(pid.shape, np.int64)
    known = np.zeros(pid.shape, bool)
    if len(particles):
        pos = np.minimum(np.searchsorted(particles.particle_id, pid), len(particles) - 1)
        known = particles.particle_id[pos] == pid
    unknown = np.flatnonzero(~known & (pid != 0))
    if unknown.size:
        line = int(order[unknown[0]]) + 2
        raise DataFormatError(
            f"{path}: line {line}: particle_id {int(pid[unknown[0]])} is not in the particles file"
        )
    return np.where(pid == 0, -1, pos).astype(np.int64)

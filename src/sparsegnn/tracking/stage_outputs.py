"""Stage outputs on disk: folders that appear whole, their manifests, and track files.

Every stage of ``sparsegnn track`` that writes a folder (``build-graphs``: graphs,
``reconstruct``: tracks) writes it through :func:`output_folder`: a temporary folder that
replaces the output whole once every file is written, with a ``manifest.json`` naming its
format, its files and what the stage was run with. The next stage reads it back with
:func:`read_manifest`, so stages chain on disk: ``track evaluate --tracks DIR`` scores
the tracks ``track reconstruct`` wrote (:func:`read_tracks`) instead of rebuilding them.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from sparsegnn.data.io import atomic_dir
from sparsegnn.errors import DataFormatError
from sparsegnn.tracking.events import Event
from sparsegnn.tracking.tracks import Tracks

MANIFEST = "manifest.json"
GRAPHS_FORMAT = "sparsegnn-track-graphs"
TRACKS_FORMAT = "sparsegnn-track-tracks"


@contextmanager
def output_folder(out: Path, kind: str
                  ) -> Iterator[tuple[Path, Callable[..., None]]]:
    """A temp folder that replaces ``out`` whole once the stage has written every file.

    Yields the folder and a function that writes the manifest (call it last, with the
    files written and any further plain-data fields). A failure part-way leaves ``out``
    as it was and no partial files. Because ``out`` is replaced, a non-empty folder that
    is not an earlier output of this stage is refused rather than deleted.
    """
    _check_replaceable(out, kind)
    with atomic_dir(out) as tmp:
        def manifest(files: list[str], **meta: Any) -> None:
            text = json.dumps({"format": kind, "version": 1, "files": files, **meta},
                              indent=1)
            (tmp / MANIFEST).write_text(text, encoding="utf-8")

        yield tmp, manifest


def _check_replaceable(out: Path, kind: str) -> None:
    if not out.is_dir() or not any(out.iterdir()):
        return
    try:
        written = json.loads((out / MANIFEST).read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        written = None
    if written != kind:
        raise DataFormatError(f"{out} is not empty and is not an earlier {kind} output; "
                              "the output replaces the folder whole, so name a new one")


def read_manifest(directory: Path, kind: str) -> dict[str, Any]:
    """The manifest of a folder a stage wrote as ``kind``, or one error naming the folder."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataFormatError(f"{directory}: no readable {MANIFEST} ({err})") from err
    if not isinstance(manifest, dict) or manifest.get("format") != kind:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise DataFormatError(f"{directory} holds {found or 'no known'} output, not {kind}")
    files = manifest.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) and "/" not in f
                                              and f not in ("", ".", "..") for f in files):
        raise DataFormatError(f"{directory}/{MANIFEST}: 'files' is not a list of file names")
    return manifest


def tracks_file(event_name: str) -> str:
    return f"{event_name}-tracks.csv"


def write_tracks(path: str | Path, event: Event, tracks: Tracks) -> None:
    """TrackML submission rows ``hit_id,track_id``; hits on no track get their own ids."""
    labels = tracks.with_singletons().hit_track
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["hit_id", "track_id"])
        writer.writerows(zip(event.hit_id.tolist(), labels.tolist(), strict=True))


def read_tracks(path: Path, event: Event) -> Tracks:
    """The tracks of ``event`` in a file :func:`write_tracks` wrote (one-hit tracks, which
    track building never makes, read back as hits on no track)."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
        if not rows or rows[0] != ["hit_id", "track_id"]:
            raise ValueError("the header is not hit_id,track_id")
        table = np.array([[int(a), int(b)] for a, b in rows[1:]], dtype=np.int64).reshape(-1, 2)
    except (OSError, ValueError) as err:
        raise DataFormatError(f"{path}: not a tracks file ({err})") from err
    if not np.array_equal(np.sort(table[:, 0]), np.sort(event.hit_id)):
        raise DataFormatError(f"{path}: its hit ids are not those of event {event.name}")
    order = np.argsort(event.hit_id)
    pos = order[np.searchsorted(event.hit_id, table[:, 0], sorter=order)]
    labels = np.full(event.num_hits, -1, dtype=np.int64)
    labels[pos] = table[:, 1]
    _, relabel, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    keep = sizes[relabel] >= 2
    _, dense = np.unique(relabel[keep], return_inverse=True)
    out = np.full(event.num_hits, -1, dtype=np.int64)
    out[keep] = dense
    return Tracks(event.name, out)


def graph_paths(directory: Path) -> list[Path]:
    """The graph files of a ``track build-graphs`` folder, sorted; an error if none."""
    paths = sorted(directory.glob("*.npz")) if directory.is_dir() else []
    if not paths:
        raise DataFormatError(f"{directory}: no graph .npz files (run 'track build-graphs')")
    return paths


def load_graphs(directory: Path) -> list:
    from sparsegnn.tracking.hit_graph import HitGraph

    return [HitGraph.load(p) for p in graph_paths(directory)]

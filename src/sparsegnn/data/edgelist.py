"""Text edge lists: two integer columns per line, read exactly or refused with the line.

Separators may be spaces, tabs or commas, ``#`` starts a comment, and further columns
(weights, timestamps) are ignored. Ids are int64 as written (never through floats), so
any id below 2**63 converts exactly; a line that is not two such ids is named by its
line number, as an editor shows it.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import numpy as np

from sparsegnn.data.edges import directed_edge_index, undirected_edge_index
from sparsegnn.data.graph import GraphData
from sparsegnn.errors import DataFormatError

PathLike = str | os.PathLike[str]
# num_nodes is stored as int64, so the largest id is one less than its maximum.
_MAX_NODES = 2**63 - 1


def read_edge_list(
    path: PathLike, *, num_nodes: int | None = None, undirected: bool = True
) -> GraphData:
    """A text edge list: two integer columns (space, tab or comma separated), ``#`` comments.

    Further columns (weights, timestamps) are ignored. The first data line is taken as a
    CSV header only if one of its first two fields is not a number: a numeric line that is
    not two integers (``1.5 2``) is a mistake in the data, not a header, and dropping it
    would lose an edge silently. Ids are used as given, so ``num_nodes`` defaults to the
    largest id plus one. ``undirected`` stores both directions; either way self-loops and
    repeated edges are dropped.
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: no such file")
    sniffed = _sniff_edge_list(path)
    if sniffed is None:  # only comments and blank lines
        return edges_to_graph(np.zeros(0), np.zeros(0), num_nodes, undirected, path)
    delimiter, skip = sniffed
    try:
        with warnings.catch_warnings():  # a header and no data is an empty graph, said once
            warnings.filterwarnings("ignore", "loadtxt: input contained no data")
            pairs = np.loadtxt(path, dtype=np.int64, comments="#", delimiter=delimiter,
                               usecols=(0, 1), skiprows=skip, ndmin=2)
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise DataFormatError(
            f"{path}: {_first_bad_line(path, delimiter, skip) or err}"
        ) from err
    return edges_to_graph(pairs[:, 0], pairs[:, 1], num_nodes, undirected, path)


def _sniff_edge_list(path: Path) -> tuple[str | None, int] | None:
    """Delimiter (comma or whitespace) and lines to skip up to a header; None if no data.

    Only a first data line with a non-numeric field among its first two is a header.
    """
    try:
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                data = line.split("#", 1)[0].strip()
                if not data:
                    continue
                delimiter = "," if "," in data else None
                fields = _fields(data, delimiter)
                if not all(_NUMBER.fullmatch(s) for s in fields):
                    return delimiter, lineno
                return delimiter, 0
    except (OSError, UnicodeDecodeError) as err:
        raise DataFormatError(f"{path}: not readable as UTF-8 text ({err})") from err
    return None


def _first_bad_line(path: Path, delimiter: str | None, skip: int) -> str | None:
    """Which line of an edge list is not two int64 ids, said the way a user fixes it.

    numpy's own message counts rows after comments and the header, not file lines; this
    rescans the file (only on failure) to name the line as an editor shows it.
    """
    try:
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                data = line.split("#", 1)[0].strip()
                if lineno <= skip or not data:
                    continue
                fields = _fields(data, delimiter)
                if len(fields) < 2 or not all(_fits_int64(s) for s in fields):
                    shown = data if len(data) <= 60 else data[:57] + "..."
                    return (f"line {lineno}: expected two integer node ids below 2**63, "
                            f"got {shown!r}")
    except (OSError, UnicodeDecodeError) as err:
        return f"not readable as UTF-8 text ({err})"
    return None


def _fields(data: str, delimiter: str | None) -> list[str]:
    """The first two fields of a data line, as numpy's loadtxt splits them."""
    return [s.strip() for s in data.split(delimiter)][:2]


# A decimal number as a data file writes one: 12, -3, 1.5, .5, 2e9 (not "nan" or "0x1f").
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")


def _fits_int64(text: str) -> bool:
    return bool(_INTEGER.fullmatch(text)) and -(2**63) <= int(text) < 2**63


def edges_to_graph(
    src: np.ndarray, dst: np.ndarray, num_nodes: int | None, undirected: bool, path: Path
) -> GraphData:
    """The graph of edge arrays read from ``path``: ids checked, loops and repeats dropped."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if src.size and min(int(src.min()), int(dst.min())) < 0:
        raise DataFormatError(f"{path}: node ids must be non-negative")
    largest = max(int(src.max()), int(dst.max())) + 1 if src.size else 0
    if largest > _MAX_NODES:
        raise DataFormatError(
            f"{path}: node id {largest - 1} leaves no room for num_nodes in int64; "
            f"ids must be below {_MAX_NODES}"
        )
    if num_nodes is None:
        num_nodes = largest
    elif largest > num_nodes:
        raise DataFormatError(f"{path}: node id {largest - 1} >= num_nodes {num_nodes}")
    build = undirected_edge_index if undirected else directed_edge_index
    return GraphData(
        edge_index=build(src, dst, num_nodes),
        num_nodes=num_nodes,
        name=path.stem,
        meta={"source": str(path), "undirected": undirected},
    )

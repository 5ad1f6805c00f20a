"""Hostile and careless input to the data commands (issue 27): ids, sizes, loaders, outputs.

Every case runs the real CLI in a subprocess. A refusal must be exit 2 with one stderr line
that names the input, no traceback, no output or temp file left behind and the inputs
unchanged; an accepted input must give exactly the graph it describes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli
from sparsegnn.data import load_graph

# Ids whose product key u * num_nodes + v overflowed int64 (num_nodes above ~3.04e9).
_BIG = 4_000_000_000
_HUGE = 2**62


def _expected(pairs: list[tuple[int, int]], directed: bool) -> list[tuple[int, int]]:
    """The edge set the converter must store: loops and repeats dropped, both directions
    when undirected, sorted by source then target."""
    edges = {(u, v) for u, v in pairs if u != v}
    if not directed:
        edges |= {(v, u) for u, v in edges}
    return sorted(edges)


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_large_ids_convert_exactly(workdir: Path, directed: bool) -> None:
    """Serious case 3: ids near 4e9 and 2**62 were converted (exit 0) into wrong edges."""
    pairs = [(_BIG, _BIG + 1), (_BIG + 1, _BIG - 1), (5, _BIG + 2), (_BIG + 2, 5),
             (_HUGE, 7), (_HUGE + 3, _HUGE), (_BIG, _BIG), (0, _HUGE + 3)]
    src = workdir / "edges.txt"
    src.write_text("".join(f"{u} {v}\n" for u, v in pairs))
    out = workdir / "out.npz"
    proc = run_cli("data", "convert", src, out, *(["--directed"] if directed else []))
    assert proc.returncode == 0, proc.stderr
    g = load_graph(out)
    assert g.num_nodes == _HUGE + 4
    assert list(map(tuple, g.edge_index.T.tolist())) == _expected(pairs, directed)

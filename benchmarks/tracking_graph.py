"""Graph construction at pileup 200: efficiency vs the number of events the module map saw.

Run: ``python benchmarks/tracking_graph.py [--quick] [--json] [--map-events 10,20,...]
[--windows 0.1:8,0.2:8] [--test-events N] [--workers W] [--plot PNG] [--save-map NPZ]``.

Module pairs are geometry, so the map need not come from the events it is used on: it is
learnt here from cheap simulated map events, muon guns of 4000 muons per event, each muon
from its own beam-spot vertex (the luminous region's z range, as pileup spreads it) and
|eta| < 3 (as the ttbar events' particle selection). A window keeps min and max, so both
ends of each variable's range must be seen: four chunks in five shoot soft muons, pT
0.9-2 GeV (the most curved pT >= 1 GeV targets, both charges), the fifth stiff ones, pT
2-50 GeV (the straight end: a module pair that only one charge of soft muons crosses
otherwise gets a dphi window that stops short of zero). Events are simulated once into
``DIR/graph_map/gun4000v/chunkNNN`` (soft, 10 events a chunk, seed 8000 + N) and
``DIR/graph_map/gun4000v_straight/chunkNNN`` (stiff, seed 9000 + N) in ``--workers``
processes, and each event's map is learnt in ``--workers`` processes too
(``sparsegnn.tracking.module_map.event_maps``), from particles with pT >= 0.9 GeV.

At each number of map events the merged map builds the graphs of held-out pileup-200
ttbar events (``tracking_dense.py``'s set: none of them is a map event) in three ways:
the map's pairs with tracking.py's global doublet cuts (the previous construction), and
the map's per-pair windows (min/max of dphi, dz, deta, phi slope, z0, as GNN4ITk's
module map) widened on each side by ``m + k / count`` times their width for each
``--windows m:k`` (``count``: the pair's segments in the map). Graph efficiency is
over the target segments (pT >= 1 GeV, >= 3 hits, |eta| < 4), pooled over the events;
``coverage`` is the share of target segments whose module pair is in the map (the bound
every construction on that map stays under).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, emit, make_parser, print_table
from _map_events import LEARN_BELOW, map_chunks
from _tracking import TRACKING_DATA, TTBAR_PU200, TrackingDataset, events_dir
from sparsegnn.tracking.doublet_cuts import DoubletCuts
from sparsegnn.tracking.events import Event, read_events
from sparsegnn.tracking.graph_construction import module_map_graph
from sparsegnn.tracking.module_map import ModuleMap, event_maps
from sparsegnn.tracking.settings import TTBAR_CUTS
from sparsegnn.tracking.truth import DEFAULT_TARGETS, segments, selected_particles

DEFAULT_IMG = Path(__file__).resolve().parents[1] / "docs" / "img" / "tracking_graph_efficiency.png"
QUICK_TEST = TrackingDataset("ttbar_pu5", None, 5, 10, 2, 1, 41)  # tracking.py --quick's


def coverage(events: list[Event], mm: ModuleMap) -> float:
    """Share of the events' target segments whose (unordered) module pair is in ``mm``."""
    known = {tuple(p) for p in mm.unordered_pairs().tolist()}
    hit = total = 0
    for ev in events:
        src, dst = segments(ev)
        target = selected_particles(ev, DEFAULT_TARGETS)[ev.particle_index[src]]
        keys = np.sort(np.stack([ev.module_key[src[target]], ev.module_key[dst[target]]], 1), 1)
        hit += sum(tuple(k) in known for k in keys.tolist())
        total += keys.shape[0]
    return hit / max(total, 1)


def measure(events: list[Event], mm: ModuleMap, cuts: DoubletCuts) -> dict[str, float]:
    """Pooled graph efficiency and purity, edges and seconds per event of one construction."""
    kept = targets = edges = true = 0
    start = time.perf_counter()
    for ev in events:
        graph = module_map_graph(ev, mm, cuts)
        kept += int(graph.target.sum())
        targets += graph.num_target_segments
        edges += graph.num_edges
        true += int(graph.y.sum())
    seconds = time.perf_counter() - start
    return {"graph_efficiency": kept / max(targets, 1), "edges_per_event": edges / len(events),
            "purity": true / max(edges, 1), "seconds_per_event": seconds / len(events)}


def constructions(windows: list[tuple[float, float]]) -> list[tuple[str, DoubletCuts]]:
    """(name, cuts): the global cuts, then the windows at each (margin, count margin)."""
    return [("global cuts", TTBAR_CUTS),
            *((f"windows {m:g} + {k:g}/count", DoubletCuts(window_margin=m,
                                                           window_count_margin=k))
              for m, k in windows)]


def bench(args: argparse.Namespace) -> list[Row]:
    """One row per (number of map events, construction)."""
    test_set = QUICK_TEST if args.quick else TTBAR_PU200
    test = read_events(events_dir(args.data, test_set, "test"))
    if not args.quick:  # the pileup-200 training events are not map events either
        test += read_events(events_dir(args.data, test_set, "train"))
    test = test[:args.test_events]
    checkpoints = sorted(args.map_events)
    dirs = map_chunks(args.data, checkpoints[-1], args.workers)
    rows: list[Row] = []
    merged, batch, seen = ModuleMap.empty("module", windows=True), [], 0
    learn_start, learn_seconds = time.perf_counter(), 0.0
    for found in event_maps(dirs, "module", LEARN_BELOW, True, args.workers,
                            limit=checkpoints[-1]):
        batch.append(found)
        seen += 1
        if seen not in checkpoints:
            continue
        merged, batch = ModuleMap.merge([merged, *batch]), []
        learn_seconds += time.perf_counter() - learn_start
        base = {"map_events": seen, "module_pairs": len(merged), "test_events": len(test),
                "coverage": coverage(test, merged), "learn_seconds": learn_seconds}
        for name, cuts in constructions(args.windows):
            rows.append({**base, "construction": name, **measure(test, merged, cuts)})
            print_table(rows[-1:], ["map_events", "construction", "graph_efficiency",
                                    "edges_per_event", "purity"])
        learn_start = time.perf_counter()
    if args.save_map:
        merged.save(args.save_map)
    return rows


def plot(rows: list[Row], path: Path) -> Path:
    """Graph efficiency vs map events, one line per construction (edges per event in the
    legend at the largest map)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in dict.fromkeys(r["construction"] for r in rows):
        mine = [r for r in rows if r["construction"] == name]
        label = f"{name} ({mine[-1]['edges_per_event'] / 1e3:.0f}k edges/event)"
        ax.plot([r["map_events"] for r in mine], [r["graph_efficiency"] for r in mine], "o-",
                label=label)
    cov = {r["map_events"]: r["coverage"] for r in rows}
    ax.plot(list(cov), list(cov.values()), "k--", label="module pairs known (coverage)")
    ax.axhline(0.995, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("map events (4000-muon guns, one vertex per muon)")
    ax.set_ylabel("graph efficiency, pT >= 1 GeV targets")
    ax.set_title(f"pileup-200 ttbar, {rows[0]['test_events']} held-out events")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = make_parser(__doc__.splitlines()[0],
                    quick_help="20 map events, one pileup-5 test event: a smoke run")

    def pairs(text: str) -> list[tuple[float, float]]:
        return [(float(m), float(k)) for m, k in (x.split(":") for x in text.split(","))]

    p.add_argument("--map-events", type=lambda s: [int(x) for x in s.split(",")],
                   default=[10, 20, 40, 80, 160, 320],
                   help="numbers of map events to measure at (default 10,...,320)")
    p.add_argument("--windows", type=pairs, default=[(0.1, 8.0), (0.2, 8.0), (0.3, 16.0)],
                   help="window widenings m:k, each side by (m + k / segments seen) x "
                        "width (default 0.1:8,0.2:8,0.3:16)")
    p.add_argument("--test-events", type=int, default=6,
                   help="held-out pileup-200 events to measure on (at most 6)")
    p.add_argument("--workers", type=int, default=1,
                   help="processes that simulate and learn map events (default 1)")
    p.add_argument("--plot", type=Path, default=None,
                   help=f"write the efficiency plot here (e.g. {DEFAULT_IMG})")
    p.add_argument("--save-map", type=Path, default=None,
                   help="write the largest map (.npz, with its windows) here")
    p.add_argument("--data", type=Path, default=TRACKING_DATA,
                   help=f"where simulated events are kept and reused (default {TRACKING_DATA})")
    args = p.parse_args(argv)
    if args.quick:
        args.map_events, args.test_events = [10, 20], 1
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rows = bench(args)
    if args.plot:
        print(f"plot: {plot(rows, args.plot)}")
    last = max(r["map_events"] for r in rows)
    metrics = {f"{r['construction']}/graph_efficiency": r["graph_efficiency"]
               for r in rows if r["map_events"] == last}
    emit(rows, {}, metrics, args.json)


if __name__ == "__main__":
    main()

"""Map events for the module map: muon guns simulated once into chunk folders, shared by
``tracking_graph.py`` (efficiency vs map events) and ``tracking.py`` (the map its
pipeline is trained with). Why soft and stiff chunks: see ``tracking_graph.py``.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from sparsegnn.tracking.events import event_files

CHUNK_EVENTS = 10
MAP_GUN = {"particles": 4000, "eta_max": 3.0, "spread_vertices": True}
# Map-event muons have pT from 0.9 to 2 times the targets' minimum (the extremes of the
# targets' curvature, both charges), and the windows are learnt from those above 0.9 x.
LEARN_BELOW = 0.9
CURVED_PT = (LEARN_BELOW, 2.0)
# Every STRAIGHT_EVERY-th chunk shoots stiff muons instead (2 to 50 times the minimum):
# a module pair that only one charge of soft muons crosses learns a dphi and phi-slope
# window that ends short of zero, and straight tracks (dphi ~ 0) fall outside it. With
# soft muons alone, 2.3% of a 1000-muon gun's target segments (flat pT 0.5-10 GeV, median
# 7.5 GeV among the lost ones) missed their windows (docs/tracking.md).
STRAIGHT_PT = (2.0, 50.0)
STRAIGHT_EVERY = 5


def simulate_chunk(directory: str, seed: int, pt_min: float, pt_max: float) -> str:
    """One chunk of map events (a worker's task; nothing when already there)."""
    from sparsegnn.tracking.simulate import GunConfig, simulate_gun

    if not (Path(directory).is_dir() and len(event_files(directory)) == CHUNK_EVENTS):
        simulate_gun(directory, GunConfig(events=CHUNK_EVENTS, seed=seed, pt_min=pt_min,
                                          pt_max=pt_max, **MAP_GUN))
    return directory


def map_folder(root: Path, min_pt: float = 1.0, straight: bool = False) -> Path:
    """Where the (soft, or with ``straight`` stiff) map events for targets above
    ``min_pt`` GeV are kept."""
    name = "gun4000v" + ("_straight" if straight else "")
    return root / "graph_map" / (name if min_pt == 1.0 else f"{name}_pt{min_pt:g}")


def map_chunks(root: Path, events: int, workers: int, min_pt: float = 1.0) -> list[Path]:
    """The chunk folders holding the first ``events`` map events for targets above
    ``min_pt`` GeV, simulated where missing (``workers`` processes)."""
    tasks = chunk_tasks(root, events, min_pt)
    if workers <= 1:
        return [Path(simulate_chunk(*task)) for task in tasks]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return [Path(d) for d in pool.map(simulate_chunk, *zip(*tasks, strict=True))]


def chunk_tasks(root: Path, events: int, min_pt: float) -> list[tuple[str, int, float, float]]:
    """Each chunk's folder, seed and muon pT range: soft chunks, every
    :data:`STRAIGHT_EVERY`-th one stiff (each kind numbered and seeded on its own, so a
    longer sequence starts with the chunks of a shorter one)."""
    base = 8000 if min_pt == 1.0 else 8500
    tasks, kinds = [], [0, 0]
    for k in range(-(-events // CHUNK_EVENTS)):
        straight = k % STRAIGHT_EVERY == STRAIGHT_EVERY - 1
        n = kinds[straight]
        kinds[straight] += 1
        low, high = STRAIGHT_PT if straight else CURVED_PT
        tasks.append((str(map_folder(root, min_pt, straight) / f"chunk{n:03d}"),
                      base + 1000 * straight + n, low * min_pt, high * min_pt))
    return tasks

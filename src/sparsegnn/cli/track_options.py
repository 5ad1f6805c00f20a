"""The option groups the ``track`` stages share, and what the given options become.

Several stages (build-graphs, reconstruct, evaluate, ckf) ask for events, target
particles, graph construction and track building with the same flags. This module adds
those groups and turns what was given into the library's objects: the events folder, a
target configuration, the model and events to read, and a
:class:`~sparsegnn.tracking.pipeline.Reconstruction` whose settings the flags override.
It is apart from the stages so that each stage reads as its own flags and its handler.
Like every CLI module it imports the library only inside functions (``--help`` stays
light).
"""


from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from sparsegnn.cli.common import float_range, int_range, resolve_device
from sparsegnn.errors import InvalidValueError
from sparsegnn.names import SCORING_PRECISIONS, TRACK_METHODS


def events_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=Path, default=None,
                   help="directory of TrackML CSV events (default: the TrackML sample event "
                        "from $SPARSEGNN_DATA, the nearest shared/data or the bundled copy)")
    p.add_argument("--limit", type=int_range(1), default=None,
                   help="read only the first N events")


def events_dir(args: argparse.Namespace) -> Path:
    """``--events``, else the sample event, so ``track evaluate`` runs from a clone alone."""
    from sparsegnn.data.paths import dataset_dir

    return args.events if args.events is not None else dataset_dir("trackml_sample")


def target_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("target / reconstructable particles")
    g.add_argument("--min-pt", type=float_range(0.0), default=1.0, help="GeV (default 1)")
    g.add_argument("--min-hits", type=int_range(1), default=3)
    g.add_argument("--max-eta", type=float_range(0.0, lo_open=True), default=4.0,
                   help="|eta| bound (default 4)")


def carried(what: str, otherwise: str) -> str:
    """Help for a flag a model file carries: with ``--model``, the model's value is the
    default, not the global one."""
    return f"{what} (default: the model's setting, else {otherwise})"


CUT_FLAGS = (("dphi", "rad"), ("dz", "mm"), ("deta", ""), ("phi-slope", "rad/mm"), ("z0", "mm"))


def graph_flags(p: argparse.ArgumentParser, default: str) -> None:
    """Graph settings; unset ones keep the model's (``--model``) or the defaults."""
    g = p.add_argument_group("graph construction (default: the model's settings, if any)")
    g.add_argument("--graph", choices=("module-map", "truth"), default=None,
                   help=carried("module map + cuts, or edges between consecutive hits",
                                default))
    g.add_argument("--module-map", type=Path, default=None,
                   help="module map file (.npz); else the model's, else learnt from "
                        "--train-events (and written here)")
    g.add_argument("--map-level", choices=("module", "layer"), default=None,
                   help=carried("learn module pairs, or (volume, layer) pairs for few "
                                "training events", "module"))
    g.add_argument("--train-events", type=Path, default=None,
                   help="events to learn the module map from (default: --events, which "
                        "makes graph efficiency optimistic)")
    for cut, unit in CUT_FLAGS:
        g.add_argument(f"--{cut}", type=float_range(0.0, lo_open=True), default=None,
                       help=carried(f"max |{cut}| {unit}".strip(), "the map's global cut"))
    g.add_argument("--min-dr", type=float_range(0.0), default=None,
                   help=carried("pairs closer than this in r (mm) skip the phi-slope and "
                                "z0 cuts (10 keeps overlapping-module pairs in dense events)",
                                "1"))
    g.add_argument("--map-windows", action="store_true",
                   help="learn the module map with a cut window per module pair (min/max "
                        "of dphi, dz, deta, phi slope, z0 of its segments)")
    g.add_argument("--map-min-pt", type=float_range(0.0), default=0.0,
                   help="learn the map from particles above this pT only (GeV; default 0, "
                        "0.9 for windows fitted to pT >= 1 GeV targets)")
    g.add_argument("--map-workers", type=int_range(1), default=1,
                   help="processes reading --train-events to learn the map (default 1)")
    g.add_argument("--window-margin", type=float_range(0.0), default=None,
                   help=carried("apply the map's windows, widened by this fraction of "
                                "their width", "no windows"))
    g.add_argument("--window-count-margin", type=float_range(0.0), default=None,
                   help=carried("widen each window by this many widths / segments seen",
                                "0"))
    g.add_argument("--window-min-count", type=int_range(1), default=None,
                   help=carried("pairs seen fewer times get no window, only the global "
                                "cuts", "1"))


def reco_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scoring and track building (default: the model's settings)")
    g.add_argument("--cut", type=float_range(0.0, 1.0),
                   help=carried("edge score cut", "0.5"))
    g.add_argument("--method", choices=TRACK_METHODS,
                   help=carried("track building (triplets: junctions resolved by edge score "
                                "and helix geometry)", "components"))
    g.add_argument("--min-track-hits", type=int_range(1), default=None,
                   help=carried("drop shorter tracks (5 drops most fragments, which count as "
                                "fakes)", "keep all"))
    g.add_argument("--precision", choices=SCORING_PRECISIONS, default=None,
                   help=carried("edge scoring precision: bf16 runs the network's message "
                                "passing in bfloat16 (faster on CPUs with AMX and on GPUs)",
                                "fp32"))
    g.add_argument("--max-sample-nodes", type=int_range(1), default=None,
                   help=carried("score ShaDow subgraphs of at most this many hits instead "
                                "of whole events: bounded memory, many times slower",
                                "whole events"))
    g.add_argument("--min-layers", type=int_range(1), default=None,
                   help=carried("drop tracks crossing fewer distinct layers", "1"))
    g.add_argument("--extend-cut", type=float_range(0.0, 1.0), default=None,
                   help=carried("walkthrough: extend chain ends with free hits through "
                                "edges down to this score", "no extension"))
    g.add_argument("--bridge-misfit", type=float_range(0.0, lo_open=True), default=None,
                   help=carried("triplets: join chains too short alone across a missing "
                                "segment (no edge) where the helix fits up to this misfit",
                                "no bridging"))
    g.add_argument("--merge-cut", type=float_range(0.0, 1.0), default=None,
                   help=carried("walkthrough: merge pieces whose end and start an edge of "
                                "at least this score joins", "no merging"))


def target_config(args: argparse.Namespace) -> Any:
    from sparsegnn.tracking.truth import DEFAULT_TARGETS, TargetConfig

    has_flags = hasattr(args, "min_pt")  # reconstruct has none: labels only
    return TargetConfig(args.min_pt, args.min_hits, args.max_eta) if has_flags else DEFAULT_TARGETS


def reconstruction(args: argparse.Namespace, base: Any, events: list[Any], model: Any = None,
                    edge_filter: Any = None) -> Any:
    """The reconstruction the options ask for: the model's (its settings over ``base``),
    or an oracle on ``base``, with every given flag overriding, and its module map."""
    from sparsegnn.tracking.module_map import ModuleMap, learn_module_map
    from sparsegnn.tracking.pipeline import Reconstruction, with_module_map

    device = resolve_device(args.device) if hasattr(args, "device") else "cpu"
    reco = (Reconstruction(base, targets=target_config(args)) if model is None else
            Reconstruction.from_model(model, device, target_config(args), base))
    given = {k: getattr(args, k.replace("-", "_"), None)
             for k in ("graph", "map_level", "min_dr", "cut", "method", "min_track_hits",
                       "window_margin", "window_count_margin", "window_min_count",
                       "extend_cut", "merge_cut", "min_layers", "precision", "bridge_misfit")}
    given |= {c.replace("-", "_"): getattr(args, c.replace("-", "_")) for c, _ in CUT_FLAGS}
    reco = reco.with_config(**given, sample_nodes=getattr(args, "max_sample_nodes", None))
    if edge_filter is not None:
        reco.edge_filter = edge_filter
    if getattr(args, "graphs", None) is not None:  # saved graphs: no map needed
        return reco
    def learn(level: str) -> Any:
        if args.train_events is None:
            return ModuleMap.learn(events, level, args.map_min_pt, args.map_windows)
        return learn_module_map([args.train_events], level, args.map_min_pt, args.map_windows,
                                args.map_workers)

    return with_module_map(reco, args.module_map, learn)


def clean(obj: Any) -> Any:
    """NaN -> None so --json prints valid JSON."""
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clean(v) for v in obj]
    return None if isinstance(obj, float) and math.isnan(obj) else obj


MODEL_HELP = ("trained model file (default: the one the package ships, trained for "
              "targets above 0.5 GeV; see docs/tracking.md)")


def model_file(args: argparse.Namespace) -> Path | None:
    """``--model``, else the shipped model; None where ``--oracle`` asks for truth scores."""
    if getattr(args, "oracle", False):
        if args.model is not None:
            raise InvalidValueError("--oracle scores edges by their truth labels; --model "
                                    "does not apply")
        return None
    if args.model is not None:
        return args.model
    from sparsegnn.tracking.shipped import shipped_model

    return shipped_model()


def model_and_events(args: argparse.Namespace) -> tuple[Any, list[Any], list[Any] | None]:
    """The model file (read first: a bad --model is refused before minutes of reading),
    the events, and their saved graphs when --graphs is given. ``args.model`` becomes
    the file used (the shipped one when none was given), for the summaries."""
    from sparsegnn.tracking.events import read_events
    from sparsegnn.tracking.infer import load_track_model
    from sparsegnn.tracking.pipeline import graphs_by_event
    from sparsegnn.tracking.stage_outputs import load_graphs

    device = resolve_device(args.device)
    args.model = model_file(args)
    found = None if args.model is None else load_track_model(args.model, device)
    events = read_events(events_dir(args), args.limit)
    graphs = (None if args.graphs is None
              else graphs_by_event(load_graphs(args.graphs), events, args.graphs))
    return found, events, graphs

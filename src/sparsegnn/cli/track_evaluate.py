"""``track evaluate`` and ``track ckf``: tracks scored against truth, and the summaries.

``evaluate`` reconstructs (or reads what ``reconstruct`` wrote) and reports edge and
track metrics, where the missed particles were lost, plots and an HTML report; ``ckf``
scores the ACTS peer with the same metrics and summary line. They are apart from
:mod:`sparsegnn.cli.track_cmd`, which registers them beside the stages that write
files, because these two only measure.
"""


from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sparsegnn.cli.common import (
    add_device_flag,
    add_json_flag,
    emit,
    int_range,
    output_dir,
    output_file,
)
from sparsegnn.cli.track_options import (
    MODEL_HELP,
    clean,
    events_dir,
    events_flags,
    graph_flags,
    model_and_events,
    reco_flags,
    reconstruction,
    target_config,
    target_flags,
)
from sparsegnn.errors import InvalidValueError


# ---------------------------------------------------------------------------- evaluate
def register_evaluate(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("evaluate", help="edge and tracking metrics against truth")
    events_flags(p)
    p.add_argument("--tracks", type=Path, default=None,
                   help="score the tracks 'track reconstruct' wrote here (track metrics "
                        "only) instead of reconstructing")
    p.add_argument("--graphs", type=Path, default=None,
                   help="saved graphs (default: build them with the graph flags)")
    p.add_argument("--model", type=Path, default=None, help=MODEL_HELP)
    p.add_argument("--oracle", action="store_true",
                   help="score edges by their truth labels instead of a model (the "
                        "graph and track building alone; default graph: truth)")
    p.add_argument("--plots", type=output_dir, default=None, help="write PNG plots here")
    p.add_argument("--report", type=output_file, default=None, metavar="HTML",
                   help="write one static HTML page: settings, metrics, efficiency vs pT "
                        "and eta (needs matplotlib)")
    reco_flags(p)
    graph_flags(p, "truth, or the model's")
    target_flags(p)
    add_device_flag(p)
    add_json_flag(p)
    p.set_defaults(func=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.pipeline import evaluate_events, plot_results, timing_line
    from sparsegnn.tracking.settings import RecoConfig

    if args.tracks is not None:
        return _evaluate_tracks(args)
    found, events, graphs = model_and_events(args)
    reco = reconstruction(args, RecoConfig(graph="truth"), events, found)
    evaluation = evaluate_events(reco, events, graphs)
    pooled, cfg, building = evaluation.tracks, reco.config, reco.config.building
    result = {
        "events": len(events), "graph": "saved" if args.graphs else cfg.graph,
        "scores": "model" if found is not None else "oracle",
        "model": None if args.model is None else str(args.model), "cut": building.cut,
        "method": building.method, "min_track_hits": building.min_track_hits,
        **evaluation.edges(), **pooled.to_dict(), "missed_particles": evaluation.missed(),
        **evaluation.timing(),
    }
    if args.plots is not None:
        result["plots"] = [str(p) for p in plot_results(evaluation.results, reco.targets,
                                                        args.plots)]
    summary = (f"{len(events)} events, {result['scores']} scores, {building.method} at cut "
               f"{building.cut}: " + _track_line(pooled) + _missed_line(result["missed_particles"])
               + f"\nreconstruction: {timing_line(evaluation.timing())}")
    if args.report is not None:
        _evaluation_report(args, evaluation, reco, clean(result))
        summary += f"\nreport: {args.report}"
    return emit(args, clean(result), summary)


def _evaluation_report(args: argparse.Namespace, evaluation: Any, reco: Any,
                       result: dict[str, Any]) -> None:
    """The ``--report`` page: the JSON figures, the settings and efficiency vs pT and eta."""
    from sparsegnn.tracking.metrics import concat_matches
    from sparsegnn.tracking.plots import efficiency_curves
    from sparsegnn.train.run_report import write_report

    matches = concat_matches([r.matches for r in evaluation.results])
    write_report(args.report, f"sparsegnn track evaluate: {args.events}",
                 {**result, **efficiency_curves(matches, reco.targets),
                  "config": reco.config.to_dict()})


def _evaluate_tracks(args: argparse.Namespace) -> int:
    """Track metrics of the tracks a reconstruct stage wrote (no scores: no edge metrics)."""
    from sparsegnn.tracking.events import read_events
    from sparsegnn.tracking.pipeline import score_written_tracks

    if args.oracle:
        raise InvalidValueError("--tracks scores written tracks; --oracle does not apply")
    for flag in ("model", "graphs", "plots", "report"):
        if getattr(args, flag) is not None:
            raise InvalidValueError(f"--tracks scores written tracks; --{flag} does not apply")
    events = read_events(events_dir(args), args.limit)
    pooled, manifest = score_written_tracks(events, args.tracks, target_config(args))
    result = {"tracks": str(args.tracks), "events": len(events),
              "settings": manifest.get("settings"), "model": manifest.get("model"),
              **pooled.to_dict()}
    return emit(args, clean(result), f"tracks in {args.tracks}: " + _track_line(pooled))


def _track_line(m: Any) -> str:
    return (f"tracking efficiency {m.efficiency:.4f} ({m.num_matched}/{m.num_reconstructable})"
            f", fake rate {m.fake_rate:.4f}, duplicate rate {m.duplicate_rate:.4f}, TrackML "
            f"score {m.trackml_score:.4f}")


def _missed_line(missed: dict[str, int]) -> str:
    """Where the unmatched particles were lost, for the human summary."""
    if not missed["missed"]:
        return ""
    return (f"\n{missed['missed']} reconstructable particles missed, first lost in graph "
            f"construction {missed['lost_in_graph']}, at the score cut "
            f"{missed['lost_at_score_cut']}, in track building "
            f"{missed['lost_in_track_building']}")


# ---------------------------------------------------------------------------- ckf
def register_ckf(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("ckf", help="ACTS seeding + combinatorial Kalman filter (the peer)")
    events_flags(p)
    target_flags(p)
    p.add_argument("--max-seeds-per-spm", type=int_range(1), default=1,
                   help="seeds kept per middle space point (more: slower, better in dense "
                        "events)")
    add_json_flag(p)
    p.set_defaults(func=_ckf)


def _ckf(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.ckf import evaluate_ckf

    pooled, run = evaluate_ckf(args.events, args.limit, target_config(args), args.max_seeds_per_spm)
    result = {"events": len(run.tracks), **pooled.to_dict(),
              "seconds_per_event": run.seconds_per_event, "wall_seconds": run.wall_seconds}
    summary = (f"CKF on {len(run.tracks)} events: " + _track_line(pooled) + f", "
               f"{run.seconds_per_event:.3f} s/event (space points + seeding + CKF + ambiguity)")
    return emit(args, clean(result), summary)

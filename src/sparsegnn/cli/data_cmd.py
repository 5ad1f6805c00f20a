"""``sparsegnn data``: inspect, convert and generate graphs.

Each action is one ``_add_<action>(actions)`` function listed in ``_ACTIONS`` that builds
its subparser and binds its handler, so a new action (``data partition``) is one more
function and one more list entry. :func:`add_source_args` gives every action that reads a
graph the same SOURCE / ``--data-dir`` / ``--seed`` options.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparsegnn.cli.common import add_json_flag, emit, int_range, output_dir, output_file
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.names import ALGORITHMS, MODEL_KINDS, PARTITIONERS

if TYPE_CHECKING:
    from sparsegnn.data.graph import GraphData

# More ranks than any grid sparsegnn runs: a typo (--nprocs 100000000) fails in argparse
# instead of after the graph was loaded and a grid of 10^8 files was planned.
_MAX_RANKS = 65536


def register(subparsers: Any) -> None:
    """Add ``data`` and its actions to the top-level subparsers."""
    parser = subparsers.add_parser(
        "data",
        help="inspect, convert, generate and fetch graphs",
        description="Inspect, convert, generate and fetch graphs. SOURCE is a dataset "
                    "name (cora, citeseer, ogbn-arxiv, ...), a generator spec (rmat:18, "
                    "sbm:nodes=4096,blocks=8,degree=16, uniform:nodes=1000,degree=8), "
                    "a file (.npz graph, scipy .npz, PyG .pt, edge list) or a folder (OGB "
                    "dataset, PyG dataset with processed/, DGL CSVDataset).",
    )
    actions = parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    for add in _ACTIONS:
        add(actions)


def add_source_args(parser: argparse.ArgumentParser) -> None:
    """SOURCE plus the options needed to resolve it (see :func:`sparsegnn.data.load_any`)."""
    parser.add_argument("source", metavar="SOURCE",
                        help="dataset name, generator spec or graph file")
    parser.add_argument("--data-dir", default=None,
                        help="folder holding the datasets (default: $SPARSEGNN_DATA, "
                             "else the nearest shared/data, else the bundled copy)")
    parser.add_argument("--seed", type=int_range(0), default=None,
                        help="seed for generator specs (overrides the spec's seed=)")


def _add_info(actions: Any) -> None:
    p = actions.add_parser("info", help="print node, edge, feature and degree counts")
    add_source_args(p)
    add_json_flag(p)
    p.set_defaults(func=_run_info)


def _add_convert(actions: Any) -> None:
    p = actions.add_parser("convert", help="save any SOURCE as a sparsegnn .npz graph")
    add_source_args(p)
    p.add_argument("out", metavar="OUT", type=output_file,
                   help="output .npz path (the file is an .npz whatever its name)")
    p.add_argument("--directed", action="store_true",
                   help="keep edge-list direction instead of storing both directions")
    p.add_argument("--compress", action="store_true", help="write a compressed .npz")
    add_json_flag(p)
    p.set_defaults(func=_run_convert)


def _add_generate(actions: Any) -> None:
    p = actions.add_parser("generate", help="generate a synthetic graph from a spec")
    p.add_argument("spec", metavar="SPEC",
                   help="generator spec, e.g. rmat:18 or sbm:nodes=262144,blocks=64,degree=16")
    p.add_argument("--out", required=True, type=output_file, help="output .npz path")
    p.add_argument("--seed", type=int_range(0), default=None, help="overrides the spec's seed=")
    p.add_argument("--compress", action="store_true", help="write a compressed .npz")
    add_json_flag(p)
    p.set_defaults(func=_run_generate)


def _add_partition(actions: Any) -> None:
    """``data partition``: one file per rank for distributed training (see docs/distributed.md)."""
    p = actions.add_parser(
        "partition", help="split SOURCE into per-rank blocks for distributed training",
        description="Write OUT/manifest.json and OUT/rank<r>.npz so that each rank of "
                    "`sparsegnn train --dataset OUT` reads only its own blocks; with --mode "
                    "minibatch, OUT/block<j>.npz holds row block j of A and the features "
                    "(nprocs / replication blocks) for `train --mode minibatch`.",
    )
    add_source_args(p)
    p.add_argument("out", metavar="OUT", type=output_dir,
                   help="output directory (new, empty, or an earlier partition to replace)")
    p.add_argument("--mode", choices=("fullgraph", "minibatch"), default="fullgraph",
                   help="fullgraph: the grid's tiles of the operator (needs --algo); "
                        "minibatch: row blocks of A for partitioned minibatch training")
    p.add_argument("--algo", choices=ALGORITHMS, default=None, help="full-graph algorithm")
    p.add_argument("--nprocs", type=int_range(1, _MAX_RANKS), required=True,
                   help="number of ranks of the grid")
    p.add_argument("--replication", type=int_range(1, _MAX_RANKS), default=1,
                   help="c for 1.5d")
    p.add_argument("--model", choices=MODEL_KINDS, default="gcn",
                   help="decides the stored operator: gcn_norm (gcn), row_norm (sage), the "
                   "pattern with one self-loop per node (gat, gatv2) or the raw sum (gin)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--parts", default=None,
                     help="partition vector file (.npy or text, one block id per vertex)")
    how.add_argument("--partitioner", default=None,
                     choices=PARTITIONERS,
                     help="compute the blocks with this partitioner (one part per vertex "
                          "block of the grid; the vector is saved as OUT/parts.npy)")
    p.add_argument("--no-normalize-features", action="store_true",
                   help="keep raw features (default: rows scaled to sum 1, as `train` does)")
    add_json_flag(p)
    p.set_defaults(func=_run_partition)


def _run_partition(args: argparse.Namespace) -> int:
    from sparsegnn.data import load_any
    from sparsegnn.distributed.layout.grid import grid_shape
    from sparsegnn.distributed.layout.partitioned import write_partitioned

    if args.mode == "minibatch":
        return _partition_minibatch(args)
    if args.algo is None:
        raise InvalidValueError("data partition --mode fullgraph needs --algo")
    grid_shape(args.algo, args.nprocs, args.replication)  # an impossible grid: before loading
    refuse_typed(args.source, args.data_dir, "partition")
    g = load_any(args.source, args.data_dir, seed=args.seed, progress=True)
    result = write_partitioned(
        g, Path(args.out), args.algo, args.nprocs, args.replication, args.model,
        _partition(args),
        normalize_features=not args.no_normalize_features, seed=args.seed or 0,
        source=args.source,
    )
    text = f"wrote {result['ranks']} rank files for the {result['grid']} to {args.out}"
    return emit(args, result, text)


def _partition(args: argparse.Namespace) -> Path | str:
    """The partition asked for: a partitioner, a vector file, or the even ``block`` split."""
    return args.partitioner or (Path(args.parts) if args.parts else "block")


def _partition_minibatch(args: argparse.Namespace) -> int:
    """``data partition --mode minibatch``: ``nprocs / replication`` row blocks."""
    from sparsegnn.data import load_any
    from sparsegnn.distributed.layout.row_blocks import write_row_blocks

    if args.nprocs % args.replication:
        raise InvalidValueError(
            f"--replication {args.replication} does not divide --nprocs {args.nprocs}")
    blocks = args.nprocs // args.replication
    refuse_typed(args.source, args.data_dir, "partition")
    g = load_any(args.source, args.data_dir, seed=args.seed, progress=True)
    result = write_row_blocks(
        g, Path(args.out), blocks, _partition(args),
        normalize_features=not args.no_normalize_features, seed=args.seed or 0,
        source=args.source)
    text = (f"wrote {blocks} row blocks to {args.out} for partitioned minibatch training "
            f"({args.nprocs} ranks, replication {args.replication})")
    return emit(args, result, text)


def _add_fetch(actions: Any) -> None:
    p = actions.add_parser(
        "fetch", help="download a public dataset, checked against its SHA-256",
        description="Download NAME into DATA_DIR/<folder>, every file checked against a "
                    "pinned SHA-256. Without a network it prints each URL, its checksum and "
                    "where to put it, so the files can be copied over by hand.")
    p.add_argument("name", metavar="NAME",
                   help="cora, citeseer_text, trackml_sample or ogbn-arxiv")
    p.add_argument("--data-dir", default=None,
                   help="data root to download into (default: $SPARSEGNN_DATA, else ./data)")
    add_json_flag(p)
    p.set_defaults(func=_run_fetch)


def _run_fetch(args: argparse.Namespace) -> int:
    """The offline instructions go out as written, one file per line (the CLI's error
    handler would fold them into one line)."""
    import os
    import sys

    from sparsegnn.data.fetch import FetchError, fetch
    from sparsegnn.data.paths import ENV_VAR

    root = Path(args.data_dir or os.environ.get(ENV_VAR) or "data").expanduser()
    try:
        folder = fetch(args.name, root)
    except FetchError as err:
        print(f"sparsegnn data fetch: {err}", file=sys.stderr)
        return 2
    result = {"name": args.name, "folder": str(folder),
              "files": sorted(p.name for p in folder.iterdir())}
    return emit(args, result, f"{args.name}: downloaded and checked into {folder}; use it "
                              f"with --data-dir {root} (or {ENV_VAR}={root})")


_ACTIONS: list[Callable[[Any], None]] = [_add_info, _add_convert, _add_generate, _add_partition,
                                         _add_fetch]


def _run_info(args: argparse.Namespace) -> int:
    from sparsegnn.data import is_hetero_source
    from sparsegnn.data.graph_set_io import is_graph_set_source

    if is_hetero_source(args.source, args.data_dir):
        return _hetero_info(args)
    if is_graph_set_source(args.source, args.data_dir):
        return _graph_set_info(args)
    if Path(args.source).is_dir() and not _graph_folder(Path(args.source)):
        return _partition_info(args)
    from sparsegnn.data import degree_stats, load_any

    g = load_any(args.source, args.data_dir, seed=args.seed, progress=True)
    result = {"source": args.source, **g.counts(),
              **degree_stats(g.edge_index, g.num_nodes)}
    return emit(args, result, _describe(g, result))


def _graph_folder(path: Path) -> bool:
    """A folder ``load_any`` reads as one graph (OGB, PyG, DGL), not a partition folder."""
    from sparsegnn.data.dgl import is_dgl_dir
    from sparsegnn.data.ogb import is_ogb_folder
    from sparsegnn.data.pyg import is_pyg_dir

    return is_ogb_folder(path) or is_pyg_dir(path) or is_dgl_dir(path)


def _hetero_info(args: argparse.Namespace) -> int:
    """``data info`` of a typed graph: nodes and features per node type, edges per edge
    type, the target type and its split."""
    from sparsegnn.data import load_hetero

    counts = load_hetero(args.source, args.data_dir, seed=args.seed).counts()
    result = {"source": args.source, **counts}
    node_types: dict[str, dict[str, int]] = counts["node_types"]  # type: ignore[assignment]
    edge_types: dict[str, int] = counts["edge_types"]  # type: ignore[assignment]
    lines = [f"{counts['name']}: typed graph, {counts['num_nodes']} nodes of "
             f"{len(node_types)} types, {counts['num_edges']} edges of {len(edge_types)} "
             f"types; target {counts['target']} ({counts['num_classes']} classes)"]
    lines += [f"node type {t}: {c['num_nodes']} nodes, {c['num_features']} features"
              for t, c in node_types.items()]
    lines += [f"edge type {t}: {n} edges" for t, n in edge_types.items()]
    if "num_train" in counts:
        lines.append(f"split: {counts.get('num_train', 0)} train / "
                     f"{counts.get('num_val', 0)} val / {counts.get('num_test', 0)} test")
    return emit(args, result, "\n".join(lines))


def _graph_set_info(args: argparse.Namespace) -> int:
    """``data info`` of a graph set (TU folder or name, ``ogbg-*``): graphs, nodes, edges,
    features and the class counts."""
    from sparsegnn.data.graph_set_io import load_graph_set

    counts = load_graph_set(args.source, args.data_dir).counts()
    result = {"source": args.source, **counts}
    text = (f"{counts['name']}: graph set of {counts['graphs']} graphs, {counts['nodes']} "
            f"nodes ({counts['mean_nodes']:.1f} per graph), {counts['edges']} directed "
            f"edges, {counts['features']} features, {counts['classes']} classes "
            f"(graphs per class {counts['class_counts']})")
    if "read_from" in counts:
        text += f"\nread from {counts['read_from']}"
    return emit(args, result, text)


def _partition_info(args: argparse.Namespace) -> int:
    """``data info`` of a partition folder: its manifest, once every rank file is checked
    to be present and to belong to it (see :func:`check_partition`)."""
    from sparsegnn.distributed.layout.row_blocks import check_row_blocks, is_row_block_dir
    from sparsegnn.distributed.layout.shard import (
        MANIFEST,
        check_partition,
        is_shard_dir,
        manifest_shape,
    )

    if is_row_block_dir(args.source):
        rows = check_row_blocks(args.source)
        blocks = len(rows["bounds"]) - 1
        result = {"source": args.source, "name": rows["name"], "mode": "minibatch",
                  "blocks": blocks, "num_nodes": rows["num_nodes"],
                  "num_features": rows["num_features"], "num_classes": rows["num_classes"],
                  "nnz_per_block": rows["nnz"], "fingerprint": rows["fingerprint"]}
        return emit(args, result, f"{rows['name']}: minibatch partition, {blocks} row blocks "
                                  f"of {rows['num_nodes']} nodes, every block file checked")
    if not is_shard_dir(args.source):
        raise DataFormatError(
            f"{args.source}: a folder without {MANIFEST}; give a graph file, a dataset name, "
            "a generator spec or a folder written by `sparsegnn data partition`"
        )
    manifest = check_partition(args.source)
    shape = manifest_shape(manifest)
    result = {"source": args.source, "name": manifest["name"], "grid": shape.describe(),
              "ranks": shape.size, "num_nodes": manifest["offsets"][-1],
              "num_features": manifest["num_features"],
              "num_classes": manifest["num_classes"], "operator": manifest["operator"],
              "fingerprint": manifest["fingerprint"]}
    text = (f"{manifest['name']}: partition for the {shape.describe()}, "
            f"{result['num_nodes']} nodes, {shape.size} rank files checked")
    return emit(args, result, text)


def _run_convert(args: argparse.Namespace) -> int:
    from sparsegnn.data import load_any, save_graph

    refuse_typed(args.source, args.data_dir, "convert")
    g = load_any(args.source, args.data_dir, seed=args.seed, undirected=not args.directed,
                 progress=True)
    out = save_graph(g, args.out, compress=args.compress)
    result = {"source": args.source, "out": str(out), "num_nodes": g.num_nodes,
              "num_edges": g.num_edges, "bytes": out.stat().st_size}
    return emit(args, result, f"wrote {out} ({_mib(out)}): {_counts(g)}")


def refuse_typed(source: str, data_dir: str | None, action: str) -> None:
    """``data convert`` and ``partition`` write one untyped graph: a typed one is refused
    naming what trains it as it is (R-GCN, on a grid with ``--nprocs`` too)."""
    from sparsegnn.data import is_hetero_source

    if is_hetero_source(source, data_dir):
        raise InvalidValueError(
            f"{source} is a typed (heterogeneous) graph; `data {action}` writes one untyped "
            f"graph. Train it as it is: `sparsegnn train --dataset {source} --model rgcn` "
            "(with --nprocs N --algo 1d|2d|... for a grid of ranks)")


def _run_generate(args: argparse.Namespace) -> int:
    from sparsegnn.data import from_spec, save_graph

    start = time.perf_counter()
    g = from_spec(args.spec, seed=args.seed, progress=True)
    seconds = time.perf_counter() - start
    out = save_graph(g, args.out, compress=args.compress)
    result = {"spec": args.spec, "name": g.name, "out": str(out), "num_nodes": g.num_nodes,
              "num_edges": g.num_edges, "num_features": g.num_features,
              "num_classes": g.num_classes, "generate_seconds": round(seconds, 3),
              "bytes": out.stat().st_size}
    return emit(args, result,
                f"generated {g.name} in {seconds:.1f}s; wrote {out} ({_mib(out)}): {_counts(g)}")


def _counts(g: GraphData) -> str:
    return (f"{g.num_nodes} nodes, {g.num_edges} directed edges, "
            f"{g.num_features} features, {g.num_classes} classes")


def _describe(g: GraphData, result: dict[str, Any]) -> str:
    lines = [f"{g.name}: {_counts(g)}"]
    if "num_train" in result:
        lines.append(f"split: {result.get('num_train', 0)} train / "
                     f"{result.get('num_val', 0)} val / {result.get('num_test', 0)} test")
    lines.append(f"degree: min {result['degree_min']}, mean {result['degree_mean']}, "
                 f"median {result['degree_median']}, max {result['degree_max']}; "
                 f"{result['num_isolated']} isolated")
    return "\n".join(lines)


def _mib(path: Path) -> str:
    return f"{path.stat().st_size / 2**20:.1f} MiB"

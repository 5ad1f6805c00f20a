"""Curation benchmark: annotator agreement and speed on CiteSeer, bulk annotation at scale.

    python benchmarks/curation.py --json                  # CiteSeer + 1M generated documents
    python benchmarks/curation.py --docs 20000 --skip-citeseer
    python benchmarks/curation.py --quick --json          # 4,000 generated documents, 2 ranks

Part 1 distils the graph-aware student, the text-only student and the teacher-side model
on CiteSeer's 60/20/20 split, and reports Cohen's kappa (with bootstrap 95% intervals) on
the test papers and each model's annotation throughput over the whole corpus.
Part 2 generates a corpus of ``--docs`` documents, ingests it, distils a student from the
ground truth of the first ``--labelled`` documents (a corpus of their own, the first
chunk of the big one), annotates every document and reports documents per second and
the process's peak resident memory. With ``--json`` the last stdout line is one JSON object.
``--quick`` skips CiteSeer and runs part 2 on 4,000 documents (1,000 labelled, 3 epochs)
over one process and 2 ranks: a smoke test of every code path, not a measurement.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, Stopwatch, emit, make_parser
from sparsegnn.curation import essential_web, read_labels
from sparsegnn.curation.annotate import annotate, annotate_over_ranks
from sparsegnn.curation.citeseer import run_citeseer
from sparsegnn.curation.demo import CONFIGS
from sparsegnn.curation.distil import distil
from sparsegnn.curation.ingest import IngestConfig, ingest
from sparsegnn.curation.student import StudentConfig
from sparsegnn.curation.synthetic import SyntheticConfig, write_corpus
from sparsegnn.train.memory import peak_memory_bytes


def citeseer(data_dir: str | None, work: Path, n_boot: int, seed: int) -> dict[str, Any]:
    """Kappa and throughput of the three annotators on one split."""
    _, _, scores = run_citeseer(data_dir, work, CONFIGS, n_boot=n_boot, seed=seed)
    out: dict[str, Any] = {s.name: {
        "kappa": {c: k.to_dict() for c, k in s.kappa.items()},
        "train_seconds": s.train_seconds,
        "annotate_docs_per_second": s.annotate_docs_per_second,
    } for s in scores}
    student, teacher = out["student"], out["teacher_side"]
    k = {n: out[n]["kappa"]["topic"]["kappa"] for n in out}
    out["checks"] = {
        "student_kappa_at_least_0.75": k["student"] >= 0.75,
        "student_above_text_only": k["student"] > k["text_only"],
        "student_within_0.03_of_teacher": k["teacher_side"] - k["student"] <= 0.03,
        "student_speedup_over_teacher": student["annotate_docs_per_second"]
        / teacher["annotate_docs_per_second"],
    }
    return out


def scale(num_docs: int, labelled: int, work: Path, epochs: int, ranks: int) -> dict[str, Any]:
    """Generate, ingest, distil on a labelled prefix, annotate everything (in one process,
    then, with ``ranks`` > 1, again over that many local gloo ranks)."""
    schema = essential_web()
    gen = SyntheticConfig(num_docs=num_docs, chunk=labelled, seed=0)
    clock = Stopwatch()
    write_corpus(work / "corpus.parquet", gen)
    write_corpus(work / "labelled.parquet", replace(gen, num_docs=labelled))
    generate_s = clock.lap()
    ingest(work / "corpus.parquet", work / "store", IngestConfig(batch_rows=16384))
    ingest(work / "labelled.parquet", work / "labelled", IngestConfig(batch_rows=16384))
    ingest_s = clock.lap()
    cfg = StudentConfig(epochs=epochs, patience=epochs)
    result = distil(work / "labelled", read_labels(work / "labelled.parquet", schema), schema,
                    cfg)
    distil_s = clock.lap()
    report = annotate(work / "store", result.annotator, batch_rows=16384, progress=False)
    over_ranks: dict[str, Any] = {}
    if ranks > 1:
        result.annotator.save(work / "student.pt")
        per_rank = annotate_over_ranks(work / "store", work / "student.pt",
                                       work / "ranks.parquet", ranks)
        seconds = max(r.value.seconds for r in per_rank)
        over_ranks = {"ranks": ranks, "annotate_seconds_ranks": seconds,
                      "annotate_docs_per_second_ranks": num_docs / seconds,
                      "peak_memory_gib_per_rank": max(r.value.peak_memory_bytes
                                                      for r in per_rank) / 2**30,
                      "bytes_sent_per_rank": [r.comm.sent for r in per_rank]}
    return {**over_ranks,
        "num_docs": num_docs, "labelled_docs": labelled,
        "generate_seconds": generate_s, "ingest_seconds": ingest_s,
        "distil_seconds": distil_s, "distil_best_val_accuracy": result.best_val_accuracy,
        "annotate_seconds": report.seconds, "annotate_docs_per_second": report.docs_per_second,
        "peak_memory_gib": peak_memory_bytes() / 2**30,
    }


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__ or "", quick_help="skip CiteSeer; 4,000 documents over 1 and 2 ranks")
    p.add_argument("--data-dir", default=None, help="data root holding citeseer_text/")
    p.add_argument("--docs", type=int, default=1_000_000, help="generated corpus size")
    p.add_argument("--labelled", type=int, default=20_000, help="teacher-labelled prefix")
    p.add_argument("--epochs", type=int, default=30, help="student epochs at scale")
    p.add_argument("--bootstrap", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ranks", type=int, default=1,
                   help="also annotate the generated corpus over this many local gloo ranks")
    p.add_argument("--skip-citeseer", action="store_true")
    p.add_argument("--skip-scale", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.skip_citeseer, args.skip_scale = True, False
        args.docs, args.labelled, args.epochs, args.ranks = 4000, 1000, 3, 2
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sparsegnn-bench-") as tmp:
        if not args.skip_citeseer:
            out["citeseer"] = citeseer(args.data_dir, Path(tmp) / "citeseer", args.bootstrap,
                                       args.seed)
            print(json.dumps(out["citeseer"]["checks"]), file=sys.stderr)
        if not args.skip_scale:
            (Path(tmp) / "scale").mkdir()
            out["scale"] = scale(args.docs, min(args.labelled, args.docs), Path(tmp) / "scale",
                                 args.epochs, args.ranks)
    for part, result in out.items():
        print(f"{part}: {json.dumps(result, default=str)[:2000]}")
    emit(*as_summary(out), args.json)
    return 0


def as_summary(out: dict[str, Any]) -> tuple[list[Row], dict[str, float], dict[str, Any]]:
    """The standard benchmark JSON: a row per CiteSeer annotator and for the scale run;
    speedups of the student over the teacher-side model and of ranks over one process."""
    rows: list[Row] = []
    speedups: dict[str, float] = {}
    metrics: dict[str, Any] = {}
    if "citeseer" in out:
        cs = out["citeseer"]
        for name in ("student", "text_only", "teacher_side"):
            if name in cs:
                rows.append({"what": "citeseer_annotator", "annotator": name,
                             "ours": name != "teacher_side", **cs[name]})
                for cat, k in cs[name]["kappa"].items():
                    metrics[f"{name}_{cat}_kappa"] = k["kappa"]
        speedups["student_vs_teacher_annotation"] = cs["checks"]["student_speedup_over_teacher"]
        metrics.update({k: v for k, v in cs["checks"].items() if isinstance(v, bool)})
    if "scale" in out:
        sc = out["scale"]
        rows.append({"what": "bulk_annotation", "ours": True, **sc})
        metrics.update({f"scale_{k}": v for k, v in sc.items()})
        if "annotate_seconds_ranks" in sc:
            speedups["annotate_ranks_vs_one_process"] = (sc["annotate_seconds"]
                                                         / sc["annotate_seconds_ranks"])
    return rows, speedups, metrics


if __name__ == "__main__":
    raise SystemExit(main())

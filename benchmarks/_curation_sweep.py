"""The curation benchmark's sweeps: link homophily and few teacher labels, over splits.

One split of one graph cannot show whether the student's choice of graph share follows
noise (issue 48), so every level runs ``splits`` random splits of the same generated
graph: each split draws its teacher-labelled documents at random (seeded), distils the
student on them (its own seed), and scores the topic kappa on every other document, for
the student and for its own text half (``alpha = 0``, the text-only preset's model). A
level reports the mean gain over text-only, its 95% t-interval and the worst split. The
student's share rule is measured beside alternatives re-chosen from the same out-of-fold
gains (``z`` standard errors: 0 = the best share whatever its error).
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from sparsegnn.curation import cohen_kappa, essential_web, read_labels
from sparsegnn.curation.annotate import annotate
from sparsegnn.curation.distil import Annotator, distil
from sparsegnn.curation.ingest import IngestConfig, ingest
from sparsegnn.curation.labels import LabelSet
from sparsegnn.curation.mix_choice import choose_mix
from sparsegnn.curation.student import PROPAGATE, StudentConfig, TextFallback
from sparsegnn.curation.synthetic import FDC, SyntheticConfig, measured_homophily, write_corpus
from sparsegnn.optional import require

pq = require("pyarrow.parquet")
RULES = (0.0, 1.0, 2.0)  # share rules measured: z standard errors


def topic_kappa(store: Path, annotator: Annotator, held_out: LabelSet, out: Path) -> float:
    """Topic kappa (primary labels) of ``annotator`` on the held-out teacher labels."""
    annotate(store, annotator, out, progress=False)
    got = read_labels(out, essential_web()).subset(held_out.ids).categories[FDC].primary
    out.unlink()
    return cohen_kappa(held_out.categories[FDC].primary, got).kappa


def make_graph(level: float, num_docs: int, work: Path, seed: int
               ) -> tuple[Path, LabelSet, float]:
    """A generated corpus at topic homophily ``level``, ingested: store, truth, measured."""
    gen = SyntheticConfig(num_docs=num_docs, chunk=num_docs, seed=seed).with_homophily(
        FDC, level)
    corpus = work / f"corpus_{level}.parquet"
    write_corpus(corpus, gen)
    store = work / f"store_{level}"
    if not store.exists():
        ingest(corpus, store, IngestConfig(batch_rows=16384))
    rows = pq.read_table(corpus, columns=["id", "links", FDC]).to_pylist()
    return store, read_labels(corpus, essential_web()), measured_homophily(rows, FDC)


def _with_shares(model: TextFallback, shares: list[float], score: Any) -> float:
    """``score()`` with the fallback's shares set to ``shares``, then restored."""
    kept = model.alpha.clone()
    model.alpha.copy_(model.alpha.new_tensor(shares))
    try:
        return score()
    finally:
        model.alpha.copy_(kept)


def run_split(store: Path, truth: LabelSet, labelled: int, split: int, epochs: int,
              work: Path, propagate: bool) -> dict[str, Any]:
    """One random split: teacher labels on ``labelled`` documents, kappa on the rest."""
    order = np.random.default_rng(1000 + split).permutation(len(truth.ids))
    teacher = truth.subset([truth.ids[i] for i in sorted(order[:labelled])])
    held_out = truth.subset([truth.ids[i] for i in sorted(order[labelled:])])
    schema = essential_web()
    result = distil(store, teacher, schema, StudentConfig(epochs=epochs, seed=split))
    annotator, model = result.annotator, result.annotator.model
    assert isinstance(model, TextFallback)

    def score() -> float:
        return topic_kappa(store, annotator, held_out, work / "s.parquet")

    student = score()
    out: dict[str, Any] = {"split": split, "labelled_docs": labelled, "student": student,
                           "text_only": _with_shares(model, [0.0] * len(model.alpha), score),
                           "alpha": result.mix[FDC].graph_share,
                           "mix": result.mix[FDC].to_dict()}
    out["gain"] = out["student"] - out["text_only"]
    out["rules"] = {}
    for z in RULES:
        shares = [choose_mix(c, list(m.candidates), m.documents, z).graph_share
                  if m.candidates else 0.0 for c, m in result.mix.items()]
        same = shares == model.alpha.tolist()
        out["rules"][str(z)] = student if same else _with_shares(model, shares, score)
    print(f"  {labelled} labels, split {split}: student {student:.3f} text "
          f"{out['text_only']:.3f} gain {out['gain']:+.3f} share {out['alpha']:.2f}",
          file=sys.stderr, flush=True)
    if propagate:
        old = distil(store, teacher, schema, replace(PROPAGATE, epochs=epochs, seed=split))
        out["propagate"] = topic_kappa(store, old.annotator, held_out, work / "p.parquet")
    return out


def summarise(splits: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean kappas, the mean gain with its 95% t-interval, the worst split, the losses;
    and the same gains for each share rule."""
    gains = [s["gain"] for s in splits]
    out = {"splits": len(splits), "student": statistics.fmean(s["student"] for s in splits),
           "text_only": statistics.fmean(s["text_only"] for s in splits)}
    out.update(_gain_stats(gains))
    out["rules"] = {z: _gain_stats([s["rules"][z] - s["text_only"] for s in splits])
                    for z in splits[0]["rules"]}
    out["graph_share_chosen"] = sum(s["alpha"] > 0 for s in splits)
    return out


def _gain_stats(gains: list[float]) -> dict[str, Any]:
    mean = statistics.fmean(gains)
    half = (scipy_stats.t.ppf(0.975, len(gains) - 1) * statistics.stdev(gains)
            / math.sqrt(len(gains)) if len(gains) > 1 else math.inf)
    return {"mean_gain": mean, "gain_low": mean - half, "gain_high": mean + half,
            "worst_gain": min(gains), "losses_over_0.01": sum(g < -0.01 for g in gains),
            "losses_over_0.03": sum(g < -0.03 for g in gains)}


def homophily_sweep(levels: list[float], num_docs: int, labelled: int, splits: int,
                    epochs: int, work: Path, propagate: bool) -> list[dict[str, Any]]:
    """Every level's splits and their summary."""
    out = []
    for level in levels:
        store, truth, measured = make_graph(level, num_docs, work, seed=0)
        print(f"homophily {level}:", file=sys.stderr, flush=True)
        runs = [run_split(store, truth, labelled, s, epochs, work, propagate)
                for s in range(splits)]
        out.append({"homophily": level, "measured_homophily": measured,
                    "num_docs": num_docs, "labelled_docs": labelled,
                    "summary": summarise(runs), "runs": runs})
    return out


def few_labels_sweep(level: float, counts: list[int], num_docs: int, splits: int,
                     epochs: int, work: Path) -> list[dict[str, Any]]:
    """At one homophily level, the splits for each number of teacher labels."""
    store, truth, _ = make_graph(level, num_docs, work, seed=0)
    out = []
    for count in counts:
        runs = [run_split(store, truth, count, s, epochs, work, False) for s in range(splits)]
        out.append({"homophily": level, "labelled_docs": count, "num_docs": num_docs,
                    "summary": summarise(runs), "runs": runs})
    return out


def sweep_checks(levels: list[dict[str, Any]]) -> dict[str, bool]:
    """Issue 48's acceptance on the homophily sweep."""
    runs = [r for lv in levels for r in lv["runs"]]
    losses = sum(r["gain"] < -0.01 for r in runs)
    return {
        "student_mean_at_least_text_every_level": all(
            lv["summary"]["student"] >= lv["summary"]["text_only"] for lv in levels),
        "no_split_loses_over_0.03": all(r["gain"] >= -0.03 for r in runs),
        "at_most_1_in_20_splits_lose_over_0.01": losses * 20 <= len(runs),
        "mean_gain_at_least_0.05_from_0.6": all(
            lv["summary"]["mean_gain"] >= 0.05 for lv in levels if lv["homophily"] >= 0.6),
    }


def sweep_table(rows: list[dict[str, Any]], key: str) -> str:
    """Per level (``key``: ``homophily`` or ``labelled_docs``): kappas, gain, worst."""
    lines = [f"{key:>13} {'student':>8} {'text':>8} {'gain':>7} {'95% interval':>17} "
             f"{'worst':>7} {'<-0.01':>6} {'graph':>5}"]
    for lv in rows:
        s = lv["summary"]
        lines.append(f"{lv[key]:>13} {s['student']:>8.3f} {s['text_only']:>8.3f} "
                     f"{s['mean_gain']:>+7.3f} [{s['gain_low']:+.3f}, {s['gain_high']:+.3f}] "
                     f"{s['worst_gain']:>+7.3f} {s['losses_over_0.01']:>6} "
                     f"{s['graph_share_chosen']:>2}/{s['splits']}")
    return "\n".join(lines)

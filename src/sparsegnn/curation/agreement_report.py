"""The agreement report of ``curate agreement``: kappa table, NMI and confusion PNGs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from sparsegnn.curation.agreement import (
    Kappa,
    Weights,
    cohen_kappa,
    confusion_matrix,
    normalized_mutual_info,
    plot_confusion,
)
from sparsegnn.curation.curation_errors import SchemaError
from sparsegnn.curation.fdc import fdc_prefix
from sparsegnn.curation.labels import CategoryLabels, LabelSet
from sparsegnn.curation.schema import Schema


@dataclass
class AgreementReport:
    """Kappa per scored category (FDC at levels 1-3): ``kappa`` as asked (the
    primary/secondary overlap unless primary only was asked for) and ``primary`` on
    primary labels alone; NMI between the reference's categories; the schema's
    categories that one of the files lacks; and the PNG files written."""

    kappa: dict[str, Kappa]
    nmi: dict[str, float]
    plots: list[str] = field(default_factory=list)
    num_documents: int = 0
    primary: dict[str, Kappa] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    undefined: dict[str, str] = field(default_factory=dict)  # category -> why no kappa

    def to_dict(self) -> dict[str, Any]:
        return {"num_documents": self.num_documents,
                "kappa": {k: v.to_dict() for k, v in self.kappa.items()},
                "primary_kappa": {k: v.to_dict() for k, v in self.primary.items()},
                "missing_categories": self.missing, "nmi": self.nmi, "plots": self.plots,
                "undefined": self.undefined}

    def table(self) -> str:
        lines = [f"{'category':<40} {'kappa':>7} {'95% CI':>17} {'primary':>8} "
                 f"{'95% CI':>17} {'n':>7}"]
        for name, k in self.kappa.items():
            p = self.primary[name]
            lines.append(f"{name:<40} {k.kappa:>7.3f} [{k.low:>6.3f}, {k.high:>6.3f}] "
                         f"{p.kappa:>8.3f} [{p.low:>6.3f}, {p.high:>6.3f}] {k.n:>7}")
        lines += [f"{name}: kappa undefined (nan): {why}"
                  for name, why in self.undefined.items()]
        if self.missing:
            lines.append(f"not in both files: {', '.join(self.missing)}")
        if self.nmi:
            worst = max(self.nmi, key=self.nmi.__getitem__)
            lines.append(f"max NMI between categories: {self.nmi[worst]:.3f} ({worst})")
        lines += [f"wrote {p}" for p in self.plots]
        return "\n".join(lines)


def _levels(name: str, lab: CategoryLabels, fdc: bool) -> dict[str, CategoryLabels]:
    """FDC is scored at levels 1, 2 and 3 (code prefixes); flat categories as they are."""
    if not fdc:
        return {name: lab}
    return {f"{name}.level_{k}": CategoryLabels(
        [fdc_prefix(p, k) for p in lab.primary],
        [None if s is None else fdc_prefix(s, k) for s in lab.secondary])
        for k in (1, 2, 3)}


def agreement_report(
    reference: LabelSet, other: LabelSet, schema: Schema, *, weights: Weights = "none",
    overlap: bool = True, n_boot: int = 1000, plots: str | Path | None = None,
) -> AgreementReport:
    """Compare ``other`` with ``reference`` on the documents of ``reference``."""
    other = other.subset(reference.ids)
    shared = [c for c in schema.categories
              if c.name in reference.categories and c.name in other.categories]
    if not shared:
        raise SchemaError("the two label files share no category of the schema")
    kappas: dict[str, Kappa] = {}
    primary: dict[str, Kappa] = {}
    written: list[str] = []
    undefined: dict[str, str] = {}
    for cat in shared:
        ref_levels = _levels(cat.name, reference.categories[cat.name], cat.kind == "fdc")
        oth_levels = _levels(cat.name, other.categories[cat.name], cat.kind == "fdc")
        order = [c.code for c in cat.codes] if weights != "none" and cat.kind == "flat" else None
        for name, ref in ref_levels.items():
            oth = oth_levels[name]
            kappas[name] = cohen_kappa(
                ref.primary, oth.primary,
                ref.secondary if overlap else None, oth.secondary if overlap else None,
                weights=weights if order else "none", order=order, n_boot=n_boot)
            primary[name] = cohen_kappa(ref.primary, oth.primary,
                                        weights=weights if order else "none", order=order,
                                        n_boot=n_boot)
            if math.isnan(primary[name].kappa):
                undefined[name] = _why_undefined(ref, oth)
            if plots is not None:
                written.append(str(_plot(ref, oth, name, Path(plots))))
    nmi = {f"{a}~{b}": normalized_mutual_info(reference.categories[a].primary,
                                              reference.categories[b].primary)
           for a, b in combinations(reference.categories, 2)}
    missing = [c.name for c in schema.categories if c not in shared]
    return AgreementReport(kappas, nmi, written, len(reference.ids), primary, missing,
                           undefined)


def _why_undefined(ref: CategoryLabels, oth: CategoryLabels) -> str:
    """Kappa divides by one minus chance agreement, which is zero when both sides give
    every document the same single code (as FDC level 1 on CiteSeer: every code is 0xx)."""
    codes = sorted(set(ref.primary) | set(oth.primary))
    return (f"every document has the code {', '.join(map(repr, codes))} on both sides, so "
            "chance agreement is 1 and kappa divides by zero; this level cannot tell the "
            "annotators apart")


def _plot(ref: CategoryLabels, oth: CategoryLabels, name: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    codes = sorted(set(ref.primary) | set(oth.primary))
    cm = confusion_matrix(ref.primary, oth.primary, codes)
    return plot_confusion(cm, codes, folder / f"confusion_{name}.png", name)

"""Training runs side by side (``sparsegnn runs compare DIR...``).

A ``--logdir`` run leaves its whole result in ``run.json`` (final figures, configuration,
per-epoch history), so runs are compared from those files alone, without TensorBoard:
their final figures in one table, the settings in which they differ (the ones they share
say nothing about the difference), and their curves overlaid in one plot. A folder may be
one run or a ``--logdir`` holding several (``version_N``, ``NAME/version_N``, and the
``run-N`` folders of earlier releases).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.optional import pyplot
from sparsegnn.train.eventlog import hparam_values
from sparsegnn.train.run_report import human_bytes

RUN_FILE = "run.json"
# Top-level result entries that describe the run rather than measure it.
_DESCRIBING = ("dataset", "task", "model", "mode", "device")
# Curves drawn, in order: the loss panel, then the first validation score a run has.
_LOSSES = ("loss", "val_loss")
_SCORES = ("val_accuracy", "val_auc", "test_accuracy")


@dataclass(frozen=True)
class CompareRequest:
    """Run folders (or logdirs holding runs) to compare, and where to draw their curves."""

    folders: tuple[Path, ...]
    plot: Path | None = None  # a PNG of the overlaid curves


@dataclass
class Comparison:
    """The runs, by label, with each compared value listed in the runs' order (``None``
    where a run lacks it)."""

    runs: dict[str, Path]
    figures: dict[str, list[Any]] = field(default_factory=dict)
    settings: dict[str, list[Any]] = field(default_factory=dict)  # only those that differ
    plot: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"runs": list(self.runs), "folders": [str(p) for p in self.runs.values()],
                "figures": self.figures, "settings_that_differ": self.settings,
                "plot": None if self.plot is None else str(self.plot)}

    def table(self) -> str:
        """Figures and differing settings as text columns, one per run."""
        rows = [["", *self.runs]]
        rows += [[k, *(_text(k, x) for x in v)] for k, v in self.figures.items()]
        if self.settings:
            rows.append(["settings that differ:", *([""] * len(self.runs))])
            rows += [[f"  {k}", *(_text(k, x) for x in v)] for k, v in self.settings.items()]
        else:
            rows.append(["settings: the same in every run", *([""] * len(self.runs))])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                         for r in rows)


def compare_runs(request: CompareRequest) -> Comparison:
    """Read every run under ``request.folders`` and put them side by side."""
    folders = [run for folder in request.folders for run in run_folders(folder)]
    if len(set(folders)) < len(folders):
        raise InvalidValueError("a run is named twice; give each run or logdir once")
    results = [_read(f) for f in folders]
    labels = _labels(folders)
    comparison = Comparison(dict(zip(labels, folders, strict=True)),
                            _aligned([_figures(r) for r in results]),
                            _differing(_aligned([_settings(r) for r in results])))
    if request.plot is not None:
        comparison.plot = draw_curves(request.plot, labels, results)
    return comparison


def run_folders(folder: Path) -> list[Path]:
    """``folder`` itself when it holds a run, else every run folder below it, in order."""
    if (folder / RUN_FILE).is_file():
        return [folder]
    if not folder.is_dir():
        raise InvalidValueError(f"{folder}: no such folder")
    found = sorted((p.parent for p in folder.rglob(RUN_FILE)), key=_natural)
    if not found:
        raise InvalidValueError(f"{folder}: holds no run ({RUN_FILE}); give a folder that "
                                "`train --logdir` wrote, or one of its version_N folders")
    return found


def _natural(path: Path) -> list[Any]:
    """``version_10`` after ``version_9``."""
    return [(int(p.rsplit("_", 1)[1]) if p.rsplit("_", 1)[-1].isdigit() else 0, p)
            for p in path.parts]


def _read(folder: Path) -> dict[str, Any]:
    path = folder / RUN_FILE
    try:
        result = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DataFormatError(f"{path}: not JSON ({err})") from None
    if not isinstance(result, dict):
        raise DataFormatError(f"{path}: expected a JSON object")
    return result


def _labels(folders: Sequence[Path]) -> list[str]:
    """Each run's path below the folder all of them share (its own name when alone)."""
    if len(folders) == 1:
        return [folders[0].name]
    root = Path(os.path.commonpath([f.absolute() for f in folders]))
    return [str(f.absolute().relative_to(root)) or f.name for f in folders]


def _figures(result: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if _number(v)}


def _settings(result: Mapping[str, Any]) -> dict[str, Any]:
    described = {k: result[k] for k in _DESCRIBING if k in result}
    return {**described, **hparam_values(result.get("config") or {})}


def _aligned(per_run: list[dict[str, Any]]) -> dict[str, list[Any]]:
    keys = list(dict.fromkeys(k for run in per_run for k in run))
    return {k: [run.get(k) for run in per_run] for k in keys}


def _differing(rows: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {k: v for k, v in rows.items() if any(x != v[0] for x in v[1:])}


def draw_curves(path: Path, labels: Sequence[str], results: Sequence[Mapping[str, Any]]
                ) -> Path:
    """One PNG, two panels: every run's loss curves, then its validation score, per epoch."""
    plt = pyplot("for runs compare --plot")
    histories = [list(r.get("history") or []) for r in results]
    score = next((k for k in _SCORES if any(_has(h, k) for h in histories)), None)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    try:
        for i, (label, history) in enumerate(zip(labels, histories, strict=True)):
            color = f"C{i % 10}"  # one colour per run, dashed for validation
            for key, style in zip(_LOSSES, ("-", "--"), strict=True):
                _line(left, history, key, f"{label} {key.replace('_', ' ')}", style + color)
            if score is not None:
                _line(right, history, score, label, "-" + color)
        for ax, name in ((left, "loss"), (right, (score or "").replace("_", " "))):
            ax.set_xlabel("epoch")
            ax.set_ylabel(name)
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=7)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png", dpi=90)
    finally:
        plt.close(fig)
    return path


def _line(ax: Any, history: list[Mapping[str, Any]], key: str, label: str, style: str) -> None:
    """``style``: matplotlib's line and colour format (``--C1``)."""
    points = [(h.get("epoch", i), h[key]) for i, h in enumerate(history) if _number(h.get(key))]
    if points:
        epochs, values = zip(*points, strict=True)
        ax.plot(epochs, values, style, label=label)


def _has(history: list[Mapping[str, Any]], key: str) -> bool:
    return any(_number(h.get(key)) for h in history)


def _number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _text(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if "bytes" in key and _number(value):
        return human_bytes(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)

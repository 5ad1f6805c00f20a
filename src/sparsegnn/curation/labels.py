"""Label files in and annotation files out.

Teacher labels (from any labeller) are Parquet or JSONL rows of ``id`` plus, per category,
either a code string (a hard label) or a mapping ``{code: probability}`` (a soft label),
and optionally ``<category>_secondary``. Annotations are written in the Essential-Web
column layout: one struct column ``eai_taxonomy`` with a field per category, each holding
``primary`` and ``secondary`` (``code`` and ``label``; the FDC topic has ``labels`` with
``level_1``..``level_3`` instead) and our ``confidence`` (the primary's probability).
Both readers return :class:`LabelSet`, so agreement compares any two of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sparsegnn.curation.curation_errors import SchemaError
from sparsegnn.curation.fdc import fdc_levels
from sparsegnn.curation.schema import Category, Schema
from sparsegnn.errors import DataFormatError
from sparsegnn.optional import require

TAXONOMY_COLUMN = "eai_taxonomy"
_SECONDARY = "_secondary"


@dataclass
class CategoryLabels:
    """One category's labels for ``LabelSet.ids``: primary and secondary codes (secondary
    ``None`` where absent) and, for soft labels, a probability per ``classes`` column."""

    primary: list[str]
    secondary: list[str | None]
    probs: np.ndarray | None = None
    classes: list[str] = field(default_factory=list)


@dataclass
class LabelSet:
    """Labels of some documents, per category, in document order."""

    ids: list[str]
    categories: dict[str, CategoryLabels]

    def subset(self, ids: Sequence[str]) -> LabelSet:
        """The rows of ``ids`` (all must be present), in that order."""
        pos = {d: i for i, d in enumerate(self.ids)}
        missing = [d for d in ids if d not in pos]
        if missing:
            raise DataFormatError(f"{len(missing)} ids have no labels, e.g. {missing[:3]}")
        idx = [pos[d] for d in ids]
        cats = {
            name: CategoryLabels(
                [c.primary[i] for i in idx], [c.secondary[i] for i in idx],
                None if c.probs is None else c.probs[idx], c.classes)
            for name, c in self.categories.items()
        }
        return LabelSet(list(ids), cats)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL or Parquet label file (label files are samples: they fit in memory)."""
    if path.suffix == ".parquet":
        return require("pyarrow.parquet").read_table(path).to_pylist()
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise DataFormatError(f"{path}:{lineno}: not a JSON object ({err.msg})") from None
    return rows


# Columns a label file may carry beside its categories (a corpus file with its codes).
DOCUMENT_COLUMNS = frozenset({"id", "text", "url", "links", "site"})


def read_labels(path: str | Path, schema: Schema, strict: bool = False) -> LabelSet:
    """Labels from a teacher label file or from an annotation file of ours.

    Every code is checked against ``schema``; a row without an id, a repeated id or an
    unknown code is an error naming the file and row, never a silently dropped row. With
    ``strict`` (teacher labels to train on), a column that is neither a category of the
    schema, its ``_secondary``, nor a document column is an error naming it: a misspelt
    or foreign category would otherwise be ignored in silence.
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: label file is missing")
    rows = _read_rows(path)
    if rows and TAXONOMY_COLUMN in rows[0]:
        rows = [_flatten_annotation(r) for r in rows]
    if strict:
        _refuse_unknown_columns(rows, schema, path)
    ids = _check_ids(rows, path)
    present = [c for c in schema.categories if any(c.name in r for r in rows)]
    if not present:
        raise SchemaError(f"{path}: no column matches a category of schema {schema.name!r} "
                          f"({', '.join(schema.names)})")
    return LabelSet(ids, {c.name: _category_labels(rows, c, path) for c in present})


def _refuse_unknown_columns(rows: list[dict[str, Any]], schema: Schema, path: Path) -> None:
    known = set(DOCUMENT_COLUMNS)
    known.update(n + suffix for n in schema.names for suffix in ("", _SECONDARY))
    unknown = sorted({k for r in rows for k in r} - known)
    if unknown:
        raise SchemaError(f"{path}: label columns not in schema {schema.name!r}: "
                          f"{', '.join(unknown)} (its categories: {', '.join(schema.names)})")


def _check_ids(rows: list[dict[str, Any]], path: Path) -> list[str]:
    ids = []
    for i, row in enumerate(rows):
        value = row.get("id")
        if value is None or str(value) == "":
            raise DataFormatError(f"{path}: row {i} has no 'id'")
        ids.append(str(value))
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        dup = next(d for d in ids if d in seen or seen.add(d))
        raise DataFormatError(f"{path}: id {dup!r} appears more than once")
    return ids


def _category_labels(rows: list[dict[str, Any]], cat: Category, path: Path) -> CategoryLabels:
    primary: list[str] = []
    secondary: list[str | None] = []
    soft: list[Mapping[str, float] | None] = []
    for i, row in enumerate(rows):
        value = row.get(cat.name)
        if value is None:
            raise DataFormatError(f"{path}: row {i} (id {row.get('id')!r}) has no "
                                  f"'{cat.name}' label")
        if isinstance(value, Mapping):
            probs = {str(k): float(v) for k, v in value.items()}
            for code in probs:
                _checked(cat, code, path, i)
            ranked = sorted(probs, key=probs.__getitem__, reverse=True)
            primary.append(ranked[0])
            secondary.append(ranked[1] if len(ranked) > 1 else None)
            soft.append(probs)
            continue
        primary.append(_checked(cat, str(value), path, i))
        sec = row.get(cat.name + _SECONDARY)
        secondary.append(None if sec in (None, "") else _checked(cat, str(sec), path, i))
        soft.append(None)
    out = CategoryLabels(primary, secondary)
    if any(s is not None for s in soft):
        out.classes = sorted({c for s in soft if s for c in s} | set(primary))
        col = {c: j for j, c in enumerate(out.classes)}
        out.probs = np.zeros((len(rows), len(out.classes)), dtype=np.float32)
        for i, s in enumerate(soft):
            for code, p in (s or {primary[i]: 1.0}).items():
                out.probs[i, col[code]] = p
        out.probs /= np.maximum(out.probs.sum(1, keepdims=True), 1e-12)
    return out


def _checked(cat: Category, code: str, path: Path, row: int) -> str:
    try:
        return cat.check(code)
    except SchemaError as err:
        raise SchemaError(f"{path}: row {row}: {err}") from None


def _flatten_annotation(row: dict[str, Any]) -> dict[str, Any]:
    """An annotation row as a flat label row (primary, secondary code per category)."""
    out: dict[str, Any] = {"id": row.get("id")}
    for name, value in (row[TAXONOMY_COLUMN] or {}).items():
        if value is None:
            continue
        out[name] = (value.get("primary") or {}).get("code")
        out[name + _SECONDARY] = (value.get("secondary") or {}).get("code")
    return out


# ---------------------------------------------------------------------- annotation layout
def _code_type(cat: Category) -> Any:
    pa = require("pyarrow")
    if cat.kind == "fdc":
        levels = pa.struct([(f"level_{k}", pa.string()) for k in (1, 2, 3)])
        return pa.struct([("code", pa.string()), ("labels", levels)])
    return pa.struct([("code", pa.string()), ("label", pa.string())])


def taxonomy_type(schema: Schema) -> Any:
    """Arrow type of the ``eai_taxonomy`` column for ``schema``."""
    pa = require("pyarrow")
    return pa.struct([
        (c.name, pa.struct([("primary", _code_type(c)), ("secondary", _code_type(c)),
                            ("confidence", pa.float32())]))
        for c in schema.categories
    ])


def _code_array(cat: Category, codes: np.ndarray) -> Any:
    """Struct array of codes with their labels; labels are looked up once per distinct code."""
    pa = require("pyarrow")
    valid = np.array([c is not None for c in codes], dtype=bool)
    filled = np.where(valid, codes, "").astype(str)
    uniq, inverse = np.unique(filled, return_inverse=True)
    mask = pa.array(~valid)
    code_arr = pa.array(filled, mask=~valid)
    if cat.kind == "fdc":
        levels = [fdc_levels(u) if u else ("", "", "") for u in uniq]
        parts = [pa.array(np.array([lv[k] for lv in levels], dtype=object)[inverse], pa.string())
                 for k in range(3)]
        labels = pa.StructArray.from_arrays(parts, names=["level_1", "level_2", "level_3"])
        return pa.StructArray.from_arrays([code_arr, labels], names=["code", "labels"], mask=mask)
    names = np.array([cat.label(u) if u else "" for u in uniq], dtype=object)
    return pa.StructArray.from_arrays([code_arr, pa.array(names[inverse], pa.string())],
                                      names=["code", "label"], mask=mask)


@dataclass
class Prediction:
    """An annotator's output for one category on a batch of documents."""

    primary: np.ndarray  # str codes
    secondary: np.ndarray  # str codes or None
    confidence: np.ndarray  # float32 probability of the primary


def annotation_batch(ids: Sequence[str], preds: Mapping[str, Prediction], schema: Schema) -> Any:
    """A ``pyarrow.RecordBatch`` (``id``, ``eai_taxonomy``) in the Essential-Web layout.

    Categories of ``schema`` without a prediction are null.
    """
    pa = require("pyarrow")
    fields = []
    for cat in schema.categories:
        pred = preds.get(cat.name)
        if pred is None:
            fields.append(pa.nulls(len(ids), taxonomy_type(schema).field(cat.name).type))
            continue
        fields.append(pa.StructArray.from_arrays(
            [_code_array(cat, pred.primary), _code_array(cat, pred.secondary),
             pa.array(pred.confidence.astype(np.float32), pa.float32())],
            names=["primary", "secondary", "confidence"]))
    tax = pa.StructArray.from_arrays(fields, fields=list(taxonomy_type(schema)))
    return pa.RecordBatch.from_arrays([pa.array(list(ids), pa.string()), tax],
                                      names=["id", TAXONOMY_COLUMN])

"""Results as the ``curate serve`` page shows them: a page of rows (text cells cut short,
every category's codes), the facets of the whole selection with the filter each bar
stands for, the result's fields with their types, and one row whole.

Every result is streamed batch by batch, so a selection of any size costs the memory of
one batch plus the page, not of the whole result.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from sparsegnn.curation.curation_errors import QueryError
from sparsegnn.curation.sandbox import Sandbox
from sparsegnn.curation.serve_view import TAXONOMY, leaf_fields
from sparsegnn.optional import require

MAX_PAGE_ROWS = 200
MAX_CELL_CHARS = 400
MAX_DETAIL_CHARS = 1_000_000
MAX_BARS = 20
_BATCH_ROWS = 4096


def run_page(box: Sandbox, sql: str, params: tuple[str, ...], offset: int,
             limit: int) -> dict[str, Any]:
    """Rows ``offset .. offset + limit`` of the result, its row count, fields, and the
    distribution of every category's primary codes over all of it."""
    rows: list[dict[str, Any]] = []
    facets = _Facets()
    total, schema = 0, None
    for batch in box.batches(sql, params, rows=_BATCH_ROWS):
        schema = schema or batch.schema
        if TAXONOMY in batch.schema.names:
            facets.add(batch.column(TAXONOMY))
        start, stop = max(offset - total, 0), min(offset + limit - total, batch.num_rows)
        if start < stop:
            rows += [_display(r) for r in batch.slice(start, stop - start).to_pylist()]
        total += batch.num_rows
    columns = [n for n in schema.names if n != TAXONOMY] if schema is not None else []
    for row in rows:
        values = row.pop("values")
        row["cells"] = [_text(values[c], MAX_CELL_CHARS) for c in columns]
    return {"columns": columns, "rows": rows, "total": total, "offset": offset,
            "fields": leaf_fields(schema) if schema is not None else [],
            "distributions": facets.bars()}


def row_detail(box: Sandbox, sql: str, params: tuple[str, ...], index: int) -> dict[str, Any]:
    """Row ``index`` of the result whole: every field's full value and every code."""
    seen = 0
    for batch in box.batches(sql, params, rows=_BATCH_ROWS):
        if index < seen + batch.num_rows:
            row = batch.slice(index - seen, 1).to_pylist()[0]
            return {"index": index, "codes": _codes(row.get(TAXONOMY), MAX_DETAIL_CHARS),
                    "fields": [{"name": k, "value": _text(v, MAX_DETAIL_CHARS)}
                               for k, v in row.items() if k != TAXONOMY]}
        seen += batch.num_rows
    raise QueryError(f"row {index + 1} is past the end of the result ({seen} rows)")


def _display(row: dict[str, Any]) -> dict[str, Any]:
    return {"values": row, "codes": _codes(row.get(TAXONOMY), MAX_CELL_CHARS)}


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else (
        "" if value is None else json.dumps(value, default=str, ensure_ascii=False))
    return text if len(text) <= limit else text[:limit] + "…"


def _codes(taxonomy: Any, limit: int) -> dict[str, dict[str, Any]]:
    """``{category: {code, label, secondary, secondary_label, confidence}}`` from an
    ``eai_taxonomy`` value (empty where it is absent or shaped otherwise: a user's SQL may
    name any column so)."""
    if not isinstance(taxonomy, dict):
        return {}
    out = {}
    for cat, value in taxonomy.items():
        if isinstance(value, dict) and isinstance(value.get("primary"), dict):
            primary, secondary = value["primary"], value.get("secondary") or {}
            confidence = value.get("confidence")
            out[cat] = {"code": _text(primary.get("code"), limit),
                        "label": _text(_label(primary), limit),
                        "secondary": _text(secondary.get("code"), limit),
                        "secondary_label": _text(_label(secondary), limit),
                        "confidence": confidence if isinstance(confidence, float) else None}
    return out


def _label(code: dict[str, Any]) -> str:
    """A flat code's label, or an FDC code's deepest level label."""
    if isinstance(code.get("labels"), dict):
        return next((v for v in reversed(list(code["labels"].values())) if v), "")
    return str(code.get("label") or "")


class _Facets:
    """Primary-code counts per category over a streamed result (FDC at level 1, its ten
    main classes), each code with its label and the filter that selects it."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.ops: dict[str, str] = {}

    def add(self, taxonomy: Any) -> None:
        pa = require("pyarrow")
        if not pa.types.is_struct(taxonomy.type):
            return
        for field in taxonomy.type:
            found = _code_columns(taxonomy, field)
            if found is None:
                continue
            code, label, self.ops[field.name] = found
            groups = pa.table({"code": code, "label": label}).group_by(
                ["code", "label"]).aggregate([("code", "count")])
            seen = self.counts.setdefault(field.name, Counter())
            names = self.labels.setdefault(field.name, {})
            for c, lab, n in zip(*(groups.column(k).to_pylist()
                                   for k in ("code", "label", "code_count")), strict=True):
                if c is not None:
                    seen[c] += n
                    names.setdefault(c, str(lab or ""))

    def bars(self) -> dict[str, list[dict[str, Any]]]:
        """The ``MAX_BARS - 1`` most frequent codes of each category and, past them, one
        bar (without a filter) for the rest."""
        out = {}
        for cat, counts in self.counts.items():
            common = counts.most_common()
            field = f"{TAXONOMY}.{cat}.primary.code"
            bars = [{"code": _text(c, MAX_CELL_CHARS),
                     "label": _text(self.labels[cat].get(c, ""), MAX_CELL_CHARS), "count": n,
                     "filter": {"field": field, "op": self.ops[cat], "value": c}}
                    for c, n in common[:MAX_BARS - 1]]
            rest = sum(n for _, n in common[MAX_BARS - 1:])
            if rest:
                bars.append({"code": "other", "label": f"{len(common) - MAX_BARS + 1} more "
                             "codes", "count": rest, "filter": None})
            if bars:
                out[cat] = bars
        return out


def _code_columns(taxonomy: Any, field: Any) -> tuple[Any, Any, str] | None:
    """One category's primary code and label arrays and the filter op that selects a code
    (FDC codes cut to level 1: ``prefix``); None where the column is not shaped like our
    annotations (a user's SQL can name anything ``eai_taxonomy``)."""
    pa, pc = require("pyarrow"), require("pyarrow.compute")
    primary_type = _child(field.type, "primary")
    code_type = _child(primary_type, "code")
    if code_type is None or not pa.types.is_string(code_type):
        return None
    primary = pc.struct_field(taxonomy, [field.name, "primary"])
    code = pc.struct_field(primary, ["code"])
    level_1 = _child(_child(primary_type, "labels"), "level_1")
    if level_1 is not None and pa.types.is_string(level_1):
        return (pc.utf8_slice_codeunits(code, 0, 1),
                pc.struct_field(primary, ["labels", "level_1"]), "prefix")
    label = _child(primary_type, "label")
    if label is not None and pa.types.is_string(label):
        return code, pc.struct_field(primary, ["label"]), "eq"
    return code, code, "eq"


def _child(struct_type: Any, name: str) -> Any:
    """The type of field ``name`` of a struct type (None if either is missing)."""
    pa = require("pyarrow")
    if struct_type is None or not pa.types.is_struct(struct_type):
        return None
    index = struct_type.get_field_index(name)
    return None if index < 0 else struct_type.field(index).type


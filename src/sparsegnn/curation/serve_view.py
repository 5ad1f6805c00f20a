"""What the browser asks for, as one SQL statement: a base selection (a recipe, or the
user's SELECT with its ``?`` values) narrowed by filters and a text search and ordered by
a field.

The statement is composed here, on the server, so that a filter or search value is always
a bound ``?`` parameter and a field name is checked against the result's own schema and
quoted, never pasted; the page shows the composed statement, so browsing without SQL
also teaches the SQL. The result is still one plain SELECT over the corpus views, run by
the same sandbox as any other query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sparsegnn.curation.curation_errors import QueryError
from sparsegnn.curation.recipes import list_recipes, recipe_sql
from sparsegnn.curation.sandbox import CorpusFiles, Sandbox
from sparsegnn.optional import require

TAXONOMY = "eai_taxonomy"
MAX_FILTERS = 20
# op -> the condition on the quoted field ``{f}``, its value bound as ``?``
OPS = {
    "eq": "{f} = ?", "ne": "{f} IS DISTINCT FROM ?", "gt": "{f} > ?", "lt": "{f} < ?",
    "prefix": "starts_with(CAST({f} AS VARCHAR), ?)",
    "contains": "contains(lower(CAST({f} AS VARCHAR)), lower(?))",
}
_CATEGORY_REFERENCE = re.compile(TAXONOMY + r"\.(\w+)")


class ViewError(ValueError):
    """A request whose shape is wrong (the server answers 400 with this message)."""


@dataclass(frozen=True)
class Filter:
    """``field op value``: a dotted path into the result (``eai_taxonomy.topic.primary.code``)."""

    field: tuple[str, ...]
    op: str
    value: str


@dataclass(frozen=True)
class View:
    """A base selection and what the page narrows and orders it by."""

    sql: str
    params: tuple[str, ...] = ()
    filters: tuple[Filter, ...] = ()
    search: str = ""
    sort: tuple[str, ...] = ()
    descending: bool = False

    @classmethod
    def from_body(cls, body: dict[str, Any], recipes: Recipes) -> View:
        """Read a request body: ``sql`` or ``recipe`` (one ``recipes`` offers),
        ``params``, ``filters`` ([{field, op, value}]), ``search``, ``sort``, ``descending``."""
        recipe, sql, params = body.get("recipe"), body.get("sql"), body.get("params", [])
        if (recipe is None) == (sql is None):
            raise ViewError("give either 'sql' or 'recipe', not both or neither")
        if recipe is not None:
            if not isinstance(recipe, str):
                raise ViewError("'recipe' must be a recipe name")
            sql = recipes.sql(recipe)
        if not isinstance(sql, str) or not sql.strip():
            raise ViewError("'sql' must be a non-empty SELECT")
        search, sort = body.get("search", ""), body.get("sort") or ""
        if not isinstance(search, str) or not isinstance(sort, str):
            raise ViewError("'search' and 'sort' must be strings")
        return cls(sql, _strings(params, "params"), _filters(body.get("filters", [])),
                   search.strip(), tuple(sort.split(".")) if sort else (),
                   bool(body.get("descending", False)))

    @property
    def plain(self) -> bool:
        """Whether the base selection runs as it is (its own ORDER BY then holds)."""
        return not (self.filters or self.search or self.sort)

    def statement(self, box: Sandbox) -> tuple[str, tuple[str, ...]]:
        """The SQL to run and its ``?`` values, fields checked against the base's schema."""
        if self.plain:
            return self.sql, self.params
        base = self.sql.strip().rstrip(";")
        schema = box.execute(f"SELECT * FROM (\n{base}\n) AS base LIMIT 0", self.params).schema
        where, values = [], list(self.params)
        for item in self.filters:
            field_type(schema, item.field)
            where.append(OPS[item.op].format(f=_reference(item.field)))
            values.append(item.value)
        if self.search:
            where.append(_search(schema))
            values += [self.search] * where[-1].count("?")
        sql = f"SELECT * FROM (\n{base}\n) AS base"
        if where:
            sql += "\nWHERE " + "\n  AND ".join(where)
        if self.sort:
            field_type(schema, self.sort)
            order = "DESC" if self.descending else "ASC"
            sql += f"\nORDER BY {_reference(self.sort)} {order} NULLS LAST"
        return sql, tuple(values)


def field_type(schema: Any, path: tuple[str, ...]) -> Any:
    """The Arrow type at ``path`` in ``schema`` (a QueryError naming the fields if none)."""
    pa = require("pyarrow")
    fields, kind = schema, None
    for name in path:
        index = fields.get_field_index(name) if fields is not None else -1
        if index < 0:
            raise QueryError(f"no field {'.'.join(path)} in this result; its fields are "
                             f"{', '.join(f['name'] for f in leaf_fields(schema))}")
        kind = fields.field(index).type
        fields = kind if pa.types.is_struct(kind) else None
    return kind


def leaf_fields(schema: Any) -> list[dict[str, str]]:
    """Every leaf of the result as ``{name, type}``, structs flattened to dotted names: the
    fields a filter or sort may name."""
    pa = require("pyarrow")
    out: list[dict[str, str]] = []

    def walk(prefix: str, fields: Any) -> None:
        for item in fields:
            name = f"{prefix}{item.name}"
            if pa.types.is_struct(item.type):
                walk(name + ".", item.type)
            else:
                out.append({"name": name, "type": str(item.type)})

    walk("", schema)
    return out


def _search(schema: Any) -> str:
    """Case-insensitive substring search over the result's top-level text columns."""
    pa = require("pyarrow")
    texts = [f.name for f in schema
             if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    if not texts:
        raise QueryError("this result has no text column to search")
    return "(" + " OR ".join(OPS["contains"].format(f=_reference((name,)))
                             for name in texts) + ")"


def _reference(path: tuple[str, ...]) -> str:
    """``base."a"."b"``: a checked path as quoted identifiers."""
    return "base." + ".".join('"' + name.replace('"', '""') + '"' for name in path)


def _strings(values: Any, what: str) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ViewError(f"'{what}' must be a list of strings")
    return tuple(values)


def _filters(items: Any) -> tuple[Filter, ...]:
    if not isinstance(items, list) or len(items) > MAX_FILTERS:
        raise ViewError(f"'filters' must be a list of at most {MAX_FILTERS} filters")
    out = []
    for item in items:
        if not isinstance(item, dict) or item.get("op") not in OPS \
                or not isinstance(item.get("field"), str) or not item["field"] \
                or not isinstance(item.get("value"), str):
            raise ViewError("a filter is {field: 'a.b', op: one of "
                            f"{', '.join(OPS)}, value: a string}}")
        out.append(Filter(tuple(item["field"].split(".")), item["op"], item["value"]))
    return tuple(out)


# --------------------------------------------------------------------------- recipes
@dataclass(frozen=True)
class Recipes:
    """The shipped recipes this store can run (``{name: sql}``), and the others with why
    not: a recipe reads the categories it names as ``eai_taxonomy.<category>``."""

    offered: dict[str, str]
    unavailable: dict[str, str]

    @classmethod
    def for_store(cls, files: CorpusFiles) -> Recipes:
        categories = store_categories(files)
        offered, unavailable = {}, {}
        for name in list_recipes():
            sql = recipe_sql(name)
            lacking = sorted(set(_CATEGORY_REFERENCE.findall(sql)) - categories)
            if lacking:
                unavailable[name] = (f"needs the categories {', '.join(lacking)}, which "
                                     "this store's annotations lack")
            else:
                offered[name] = sql
        return cls(offered, unavailable)

    def sql(self, name: str) -> str:
        """Recipe ``name``'s SQL, or why this store cannot run it."""
        if name in self.offered:
            return self.offered[name]
        if name in self.unavailable:
            raise QueryError(f"recipe {name} {self.unavailable[name]}")
        return recipe_sql(name)  # unknown: its own error, naming the shipped recipes


def store_categories(files: CorpusFiles) -> frozenset[str]:
    """The annotation categories the store has (none without annotations)."""
    if files.annotations is None:
        return frozenset()
    pa, pq = require("pyarrow"), require("pyarrow.parquet")
    schema = pq.read_schema(files.annotations)
    index = schema.get_field_index(TAXONOMY)
    kind = schema.field(index).type if index >= 0 else None
    return frozenset(f.name for f in kind) if kind and pa.types.is_struct(kind) else frozenset()

"""Taxonomy annotation and SQL curation of document collections (the Essential-Web recipe).

A teacher labels a sample; a graph-aware student, trained with sparsegnn's engine on text
features plus the document graph, annotates the whole corpus; curation is SQL over the
annotations in a DuckDB sandbox; agreement is Cohen's kappa with bootstrap intervals.
"""

from sparsegnn.curation.agreement import (
    Kappa,
    cohen_kappa,
    confusion_matrix,
    normalized_mutual_info,
    plot_confusion,
)
from sparsegnn.curation.curation_errors import QueryError, SandboxError, SchemaError
from sparsegnn.curation.fdc import fdc_levels, parse_fdc
from sparsegnn.curation.labels import (
    CategoryLabels,
    LabelSet,
    Prediction,
    annotation_batch,
    read_labels,
    taxonomy_type,
)
from sparsegnn.curation.recipes import list_recipes, recipe_sql
from sparsegnn.curation.sandbox import CorpusFiles, Sandbox
from sparsegnn.curation.schema import (
    Category,
    Code,
    Schema,
    essential_web,
    load_schema,
    save_schema,
)

__all__ = [
    "Category",
    "CategoryLabels",
    "Code",
    "CorpusFiles",
    "Kappa",
    "LabelSet",
    "Prediction",
    "QueryError",
    "Sandbox",
    "SandboxError",
    "Schema",
    "SchemaError",
    "annotation_batch",
    "cohen_kappa",
    "confusion_matrix",
    "essential_web",
    "fdc_levels",
    "list_recipes",
    "load_schema",
    "normalized_mutual_info",
    "parse_fdc",
    "plot_confusion",
    "read_labels",
    "recipe_sql",
    "save_schema",
    "taxonomy_type",
]

"""Taxonomy schemas: the built-in Essential-Web taxonomy and user-defined ones.

A schema is a list of categories; each category has codes with labels, and every
annotation gives a primary and a secondary code per category. The Essential-Web schema has
the FDC topic (a hierarchical decimal code read at three levels) and nine flat categories.
User schemas come from a small YAML or JSON file::

    name: citeseer_topics
    categories:
      - name: topic
        codes:
          - {code: ML, label: Machine learning}
          - {code: DB, label: Databases}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from sparsegnn.curation.curation_errors import SchemaError
from sparsegnn.curation.fdc import fdc_levels, fdc_tree, is_fdc_code
from sparsegnn.optional import require

Kind = Literal["flat", "fdc"]
FDC = "free_decimal_correspondence"


@dataclass(frozen=True)
class Code:
    """One value of a category: the code stored in annotations and its human label."""

    code: str
    label: str


@dataclass(frozen=True)
class Category:
    """A taxonomy axis. ``flat`` accepts only its listed codes, in the listed (ordinal)
    order; ``fdc`` accepts any well-formed FDC decimal and labels it from the FDC tree."""

    name: str
    codes: tuple[Code, ...]
    kind: Kind = "flat"
    description: str = ""
    _label_of: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not self.name.isidentifier():
            raise SchemaError(f"category name {self.name!r} must be a non-empty identifier")
        labels = {c.code: c.label for c in self.codes}
        if len(labels) != len(self.codes):
            raise SchemaError(f"category {self.name!r} lists a code twice")
        if self.kind == "flat" and not labels:
            raise SchemaError(f"category {self.name!r} has no codes")
        object.__setattr__(self, "_label_of", labels)

    def is_valid(self, code: str) -> bool:
        if self.kind == "fdc":
            return is_fdc_code(code)
        return code in self._label_of

    def check(self, code: str) -> str:
        """``code`` itself, or a SchemaError naming the category and the codes it knows."""
        if not self.is_valid(code):
            known = ", ".join(c.code for c in self.codes[:12])
            more = "" if len(self.codes) <= 12 else ", ..."
            raise SchemaError(f"unknown code {code!r} for category {self.name!r} "
                              f"(known: {known}{more})")
        return code

    def label(self, code: str) -> str:
        """Label of a valid code; FDC codes take the deepest label the tree has."""
        self.check(code)
        if self.kind == "fdc":
            return self._label_of.get(code) or next(
                (lab for lab in reversed(fdc_levels(code)) if lab), "")
        return self._label_of[code]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.description:
            out["description"] = self.description
        if self.kind == "flat":
            out["codes"] = [{"code": c.code, "label": c.label} for c in self.codes]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Category:
        if not isinstance(data, Mapping) or "name" not in data:
            raise SchemaError(f"a category needs a mapping with a 'name', got {data!r}")
        kind = data.get("kind", "flat")
        if kind not in ("flat", "fdc"):
            raise SchemaError(f"category {data['name']!r}: kind must be 'flat' or 'fdc'")
        if kind == "fdc":
            return fdc_category(str(data["name"]))
        codes = data.get("codes")
        if not isinstance(codes, Sequence) or isinstance(codes, str):
            raise SchemaError(f"category {data['name']!r}: 'codes' must be a list")
        try:
            parsed = tuple(Code(str(c["code"]), str(c.get("label", c["code"]))) for c in codes)
        except (TypeError, KeyError):
            raise SchemaError(
                f"category {data['name']!r}: each code needs a mapping with 'code' and 'label'"
            ) from None
        return cls(str(data["name"]), parsed, "flat", str(data.get("description", "")))


@dataclass(frozen=True)
class Schema:
    """A named, ordered set of categories."""

    name: str
    categories: tuple[Category, ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.categories]
        if not names:
            raise SchemaError(f"schema {self.name!r} has no categories")
        if len(set(names)) != len(names):
            raise SchemaError(f"schema {self.name!r} names a category twice")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.categories]

    def category(self, name: str) -> Category:
        for cat in self.categories:
            if cat.name == name:
                return cat
        raise SchemaError(f"schema {self.name!r} has no category {name!r}; "
                          f"it has {', '.join(self.names)}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "categories": [c.to_dict() for c in self.categories]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schema:
        if not isinstance(data, Mapping) or "categories" not in data:
            raise SchemaError("a schema needs a mapping with 'name' and 'categories'")
        cats = data["categories"]
        if not isinstance(cats, Sequence) or isinstance(cats, str):
            raise SchemaError("schema 'categories' must be a list")
        return cls(str(data.get("name", "schema")), tuple(Category.from_dict(c) for c in cats))


def load_schema(source: str | Path) -> Schema:
    """``"essential_web"`` (built in) or a ``.json``/``.yaml``/``.yml`` schema file."""
    if str(source) == "essential_web":
        return essential_web()
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SchemaError(f"{path}: cannot read schema file ({err})") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            yaml = require("yaml")
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except ValueError as err:  # json.JSONDecodeError and yaml.YAMLError both qualify
        raise SchemaError(f"{path}: not valid {path.suffix[1:] or 'json'} ({err})") from None
    return Schema.from_dict(data)


def save_schema(schema: Schema, path: str | Path) -> None:
    """Write ``schema`` as JSON, or YAML when the suffix asks for it."""
    path = Path(path)
    data = schema.to_dict()
    if path.suffix.lower() in (".yaml", ".yml"):
        text = require("yaml").safe_dump(data, sort_keys=False, allow_unicode=True)
    else:
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")


def fdc_category(name: str = FDC) -> Category:
    """The FDC topic axis: every code of the shipped tree, any well-formed decimal valid."""
    codes = tuple(Code(code, label) for code, label in fdc_tree().items())
    return Category(name, codes, "fdc", "Free Decimal Correspondence topic (levels 1-3)")


def _flat(name: str, pairs: Sequence[tuple[int, str]], description: str) -> Category:
    return Category(name, tuple(Code(str(c), lab) for c, lab in pairs), "flat", description)


_ABSTAIN = (-1, "Abstain")
_EW_FLAT: tuple[tuple[str, str, tuple[tuple[int, str], ...]], ...] = (
    ("bloom_cognitive_process", "Bloom's taxonomy: cognitive process", (
        _ABSTAIN, (1, "Remember"), (2, "Understand"), (3, "Apply"), (4, "Analyze"),
        (5, "Evaluate"), (6, "Create"))),
    ("bloom_knowledge_domain", "Bloom's taxonomy: knowledge domain", (
        _ABSTAIN, (1, "Factual"), (2, "Conceptual"), (3, "Procedural"), (4, "Metacognitive"))),
    ("document_type_v1", "Document type, first version", (
        _ABSTAIN, (1, "News/Editorial"), (2, "Academic/Research"),
        (3, "Reference/Encyclopedic/Educational"), (4, "Code/Software"), (5, "Social/Forum"),
        (6, "Promotional/Advertisement"), (7, "Search/Directory/Bibliography"),
        (8, "Adult/Pornographic"), (9, "Personal/Misc"), (10, "Machine-Generated"),
        (11, "Legal/Regulatory"), (12, "Government/Political"), (13, "Literary/Creative"),
        (14, "Reviews/Critiques"), (15, "E-Commerce/Marketplace"),
        (16, "Images/Videos/Audio"), (17, "Other/Unclassified"))),
    ("document_type_v2", "Document type, second version", (
        _ABSTAIN, (1, "About (Org.)"), (2, "About (Personal)"), (3, "Academic Writing"),
        (4, "Audio Transcript"), (5, "Comment Section"), (6, "Content Listing"),
        (7, "Creative Writing"), (8, "Documentation"), (9, "FAQ"), (10, "Knowledge Article"),
        (11, "Legal Notices"), (12, "Listicle"), (13, "News (Org.)"), (14, "News Article"),
        (15, "Nonfiction Writing"), (16, "Personal Blog"), (17, "Product Page"),
        (18, "Q&A Forum"), (19, "Spam / Ads"), (20, "Structured Data"),
        (21, "Customer Support"), (22, "Truncated"), (23, "Tutorial"), (24, "User Review"),
        (25, "Other/Unclassified"))),
    ("extraction_artifacts", "Leftovers of HTML-to-text extraction", (
        _ABSTAIN, (0, "No Artifacts"), (1, "Leftover HTML"), (2, "Text Extraction Errors"),
        (3, "Irrelevant Content"), (4, "Indeterminate"))),
    ("missing_content", "Content the extraction lost", (
        _ABSTAIN, (0, "No Missing Content"), (1, "Truncated Snippets"),
        (2, "Click Here References"), (3, "Incoherent Flow"), (4, "Missing Images or Figures"),
        (5, "Missing Referenced Data"), (6, "Indeterminate"))),
    ("reasoning_depth", "Depth of the reasoning in the text", (
        _ABSTAIN, (1, "No Reasoning"), (2, "Basic"), (3, "Intermediate"),
        (4, "Advanced"), (5, "Exceptional"), (6, "Indeterminate"))),
    ("technical_correctness", "Technical correctness of the content", (
        _ABSTAIN, (1, "Technically Flawed"), (2, "Partially Correct"), (3, "Mostly Correct"),
        (4, "Highly Correct"), (5, "Exceptionally Correct"),
        (6, "Not Applicable/Indeterminate"))),
    ("education_level", "Education level the text assumes", (
        _ABSTAIN, (1, "General Audience"), (2, "High School"),
        (3, "Undergraduate"), (4, "Graduate/Expert"), (5, "Indeterminate"))),
)


@cache
def essential_web() -> Schema:
    """The Essential-Web v1.0 taxonomy: FDC topic plus the nine flat categories."""
    flat = tuple(_flat(name, pairs, desc) for name, desc, pairs in _EW_FLAT)
    return Schema("essential_web", (fdc_category(), *flat))

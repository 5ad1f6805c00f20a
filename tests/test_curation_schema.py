"""Schemas: the built-in Essential-Web taxonomy, user schemas, FDC levels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparsegnn.curation import (
    SchemaError,
    essential_web,
    fdc_levels,
    load_schema,
    parse_fdc,
    save_schema,
)
from sparsegnn.curation.fdc import fdc_tree

FDC_TXT = Path(__file__).resolve().parents[2] / "shared" / "data" / "fdc_taxonomy" / "fdc.txt"


def test_essential_web_has_ten_categories_with_published_codes():
    schema = essential_web()
    assert len(schema.categories) == 10
    assert schema.names[0] == "free_decimal_correspondence"
    dt2 = schema.category("document_type_v2")
    assert [c.code for c in dt2.codes] == ["-1", *map(str, range(1, 26))]
    assert dt2.label("18") == "Q&A Forum"
    assert schema.category("extraction_artifacts").label("0") == "No Artifacts"
    assert schema.category("reasoning_depth").label("-1") == "Abstain"


def test_fdc_codes_and_levels():
    fdc = essential_web().category("free_decimal_correspondence")
    assert fdc.is_valid("513.212") and fdc.is_valid("51") and not fdc.is_valid("5x1")
    assert fdc_levels("513.212") == ("Science", "Mathematics", "Geometry")
    assert fdc.label("006.6") == "Computer graphics"
    with pytest.raises(SchemaError, match="unknown code '5x1'"):
        fdc.check("5x1")


@pytest.mark.skipif(not FDC_TXT.exists(), reason="shared FDC source not present")
def test_shipped_tree_matches_the_source_file():
    assert parse_fdc(FDC_TXT) == fdc_tree()


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_schema_round_trip(tmp_path: Path, suffix: str):
    if suffix == ".yaml":
        pytest.importorskip("yaml")
    path = tmp_path / f"schema{suffix}"
    save_schema(essential_web(), path)
    assert load_schema(path) == essential_web()


def test_user_schema_from_json(tmp_path: Path):
    path = tmp_path / "topics.json"
    path.write_text(json.dumps({"name": "topics", "categories": [
        {"name": "topic", "codes": [{"code": "ML", "label": "Machine learning"},
                                    {"code": "DB", "label": "Databases"}]}]}))
    schema = load_schema(path)
    assert schema.category("topic").label("DB") == "Databases"
    with pytest.raises(SchemaError, match="unknown code 'IR' for category 'topic'"):
        schema.category("topic").check("IR")


@pytest.mark.parametrize("body, message", [
    ({"name": "s", "categories": []}, "no categories"),
    ({"name": "s", "categories": [{"name": "t", "codes": []}]}, "has no codes"),
    ({"name": "s", "categories": [{"name": "t", "codes": [{"code": "a"}, {"code": "a"}]}]},
     "code twice"),
    ({"name": "s", "categories": [{"name": "bad name", "codes": [{"code": "a"}]}]},
     "identifier"),
])
def test_bad_user_schemas_are_refused(tmp_path: Path, body: dict, message: str):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(body))
    with pytest.raises(SchemaError, match=message):
        load_schema(path)

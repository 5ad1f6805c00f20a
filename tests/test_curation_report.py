"""`curate agreement`: the kappa table, FDC levels, NMI and confusion PNGs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparsegnn.cli.main import main

pytest.importorskip("matplotlib")

REF = [
    {"id": "a", "free_decimal_correspondence": "513.2", "document_type_v1": "3",
     "document_type_v1_secondary": "2"},
    {"id": "b", "free_decimal_correspondence": "530", "document_type_v1": "2"},
    {"id": "c", "free_decimal_correspondence": "616.1", "document_type_v1": "2"},
    {"id": "d", "free_decimal_correspondence": "940", "document_type_v1": "1"},
]
# Same level-1 and level-2 topics except d; level 3 differs on a; v1 differs only on a,
# whose reference secondary (2) matches: agreement by overlap, not by primary.
OTHER = [
    {"id": "d", "free_decimal_correspondence": "130", "document_type_v1": "1"},
    {"id": "a", "free_decimal_correspondence": "512", "document_type_v1": "2"},
    {"id": "b", "free_decimal_correspondence": "530.1", "document_type_v1": "2"},
    {"id": "c", "free_decimal_correspondence": "616", "document_type_v1": "2"},
]


def _strict(token: str) -> None:
    raise AssertionError(f"{token} is not JSON")


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_agreement_command(tmp_path: Path, capsys: pytest.CaptureFixture):
    ref, other = _write(tmp_path / "ref.jsonl", REF), _write(tmp_path / "o.jsonl", OTHER)
    code = main(["curate", "agreement", "--reference", str(ref), "--annotations", str(other),
                 "--bootstrap", "20", "--plots", str(tmp_path / "plots"), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1], parse_constant=_strict)
    kappa = {k: v["kappa"] for k, v in out["kappa"].items()}
    # level 1: a,b,c agree (5,5,6), d does not (9 vs 1): observed 3/4
    # chance: ref {5:2, 6:1, 9:1}, other {1:1, 5:2, 6:1} -> (2*2 + 1*1) / 16 = 5/16
    assert kappa["free_decimal_correspondence.level_1"] == pytest.approx((0.75 - 5 / 16)
                                                                         / (1 - 5 / 16))
    assert kappa["document_type_v1"] == pytest.approx(1.0)
    assert len(out["plots"]) == 4 and all(Path(p).is_file() for p in out["plots"])
    assert "free_decimal_correspondence~document_type_v1" in out["nmi"]


def test_agreement_needs_every_reference_id(tmp_path: Path, capsys: pytest.CaptureFixture):
    ref, other = _write(tmp_path / "ref.jsonl", REF), _write(tmp_path / "o.jsonl", OTHER[:2])
    assert main(["curate", "agreement", "--reference", str(ref), "--annotations",
                 str(other)]) == 2
    assert "2 ids have no labels" in capsys.readouterr().err

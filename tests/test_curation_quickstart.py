"""The quick start of docs/curation.md run as written; the rough edges of issue 48; the
out-of-fold choice of the graph share."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.curation.agreement_report import agreement_report
from sparsegnn.curation.labels import CategoryLabels, LabelSet
from sparsegnn.curation.mix_choice import ShareGain, choose_mix, fold_positions, share_gains
from sparsegnn.curation.schema import essential_web
from sparsegnn.curation.synthetic import SyntheticConfig, generate

pq = pytest.importorskip("pyarrow.parquet")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "curation.md"
SKIPPED = ("demo", "serve")  # the demo has its own test; serve runs until Ctrl-C


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def quick_start_commands() -> list[list[str]]:
    """The ``sparsegnn curate`` lines of the docs' first code block (continuations joined)."""
    block = re.search(r"```\n(.*?)```", DOCS.read_text(), re.S).group(1)
    lines = block.replace("\\\n", " ").splitlines()
    return [shlex.split(line.split("  #")[0])[1:] for line in lines
            if line.startswith("sparsegnn curate")]


@pytest.fixture
def quick_start_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """corpus.jsonl, teacher.jsonl and teacher_heldout.jsonl, as the quick start names them."""
    rows = next(iter(generate(SyntheticConfig(num_docs=120, num_sites=6, seed=1))))
    _jsonl(tmp_path / "corpus.jsonl", [{k: r[k] for k in ("id", "text", "url", "links")}
                                       for r in rows])
    codes = [{k: v for k, v in r.items() if k not in ("text", "url", "links")} for r in rows]
    _jsonl(tmp_path / "teacher.jsonl", codes[:80])
    _jsonl(tmp_path / "teacher_heldout.jsonl", codes[80:])
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_docs_quick_start_runs_as_written(quick_start_files: Path,
                                              capsys: pytest.CaptureFixture):
    commands = quick_start_commands()
    assert [c[1] for c in commands] == ["ingest", "distil", "annotate", "query", "query",
                                        "agreement", "demo", "serve"]
    for args in commands:
        if args[1] not in SKIPPED:
            assert main(args) == 0, args
    # distil says, per category, which share it took and on what evidence
    shares = capsys.readouterr().out.split("graph share per category")[1]
    assert "out of fold on 80 labelled documents" in shares
    assert pq.read_table(quick_start_files / "math.parquet").num_columns > 0
    assert any((quick_start_files / "plots").iterdir())


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_an_export_without_matching_rows_is_a_valid_empty_file(
        quick_start_files: Path, suffix: str):
    assert main(["curate", "ingest", "corpus.jsonl", "--out", "store"]) == 0
    out = quick_start_files / f"none{suffix}"
    assert main(["curate", "query", "SELECT id, site FROM documents WHERE site = 'nowhere'",
                 "--corpus", "store", "--output", str(out)]) == 0
    if suffix == ".parquet":
        table = pq.read_table(out)
        assert table.num_rows == 0 and table.column_names == ["id", "site"]
    else:
        assert out.read_bytes() == (b"id,site\r\n" if suffix == ".csv" else b"")


def test_distil_names_label_columns_the_schema_lacks(
        quick_start_files: Path, capsys: pytest.CaptureFixture):
    rows = [json.loads(line) | {"topic": "ML", "bogus_category": "1"}
            for line in (quick_start_files / "teacher.jsonl").read_text().splitlines()]
    _jsonl(quick_start_files / "bad.jsonl", rows)
    assert main(["curate", "ingest", "corpus.jsonl", "--out", "store"]) == 0
    assert main(["curate", "distil", "--corpus", "store", "--labels", "bad.jsonl",
                 "--out", "s.pt", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "bogus_category, topic" in err and not (quick_start_files / "s.pt").exists()


def test_an_undefined_kappa_says_why():
    one = LabelSet(["a", "b"], {"free_decimal_correspondence": CategoryLabels(
        ["006.3", "025.04"], [None, None])})
    report = agreement_report(one, one, essential_web(), n_boot=0)
    assert set(report.undefined) == {"free_decimal_correspondence.level_1"}
    assert "chance agreement is 1" in report.table()


def test_folds_cover_every_labelled_document_once():
    folds = fold_positions(23, 5, seed=3)
    assert sorted(i for f in folds for i in f.tolist()) == list(range(23))
    assert {len(f) for f in folds} == {4, 5}


def test_share_gains_are_paired_differences_against_text():
    truth = torch.tensor([0, 0, 1, 1])
    text = torch.tensor([[2.0, 0.0], [2.0, 0.0], [2.0, 0.0], [0.0, 2.0]])  # 3 of 4 right
    graph = torch.tensor([[0.0, 2.0], [2.0, 0.0], [0.0, 2.0], [0.0, 2.0]])  # 3 of 4 right
    gains = {g.share: g for g in share_gains(text, graph, truth)}
    assert gains[0.0].gain == 0.0 and gains[0.0].stderr == 0.0
    # the graph alone: +1 on the third document, -1 on the first: mean 0, sd sqrt(2/3)
    assert gains[1.0].gain == 0.0
    assert gains[1.0].stderr == pytest.approx((2 / 3) ** 0.5 / 2)


def test_a_share_needs_a_gain_beyond_its_standard_error():
    gains = [ShareGain(0.0, 0.0, 0.0), ShareGain(0.5, 0.03, 0.02), ShareGain(1.0, 0.05, 0.06)]
    chosen = choose_mix("topic", gains, 100, z=1.0)
    assert chosen.graph_share == 0.5 and chosen.verdict == "graph"
    assert chosen.best.share == 1.0  # the largest gain, reported even when not taken
    unclear = choose_mix("topic", gains, 100, z=2.0)
    assert unclear.graph_share == 0.0 and unclear.verdict == "too_few"
    assert "too few labels to tell" in unclear.describe()
    worse = choose_mix("topic", [ShareGain(0.0, 0.0, 0.0), ShareGain(1.0, -0.1, 0.01)], 100, 1)
    assert worse.verdict == "no_gain" and "does not help" in worse.describe()
    assert choose_mix("topic", gains, 6, z=0.0).graph_share == 0.0  # too few to cross-fit

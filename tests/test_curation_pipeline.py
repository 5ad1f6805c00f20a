"""Ingest, distil, annotate and the CLI on a small generated corpus."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.curation import essential_web, read_labels
from sparsegnn.curation.distil import Annotator, distil
from sparsegnn.curation.ingest import IngestConfig, ingest, load_graph_edges, site_of
from sparsegnn.curation.student import StudentConfig
from sparsegnn.curation.synthetic import SyntheticConfig, generate, write_corpus
from sparsegnn.errors import DataFormatError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
TINY = StudentConfig(n_features=512, hidden=8, hops=1, epochs=3, patience=3, label_inputs=True)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("synthetic")
    write_corpus(folder / "corpus.jsonl", SyntheticConfig(num_docs=300, num_sites=10, seed=2))
    return folder


def test_generator_is_seeded_and_chunked():
    cfg = SyntheticConfig(num_docs=50, num_sites=5, seed=4, chunk=20)
    a = [r for chunk in generate(cfg) for r in chunk]
    b = [r for chunk in generate(cfg) for r in chunk]
    assert a == b and len(a) == 50
    assert [len(c) for c in generate(cfg)] == [20, 20, 10]


def test_ingest_loses_no_rows_and_builds_all_edge_kinds(corpus: Path, tmp_path: Path):
    report = ingest(corpus / "corpus.jsonl", tmp_path,
                    IngestConfig(batch_rows=64, site_neighbors=2, knn=2))
    assert report.num_documents == 300
    assert pq.ParquetFile(tmp_path / "documents.parquet").metadata.num_row_groups == 5
    assert min(report.edges.values()) > 0 and report.dangling_links == 0
    n, src, dst = load_graph_edges(tmp_path / "graph.npz")
    assert n == 300 and src.max() < 300 and dst.max() < 300


def test_link_edges_resolve_across_batches_and_count_dangling(tmp_path: Path):
    rows = [{"id": "a", "text": "alpha beta", "links": ["c", "gone"]},
            {"id": "b", "text": "beta gamma"},
            {"id": "c", "text": "gamma delta", "links": "a"},
            {"id": "d", "text": "delta alpha", "links": ["b", "c", "nowhere"]}]
    report = ingest(_jsonl(tmp_path / "c.jsonl", rows), tmp_path / "s",
                    IngestConfig(batch_rows=3, site_neighbors=0))
    assert report.dangling_links == 2 and report.edges["link"] == 4
    with np.load(tmp_path / "s" / "graph.npz") as z:
        assert z["link_src"].tolist() == [0, 2, 3, 3]
        assert z["link_dst"].tolist() == [2, 0, 1, 2]


def test_parquet_input_matches_jsonl(corpus: Path, tmp_path: Path):
    rows = [json.loads(line) for line in (corpus / "corpus.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "corpus.parquet")
    a = ingest(tmp_path / "corpus.parquet", tmp_path / "a", IngestConfig(batch_rows=100))
    b = ingest(corpus / "corpus.jsonl", tmp_path / "b", IngestConfig(batch_rows=100))
    assert (a.num_documents, a.edges) == (b.num_documents, b.edges)


def test_ingest_memory_is_bounded_by_the_batch(tmp_path: Path):
    """Arrow's peak allocation is one batch of text, whatever the corpus size."""
    peaks = []
    for n in (400, 4000):
        path = _jsonl(tmp_path / f"c{n}.jsonl",
                      [{"id": str(i), "text": "word " * 200} for i in range(n)])
        pool = pa.default_memory_pool()
        before = pool.max_memory()
        ingest(path, tmp_path / f"s{n}", IngestConfig(batch_rows=100, site_neighbors=0))
        peaks.append(pool.max_memory() - before)
    # corpus 10x larger, peak well under 2x (and under ten batches of text)
    assert peaks[1] < 2 * max(peaks[0], 1) + 100 * 1000 * 10


@pytest.mark.parametrize("rows, message", [
    ([{"id": "a", "text": "x"}, {"text": "y"}], "row 1: missing id"),
    ([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}], "duplicate id 'a'"),
    ([{"id": "a", "text": "x"}, {"id": "b", "text": "  "}], "empty text for id 'b'"),
])
def test_bad_documents_are_refused_and_nothing_written(tmp_path: Path, rows: list, message: str):
    path = _jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataFormatError, match=message):
        ingest(path, tmp_path / "out")
    assert not (tmp_path / "out" / "documents.parquet").exists()


def test_every_bad_row_is_counted_with_its_row_number(tmp_path: Path):
    rows = [{"id": str(i % 3), "text": "t"} for i in range(6)] + [{"id": "late", "text": ""}]
    path = _jsonl(tmp_path / "dups.jsonl", rows)
    # rows 3-5 repeat ids; row 6 sits in the second batch, after a batch with bad rows
    with pytest.raises(DataFormatError, match=r"4 bad rows.*row 3: duplicate id '0'.*"
                                              r"row 6: empty text for id 'late'"):
        ingest(path, tmp_path / "out", IngestConfig(batch_rows=4))


def test_bad_labels_are_refused(tmp_path: Path):
    schema = essential_web()
    unknown = _jsonl(tmp_path / "u.jsonl", [{"id": "a", "document_type_v1": "99"}])
    with pytest.raises(Exception, match="row 0: unknown code '99'"):
        read_labels(unknown, schema)
    dup = _jsonl(tmp_path / "d.jsonl", [{"id": "a", "document_type_v1": "2"}] * 2)
    with pytest.raises(DataFormatError, match="'a' appears more than once"):
        read_labels(dup, schema)


def test_site_of():
    assert site_of("https://www.Example.org/a?b") == "example.org"
    assert site_of("example.org/x") == "example.org" and site_of(None) is None


def test_distil_annotate_and_reload(corpus: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture):
    store = tmp_path / "store"
    ingest(corpus / "corpus.jsonl", store, IngestConfig(batch_rows=128))
    schema = essential_web()
    labels = read_labels(corpus / "corpus.jsonl", schema)
    result = distil(store, labels.subset(labels.ids[:150]), schema, TINY)
    result.annotator.save(tmp_path / "model.pt")
    assert Annotator.load(tmp_path / "model.pt").known.ids == labels.ids[:150]
    assert main(["curate", "annotate", "--corpus", str(store), "--model",
                 str(tmp_path / "model.pt"), "--batch-rows", "128", "--no-progress",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["num_documents"] == 300 and report["docs_per_second"] > 0
    table = pq.read_table(report["output"])
    assert table.num_rows == 300 and table.column("id").to_pylist() == labels.ids
    ann = read_labels(report["output"], schema)
    assert set(ann.categories) == set(labels.categories)
    conf = table.column("eai_taxonomy").combine_chunks().field("document_type_v1").field(
        "confidence").to_numpy()
    assert ((conf > 0) & (conf <= 1)).all()


def test_cli_distil_text_only(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture):
    ingest(corpus / "corpus.jsonl", tmp_path, IngestConfig(batch_rows=128))
    assert main(["curate", "distil", "--corpus", str(tmp_path), "--labels",
                 str(corpus / "corpus.jsonl"), "--model", "text", "--epochs", "2",
                 "--batch-size", "64", "--out", str(tmp_path / "text.pt"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert out["epochs_run"] == 2 and out["config"]["hops"] == 0
    assert out["config"]["batch_size"] == 64
    assert Annotator.load(tmp_path / "text.pt").graph(tmp_path, []) is None


def test_cli_ingest_and_query(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture):
    assert main(["curate", "ingest", str(corpus / "corpus.jsonl"), "--out", str(tmp_path),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["num_documents"] == 300
    out = tmp_path / "sel.jsonl"
    assert main(["curate", "query", "SELECT id FROM documents WHERE site = ?", "--param",
                 "site1.example", "--corpus", str(tmp_path), "--output", str(out)]) == 0
    assert out.read_text().count("\n") > 0
    assert main(["curate", "query", "COPY documents TO 'x.csv'", "--corpus",
                 str(tmp_path)]) == 2
    assert "COPY statements are not allowed" in capsys.readouterr().err


def test_demo_leaves_out_the_teacher_without_the_embedding_model(
        monkeypatch: pytest.MonkeyPatch):
    from sparsegnn.curation import curate_demo as demo

    monkeypatch.setattr(demo.embed, "available", lambda: False)
    configs, notes = demo.demo_configs(teacher=True)
    assert set(configs) == {"student", "text_only"} and "sparsegnn[embed]" in notes[0]
    monkeypatch.setattr(demo.embed, "available", lambda: True)
    assert demo.demo_configs(teacher=True) == (demo.CONFIGS, [])
    configs, notes = demo.demo_configs()  # by default: minutes saved, and said so
    assert set(configs) == {"student", "text_only"} and "--teacher" in notes[0]


def test_knn_edges_get_their_own_operator(corpus: Path, tmp_path: Path):
    """k-NN edges propagate through their own hop; links and sites through the other."""
    from sparsegnn.curation.student_build import document_graph

    plain, knn = tmp_path / "plain", tmp_path / "knn"
    ingest(corpus / "corpus.jsonl", plain, IngestConfig(batch_rows=128))
    ingest(corpus / "corpus.jsonl", knn, IngestConfig(batch_rows=128, knn=3))
    with_knn = document_graph(knn, ["link", "site", "knn"])
    # the link and site operators are the same whether or not ingest also made k-NN edges
    for kind in ("link", "site"):
        assert torch.equal(with_knn.ops[kind].to_dense(),
                           document_graph(plain, [kind]).ops[kind].to_dense())
    n, src, dst = load_graph_edges(knn / "graph.npz", ("knn",))
    dense = with_knn.ops["knn"].to_dense()
    assert n == 300 and len(src) == 900 and (dense[src, dst] > 0).all()
    assert (dense[dst, src] > 0).all()  # symmetrised
    with pytest.raises(DataFormatError, match="--knn"):
        document_graph(plain, ["knn"])

    schema = essential_web()
    every = read_labels(corpus / "corpus.jsonl", schema)
    labels = every.subset(every.ids[:150])
    cfg = replace(TINY, label_inputs=False)
    assert distil(plain, labels, schema, cfg).annotator.config.knn_hops == 0
    result = distil(knn, labels, schema, cfg)  # knn_hops=None: one hop when edges exist
    assert result.annotator.config.knn_hops == 1 and result.annotator.model.knn_hops == 1
    result.annotator.save(tmp_path / "m.pt")
    loaded = Annotator.load(tmp_path / "m.pt")
    assert loaded.model.knn_hops == 1 and "knn" in loaded.graph(knn, []).ops
    with pytest.raises(DataFormatError, match="--knn"):
        distil(plain, labels, schema, replace(cfg, knn_hops=1))


def _annotate_rank(store: str, model: str, out: str) -> int:
    """Rank body: ``curate annotate`` as torchrun would start it (RANK, WORLD_SIZE set)."""
    return main(["curate", "annotate", "--corpus", store, "--model", model, "--out", out,
                 "--batch-rows", "40", "--no-progress", "--json"])


@pytest.mark.distributed
@pytest.mark.parametrize("ranks", [2, 3])
def test_annotation_over_ranks_equals_one_process(corpus: Path, tmp_path: Path, ranks: int,
                                                  capsys: pytest.CaptureFixture):
    """Each rank annotates a share of the row groups (5 groups: uneven shares at 3 ranks)
    and the concatenated file is the single-process one, row for row: ranks started as
    torchrun starts them (3), or by ``curate annotate --nprocs`` (2), which also reports
    the bytes of the one all-reduce."""
    from sparsegnn.curation.annotate import annotate
    from sparsegnn.distributed.runtime.launch import spawn

    store = tmp_path / "store"
    ingest(corpus / "corpus.jsonl", store, IngestConfig(batch_rows=64))
    schema = essential_web()
    labels = read_labels(corpus / "corpus.jsonl", schema)
    annotator = distil(store, labels.subset(labels.ids[:150]), schema, TINY).annotator
    annotator.save(tmp_path / "model.pt")
    one = pq.read_table(annotate(store, annotator, tmp_path / "one.parquet", batch_rows=40,
                                 progress=False).output)
    out = tmp_path / "many.parquet"
    if ranks == 3:
        reports = spawn(_annotate_rank, ranks, (str(store), str(tmp_path / "model.pt"),
                                                str(out)), wall_timeout_s=120)
        assert reports == [0] * ranks
    else:
        capsys.readouterr()
        assert main(["curate", "annotate", "--corpus", str(store), "--model",
                     str(tmp_path / "model.pt"), "--out", str(out), "--batch-rows", "40",
                     "--nprocs", "2", "--json"]) == 0
        got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        # each rank sends its zero-padded H0 (300 documents x hidden 8, float32) once
        # (both students' H0 of the text fallback: hidden 8 each)
        assert got["world_size"] == 2 and got["bytes_sent_per_rank"] == [300 * 16 * 4] * 2
    many = pq.read_table(out)
    assert many.column("id").to_pylist() == one.column("id").to_pylist()
    for cat in ("document_type_v1", "free_decimal_correspondence"):
        a, b = (t.column("eai_taxonomy").combine_chunks().field(cat) for t in (one, many))
        assert a.field("primary").field("code").to_pylist() == \
            b.field("primary").field("code").to_pylist()
        np.testing.assert_allclose(a.field("confidence").to_numpy(),
                                   b.field("confidence").to_numpy(), rtol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir() if "many" in p.name) == ["many.parquet"]


def test_sampled_distil_with_whole_neighbourhoods_takes_the_full_graph_step(
        corpus: Path, tmp_path: Path):
    """One ShaDow minibatch holding every training document, with fan-outs wide enough
    to keep each seed's neighbours and theirs, sees exactly the full graph's receptive
    field (hops=1: neighbours, and their degrees for the normalisation): the first Adam
    step must equal full-graph training's. Smaller batches then train and annotate."""
    from sparsegnn.curation.annotate import annotate

    store = tmp_path / "store"
    ingest(corpus / "corpus.jsonl", store, IngestConfig(batch_rows=128, knn=2))
    schema = essential_web()
    every = read_labels(corpus / "corpus.jsonl", schema)
    labels = every.subset(every.ids[:200])
    cfg = replace(TINY, dropout=0.0, epochs=1, patience=1)
    full = distil(store, labels, schema, cfg).annotator.model.state_dict()
    one_batch = replace(cfg, batch_size=1000, fanouts=(1000, 1000))
    sampled = distil(store, labels, schema, one_batch).annotator.model.state_dict()
    assert full.keys() == sampled.keys()
    for name, value in full.items():  # Adam's first step moves each weight by ~lr = 1e-2
        torch.testing.assert_close(sampled[name], value, atol=1e-4, rtol=1e-4)
    small = replace(TINY, batch_size=16, fanouts=(3, 2), epochs=2)
    result = distil(store, labels, schema, small)
    assert result.epochs_run == 2 and 0 <= result.best_val_accuracy <= 1
    report = annotate(store, result.annotator, tmp_path / "a.parquet", progress=False)
    assert report.num_documents == 300


@pytest.mark.parametrize("batch_size", [None, 32], ids=["full-graph", "sampled"])
def test_interrupted_distil_resumes_bit_identically(corpus: Path, tmp_path: Path,
                                                    batch_size: int | None):
    """Stopped after 2 of 5 epochs and resumed from its checkpoint, distillation ends with
    the weights and validation score of a run that never stopped."""
    store = tmp_path / "store"
    ingest(corpus / "corpus.jsonl", store, IngestConfig(batch_rows=128))
    schema = essential_web()
    every = read_labels(corpus / "corpus.jsonl", schema)
    labels = every.subset(every.ids[:150])
    cfg = replace(TINY, epochs=5, patience=10, batch_size=batch_size, fanouts=(3, 2))
    full = distil(store, labels, schema, cfg)
    ckpt = tmp_path / "distil.pt"
    distil(store, labels, schema, replace(cfg, epochs=2), checkpoint=ckpt)
    resumed = distil(store, labels, schema, cfg, checkpoint=ckpt, resume=True)
    assert resumed.best_val_accuracy == full.best_val_accuracy
    assert resumed.epochs_run == full.epochs_run == 5
    a = full.annotator.model.state_dict()
    for name, value in resumed.annotator.model.state_dict().items():
        assert torch.equal(value, a[name])

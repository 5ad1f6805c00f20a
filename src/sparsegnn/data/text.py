"""Hashed TF-IDF text features: reproducible, vocabulary-free, bounded memory.

Raw-text graphs (CiteSeer with abstracts, curated corpora) need node features without
downloading a language model. Hashing n-grams into a fixed number of buckets needs no
vocabulary, so a corpus of any size streams through in chunks; the hash is blake2b on the
UTF-8 bytes (not Python's per-process salted ``hash``), so the same text gives the same
feature columns in every process and on every machine.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from itertools import islice

import numpy as np
import scipy.sparse as sp

from sparsegnn.errors import InvalidValueError

# Words: runs of two or more letters or digits (single characters are mostly noise).
_TOKEN = re.compile(r"[^\W_]{2,}")
# Odd 64-bit constants for mixing n-gram hashes (splitmix64's).
_MUL = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def tokenize(text: str) -> list[str]:
    """Lower-case words of two or more letters/digits."""
    return _TOKEN.findall(text.lower())


class HashedTfidf:
    """TF-IDF over hashed word n-grams, producing L2-normalised float32 CSR rows.

    ``fit`` counts document frequencies per bucket; ``transform`` weights term counts by
    the smoothed idf ``log((1 + n) / (1 + df)) + 1``. Buckets seen in fewer than
    ``min_df`` training documents get weight zero, which drops typos and OCR debris.
    Both stream over ``chunk_size`` documents at a time, so memory stays bounded.
    """

    def __init__(
        self,
        n_features: int = 2**14,
        ngram_range: tuple[int, int] = (1, 2),
        sublinear_tf: bool = True,
        min_df: int = 1,
        chunk_size: int = 4096,
    ) -> None:
        lo, hi = ngram_range
        if n_features < 1 or not 1 <= lo <= hi or min_df < 1 or chunk_size < 1:
            raise InvalidValueError(
                f"need n_features >= 1, 1 <= ngram_range[0] <= ngram_range[1], min_df >= 1 "
                f"and chunk_size >= 1; got n_features={n_features}, ngram_range={ngram_range}, "
                f"min_df={min_df}, chunk_size={chunk_size}"
            )
        self.n_features = n_features
        self.ngram_range = (lo, hi)
        self.sublinear_tf = sublinear_tf
        self.min_df = min_df
        self.chunk_size = chunk_size
        self.idf_: np.ndarray | None = None
        self.num_documents_ = 0

    def fit(self, texts: Iterable[str]) -> HashedTfidf:
        """Learn bucket idf weights from ``texts`` (any iterable; read once, in chunks)."""
        df = np.zeros(self.n_features, dtype=np.int64)
        n = 0
        for chunk in _chunks(texts, self.chunk_size):
            counts = self._counts(chunk)
            df += np.bincount(counts.indices, minlength=self.n_features)
            n += counts.shape[0]
        idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
        idf[df < self.min_df] = 0.0
        self.idf_ = idf.astype(np.float32)
        self.num_documents_ = n
        return self

    def transform(self, texts: Iterable[str]) -> sp.csr_matrix:
        """Features of ``texts`` as one ``[len(texts), n_features]`` CSR matrix."""
        blocks = list(self.transform_iter(_chunks(texts, self.chunk_size)))
        if not blocks:
            return sp.csr_matrix((0, self.n_features), dtype=np.float32)
        return sp.vstack(blocks, format="csr", dtype=np.float32)

    def transform_iter(self, chunks: Iterable[list[str]]) -> Iterator[sp.csr_matrix]:
        """One CSR block per chunk of texts, for corpora too large to hold at once."""
        idf = self.idf_
        if idf is None:
            raise InvalidValueError("HashedTfidf is not fitted: call fit() first")
        for chunk in chunks:
            yield _weigh(self._counts(chunk), idf, self.sublinear_tf)

    def fit_transform(self, texts: list[str]) -> sp.csr_matrix:
        """``fit`` then ``transform`` (two passes, hence a list rather than an iterable)."""
        return self.fit(texts).transform(texts)

    # ------------------------------------------------------------------ internals
    def _counts(self, docs: list[str]) -> sp.csr_matrix:
        """Raw n-gram bucket counts of a chunk, ``[len(docs), n_features]`` int64."""
        token_hashes, doc_of = _hash_tokens(docs)
        rows, cols = [], []
        lo, hi = self.ngram_range
        for n in range(lo, hi + 1):
            if token_hashes.size < n:
                break
            # An n-gram starts at i when tokens i..i+n-1 all belong to one document.
            starts = np.flatnonzero(doc_of[: doc_of.size - n + 1] == doc_of[n - 1:])
            h = token_hashes[starts]
            for k in range(1, n):
                h = _mix(h, token_hashes[starts + k])
            rows.append(doc_of[starts])
            cols.append((h % np.uint64(self.n_features)).astype(np.int64))
        row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        col = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
        counts = sp.csr_matrix(
            (np.ones(row.size, dtype=np.int64), (row, col)),
            shape=(len(docs), self.n_features),
        )
        counts.sum_duplicates()
        return counts


def _weigh(counts: sp.csr_matrix, idf: np.ndarray, sublinear_tf: bool) -> sp.csr_matrix:
    """Counts to L2-normalised tf-idf (float32); rows with no known term stay zero."""
    tf = counts.data.astype(np.float32)
    if sublinear_tf:
        tf = 1.0 + np.log(tf)
    data = tf * idf[counts.indices]
    row_of = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    norms = np.sqrt(np.bincount(row_of, weights=data.astype(np.float64) ** 2,
                                minlength=counts.shape[0]))
    norms[norms == 0] = 1.0
    out = sp.csr_matrix(
        ((data / norms[row_of]).astype(np.float32), counts.indices, counts.indptr),
        shape=counts.shape,
    )
    out.eliminate_zeros()
    return out


def _hash_tokens(docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Stable 64-bit hash of every token in ``docs``, and the document each came from.

    Each distinct token in the chunk is hashed once; the per-token work is array indexing.
    """
    # A token's first sighting numbers it (``__missing__`` runs before the insert, so the
    # default is the next free index); ``map`` over ``__getitem__`` keeps the per-token
    # loop in C (a generator of ``setdefault`` calls ran it in Python).
    local: defaultdict[str, int] = defaultdict(lambda: len(local))
    ids: list[int] = []
    lengths = np.zeros(len(docs), dtype=np.int64)
    for d, doc in enumerate(docs):
        tokens = tokenize(doc)
        lengths[d] = len(tokens)
        ids.extend(map(local.__getitem__, tokens))
    unique_hashes = np.fromiter(
        (int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
         for t in local),
        dtype=np.uint64, count=len(local),
    )
    token_hashes = unique_hashes[np.asarray(ids, dtype=np.int64)]
    return token_hashes, np.repeat(np.arange(len(docs), dtype=np.int64), lengths)


def _mix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Order-sensitive combination of two uint64 hash arrays (wrapping arithmetic)."""
    x = a * _MUL + b
    x ^= x >> np.uint64(30)
    x *= _MIX1
    x ^= x >> np.uint64(27)
    x *= _MIX2
    return x ^ (x >> np.uint64(31))


def _chunks(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    if isinstance(texts, str):
        raise InvalidValueError("expected an iterable of texts, got a single str")
    it = iter(texts)
    while chunk := list(islice(it, size)):
        yield chunk

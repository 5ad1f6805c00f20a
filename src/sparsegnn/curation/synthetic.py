"""A synthetic web corpus: codes for every Essential-Web category, sites, and links whose
homophily is a knob.

Every document draws a code for each of the ten categories of the built-in schema (FDC
topic and the nine flat ones), independently and uniformly. Its text mixes words of its
topic's vocabulary (``topic_share`` of the words), a few marker words of each flat
category's code (``code_share`` each), and a shared background vocabulary, all drawn with
Zipf-like weights, so every category can be learnt from text, the topic most easily.

Links are the knob. Each category named in ``homophily`` has the probability that a
link joins two documents with the same code: for each link the generator decides, per
such category, "same" with that probability, picks the code the target must have (the
source's, or one of the others uniformly), and links to a random document of the chunk
with exactly those codes; categories not named are left to chance. The measured
homophily (:func:`measured_homophily`) is therefore the knob up to sampling noise.

Sites are independent of topic: a document's site is drawn uniformly, and only its
document type follows the site's (with ``site_type_prob``), so same-site edges (ingest's
``--site-neighbors``) say something about a page's type and nothing about its topic, as
on the web. The generator is seeded and streams in chunks (links stay inside a chunk),
so any size fits in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sparsegnn.errors import InvalidValueError
from sparsegnn.optional import require

FDC = "free_decimal_correspondence"
# Topic -> FDC code; one per shipped recipe's field and a few that no recipe selects.
TOPIC_CODES = ("513.2", "530.1", "005.13", "616.1", "620.1", "940.5", "780.9", "332.6")
# The codes generated per category (valid codes of the built-in schema).
CATEGORY_CODES: dict[str, tuple[str, ...]] = {
    FDC: TOPIC_CODES,
    "bloom_cognitive_process": ("1", "2", "3", "4", "5", "6"),
    "bloom_knowledge_domain": ("1", "2", "3", "4"),
    "document_type_v1": ("1", "2", "3", "4", "5", "6"),
    "document_type_v2": ("3", "5", "8", "10", "14", "18"),
    "extraction_artifacts": ("0", "1", "2", "3"),
    "missing_content": ("0", "1", "2", "3"),
    "reasoning_depth": ("1", "2", "3", "4", "5"),
    "technical_correctness": ("1", "2", "3", "4", "5"),
    "education_level": ("1", "2", "3", "4"),
}
SITE_TYPED = "document_type_v1"  # the category a site decides (with site_type_prob)
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "xi",
              "do", "fe", "gu", "ha", "ja", "be", "co", "wy")


@dataclass
class SyntheticConfig:
    """Sizes, text mix and link structure of a generated corpus.

    ``homophily`` pairs a category with the probability that a link joins documents of
    the same code (0 to 1); :meth:`with_homophily` changes one.
    """

    num_docs: int = 10_000
    num_sites: int = 200
    words_per_topic: int = 300
    words_per_code: int = 40
    background_words: int = 1000
    doc_length: tuple[int, int] = (40, 120)
    topic_share: float = 0.04
    code_share: float = 0.04
    site_type_prob: float = 0.8
    links_per_doc: int = 3
    homophily: tuple[tuple[str, float], ...] = (
        (FDC, 0.8), ("document_type_v1", 0.5), ("reasoning_depth", 0.3))
    seed: int = 0
    chunk: int = 20_000

    def __post_init__(self) -> None:
        for name, h in self.homophily:
            if name not in CATEGORY_CODES:
                raise InvalidValueError(f"homophily names {name!r}, which the generator does "
                                        f"not make; it makes {', '.join(CATEGORY_CODES)}")
            if not 0.0 <= h <= 1.0:
                raise InvalidValueError(f"homophily of {name} must be in [0, 1], got {h}")

    def with_homophily(self, category: str, value: float) -> SyntheticConfig:
        """The same corpus settings with ``category``'s link homophily set to ``value``."""
        rest = tuple((c, h) for c, h in self.homophily if c != category)
        return SyntheticConfig(**{**self.__dict__, "homophily": ((category, value), *rest)})


def _vocabulary(size: int, rng: np.random.Generator) -> np.ndarray:
    """Distinct pseudo-words of three or four syllables."""
    words: set[str] = set()
    while len(words) < size:
        parts = rng.integers(0, len(_SYLLABLES), (size, 4))
        lengths = rng.integers(3, 5, size)
        words.update("".join(_SYLLABLES[p] for p in row[:k])
                     for row, k in zip(parts, lengths, strict=True))
    return np.array(sorted(words)[:size], dtype=object)


def _zipf(size: int) -> np.ndarray:
    w = 1.0 / np.arange(1, size + 1)
    return w / w.sum()


class _World:
    """The fixed parts of a corpus: one vocabulary per code of every category, the
    background vocabulary, and each site's document type."""

    def __init__(self, cfg: SyntheticConfig) -> None:
        rng = np.random.default_rng(cfg.seed)
        sizes = [cfg.words_per_topic if c == FDC else cfg.words_per_code
                 for c, codes in CATEGORY_CODES.items() for _ in codes]
        vocab = _vocabulary(sum(sizes) + cfg.background_words, rng)
        self.words: dict[str, list[np.ndarray]] = {}
        start = 0
        for cat, codes in CATEGORY_CODES.items():
            size = cfg.words_per_topic if cat == FDC else cfg.words_per_code
            self.words[cat] = [vocab[start + i * size:start + (i + 1) * size]
                               for i in range(len(codes))]
            start += size * len(codes)
        self.background = vocab[start:]
        self.site_type = rng.integers(0, len(CATEGORY_CODES[SITE_TYPED]), cfg.num_sites)


def generate(cfg: SyntheticConfig) -> Iterator[list[dict[str, Any]]]:
    """Documents in chunks of ``cfg.chunk``: id, text, url, links and a code per category."""
    world = _World(cfg)
    rng = np.random.default_rng(cfg.seed + 1)
    for start in range(0, cfg.num_docs, cfg.chunk):
        yield _chunk(cfg, world, rng, start, min(cfg.chunk, cfg.num_docs - start))


def _draw_codes(cfg: SyntheticConfig, world: _World, rng: np.random.Generator,
                site: np.ndarray) -> dict[str, np.ndarray]:
    """Each document's code index per category: uniform, except the site-typed one."""
    codes = {c: rng.integers(0, len(v), site.size) for c, v in CATEGORY_CODES.items()}
    keep = rng.random(site.size) < cfg.site_type_prob
    codes[SITE_TYPED] = np.where(keep, world.site_type[site], codes[SITE_TYPED])
    return codes


def _chunk(cfg: SyntheticConfig, world: _World, rng: np.random.Generator, start: int,
           size: int) -> list[dict[str, Any]]:
    site = rng.integers(0, cfg.num_sites, size)
    codes = _draw_codes(cfg, world, rng, site)
    texts = _texts(cfg, world, rng, codes, size)
    links = _links(cfg, rng, codes, size)
    rows = []
    for i in range(size):
        row = {"id": f"doc{start + i}", "text": texts[i],
               "url": f"https://site{site[i]}.example/{start + i}",
               "links": [f"doc{start + j}" for j in links[i]]}
        row.update({c: CATEGORY_CODES[c][idx[i]] for c, idx in codes.items()})
        rows.append(row)
    return rows


def _texts(cfg: SyntheticConfig, world: _World, rng: np.random.Generator,
           codes: dict[str, np.ndarray], size: int) -> list[str]:
    """Every document's words, drawn for the whole chunk at once and shuffled per document."""
    length = rng.integers(cfg.doc_length[0], cfg.doc_length[1] + 1, size)
    left = length.copy()
    docs, words = [], []
    for cat, idx in codes.items():
        share = cfg.topic_share if cat == FDC else cfg.code_share
        count = np.minimum(rng.binomial(length, share), left)
        left -= count
        vocab = world.words[cat]
        pick = rng.choice(len(vocab[0]), int(count.sum()), p=_zipf(len(vocab[0])))
        owner = np.repeat(np.arange(size), count)
        table = np.stack(vocab)  # [codes, words per code]
        docs.append(owner)
        words.append(table[idx[owner], pick])
    owner = np.repeat(np.arange(size), left)
    docs.append(owner)
    words.append(world.background[rng.choice(cfg.background_words, owner.size,
                                             p=_zipf(cfg.background_words))])
    doc, word = np.concatenate(docs), np.concatenate(words)
    order = np.lexsort((rng.random(doc.size), doc))  # by document, shuffled within
    bounds = np.cumsum(length)[:-1]
    return [" ".join(part) for part in np.split(word[order], bounds)]


def _links(cfg: SyntheticConfig, rng: np.random.Generator, codes: dict[str, np.ndarray],
           size: int) -> list[list[int]]:
    """``links_per_doc`` targets per document inside the chunk, each with, per category
    of ``cfg.homophily``, the source's code with that probability and another code
    otherwise; a target code combination no other document has is drawn again (up to 20
    times, then the link is left out)."""
    cats = [c for c, _ in cfg.homophily]
    if size < 2:
        return [[] for _ in range(size)]
    if not cats:
        return _random_links(cfg, rng, size)
    radix = np.array([len(CATEGORY_CODES[c]) for c in cats])
    own = np.stack([codes[c] for c in cats], axis=1)  # [size, categories]
    key = _keys(own, radix)
    order = np.argsort(key, kind="stable")
    sorted_keys = key[order]
    src = np.repeat(np.arange(size), cfg.links_per_doc)
    dst = np.full(src.size, -1)
    todo = np.arange(src.size)
    for _ in range(20):
        if todo.size == 0:
            break
        want = _target_codes(own[src[todo]], radix,
                             np.array([h for _, h in cfg.homophily]), rng)
        lo = np.searchsorted(sorted_keys, _keys(want, radix), side="left")
        hi = np.searchsorted(sorted_keys, _keys(want, radix), side="right")
        pick = order[np.minimum(lo + (rng.random(todo.size) * (hi - lo)).astype(np.int64),
                                size - 1)]
        ok = (hi > lo) & (pick != src[todo])
        dst[todo[ok]] = pick[ok]
        todo = todo[~ok]
    out: list[list[int]] = [[] for _ in range(size)]
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        if d >= 0:
            out[s].append(d)
    return out


def _random_links(cfg: SyntheticConfig, rng: np.random.Generator, size: int
                  ) -> list[list[int]]:
    """Links with no homophily asked for: uniform targets other than the source."""
    targets = rng.integers(0, size - 1, (size, cfg.links_per_doc))
    targets += targets >= np.arange(size)[:, None]
    return targets.tolist()


def _keys(codes: np.ndarray, radix: np.ndarray) -> np.ndarray:
    """One integer per code combination (mixed radix)."""
    weights = np.concatenate([[1], np.cumprod(radix[:-1])])
    return codes @ weights


def _target_codes(own: np.ndarray, radix: np.ndarray, homophily: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """Per link and category: the source's code with probability ``homophily``, else one
    of the other codes uniformly."""
    same = rng.random(own.shape) < homophily
    shift = 1 + (rng.random(own.shape) * (radix - 1)).astype(np.int64)
    return np.where(same, own, (own + shift) % radix)


def measured_homophily(rows: Sequence[dict[str, Any]], category: str) -> float:
    """The fraction of links (inside ``rows``) that join two documents with the same code
    of ``category``."""
    code = {r["id"]: r[category] for r in rows}
    pairs = [(code[r["id"]], code[t]) for r in rows for t in r["links"] if t in code]
    if not pairs:
        raise InvalidValueError("the documents have no links between them")
    return float(np.mean([a == b for a, b in pairs]))


def write_corpus(path: str | Path, cfg: SyntheticConfig) -> int:
    """Write the corpus as ``.jsonl`` or ``.parquet`` (by suffix); returns the row count."""
    path = Path(path)
    n = 0
    if path.suffix == ".parquet":
        pa, pq = require("pyarrow"), require("pyarrow.parquet")
        writer = None
        for rows in generate(cfg):
            table = pa.Table.from_pylist(rows)
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
            n += len(rows)
        if writer is not None:
            writer.close()
        return n
    with path.open("w", encoding="utf-8") as fh:
        for rows in generate(cfg):
            fh.writelines(json.dumps(r) + "\n" for r in rows)
            n += len(rows)
    return n

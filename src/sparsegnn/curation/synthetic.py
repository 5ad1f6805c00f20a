"""A synthetic web corpus for scale tests: topics, sites, links and ground-truth codes.

Each topic has its own vocabulary (pseudo-words) drawn with Zipf-like weights, mixed with
a shared background vocabulary; each site has a home topic and a document type; a
document takes its site's topic most of the time, and links mostly to documents of the
same topic, usually on the same site. Ground truth covers the FDC topic, both document
types, the reasoning depth and the technical correctness, so recipes, distillation and
agreement all have something to find. The generator is seeded and streams in chunks, so
any size fits in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sparsegnn.optional import require

# Topic -> FDC code; one per shipped recipe's field and a few that no recipe selects.
TOPIC_CODES = ("513.2", "530.1", "005.13", "616.1", "620.1", "940.5", "780.9", "332.6")
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "xi",
              "do", "fe", "gu", "ha", "ja", "be", "co", "wy")


@dataclass
class SyntheticConfig:
    num_docs: int = 10_000
    num_sites: int = 200
    words_per_topic: int = 300
    background_words: int = 1000
    doc_length: tuple[int, int] = (40, 120)
    topic_share: float = 0.55
    site_topic_prob: float = 0.85
    links_per_doc: int = 3
    same_site_link_prob: float = 0.6
    seed: int = 0
    chunk: int = 20_000


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
    """The fixed parts of a corpus: vocabularies, sites and their properties."""

    def __init__(self, cfg: SyntheticConfig) -> None:
        rng = np.random.default_rng(cfg.seed)
        n_topics = len(TOPIC_CODES)
        vocab = _vocabulary(n_topics * cfg.words_per_topic + cfg.background_words, rng)
        self.topic_words = vocab[: n_topics * cfg.words_per_topic].reshape(n_topics, -1)
        self.background = vocab[n_topics * cfg.words_per_topic:]
        self.site_topic = rng.integers(0, n_topics, cfg.num_sites)
        self.site_dt = rng.choice(np.array([2, 3, 4, 5, 1, 6]), cfg.num_sites,
                                  p=[0.25, 0.3, 0.15, 0.15, 0.1, 0.05])
        self.site_tc = rng.choice(np.array([2, 3, 4, 5]), cfg.num_sites, p=[0.2, 0.3, 0.3, 0.2])
        self.topic_p = _zipf(cfg.words_per_topic)
        self.background_p = _zipf(cfg.background_words)


_DT2_OF_DT1 = {1: "14", 2: "3", 3: "10", 4: "8", 5: "18", 6: "17"}


def generate(cfg: SyntheticConfig) -> Iterator[list[dict[str, Any]]]:
    """Documents in chunks of ``cfg.chunk``: id, text, url, links and ground-truth codes."""
    world = _World(cfg)
    rng = np.random.default_rng(cfg.seed + 1)
    for start in range(0, cfg.num_docs, cfg.chunk):
        yield _chunk(cfg, world, rng, start, min(cfg.chunk, cfg.num_docs - start))


def _chunk(cfg: SyntheticConfig, world: _World, rng: np.random.Generator, start: int,
           size: int) -> list[dict[str, Any]]:
    site = rng.integers(0, cfg.num_sites, size)
    topic = np.where(rng.random(size) < cfg.site_topic_prob, world.site_topic[site],
                     rng.integers(0, len(TOPIC_CODES), size))
    length = rng.integers(cfg.doc_length[0], cfg.doc_length[1] + 1, size)
    links = _links(cfg, rng, start, site, topic)
    rows = []
    for i in range(size):
        n_topic = rng.binomial(length[i], cfg.topic_share)
        words = np.concatenate([
            world.topic_words[topic[i]][rng.choice(cfg.words_per_topic, n_topic, p=world.topic_p)],
            world.background[rng.choice(cfg.background_words, length[i] - n_topic,
                                        p=world.background_p)],
        ])
        rng.shuffle(words)
        dt1 = int(world.site_dt[site[i]])
        rows.append({
            "id": f"doc{start + i}",
            "text": " ".join(words),
            "url": f"https://site{site[i]}.example/{start + i}",
            "links": links[i],
            "free_decimal_correspondence": TOPIC_CODES[topic[i]],
            "document_type_v1": str(dt1),
            "document_type_v2": _DT2_OF_DT1[dt1],
            "reasoning_depth": str(2 + int(length[i] > 80) + int(length[i] > 110)),
            "technical_correctness": str(world.site_tc[site[i]]),
        })
    return rows


def _links(cfg: SyntheticConfig, rng: np.random.Generator, start: int, site: np.ndarray,
           topic: np.ndarray) -> list[list[str]]:
    """Links to earlier documents of the chunk: same site, else same topic, else any."""
    by_site: dict[int, list[int]] = {}
    by_topic: dict[int, list[int]] = {}
    out = []
    for i in range(site.size):
        mine: list[str] = []
        for _ in range(cfg.links_per_doc):
            pool = by_site.get(int(site[i])) if rng.random() < cfg.same_site_link_prob else None
            pool = pool or by_topic.get(int(topic[i]))
            if pool:
                mine.append(f"doc{start + pool[rng.integers(0, len(pool))]}")
        out.append(mine)
        by_site.setdefault(int(site[i]), []).append(i)
        by_topic.setdefault(int(topic[i]), []).append(i)
    return out


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

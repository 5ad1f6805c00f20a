"""Knowledge graphs as triple folders, and the typed graph R-GCN encodes them with.

A knowledge graph is a set of ``(head, relation, tail)`` triples split into
``train.txt``, ``valid.txt`` and ``test.txt``, one tab-separated triple a line (the
layout of the UMLS, Kinships and Nations folders PyKEEN's wheel ships, and of FB15k-237
and WN18RR elsewhere). :func:`read_kg_folder` reads such a folder into a
:class:`KnowledgeGraph`: entity and relation names sorted, so ids do not depend on the
order of the lines, and every triple as a ``[3, T]`` id tensor. A malformed line or a
relation no training triple names is one line naming file and line.

:meth:`KnowledgeGraph.message_graph` is the graph R-GCN passes messages over in
Schlichtkrull et al.'s link prediction: the training triples as a one-node-type
:class:`~sparsegnn.data.hetero.HeteroGraph`, flattened with an inverse relation per
relation, so relation ``r``'s edges carry id ``2r`` and their reverses ``2r + 1``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from sparsegnn.data.hetero import HeteroGraph, RelationalGraph
from sparsegnn.data.packaged import PACKAGED, packaged_dataset
from sparsegnn.errors import DataFormatError

SPLIT_FILES = {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}
# Packaged knowledge graphs by lower-case name (``--dataset umls``).
KG_DATASETS = {name.lower(): name for name in ("UMLS", "Kinships", "Nations")
               if name in PACKAGED}
ENTITY = "entity"


@dataclass(frozen=True)
class KnowledgeGraph:
    """Named entities and relations, and each split's triples as ``[3, T]`` int64 rows
    ``(head, relation, tail)`` of ids into ``entities`` / ``relations``."""

    name: str
    entities: list[str]
    relations: list[str]
    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    def all_triples(self) -> torch.Tensor:
        """Every known true triple (train, valid and test): what filtered ranking removes."""
        return torch.cat([self.train, self.valid, self.test], dim=1)

    def counts(self) -> dict[str, object]:
        """What ``data info`` would show: entities, relations, triples per split."""
        return {"name": self.name, "num_entities": self.num_entities,
                "num_relations": self.num_relations,
                **{f"num_{s}": int(getattr(self, s).shape[1]) for s in SPLIT_FILES}}

    def message_graph(self) -> RelationalGraph:
        """The training triples as R-GCN's relational graph, inverse relations added:
        relation ``r`` is relation id ``2r`` of the result and its reverse ``2r + 1``."""
        edges = {(ENTITY, rel, ENTITY): self.train[[0, 2]][:, self.train[1] == r]
                 for r, rel in enumerate(self.relations)}
        typed = HeteroGraph(num_nodes={ENTITY: self.num_entities}, edge_index=edges,
                            name=self.name)
        return typed.to_relational(inverse=True)


def is_kg_source(source: str | os.PathLike[str]) -> bool:
    """Whether ``source`` is a packaged knowledge graph's name or a triple folder."""
    text = os.fspath(source)
    if text.lower() in KG_DATASETS:
        return True
    path = Path(text)
    return path.is_dir() and all((path / f).is_file() for f in SPLIT_FILES.values())


def load_kg(source: str | os.PathLike[str]) -> KnowledgeGraph:
    """A packaged knowledge graph by name (``umls``, ``kinships``, ``nations``; the
    ``datasets`` extra installs them) or a folder of triple files."""
    text = os.fspath(source)
    if text.lower() in KG_DATASETS:
        name = KG_DATASETS[text.lower()]
        return read_kg_folder(packaged_dataset(name), name=name.lower())
    if not is_kg_source(text):
        raise DataFormatError(f"{text}: not a knowledge graph (expected "
                              f"{', '.join(KG_DATASETS)} or a folder with "
                              f"{', '.join(SPLIT_FILES.values())})")
    return read_kg_folder(Path(text))


def read_kg_folder(folder: str | os.PathLike[str], name: str | None = None) -> KnowledgeGraph:
    """Read ``train.txt``, ``valid.txt`` and ``test.txt`` of ``folder`` (see the module)."""
    folder = Path(folder)
    rows = {split: _read_triples(folder / f) for split, f in SPLIT_FILES.items()}
    for split, triples in rows.items():
        if not triples:
            raise DataFormatError(f"{folder / SPLIT_FILES[split]}: no triples (training, "
                                  "validation and test each need some)")
    entities = sorted({e for triples in rows.values() for h, _, t in triples for e in (h, t)})
    relations = sorted({r for h, r, t in rows["train"]})
    ent_id = {e: i for i, e in enumerate(entities)}
    rel_id = {r: i for i, r in enumerate(relations)}
    for split in ("valid", "test"):
        for line, (_, rel, _) in enumerate(rows[split], 1):
            if rel not in rel_id:
                raise DataFormatError(f"{folder / SPLIT_FILES[split]}:{line}: relation "
                                      f"{rel!r} appears in no training triple")
    ids = {split: torch.tensor([[ent_id[h], rel_id[r], ent_id[t]] for h, r, t in triples],
                               dtype=torch.int64).reshape(-1, 3).t().contiguous()
           for split, triples in rows.items()}
    return KnowledgeGraph(name or folder.name, entities, relations, ids["train"],
                          ids["valid"], ids["test"])


def _read_triples(path: Path) -> list[tuple[str, str, str]]:
    """The tab-separated triples of ``path``; a line of another width is refused."""
    if not path.is_file():
        raise DataFormatError(f"{path}: missing (a knowledge graph folder holds "
                              f"{', '.join(SPLIT_FILES.values())})")
    triples = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            line = line.rstrip("\n\r")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 3 or not all(p.strip() for p in parts):
                raise DataFormatError(f"{path}:{line_no}: expected 3 tab-separated columns "
                                      f"(head, relation, tail), got {len(parts)}")
            triples.append((parts[0].strip(), parts[1].strip(), parts[2].strip()))
    return triples

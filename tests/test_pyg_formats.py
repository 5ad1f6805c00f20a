"""PyG graphs in memory and on disk (``InMemoryDataset.save``, ``torch.save(data)``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sparsegnn.data import load_any
from sparsegnn.data.pyg import from_pyg, read_pyg
from sparsegnn.errors import DataFormatError

pyg_data = pytest.importorskip("torch_geometric.data")


def _data() -> object:
    """Directed, with a repeated edge and a self-loop; y of one column, as OGB's PyG sets."""
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.tensor([[0, 1, 1, 2, 3, 3], [1, 2, 2, 0, 3, 4]])
    return pyg_data.Data(x=torch.randn(6, 3, generator=gen), edge_index=edge_index,
                         y=torch.tensor([[0], [1], [2], [0], [1], [2]]),
                         train_mask=torch.tensor([1, 1, 0, 0, 0, 0], dtype=torch.bool),
                         val_mask=torch.tensor([0, 0, 1, 0, 0, 0], dtype=torch.bool),
                         test_mask=torch.tensor([0, 0, 0, 1, 1, 0], dtype=torch.bool))


def _check(g: object) -> None:
    data = _data()
    assert g.num_nodes == 6  # node 5 is isolated
    assert {tuple(e) for e in g.edge_index.T.tolist()} == {
        (0, 1), (1, 0), (1, 2), (2, 1), (2, 0), (0, 2), (3, 4), (4, 3)}
    assert torch.equal(g.x, data.x) and g.y.tolist() == [0, 1, 2, 0, 1, 2]
    for key in ("train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(g, key), getattr(data, key))


def test_from_pyg_data() -> None:
    _check(from_pyg(_data()))
    directed = from_pyg(_data(), undirected=False)
    assert {tuple(e) for e in directed.edge_index.T.tolist()} == {
        (0, 1), (1, 2), (2, 0), (3, 4)}


def test_in_memory_dataset_folder(tmp_path: Path) -> None:
    folder = tmp_path / "MyGraph"
    (folder / "processed").mkdir(parents=True)
    pyg_data.InMemoryDataset.save([_data()], str(folder / "processed" / "data.pt"))
    torch.save({}, folder / "processed" / "pre_transform.pt")
    g = load_any(folder)
    _check(g)
    assert g.name == "MyGraph"


def test_torch_saved_data(tmp_path: Path) -> None:
    torch.save(_data(), tmp_path / "graph.pt")
    _check(load_any(tmp_path / "graph.pt"))


def test_several_graphs_are_refused(tmp_path: Path) -> None:
    pyg_data.InMemoryDataset.save([_data(), _data()], str(tmp_path / "two.pt"))
    with pytest.raises(DataFormatError, match="holds 2 graphs"):
        read_pyg(tmp_path / "two.pt")


class _Exploit:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("ran",))


def test_a_pickle_that_runs_code_is_refused(tmp_path: Path) -> None:
    torch.save(_Exploit(), tmp_path / "evil.pt")
    with pytest.raises(DataFormatError, match="without running code"):
        read_pyg(tmp_path / "evil.pt")


def test_reading_a_pyg_file_leaves_pyg_own_safe_globals_registered(tmp_path: Path) -> None:
    """Our allowlist is a context; leaving it must not unregister what PyG registered at
    import, or PyG's own datasets fail to load afterwards."""
    pyg = pytest.importorskip("torch_geometric.data")
    from sparsegnn.data.pyg import load_pyg_file

    torch.save(pyg.Data(x=torch.zeros(2, 1)), tmp_path / "g.pt")
    before = set(map(id, torch.serialization.get_safe_globals()))
    load_pyg_file(tmp_path / "g.pt", hetero=True)
    assert before <= set(map(id, torch.serialization.get_safe_globals()))


def test_data_info_reads_a_pyg_dataset_folder(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A dataset folder holding ``processed/*.pt`` is a graph, not a partition folder."""
    import json

    from sparsegnn.cli.main import main

    pyg = pytest.importorskip("torch_geometric.data")
    (tmp_path / "toy" / "processed").mkdir(parents=True)
    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    torch.save(pyg.Data(x=torch.zeros(3, 2), edge_index=edges, y=torch.tensor([0, 1, 0])),
               tmp_path / "toy" / "processed" / "data.pt")
    assert main(["data", "info", str(tmp_path / "toy"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["num_nodes"] == 3


def test_training_a_processed_file_without_masks_points_to_the_dataset_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OGB keeps the split beside ``processed/``: naming the file alone is refused in one
    line that says which folder to give instead."""
    from sparsegnn.cli.main import main

    pyg = pytest.importorskip("torch_geometric.data")
    processed = tmp_path / "ogbn_toy" / "processed"
    processed.mkdir(parents=True)
    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    torch.save(pyg.Data(x=torch.zeros(3, 2), edge_index=edges, y=torch.tensor([0, 1, 0])),
               processed / "geometric_data_processed.pt")
    argv = ["train", "--dataset", str(processed / "geometric_data_processed.pt"),
            "--epochs", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no train_mask" in err[0]
    assert f"give the dataset folder {tmp_path / 'ogbn_toy'}" in err[0]

"""DGL's ``CSVDataset`` folders (``edges.csv``, ``nodes.csv``) through ``load_any``."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparsegnn.data import load_any
from sparsegnn.errors import DataFormatError


def test_dgl_csv_dataset_folder(tmp_path: Path) -> None:
    """Columns in DGL's names and any order; masks as pandas writes them; node rows
    out of order (placed by node_id); feat as quoted comma-separated vectors."""
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "meta.yaml").write_text("dataset_name: toy\nedge_data:\n- file_name: edges.csv\n"
                                      "node_data:\n- file_name: nodes.csv\n")
    (folder / "edges.csv").write_text("weight,src_id,dst_id\n1.0,0,1\n1.0,1,2\n2.0,1,2\n"
                                      "1.0,2,2\n")
    (folder / "nodes.csv").write_text(
        'node_id,label,train_mask,val_mask,test_mask,feat\n'
        '2,1,False,False,True,"0.5, 0.25"\n0,0,True,False,False,"1.0, 0.0"\n'
        '1,1,False,True,False,"0.0, 1.0"\n3,0,False,False,True,"0.0, 0.0"\n')
    g = load_any(folder)
    assert (g.name, g.num_nodes) == ("toy", 4)
    _data_info_reads(folder, 4)
    assert {tuple(e) for e in g.edge_index.T.tolist()} == {(0, 1), (1, 0), (1, 2), (2, 1)}
    assert g.y.tolist() == [0, 1, 1, 0]
    assert g.train_mask.tolist() == [True, False, False, False]
    assert g.test_mask.tolist() == [False, False, True, True]
    assert g.x.tolist() == [[1.0, 0.0], [0.0, 1.0], [0.5, 0.25], [0.0, 0.0]]


def test_dgl_csv_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "edges.csv").write_text("source,target\n0,1\n")
    with pytest.raises(DataFormatError, match=r"edges\.csv: no src_id column"):
        load_any(tmp_path)


def _data_info_reads(folder: Path, nodes: int) -> None:
    """``data info`` on a graph folder describes the graph (it once took every folder for
    a partition folder and asked for a manifest.json)."""
    import contextlib
    import io
    import json

    from sparsegnn.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["data", "info", str(folder), "--json"]) == 0
    assert json.loads(out.getvalue().strip().splitlines()[-1])["num_nodes"] == nodes


def test_meta_yaml_names_the_files(tmp_path: Path) -> None:
    """DGL lets meta.yaml name any files (``edges_0.csv``); a plain graph has one edge
    file, and a list of several is one line naming the count."""
    folder = tmp_path / "named"
    folder.mkdir()
    (folder / "meta.yaml").write_text("dataset_name: named\nedge_data:\n- file_name: "
                                      "edges_0.csv\nnode_data:\n- file_name: nodes_0.csv\n")
    (folder / "edges_0.csv").write_text("src_id,dst_id\n0,1\n1,2\n")
    (folder / "nodes_0.csv").write_text("node_id,label\n0,0\n1,1\n2,0\n")
    g = load_any(folder)
    assert (g.num_nodes, g.y.tolist()) == (3, [0, 1, 0])
    (folder / "meta.yaml").write_text("edge_data:\n- file_name: edges_0.csv\n"
                                      "- file_name: edges_0.csv\n")
    with pytest.raises(DataFormatError, match=r"one edge file .* lists 2"):
        load_any(folder)

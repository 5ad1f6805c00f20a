"""A log file of a run holds our lines, not other libraries': matplotlib's font cache,
tensorboard and the Hugging Face libraries stay at WARNING unless ``--verbose``."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparsegnn.cli.main import main

GRAPH = "sbm:nodes=200,blocks=2,degree=6"
# A logging record as the CLI formats it: "LEVEL logger.name: message".
RECORD = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) ([\w.]+): ", re.MULTILINE)
THIRD_PARTY = ("matplotlib.font_manager", "duckdb", "transformers.modeling_utils",
               "huggingface_hub.file_download", "urllib3.connectionpool")


def test_a_train_log_file_has_no_third_party_lines(tmp_path: Path) -> None:
    """``train --logdir --report > log 2>&1`` in a real process. matplotlib gets an empty
    config folder, so it builds its font cache in this run and logs that at INFO (the
    line that leaked): the cache file proves the line was there to leak."""
    pytest.importorskip("matplotlib", reason="the report needs matplotlib")
    pytest.importorskip("tensorboard", reason="--logdir needs tensorboard")
    mpl = tmp_path / "mpl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLCONFIGDIR": str(mpl)}
    log = tmp_path / "train.log"
    with log.open("w") as fh:
        done = subprocess.run(
            [sys.executable, "-m", "sparsegnn", "train", "--dataset", GRAPH, "--epochs", "2",
             "--device", "cpu", "--logdir", str(tmp_path / "runs"), "--report",
             str(tmp_path / "r.html")],
            stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=300, check=False)
    text = log.read_text()
    assert done.returncode == 0, text
    assert list(mpl.glob("fontlist-*.json")), "matplotlib did not build its font cache"
    loggers = {m.group(2) for m in RECORD.finditer(text)}
    assert "sparsegnn.train.progress" in loggers and "\r" not in text
    assert {n for n in loggers if not n.startswith("sparsegnn")} == set(), text


@pytest.mark.parametrize("verbose", [False, True])
def test_curate_demo_logs_only_ours_unless_verbose(
        verbose: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """``curate demo``'s logging set-up, in-process: its recipe replaced by one that logs
    as the libraries it runs do (three minutes of curation are not what is tested)."""
    import sparsegnn.curation.curate_demo as demo

    class Finished:
        def to_dict(self) -> dict[str, bool]:
            return {"ok": True}

        def summary(self) -> str:
            return "demo done"

    def logging_demo(*_: object) -> Finished:
        logging.getLogger("sparsegnn.curation.curate_demo").info("our progress line")
        for name in THIRD_PARTY:
            logging.getLogger(name).info("a third-party line")
        return Finished()

    monkeypatch.setattr(demo, "run_demo", logging_demo)
    # A library imported earlier in this process may have set its own loggers' levels
    # (transformers sets its tree to WARNING): start each from "inherit", as in a fresh
    # process, so the outcome does not depend on which tests ran before.
    libraries = {logging.getLogger(name.split(".")[0]) for name in THIRD_PARTY}
    libraries |= {logging.getLogger(name) for name in THIRD_PARTY}
    levels = [(lg, lg.level) for lg in (logging.getLogger(), logging.getLogger("sparsegnn"),
                                         *libraries)]
    for logger in libraries:
        logger.setLevel(logging.NOTSET)
    try:
        flags = ["--verbose"] if verbose else []
        assert main([*flags, "curate", "demo", "--out", str(tmp_path)]) == 0
    finally:
        for logger, level in levels:
            logger.setLevel(level)
    names = {r.name for r in caplog.records}
    assert "sparsegnn.curation.curate_demo" in names
    assert (names & set(THIRD_PARTY)) == (set(THIRD_PARTY) if verbose else set())
    assert "demo done" in capsys.readouterr().out

"""``sparsegnn train`` as one library call: the CLI only builds the request.

The options parsed from the command line stay as given, and ``--algo auto``'s choice
through the request is the one :func:`choose_distribution` makes for the same inputs
(the benchmark calls it directly); the mode is the library's inference.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import pytest

from sparsegnn.cli.main import build_parser
from sparsegnn.cli.train_cmd import request_from_args
from sparsegnn.data import load_any
from sparsegnn.distributed.planning.cost_profile import LinkCost, Profile
from sparsegnn.train.auto_choice import AutoRequest, choose_distribution
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.train_grid import choose_auto
from sparsegnn.train.train_request import is_distributed

SPEC = "sbm:nodes=300,blocks=3,degree=6"


def _profile() -> Profile:
    links = {k: LinkCost(1e-5, 1e-9)
             for k in ("broadcast", "all_reduce", "all_gather", "all_to_all")}
    return Profile("gloo", 4, {8: 2e-9, 128: 1e-9}, 1e-9, 1e-10, 1e-9, links)


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["train", "--dataset", SPEC, *argv])


def test_cli_choice_equals_the_library_choice(tmp_path: Path) -> None:
    _profile().save(tmp_path / "p.json")
    args = _args("--nprocs", "4", "--algo", "auto", "--profile", str(tmp_path / "p.json"),
                 "--auto-trials", "1")
    given = copy.deepcopy(vars(args))
    via_cli = choose_auto(request_from_args(args))
    assert vars(args) == given  # the CLI never rewrites its arguments
    direct = choose_distribution(AutoRequest(load_any(SPEC), 4, TrainConfig(), _profile(),
                                             trials=1))
    assert via_cli.config == direct.config and via_cli.ranked == direct.ranked


@pytest.mark.parametrize(("argv", "distributed"), [
    ((), False), (("--nprocs", "2"), True), (("--algo", "1d"), True),
    (("--mode", "minibatch"), False),
])
def test_the_library_infers_the_mode(argv: tuple[str, ...], distributed: bool,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    request = request_from_args(_args(*argv))
    assert is_distributed(request) is distributed
    assert (request.minibatch is not None) is ("--mode" in argv)

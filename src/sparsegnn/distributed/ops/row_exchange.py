"""Row exchange: one ``all_to_all`` that moves chosen rows between the members of a group.

Both sparsity-aware products use it: the 1D/1.5D SpMM
(:mod:`sparsegnn.distributed.ops.sparse_comm`) and the attention protocol on every grid
(:mod:`sparsegnn.distributed.ops.edge_exchange`), which fetch exactly the rows whose ids
are nonzero columns of the rank's tiles. It lives apart from both so that the operators'
base class can build either without an import cycle.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from sparsegnn.distributed.runtime.comm import Communicator, Group


class SparseCommunicator(Communicator):
    """A :class:`Communicator` that also exchanges rows with one ``all_to_all``."""

    def exchange(
        self, send: torch.Tensor, send_counts: list[int], recv_counts: list[int], group: Group
    ) -> torch.Tensor:
        """Rows ``send_counts[m]`` of ``send`` (member order) go to member m; returns the
        ``sum(recv_counts)`` rows received, in member order. Counts are known to both
        sides (they are part of the plan), so no size exchange precedes the data."""
        recv, work = self.exchange_async(send, send_counts, recv_counts, group)
        self.wait(work)
        return recv

    def exchange_async(
        self, send: torch.Tensor, send_counts: list[int], recv_counts: list[int], group: Group
    ) -> tuple[torch.Tensor, Any]:
        """:meth:`exchange` started: the receive buffer, to read only after :meth:`wait`
        on the handle (``None`` when nothing moves). Counted now."""
        if group.size == 1:
            return send, None
        width = math.prod(send.shape[1:])
        recv = send.new_empty((sum(recv_counts), *send.shape[1:]))
        work = dist.all_to_all_single(
            recv.view(-1), send.contiguous().view(-1),
            [c * width for c in recv_counts], [c * width for c in send_counts],
            group=group.handle, async_op=True,
        )
        row_bytes = width * send.element_size()
        self._count(
            "all_to_all",
            (sum(send_counts) - send_counts[group.me]) * row_bytes,
            (sum(recv_counts) - recv_counts[group.me]) * row_bytes,
        )
        return recv, work


def request_rows(
    wanted: list[torch.Tensor], comm: SparseCommunicator, group: Group
) -> tuple[torch.Tensor, list[int]]:
    """Tell every member which of its rows this rank needs (``wanted[m]``: ids local to
    member m); returns the rows the others asked of this rank, concatenated in member
    order, and how many each asked for. Collective over ``group``; one count exchange and
    one id exchange (setup traffic)."""
    need_counts = [len(w) for w in wanted]
    device = wanted[0].device if wanted else torch.device("cpu")
    counts = torch.tensor(need_counts, dtype=torch.long, device=device).reshape(-1, 1)
    ones = [1] * group.size
    send_counts = comm.exchange(counts, ones, ones, group).reshape(-1).tolist()
    return comm.exchange(torch.cat(wanted), need_counts, send_counts, group), send_counts

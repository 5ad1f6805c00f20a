"""What a running training loop shows: a bar for a person, a few lines for a log file.

A progress bar redraws itself in place on a terminal, but in a log file or a CI job every
redraw becomes a line of its own (hundreds per run). So the bar appears only where
someone watches it (standard error is a terminal) or when asked for (``progress=True``);
everywhere else the run logs one summary line per tenth of its epochs, through the
``logging`` module, so a library caller who configured no logging sees nothing at all.
Only one rank of a distributed run (``reports``) shows either.
"""

from __future__ import annotations

import logging
import math
import shutil
import sys
from collections.abc import Callable
from typing import Any

from tqdm.auto import tqdm

log = logging.getLogger(__name__)

SUMMARY_LINES = 10  # summary lines per run when no bar is shown (plus the last epoch)


def shows_bar(progress: bool | None, reports: bool) -> bool:
    """``progress``: True always, False never, None only when stderr is a terminal."""
    if not reports or progress is False:
        return False
    return progress is True or sys.stderr.isatty()


def bar_size() -> dict[str, int]:
    """The terminal's size, or 80 x 24 where it reports none: tqdm hides every bar below
    a screen of 0 lines, so on a terminal that says it is 0 x 0 (serial consoles, some CI
    runners) training showed nothing at all."""
    size = shutil.get_terminal_size(fallback=(80, 24))
    return {"ncols": size.columns or 80, "nrows": size.lines or 24}


class EpochDisplay:
    """A bar, or summary lines every ``ceil(total / SUMMARY_LINES)`` epochs, for one run."""

    def __init__(self, total: int, done: int, desc: str, progress: bool | None,
                 reports: bool, score: Callable[[Any], float] | None) -> None:
        self.total, self.desc, self.score = total, desc, score
        self.reports = reports
        self.every = max(1, math.ceil(total / SUMMARY_LINES))
        self.bar = (tqdm(total=total, initial=done, desc=desc, unit="epoch", leave=False,
                         **bar_size()) if shows_bar(progress, reports) else None)

    def update(self, epoch: int, stats: Any, last: bool) -> None:
        """Epoch ``epoch`` (1-based) finished with ``stats``; ``last``: the run ends here."""
        shown = self._fields(stats)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(shown)
        elif self.reports and (last or epoch % self.every == 0):
            text = ", ".join(f"{k} {v}" for k, v in shown.items())
            log.info("%s: epoch %d/%d, %s", self.desc, epoch, self.total, text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _fields(self, stats: Any) -> dict[str, str]:
        shown = {"loss": f"{stats.loss:.4f}"}
        if self.score is not None:
            shown["val"] = f"{self.score(stats):.3f}"
        seconds = getattr(stats, "seconds", None)
        if seconds is not None:
            shown["epoch time"] = f"{seconds * 1e3:.1f} ms"
        return shown

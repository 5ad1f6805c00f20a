"""Each category's mix of the text and graph students, chosen with every teacher label.

A share picked on the validation fifth follows noise when that fifth is a few dozen
documents (issue 48: a validation accuracy of 1.0 chose a share that lost 0.26 kappa on
test). Here every labelled document counts once, out of fold: the labels are cut into
``k`` folds, and for each fold a text and a graph student trained on the other folds
predict it (:func:`sparsegnn.curation.distil.distil` does the training). A share's gain
over text alone is then a mean of paired per-document differences (correct with the mix
minus correct with text), so its standard error is honest, and a share is taken only
when its gain exceeds ``z`` standard errors; otherwise the annotator is the text-only
student, and the choice says whether the labels were too few to tell or the graph did
not help.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import torch

from sparsegnn.curation.student import ALPHAS, mix_log_probs

Verdict = Literal["graph", "too_few", "no_gain"]
MIN_DOCUMENTS = 10  # below this no fold split can say anything: text-only
Z_95 = 1.959964  # the reported interval is gain +- Z_95 standard errors


@dataclass(frozen=True)
class ShareGain:
    """Out-of-fold accuracy gain of one graph share over the text-only student."""

    share: float
    gain: float
    stderr: float

    def interval(self) -> tuple[float, float]:
        return self.gain - Z_95 * self.stderr, self.gain + Z_95 * self.stderr


@dataclass(frozen=True)
class MixChoice:
    """The share one category uses, the best candidate's measured gain, and why."""

    category: str
    graph_share: float
    best: ShareGain  # the candidate with the largest out-of-fold gain
    documents: int
    verdict: Verdict
    candidates: tuple[ShareGain, ...] = ()

    def describe(self) -> str:
        """One line for ``curate distil``: the share and the evidence for it."""
        low, high = self.best.interval()
        gain = (f"share {self.best.share:.2f} gains {self.best.gain:+.3f} "
                f"[{low:+.3f}, {high:+.3f}] accuracy over text-only, out of fold on "
                f"{self.documents} labelled documents")
        if self.verdict == "graph":
            return f"graph share {self.graph_share:.2f}: {gain}"
        if self.documents < MIN_DOCUMENTS:
            return (f"text-only: {self.documents} labelled documents are too few to tell "
                    "whether the graph helps")
        if self.verdict == "too_few":
            return f"text-only: too few labels to tell whether the graph helps ({gain})"
        return f"text-only: the graph does not help ({gain})"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (an unmeasured standard error is ``None``)."""
        low, high = self.best.interval()
        out = asdict(self)
        out.update(gain=self.best.gain, stderr=self.best.stderr, low=low, high=high,
                   description=self.describe())
        return _finite(out)


def _finite(value: Any) -> Any:
    """``value`` with every infinite or NaN float replaced by ``None``."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def fold_positions(n: int, k: int, seed: int) -> list[np.ndarray]:
    """``k`` disjoint random folds of ``range(n)`` (sizes differ by at most one)."""
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.array_split(order, min(k, n))]


def share_gains(text: torch.Tensor, graph: torch.Tensor, truth: torch.Tensor
                ) -> list[ShareGain]:
    """Gain and standard error of every share in :data:`ALPHAS` from out-of-fold logits
    of one category (``[n, classes]`` each) and the teacher's codes (``[n]``)."""
    base = (text.argmax(1) == truth).double()
    out = []
    for a in ALPHAS:
        diff = (mix_log_probs(text, graph, a).argmax(1) == truth).double() - base
        n = len(diff)
        stderr = float(diff.std(unbiased=True)) / math.sqrt(n) if n > 1 else math.inf
        out.append(ShareGain(a, float(diff.mean()) if n else 0.0, stderr))
    return out


def choose_mix(category: str, gains: list[ShareGain], documents: int, z: float
               ) -> MixChoice:
    """The share with the largest gain among those whose gain exceeds ``z`` standard
    errors (ties: the smaller share), else text-only (share 0)."""
    best = max(gains, key=lambda g: (g.gain, -g.share))
    if documents < MIN_DOCUMENTS:
        return MixChoice(category, 0.0, best, documents, "too_few", tuple(gains))
    clear = [g for g in gains if g.share > 0 and g.gain > 0 and g.gain > z * g.stderr]
    if clear:
        pick = max(clear, key=lambda g: (g.gain, -g.share))
        return MixChoice(category, pick.share, best, documents, "graph", tuple(gains))
    verdict: Verdict = "too_few" if best.gain > 0 else "no_gain"
    return MixChoice(category, 0.0, best, documents, verdict, tuple(gains))


def text_only_choice(category: str, documents: int) -> MixChoice:
    """The choice when there are too few labels to cross-fit at all."""
    nothing = ShareGain(0.0, 0.0, math.inf)
    return MixChoice(category, 0.0, nothing, documents, "too_few")

"""PNG plots of tracking performance: efficiency vs pT and eta, and the edge-score distribution.

matplotlib is optional (the ``plot`` extra); it is imported inside the functions, with
the Agg backend, so the rest of the tracking package works without it and no display is
ever needed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sparsegnn.optional import pyplot
from sparsegnn.tracking.metrics import ParticleMatches
from sparsegnn.tracking.truth import TargetConfig


def _binned_efficiency(values: np.ndarray, matched: np.ndarray, edges: np.ndarray):
    """Per-bin efficiency and its binomial standard error (nan for empty bins)."""
    idx = np.digitize(values, edges) - 1
    inside = (idx >= 0) & (idx < edges.size - 1)
    total = np.bincount(idx[inside], minlength=edges.size - 1).astype(float)
    found = np.bincount(idx[inside], weights=matched[inside].astype(float),
                        minlength=edges.size - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        eff = found / total
        err = np.sqrt(eff * (1 - eff) / total)
    return eff, err, total


def efficiency_curves(matches: ParticleMatches, cfg: TargetConfig
                      ) -> dict[str, dict[str, list[float | None]]]:
    """Tracking efficiency per bin of pT (all cuts but pT) and of eta (all cuts but eta),
    as plain lists (``edges``, ``efficiency``, ``error``; None for an empty bin): what
    the PNGs draw and what a run report (``--report``) carries."""
    pt, eta = matches.pt, matches.eta
    enough_hits = matches.nhits >= cfg.min_hits
    panels = {"efficiency_vs_pt": (pt, enough_hits & (np.abs(eta) < cfg.max_abs_eta),
                                   np.logspace(-1, 1.3, 12)),
              "efficiency_vs_eta": (eta, enough_hits & (pt >= cfg.min_pt),
                                    np.linspace(-4, 4, 17))}
    curves = {}
    for key, (values, selected, edges) in panels.items():
        eff, err, total = _binned_efficiency(values[selected], matches.matched[selected], edges)
        curves[key] = {"edges": edges.tolist(),
                       "efficiency": [float(e) if n else None for e, n in zip(eff, total,
                                                                               strict=True)],
                       "error": [float(e) if n else None for e, n in zip(err, total,
                                                                          strict=True)]}
    return curves


def efficiency_plots(matches: ParticleMatches, cfg: TargetConfig,
                     out_dir: str | Path) -> list[Path]:
    """``efficiency_pt.png`` (all cuts but pT) and ``efficiency_eta.png`` (all cuts but eta)."""
    plt = pyplot("for tracking plots")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    curves = efficiency_curves(matches, cfg)
    panels = [("efficiency_pt.png", curves["efficiency_vs_pt"], "pT [GeV]", True),
              ("efficiency_eta.png", curves["efficiency_vs_eta"], "eta", False)]
    written = []
    for name, curve, label, log in panels:
        edges = np.asarray(curve["edges"])
        centers = 0.5 * (edges[1:] + edges[:-1])
        ok = np.array([e is not None for e in curve["efficiency"]])
        eff = np.array([e for e in curve["efficiency"] if e is not None])
        err = np.array([e for e in curve["error"] if e is not None])
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.errorbar(centers[ok], eff, yerr=err, fmt="o", capsize=2)
        ax.set_xlabel(label)
        ax.set_ylabel("tracking efficiency")
        ax.set_ylim(0, 1.05)
        if log:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        written.append(out_dir / name)
    return written


def score_plot(scores: np.ndarray, true: np.ndarray, out_dir: str | Path) -> Path:
    """``scores.png``: histogram of edge scores for true and false edges (log counts)."""
    plt = pyplot("for tracking plots")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    bins = np.linspace(0, 1, 41)
    ax.hist(scores[true], bins=bins, histtype="step", label="true edges")
    ax.hist(scores[~true], bins=bins, histtype="step", label="false edges")
    ax.set_yscale("log")
    ax.set_xlabel("edge score")
    ax.set_ylabel("edges")
    ax.legend()
    fig.tight_layout()
    path = out_dir / "scores.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

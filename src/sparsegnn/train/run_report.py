"""A training run as one static HTML page (``--report run.html``).

The page is meant to be mailed, attached to a CI job or opened years later, so it holds
everything itself: plots drawn by matplotlib as PNG images inlined in base64, and tables of
the final figures (sizes in KiB/MiB/GiB) and of the settings the user chose. It
references nothing on a network, and its Content-Security-Policy forbids the browser from
fetching anything at all (no scripts, no remote images, fonts or styles), so a page that
renders offline renders anywhere.

It opens on what a reader looks at first, the loss and accuracy curves, side by side on
one screen; the tables and the other plots follow. Which plots appear depends on what the
run recorded: loss, accuracy (or AUC) curves and
epoch times from the per-epoch history, bytes sent and peak memory per rank for runs on
ranks, a confusion matrix where the run computed one (node and graph classification),
(its axes labelled with the data set's class names where it has them), the test ROC
curve and Hits@K of link prediction, tracking efficiency against pT and eta where a
tracking command measured it.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sparsegnn.optional import pyplot
from sparsegnn.train.eventlog import rank_scalars

# Result keys that are drawn or tabulated on their own, not listed as figures.
_NOT_FIGURES = {"history", "losses", "config", "settings", "class_names"}
# The plots of the first screen: the curves a reader opens the page for.
_FIRST = ("plot-loss", "plot-accuracy", "plot-auc")
_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
_STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
td, th { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
figure.plot { margin: 0; border: 1px solid #ddd; padding: 0.5em; }
figure.plot img { display: block; }
"""

_ANNOTATED_CLASSES = 12  # confusion matrices up to this size print their counts
Figure = tuple[str, str, str]  # (element id, caption, PNG bytes in base64)


def write_report(path: str | Path, title: str, result: Mapping[str, Any]) -> Path:
    """Write the page of a finished run's JSON ``result`` (with its ``history``) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(title, result), encoding="utf-8")
    return path


def render(title: str, result: Mapping[str, Any]) -> str:
    """The whole page as a string: the curves first, then the tables and other plots."""
    figures = plots(result)
    first = [f for f in figures if f[0] in _FIRST]
    rest = [f for f in figures if f[0] not in _FIRST]
    body = [f"<h1>{html.escape(title)}</h1>",
            '<div class="plots">', *map(_figure_html, first), "</div>",
            "<h2>Metrics</h2>", _table(_figures(result)), *_settings(result)]
    if rest:
        body += ["<h2>Plots</h2>", '<div class="plots">', *map(_figure_html, rest), "</div>"]
    if not figures:
        body.append("<p>This run recorded nothing to plot.</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">'
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
            "<body>\n" + "\n".join(body) + "\n</body></html>\n")


def _settings(result: Mapping[str, Any]) -> list[str]:
    """The settings the user chose (``settings``: the options typed on the command line),
    else the whole configuration; every setting stays in the run's JSON."""
    chosen = result.get("settings")
    if chosen is None:
        return ["<h2>Configuration</h2>", _table(_flatten(result.get("config") or {}))]
    note = ("<p>Options given on the command line; the rest kept their defaults (every "
            "setting is under <code>config</code> in the run's JSON).</p>")
    rows = {f"--{k.replace('_', '-')}": v for k, v in chosen.items()}
    return ["<h2>Configuration</h2>", note,
            _table(rows) if rows else "<p>None: every setting at its default.</p>"]


def plots(result: Mapping[str, Any]) -> list[Figure]:
    """Every plot the run's result has the data for, in reading order."""
    plt = pyplot("for --report")
    history = list(result.get("history") or [])
    figures: list[Figure] = []
    for fig_id, caption, draw in _candidates(result, history):
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        try:
            if draw(ax):
                fig.tight_layout()
                figures.append((fig_id, caption, _png(fig)))
        finally:
            plt.close(fig)
    return figures


def _candidates(result: Mapping[str, Any], history: list[Mapping[str, Any]]
                ) -> list[tuple[str, str, Callable[[Any], bool]]]:
    ranks = rank_scalars(result)
    found: list[tuple[str, str, Callable[[Any], bool]]] = [
        ("plot-loss", "Loss per epoch (training; validation where recorded)",
         lambda ax: _curves(ax, history, ["loss", "val_loss"])),
        ("plot-accuracy", "Accuracy per epoch",
         lambda ax: _curves(ax, history, _accuracy_fields(history))),
        ("plot-auc", "Validation AUC per epoch",
         lambda ax: _curves(ax, history, [k for k in (history or [{}])[0]
                                          if k.endswith("auc")])),
        ("plot-epoch-time", "Epoch time (ms)",
         lambda ax: _curves(ax, history, ["seconds"], scale=1e3)),
    ]
    for name, values in ranks.items():
        found.append((f"plot-ranks-{name.replace('_', '-')}",
                      f"{name.replace('_', ' ')} per rank",
                      lambda ax, v=values, n=name: _bars(ax, v, n)))
    confusion = result.get("test_confusion")
    if confusion:
        names = result.get("class_names")
        classes = f"; classes {', '.join(names)}" if names else ""
        found.append(("plot-confusion", "Confusion matrix (test split; rows true, "
                      f"columns predicted{classes})", lambda ax: _matrix(ax, confusion, names)))
    roc = result.get("test_roc")
    if roc:
        found.append(("plot-roc", f"ROC curve (test split; AUC {result.get('test_auc', 0):.4f})",
                      lambda ax: _roc(ax, roc)))
    hits = {k.removeprefix("test_hits_at_"): v for k, v in result.items()
            if k.startswith("test_hits_at_") and _finite(v)}
    if hits:
        found.append(("plot-hits", "Hits@K (test split)", lambda ax: _hits(ax, hits)))
    for key, label in (("efficiency_vs_pt", "pT [GeV]"), ("efficiency_vs_eta", "eta")):
        binned = result.get(key)
        if binned:
            found.append((f"plot-{key.replace('_', '-')}", f"Tracking efficiency vs {label}",
                          lambda ax, b=binned, lab=label: _efficiency(ax, b, lab)))
    return found


def _accuracy_fields(history: list[Mapping[str, Any]]) -> list[str]:
    return [k for k in (history[0] if history else {}) if k.endswith("accuracy")]


def _curves(ax: Any, history: list[Mapping[str, Any]], keys: Sequence[str],
            scale: float = 1.0) -> bool:
    """One line per field of the per-epoch history; False when no field has a number."""
    drawn = False
    for key in keys:
        points = [(h.get("epoch", i), h[key] * scale) for i, h in enumerate(history)
                  if _finite(h.get(key))]
        if points:
            epochs, values = zip(*points, strict=True)
            ax.plot(epochs, values, marker="." if len(points) < 30 else None,
                    label=key.replace("_", " "))
            drawn = True
    if drawn:
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend()
    return drawn


def _bars(ax: Any, values: Sequence[float], name: str) -> bool:
    label = name.replace("_", " ")
    if "bytes" in name:
        unit = _byte_unit(max(values, default=0))
        values = [v / 2 ** (10 * _UNITS.index(unit)) for v in values]
        label = f"{label.replace(' bytes', '')} ({unit})"
    ax.bar(range(len(values)), values, color="#4c72b0")
    ax.set_xlabel("rank")
    ax.set_ylabel(label)
    ax.set_xticks(range(len(values)))
    return True


def _matrix(ax: Any, counts: Sequence[Sequence[int]],
            names: Sequence[str] | None = None) -> bool:
    image = ax.imshow(counts, cmap="Blues")
    if names is not None and len(names) == len(counts):
        ticks = range(len(names))
        ax.set_xticks(ticks, names, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(ticks, names, fontsize=7)
    ax.figure.colorbar(image, ax=ax)
    if len(counts) <= _ANNOTATED_CLASSES:
        top = max(max(row) for row in counts) or 1
        for i, row in enumerate(counts):
            for j, n in enumerate(row):
                ax.text(j, i, str(n), ha="center", va="center", fontsize=7,
                        color="white" if n > top / 2 else "black")
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    return True


def _roc(ax: Any, roc: Mapping[str, Sequence[float]]) -> bool:
    ax.plot(roc["fpr"], roc["tpr"], color="#4c72b0")
    ax.plot([0, 1], [0, 1], color="#999", linestyle="--", linewidth=0.8)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    return True


def _hits(ax: Any, hits: Mapping[str, float]) -> bool:
    ks = sorted(hits, key=int)
    ax.bar(range(len(ks)), [hits[k] for k in ks], color="#4c72b0")
    ax.set_xticks(range(len(ks)), [f"K={k}" for k in ks])
    ax.set_ylabel("Hits@K")
    ax.set_ylim(0, 1)
    return True


def _efficiency(ax: Any, binned: Mapping[str, Sequence[float]], label: str) -> bool:
    """Points at the bin centres of ``binned['edges']``; empty bins (None/nan) left out."""
    edges, eff = binned["edges"], binned["efficiency"]
    points = [((lo + hi) / 2, e) for lo, hi, e in zip(edges[:-1], edges[1:], eff, strict=True)
              if _finite(e)]
    if not points:
        return False
    centres, values = zip(*points, strict=True)
    ax.plot(centres, values, "o")
    if label.startswith("pT"):
        ax.set_xscale("log")
    ax.set_xlabel(label)
    ax.set_ylabel("tracking efficiency")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    return True


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure_html(figure: Figure) -> str:
    fig_id, caption, png = figure
    text = html.escape(caption)
    return (f'<figure class="plot" id="{fig_id}"><img alt="{text}" '
            f'src="data:image/png;base64,{png}"><figcaption>{text}</figcaption></figure>')


def _figures(result: Mapping[str, Any]) -> dict[str, Any]:
    """The run's final figures: its top-level values that are not plots or the config."""
    return {k: v for k, v in _flatten(result).items()
            if k.split(".")[0] not in _NOT_FIGURES and not isinstance(v, list)}


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _table(rows: Mapping[str, Any]) -> str:
    cells = "".join(f"<tr><th>{html.escape(k)}</th>{_cell(_table_value(k, v))}</tr>"
                    for k, v in rows.items())
    return f"<table>{cells}</table>"


def _table_value(key: str, value: Any) -> Any:
    """Byte counts (a name with ``bytes`` in it) in KiB/MiB/GiB, other values as they are."""
    if "bytes" in key.rsplit(".", 1)[-1] and _finite(value):
        return human_bytes(value)
    return value


_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB")


def _byte_unit(n: float) -> str:
    power = 0
    while abs(n) >= 1024 and power < len(_UNITS) - 1:
        n /= 1024
        power += 1
    return _UNITS[power]


def human_bytes(n: float) -> str:
    """``n`` bytes as people read them: ``812 bytes``, ``3.4 MiB``, ``1.25 GiB``."""
    unit = _byte_unit(n)
    if unit == "bytes":
        return f"{n:,.0f} bytes"
    value = n / 2 ** (10 * _UNITS.index(unit))
    return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"  # not 1.01e+03


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f'<td class="num">{value:.6g}</td>'
    if isinstance(value, int) and not isinstance(value, bool):
        return f'<td class="num">{value:,}</td>'
    return f"<td>{html.escape(str(value))}</td>"


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(
        value)

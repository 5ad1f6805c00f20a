"""The Free Decimal Correspondence (FDC) topic tree, the topic axis of Essential-Web.

FDC codes are Dewey-compatible decimals such as ``"513.212"``; Essential-Web reads three
levels off a code: level 1 is its first digit, level 2 its first two, level 3 its first
three. :func:`parse_fdc` reads John Mark Ockerbloom's ``fdc.txt`` (v0.06, CC0), and the
package ships its result as ``fdc_tree.json`` so the built-in schema works offline.
"""

from __future__ import annotations

import html
import json
import re
from functools import cache
from importlib import resources
from pathlib import Path

from sparsegnn.curation.curation_errors import SchemaError

# Level-1 labels as Essential-Web words them (the FDC file words its "X00" lines longer).
LEVEL_1_LABELS = {
    "0": "General works", "1": "Philosophy & psychology", "2": "Religion",
    "3": "Social sciences", "4": "Language", "5": "Science", "6": "Technology",
    "7": "Arts & recreation", "8": "Literature", "9": "History & geography",
}
# A single code line: "513 Arithmetic" or "006.6 Computer graphics" (ranges are skipped).
_LINE = re.compile(r"^\s*(\d{3}(?:\.\d+)?)\s+(.+?)\s*$")
_CODE = re.compile(r"^\d{1,3}$|^\d{3}\.\d+$")
_TREE_FILE = "fdc_tree.json"


def _clean_label(terms: str) -> str:
    """Readable label from an FDC term list.

    ``A | B`` gives two wordings of one subject, the last being plain English; ``A + B``
    two subjects sharing the number; quotes mark LCSH headings and are dropped.
    """
    text = html.unescape(terms).split(" | ")[-1]
    text = text.replace('"', "").replace("(", "").replace(")", "")
    return re.sub(r"\s+", " ", text.replace(" + ", "; ")).strip()


def parse_fdc(path: str | Path) -> dict[str, str]:
    """Every code of ``fdc.txt`` with its label: ``{"5": ..., "51": ..., "513": ...}``.

    Level-2 codes come from the ``X_0`` lines (``"510 Mathematics"`` gives ``"51"``),
    level-1 labels from :data:`LEVEL_1_LABELS`; decimal lines keep their full code.
    """
    tree = dict(LEVEL_1_LABELS)
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        code, label = match.group(1), _clean_label(match.group(2))
        tree.setdefault(code, label)
        if len(code) == 3 and code.endswith("0"):
            tree.setdefault(code[:2], label)
    return dict(sorted(tree.items()))


@cache
def fdc_tree() -> dict[str, str]:
    """The shipped FDC tree (code -> label), loaded once."""
    text = resources.files("sparsegnn.curation").joinpath(_TREE_FILE).read_text("utf-8")
    return json.loads(text)


def is_fdc_code(code: str) -> bool:
    """Well-formed FDC code: one to three digits, or three digits, a dot and more digits."""
    return bool(_CODE.match(code))


def fdc_levels(code: str) -> tuple[str, str, str]:
    """Labels of a code's three levels (empty where the tree leaves a number unassigned)."""
    if not is_fdc_code(code):
        raise SchemaError(f"{code!r} is not an FDC code; expected digits like '513' or '513.212'")
    tree = fdc_tree()
    return (tree.get(code[:1], ""), tree.get(code[:2], "") if len(code) >= 2 else "",
            tree.get(code[:3], "") if len(code) >= 3 else "")


def fdc_prefix(code: str, level: int) -> str:
    """The code truncated to ``level`` digits (1, 2 or 3), the unit Essential-Web scores."""
    if level not in (1, 2, 3):
        raise SchemaError(f"FDC level must be 1, 2 or 3, got {level}")
    return code[:level]

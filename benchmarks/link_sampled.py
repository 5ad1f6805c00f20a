"""Sampled link training throughput, ours vs PyG's ``LinkNeighborLoader``, side by side:
the sampled rows of ``benchmarks/link.py`` alone (what they measure: ``_link_sampled``).

    python benchmarks/link_sampled.py [--quick] [--json] [--threads N] [--rounds R]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _link_sampled import main

if __name__ == "__main__":
    main()

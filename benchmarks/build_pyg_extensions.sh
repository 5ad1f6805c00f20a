#!/usr/bin/env bash
# Build torch-scatter and torch-sparse wheels against the venv's torch, into a cache
# outside the repository, and install them so benchmarks/sampling.py can run PyG's
# NeighborLoader. pyg-lib has no wheel for this torch, and PyG 2.8 has no pure-torch
# NeighborLoader, so these two extensions are the only way to get the peer.
#
# Compiling takes 20-40 minutes on a small CPU machine; run it when the machine is free.
# Wheels already in the cache are reused, so a second run only installs.
#
# Usage: benchmarks/build_pyg_extensions.sh [--no-install]
#   PYTHON     interpreter of the venv to build for (default: .venv/bin/python)
#   WHEEL_DIR  wheel cache (default: ${XDG_CACHE_HOME:-~/.cache}/sparsegnn/pyg-wheels)
#   MAX_JOBS   parallel compile jobs (default: 1, the machine is shared)
set -euo pipefail

PYTHON="${PYTHON:-.venv/bin/python}"
WHEEL_DIR="${WHEEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sparsegnn/pyg-wheels}"
export MAX_JOBS="${MAX_JOBS:-1}"
INSTALL=1
[[ "${1:-}" == "--no-install" ]] && INSTALL=0

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "error: $PYTHON cannot import torch; create the venv first (make venv)" >&2
  exit 1
fi
TORCH_TAG="$("$PYTHON" -c 'import torch; print(torch.__version__.replace("+", "_"))')"
DEST="$WHEEL_DIR/torch-$TORCH_TAG"
mkdir -p "$DEST"
echo "building for torch $TORCH_TAG into $DEST (MAX_JOBS=$MAX_JOBS)"

"$PYTHON" -m pip install --quiet wheel setuptools ninja
for pkg in torch-scatter torch-sparse; do
  if ls "$DEST"/"${pkg//-/_}"-*.whl >/dev/null 2>&1; then
    echo "$pkg: cached wheel found"
  else
    # No build isolation: the extension must compile against the torch it will run with.
    "$PYTHON" -m pip wheel --no-deps --no-build-isolation --wheel-dir "$DEST" "$pkg"
  fi
done

if [[ "$INSTALL" == 1 ]]; then
  "$PYTHON" -m pip install --no-deps --no-index --find-links "$DEST" torch-scatter torch-sparse
  "$PYTHON" -c "import torch_geometric.typing as t; print('torch-sparse available:', t.WITH_TORCH_SPARSE)"
fi

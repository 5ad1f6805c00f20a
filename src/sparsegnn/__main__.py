"""``python -m sparsegnn`` (what ``torchrun -m sparsegnn`` runs) is the CLI."""

from sparsegnn.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())

"""The ``sparsegnn`` command line: one console script with subcommands."""

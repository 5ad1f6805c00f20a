"""Errors of the curation package, in the library's one hierarchy.

They derive from :class:`sparsegnn.errors.SparseGNNError`, so the CLI reports them as
clean one-line errors, and from the builtin a caller would naturally catch.
"""

from __future__ import annotations

from sparsegnn.errors import SparseGNNError


class SchemaError(SparseGNNError, ValueError):
    """A schema file, a category name or a code that the schema does not define."""


class SandboxError(SparseGNNError, PermissionError):
    """User SQL that tries to leave the sandbox (write, attach, install, read other files)."""


class QueryError(SparseGNNError, ValueError):
    """User SQL that is allowed but fails (syntax error, unknown column)."""

"""Named curation recipes, one ``.sql`` file each, run in the sandbox over ``corpus``."""

from __future__ import annotations

from importlib import resources

from sparsegnn.curation.curation_errors import SchemaError


def list_recipes() -> list[str]:
    """Names of the shipped recipes (``math``, ``stem``, ...)."""
    files = resources.files(__name__).iterdir()
    return sorted(f.name.removesuffix(".sql") for f in files if f.name.endswith(".sql"))


def recipe_sql(name: str) -> str:
    """The SQL text of recipe ``name``."""
    if name not in list_recipes():
        raise SchemaError(f"no recipe {name!r}; shipped recipes: {', '.join(list_recipes())}")
    return resources.files(__name__).joinpath(f"{name}.sql").read_text(encoding="utf-8")

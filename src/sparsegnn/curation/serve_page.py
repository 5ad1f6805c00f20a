"""The one page of ``curate serve``: ``static/page.html``, ``page.css`` and ``page.js``
inlined into one response.

Nothing of the corpus is ever written into this text. The script fetches JSON from the
server and puts every value into the page with ``textContent`` (never ``innerHTML``), so
a document, code or query holding markup shows as that markup. The script and style
carry the response's CSP nonce; the page references no other file.
"""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def _static(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def page_html(nonce: str) -> str:
    """The page, its inline script and style marked with ``nonce`` (URL-safe characters
    from ``secrets``, so it needs no escaping)."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width">\n'
            f'<link rel="icon" href="data:,">\n<title>sparsegnn curation</title>\n'
            f'<style nonce="{nonce}">{_static("page.css")}</style></head>\n<body>\n'
            f'{_static("page.html")}<script nonce="{nonce}">{_static("page.js")}</script>\n'
            '</body></html>\n')

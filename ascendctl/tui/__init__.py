"""The Textual dashboard of `ascendctl top`."""

from __future__ import annotations

from typing import Any


def translate_bindings(node: Any) -> None:
    """The footer's key descriptions in the messages' language. BINDINGS are class constants
    (their descriptions marked with N_()), made before the language may be chosen: each screen and
    widget translates its own copy when it is created. English leaves them as they are."""
    from engine.i18n import DEFAULT, _, message_language

    if message_language() == DEFAULT:
        return
    import dataclasses

    table = node._bindings.key_to_bindings  # textual is pinned (pyproject.toml): its BindingsMap
    for key, bindings in table.items():
        table[key] = [dataclasses.replace(b, description=_(b.description)) if b.description else b for b in bindings]

"""Headless core of ascendctl: probes, parsers, planners, launchers, rules and scenarios.

Nothing in this package imports textual, typer or rich (see the import-linter contract in
pyproject.toml and tests/unit/test_import_hygiene.py): scripts, exporters and tests reuse it as is.
"""

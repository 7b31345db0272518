"""ascendctl: the shell (Typer commands, output, the Textual dashboard) over `engine`."""

# The one place the version is written: pyproject.toml reads it from here. A literal, not
# importlib.metadata: that import alone costs every command ~30 ms of start-up.
__version__ = "0.1.0"

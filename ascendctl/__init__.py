"""ascendctl: the shell (Typer commands, output, the Textual dashboard) over `engine`."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ascendctl")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

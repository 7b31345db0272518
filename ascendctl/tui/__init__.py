"""The Textual dashboard of `ascendctl top` and the rich renderers it shares with `--once`."""

"""The engine in a container: the runtime that runs it (docker, podman, nerdctl), the image, the
`run` command line that wraps the launch spec, and finding the containers a run started.

One place knows a container's name and labels (`runtime.py`); serve, doctor, top, the exporter
and bundle ask it instead of spelling them again.
"""

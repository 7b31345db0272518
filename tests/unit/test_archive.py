"""The one safe archive reader: a crafted `--root` archive or bundle reads nothing outside itself,
never reads a device without end, and cannot fill the disk."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from ascendctl.cli import main
from engine.bundle.layout import bundle_logs
from engine.system import archive
from engine.system.host import Host
from engine.system.recorded import recorded_host


def add(tar: tarfile.TarFile, name: str, data: bytes = b"", link: str | None = None, size: int | None = None) -> None:
    info = tarfile.TarInfo(name)
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
        return
    info.size = len(data) if size is None else size
    tar.addfile(info, io.BytesIO(data) if size is None else _Zeros(size))


class _Zeros(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.n = n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # noqa: ANN001
        k = min(len(b), self.n)
        b[:k] = bytes(k)
        self.n -= k
        return k


def crafted(path: Path, outside: Path) -> Path:
    with tarfile.open(path, "w:gz") as t:
        add(t, "case/etc/os-release", b'NAME="Debian GNU/Linux"\nVERSION_ID="12"\n')
        add(t, "case/.recorded/env", b"HOME=/root\n")
        add(t, "case/process_log/debug/plog/plog-1_1.log", b"[ERROR] EZ9999 x\n")
        logs = ["process_log/debug/plog/plog-1_1.log", "../../../../../../.." + str(outside), str(outside)]
        add(
            t,
            "case/manifest.json",
            json.dumps({"kind": "ascendctl-bundle", "schema_version": 1, "logs": logs}).encode(),
        )
        add(t, "case/etc/hostname", link="/dev/zero")
        add(t, "case/etc/hccn.conf", link=str(outside))
        add(t, "case/etc/machine-id", link="../../../../../../.." + str(outside))
        add(t, "case/usr/local/Ascend/cann-8.5.0/version.cfg", b"version=8.5.0\n")
        add(t, "case/usr/local/Ascend/ascend-toolkit/latest", link="/usr/local/Ascend/cann-8.5.0")
    return path


def test_links_to_devices_and_outside_files_are_never_read(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("OUTSIDE-FILE-7731\n")
    host, _ = recorded_host(crafted(tmp_path / "case.tar.gz", outside))
    # /dev/zero, an absolute file outside and a relative climb out all read as missing, at once.
    assert host.read_text("/etc/hostname") is None
    assert host.read_text("/etc/hccn.conf") is None
    assert host.read_text("/etc/machine-id") is None
    # The recorded machine's own absolute link still works, inside the tree.
    assert host.read_text("/usr/local/Ascend/ascend-toolkit/latest/version.cfg") == "version=8.5.0\n"
    assert host.read_text("/etc/os-release").startswith("NAME=")


def test_doctor_netcheck_and_triage_of_a_crafted_archive_read_nothing_outside(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.write_text("OUTSIDE-FILE-7731\n")
    case = crafted(tmp_path / "case.tar.gz", outside)
    for argv in (["doctor", "--root", str(case), "--json"], ["netcheck", "--root", str(case), "--json"]):
        assert main(argv) <= 3
        assert "OUTSIDE-FILE-7731" not in capsys.readouterr().out
    main(["triage", str(case), "--json", "--fail-on", "never"])
    report = json.loads(capsys.readouterr().out)
    assert [Path(i).name for i in report["inputs"]] == ["plog-1_1.log"]


def test_manifest_logs_that_leave_the_bundle_are_ignored(tmp_path):
    top = tmp_path / "b"
    (top / "run").mkdir(parents=True)
    (top / "run" / "engine.log").write_text("x\n")
    (top / "run" / "link.log").symlink_to(tmp_path / "secret")
    (tmp_path / "secret").write_text("s\n")
    logs = ["run/engine.log", "run/link.log", "../secret", str(tmp_path / "secret"), 7]
    (top / "manifest.json").write_text(json.dumps({"logs": logs}))
    assert bundle_logs(top) == [str(top / "run" / "engine.log")]


def test_an_archive_that_unpacks_past_the_cap_is_refused_before_writing(tmp_path, capsys, monkeypatch):
    bomb = tmp_path / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz") as t:
        add(t, "case/etc/os-release", b'NAME="Debian"\n')
        add(t, "case/usr/zeros.bin", size=8 << 20)
    monkeypatch.setattr(archive, "MAX_UNPACKED", 4 << 20)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    assert main(["doctor", "--root", str(bomb)]) == 2
    err = capsys.readouterr().err
    assert "more than 4 MB" in err and "tar xzf" in err
    assert list((tmp_path / "tmp").iterdir()) == []  # nothing left behind


def test_too_many_members_devices_and_hard_links_are_refused_or_dropped(tmp_path):
    many = tmp_path / "many.tar"
    with tarfile.open(many, "w") as t:
        for i in range(30):
            add(t, f"case/f{i}", b"x")
    with pytest.raises(archive.ArchiveRefused, match="more than 20 members"):
        archive.unpack(many, tmp_path / "d1", max_members=20)
    odd = tmp_path / "odd.tar"
    with tarfile.open(odd, "w") as t:
        add(t, "case/ok", b"x")
        dev = tarfile.TarInfo("case/zero")
        dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 5
        t.addfile(dev)
        hard = tarfile.TarInfo("case/hard")
        hard.type, hard.linkname = tarfile.LNKTYPE, "/etc/passwd"
        t.addfile(hard)
    (tmp_path / "d2").mkdir()
    archive.unpack(odd, tmp_path / "d2")
    assert sorted(p.name for p in (tmp_path / "d2" / "case").iterdir()) == ["ok"]


def test_read_regular_refuses_fifos_devices_and_links_and_caps(tmp_path):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert archive.read_regular(fifo) is None  # returns at once: no writer needed
    assert archive.read_regular("/dev/zero", follow=True) is None
    big = tmp_path / "big"
    big.write_bytes(b"a" * 1000)
    (tmp_path / "link").symlink_to(big)
    assert archive.read_regular(tmp_path / "link") is None
    assert archive.read_regular(tmp_path / "link", limit=10, follow=True) == b"a" * 10
    # The live machine's Host reads only regular files too.
    assert Host(root=Path("/")).read_text("/dev/zero") is None


def test_a_source_archives_metadata_is_read_capped_and_never_through_a_link(tmp_path):
    from engine.stacks import download

    sdist = tmp_path / "evil-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as t:
        add(t, "evil-1.0/PKG-INFO", link="/etc/passwd")
        add(t, "evil-1.0/pyproject.toml", size=64 << 20)  # 64 MB of zeros where a few lines belong
        add(t, "evil-1.0/requirements.txt", b"numpy\n")
    found = archive.read_members(sdist, lambda n: n.count("/") == 1, limit=1 << 20)
    assert sorted(found) == ["evil-1.0/pyproject.toml", "evil-1.0/requirements.txt"]
    assert len(found["evil-1.0/pyproject.toml"]) == 1 << 20
    runtime, build = download.sdist_requirements(sdist)
    assert runtime == ["numpy"] and build == ["setuptools>=40.8.0", "wheel"]

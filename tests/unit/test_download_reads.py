"""`engine download` reads a package index as every other page is read: with a total deadline and
a size cap, so a broken or hostile mirror cannot hold it for ever or fill the memory."""

from __future__ import annotations

import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.stacks import download
from engine.stacks.download import DownloadError, fetch_sdist

SDIST = b"not really a tar.gz, but bytes with a checksum"


class Index(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/good/pkg/"):
            digest = hashlib.sha256(SDIST).hexdigest()
            body = f'<a href="/files/pkg-1.0.tar.gz#sha256={digest}">pkg-1.0.tar.gz</a>'.encode()
            self._send(body)
        elif self.path == "/files/pkg-1.0.tar.gz":
            self._send(SDIST)
        elif self.path.startswith("/endless/"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"x" * 65536
            try:
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                return
        elif self.path.startswith("/trickle/"):
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            try:
                for _ in range(60):
                    self.wfile.write(b"<")
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                return

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def index():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_good_index_gives_the_checked_archive(index, tmp_path):
    got = fetch_sdist(f"{index}/good", "pkg==1.0", tmp_path, timeout=10)
    assert got.read_bytes() == SDIST


def test_an_endless_page_is_cut_at_the_cap(index, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "MAX_PAGE_BYTES", 1 << 20)
    started = time.monotonic()
    with pytest.raises(DownloadError, match="more than 1 MiB"):
        fetch_sdist(f"{index}/endless", "pkg==1.0", tmp_path, timeout=20)
    assert time.monotonic() - started < 10


def test_a_trickling_page_ends_at_the_deadline(index, tmp_path):
    started = time.monotonic()
    with pytest.raises(DownloadError, match="cannot read"):
        fetch_sdist(f"{index}/trickle", "pkg==1.0", tmp_path, timeout=2)
    assert time.monotonic() - started < 6

"""A local HTTP server of hostile pages, in the test's own process, on 127.0.0.1.

    /NAME/metrics, /NAME/api/snapshot, /NAME/version  -> pages[NAME] (text), when set
    /trickle/...    headers, then one byte every 0.2 s (a Content-Length it never reaches)
    /slowheaders/...  the status line and then a header byte every 0.2 s
    /endless/...    a chunked body that never ends, as fast as it can be read
    /silent/...     reads the request and answers nothing
A POST (a probe's completion) gets the same answers.

Every loop stops when the server is closed, so a test leaves no thread writing behind.
"""

from __future__ import annotations

import http.server
import threading
import time

VLLM_PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
"""


class HostileServer:
    def __init__(self, pages: dict[str, str] | None = None) -> None:
        self.pages = dict(pages or {})
        self.stop = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _drip(self, data: bytes) -> None:
                for i in range(len(data)):
                    if owner.stop.wait(0.2):
                        return
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()

            def do_GET(self):  # noqa: N802 - http.server's naming
                name, _, _rest = self.path.lstrip("/").partition("/")
                try:
                    if name == "trickle":
                        self.send_response(200)
                        self.send_header("Content-Length", "100000000")
                        self.end_headers()
                        self._drip(b"#" * 600)
                    elif name == "slowheaders":
                        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                        self._drip(b"X-Slow: " + b"a" * 600 + b"\r\n\r\n")
                    elif name == "endless":
                        self.send_response(200)
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        chunk = b"#" * 65536
                        frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
                        while not owner.stop.is_set():
                            self.wfile.write(frame)
                    elif name == "silent":
                        owner.stop.wait(30)
                    elif name in owner.pages:
                        body = owner.pages[name].encode()
                        ctype = "application/json" if body[:1] in (b"{", b"[") else "text/plain; version=0.0.4"
                        self.send_response(200)
                        self.send_header("Content-Type", ctype)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                    else:
                        self.send_response(404)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                except OSError:
                    pass

            def do_POST(self):  # noqa: N802 - a completion gets the same hostile answers
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        time.sleep(0.05)

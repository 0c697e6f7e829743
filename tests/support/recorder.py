"""A Prometheus stand-in for the credential and time attacks: real HTTP(S) on 127.0.0.1 that answers an instant
query with one series of ``value``, records each request's path, query and headers, and sets a cookie."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import time
from urllib.parse import parse_qs, urlparse


class Recorder:
    def __init__(self, value: float = 5.0, tls: tuple[str, str] | None = None):
        self.value = value
        self.requests: list[dict] = []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                u = urlparse(self.path)
                rec.requests.append({"path": u.path, "query": parse_qs(u.query), "headers": dict(self.headers)})
                body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
                    {"metric": {}, "value": [time.time(), str(rec.value)]}]}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Set-Cookie", "session=tenant-a; Path=/")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host = "localhost" if self.scheme == "https" else "127.0.0.1"
        return f"{self.scheme}://{host}:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

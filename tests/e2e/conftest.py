"""What every end-to-end test file shares: where the ctxfs binary is, how long to wait, and the check that it exists.

Builds nothing: the binary comes from $CTXFS_BIN (default target/debug/ctxfs, relative to
the repository); $CTXFS_E2E_TIMEOUT (seconds, default 60) bounds each wait for an answer.
"""

import json
import os
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("CTXFS_BIN", "target/debug/ctxfs"))
if not BIN.is_absolute():
    BIN = REPO / BIN
TIMEOUT = int(os.environ.get("CTXFS_E2E_TIMEOUT", "60"))


@pytest.fixture(scope="session", autouse=True)
def binary_exists():
    if not BIN.is_file():
        pytest.fail(f"no ctxfs binary at {BIN}: run `cargo build` first, or set CTXFS_BIN")


class JsonServer:
    """An HTTP server on 127.0.0.1, on a thread of this process, for the fake embedders the tests
    run: each POST's JSON body goes to `answer(path, body)`, which gives the status and the JSON
    to send back. `base` is its address."""

    def __init__(self, answer):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                status, reply = answer(self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

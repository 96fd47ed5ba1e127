#!/usr/bin/env python3
"""Benchmark of the LSP door (`ctxfs lsp`), over raw pipes (no client library).

Measures:
1. didChange on a 10 MB open buffer: the time per small incremental change,
   end to end (framing, JSON, rope edit), from a burst of changes closed by a
   request (its own round trip subtracted);
2. read of an open 10 MB document (the overlay) against the same file
   closed (the disk), through `ctxfs/call read` with `limit: 1` (the whole
   file is loaded and hashed either way), and grep over it;
3. the round trip of a small read through `ctxfs/call` against `tools/call`
   of `ctxfs mcp` (one JSON message per line).

Prints figures; an error answer ends it with a message and exit status 1. Usage:
    python3 bench/lsp.py [--bin target/release/ctxfs] [--changes 2000] [--reads 300]
The binary defaults to $CTXFS_BIN, else target/release/ctxfs (build it with
`cargo build --release`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from common import end, spawn  # noqa: E402


class Lsp:
    """A `ctxfs lsp` process, driven synchronously over its pipes."""

    def __init__(self, binary: Path, ws: Path, data: Path):
        self.proc = spawn([str(binary), "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)
        self.next_id = 0
        self.request("initialize", {"processId": None, "capabilities": {},
                                    "workspaceFolders": [{"uri": ws.as_uri(), "name": "ws"}],
                                    "initializationOptions": {"data": str(data)}})
        self.notify("initialized", {})

    def write(self, message: dict):
        body = json.dumps(message).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def read(self) -> dict:
        out = self.proc.stdout
        length = None
        while True:
            line = out.readline()
            if line in (b"\r\n", b"\n"):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(out.read(length))

    def notify(self, method: str, params):
        self.write({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params=None):
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.write(message)
        while True:
            answer = self.read()
            if answer.get("id") == self.next_id and "method" not in answer:
                if "error" in answer:
                    raise RuntimeError(answer["error"])
                return answer["result"]

    def close(self):
        self.request("shutdown")
        self.notify("exit", None)
        end(self.proc)


class Mcp:
    """A `ctxfs mcp` process, one JSON message per line."""

    def __init__(self, binary: Path, ws: Path, data: Path):
        self.proc = spawn([str(binary), "mcp", "--root", str(ws), "--data", str(data)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "0"}})
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()

    def request(self, method: str, params):
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                          "params": params}).encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            answer = json.loads(self.proc.stdout.readline())
            if answer.get("id") == self.next_id:
                return answer["result"]

    def close(self):
        end(self.proc)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def summary(samples: list[float]) -> str:
    samples = sorted(samples)
    p50 = statistics.median(samples)
    p95 = samples[int(len(samples) * 0.95) - 1]
    return f"p50 {ms(p50)}, p95 {ms(p95)} (n={len(samples)})"


def big_text(size: int) -> str:
    line = "let value = compute(alpha, beta, gamma); // some ordinary source text here\n"
    return line * (size // len(line))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.environ.get("CTXFS_BIN", str(REPO / "target" / "release" / "ctxfs")))
    parser.add_argument("--changes", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--size-mb", type=float, default=10)
    args = parser.parse_args()
    binary = Path(args.bin)
    if not binary.is_file():
        sys.exit(f"no binary at {binary}: cargo build --release, or pass --bin")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ws, data = tmp / "ws", tmp / "data"
        ws.mkdir()
        text = big_text(int(args.size_mb * 1_000_000))
        (ws / "open.rs").write_text(text)
        (ws / "closed.rs").write_text(text)
        (ws / "small.txt").write_text("hello\nworld\n")
        lines = text.count("\n")
        print(f"binary: {binary}")
        print(f"document: {len(text) / 1e6:.1f} MB, {lines} lines")

        lsp = Lsp(binary, ws, data)
        session = lsp.request("ctxfs/openSession", {})["session"]

        # 1. didChange on the open 10 MB buffer.
        start = time.perf_counter()
        lsp.notify("textDocument/didOpen", {"textDocument": {"uri": (ws / "open.rs").as_uri(), "languageId": "rust",
                                                              "version": 1, "text": text}})
        lsp.request("ctxfs/tools")
        opened = time.perf_counter() - start
        barrier = []
        for _ in range(50):
            t = time.perf_counter()
            lsp.request("ctxfs/tools")
            barrier.append(time.perf_counter() - t)
        rtt = statistics.median(barrier)
        uri = (ws / "open.rs").as_uri()
        bodies = []
        for i in range(args.changes):
            line = (i * 7919) % lines
            change = {"range": {"start": {"line": line, "character": 4}, "end": {"line": line, "character": 9}},
                      "text": "VALUE"}
            message = {"jsonrpc": "2.0", "method": "textDocument/didChange",
                       "params": {"textDocument": {"uri": uri, "version": i + 2}, "contentChanges": [change]}}
            body = json.dumps(message).encode()
            bodies.append(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        burst = b"".join(bodies)
        start = time.perf_counter()
        lsp.proc.stdin.write(burst)
        lsp.proc.stdin.flush()
        lsp.request("ctxfs/tools")
        total = time.perf_counter() - start - rtt
        per_change = total / args.changes
        print(f"didOpen of the {len(text) / 1e6:.0f} MB document (framing, JSON, rope), with one round trip: {ms(opened)}")
        print(f"didChange on the {len(text) / 1e6:.0f} MB buffer, end to end: {ms(per_change)} per change "
              f"({args.changes} changes in {ms(total)}; round trip {ms(rtt)} subtracted)")

        # 2. Read of the open document (overlay) against the closed copy (disk).
        def timed_call(tool, call_args, n):
            samples = []
            for _ in range(n):
                t = time.perf_counter()
                answer = lsp.request("ctxfs/call", {"session": session, "tool": tool, "args": call_args})
                samples.append(time.perf_counter() - t)
                if answer["isError"]:
                    sys.exit(f"lsp: FAILED: ctxfs/call {tool} answered an error, so its time is no figure: {answer['text'][:300]}")
            return samples

        n = max(10, args.reads // 10)
        read_open = timed_call("read", {"file_path": "open.rs", "limit": 1}, n)
        read_disk = timed_call("read", {"file_path": "closed.rs", "limit": 1}, n)
        print(f"read of the open 10 MB document (buffer): {summary(read_open)}")
        print(f"read of the closed 10 MB file (disk):     {summary(read_disk)}")
        grep_open = timed_call("grep", {"pattern": "VALUE = nothing", "path": "open.rs"}, n)
        grep_disk = timed_call("grep", {"pattern": "VALUE = nothing", "path": "closed.rs"}, n)
        print(f"grep of the open 10 MB document (buffer): {summary(grep_open)}")
        print(f"grep of the closed 10 MB file (disk):     {summary(grep_disk)}")

        # 3. A small read: ctxfs/call against the MCP door.
        lsp_small = timed_call("read", {"file_path": "small.txt"}, args.reads)
        lsp.close()
        mcp = Mcp(binary, ws, tmp / "data-mcp")
        mcp_small = []
        for _ in range(args.reads):
            t = time.perf_counter()
            result = mcp.request("tools/call", {"name": "read", "arguments": {"file_path": "small.txt"}})
            mcp_small.append(time.perf_counter() - t)
            if result.get("isError"):
                sys.exit(f"lsp: FAILED: MCP tools/call read answered an error, so its time is no figure: {str(result)[:300]}")
        mcp.close()
        print(f"small read, LSP ctxfs/call:  {summary(lsp_small)}")
        print(f"small read, MCP tools/call:  {summary(mcp_small)}")


if __name__ == "__main__":
    main()

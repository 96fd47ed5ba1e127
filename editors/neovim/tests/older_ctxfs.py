#!/usr/bin/env python3
"""A stand-in for a ctxfs build from before `ctxfs/resultText` and the chain's `file`, for the
plugin's tests only: it runs the real ctxfs (CTXFS_BIN, with this script's arguments) and relays
every message both ways, except that it answers `ctxfs/resultText` itself with MethodNotFound
(-32601), leaves that method out of `initialize`'s list, and drops `file` from the chain of
`ctxfs/openSession` answers. Everything else is the real server's. It ends when its stdin
closes, after closing the server's stdin and waiting for it."""
import os
import subprocess
import sys
import threading

import lsp_frames

real = subprocess.Popen([os.environ["CTXFS_BIN"], *sys.argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
out_lock = threading.Lock()
opening = set()  # ids of ctxfs/openSession requests in flight
initializing = set()


read = lsp_frames.read
write = lsp_frames.write


def from_editor():
    while True:
        msg = read(sys.stdin.buffer)
        if msg is None:
            break
        method = msg.get("method")
        if method == "ctxfs/resultText" and "id" in msg:
            write(sys.stdout.buffer, {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "Method not found"}}, out_lock)
            continue
        if method == "ctxfs/openSession":
            opening.add(msg.get("id"))
        if method == "initialize":
            initializing.add(msg.get("id"))
        write(real.stdin, msg)
    real.stdin.close()


threading.Thread(target=from_editor, daemon=True).start()
while True:
    msg = read(real.stdout)
    if msg is None:
        break
    if "method" not in msg and msg.get("id") in opening:
        opening.discard(msg["id"])
        for f in ((msg.get("result") or {}).get("chain") or {}).get("files", []):
            f.pop("file", None)
    if "method" not in msg and msg.get("id") in initializing:
        initializing.discard(msg["id"])
        ctxfs = (((msg.get("result") or {}).get("capabilities") or {}).get("experimental") or {}).get("ctxfs") or {}
        if "ctxfs/resultText" in ctxfs.get("methods", []):
            ctxfs["methods"].remove("ctxfs/resultText")
    write(sys.stdout.buffer, msg, out_lock)
code = real.wait()
sys.stdout.flush()
# Not sys.exit: the reader thread may hold stdin's lock, which aborts the interpreter's shutdown.
os._exit(code)

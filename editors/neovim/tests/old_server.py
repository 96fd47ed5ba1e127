#!/usr/bin/env python3
"""A stand-in for an old ctxfs build, for the plugin's tests only: a language server that answers
`initialize` with `experimental.ctxfs.protocol` 1 (or, with --not-ctxfs, without experimental.ctxfs),
then `shutdown` and `exit`. Building a real old ctxfs here would cost a second full build; this
answers exactly the one message the plugin's version check reads."""
import sys

import lsp_frames

not_ctxfs = "--not-ctxfs" in sys.argv


def read():
    return lsp_frames.read(sys.stdin.buffer)


def send(msg):
    lsp_frames.write(sys.stdout.buffer, msg)


while True:
    msg = read()
    if msg is None:
        break
    method = msg.get("method")
    if method == "initialize":
        caps = {"textDocumentSync": 1}
        if not not_ctxfs:
            caps["experimental"] = {"ctxfs": {"protocol": 1, "methods": ["ctxfs/tools"], "notifications": []}}
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"capabilities": caps, "serverInfo": {"name": "ctxfs", "version": "0.0.9"}}})
    elif method == "shutdown":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
    elif method == "exit":
        break
    elif "id" in msg:
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "Method not found"}})

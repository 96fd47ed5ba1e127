#!/usr/bin/env python3
"""The reliability campaign: ctxfs as a hostile user and a crashing machine would treat it.

Each part counts what must be zero and prints it with its sample size:

  two-sessions   two `ctxfs mcp` processes read a file, then edit different lines at the same
                 moment: edits answered as done but missing from the file.
  outside        an outside program saves the file (read, add a line, rename) every ~2 ms while
                 a session edits it with 16 calls in flight: outside saves ctxfs overwrote.
  kill-answer    `kill -9` right after an answer, then `--session` resumes: answered ids that
                 recall no longer finds, and ids given twice.
  kill-patch     `kill -9` at a random moment of a two-file apply_patch, then a new start:
                 patches left half-applied, and temporary files left visible.
  lsp-frames     malformed LSP frames (duplicate, too long or too short Content-Length, a
                 missing blank line, garbage), each followed by a valid request: unanswered ones.
  mcp-lines      malformed MCP lines (lone surrogates, arguments that are not objects, bad
                 JSON with a readable id, garbage), each followed by a ping: unanswered ones.
  stall          a ping sent right after a call whose cost grows with its input (a read of a
                 60 MB file, a path 4,000 levels deep): the longest wait for the ping's answer.

Usage: python3 bench/reliability.py [--ctxfs target/release/ctxfs] [--size small|large] [PART ...]
The test command runs the same properties at a smaller size in tests/reliability.rs and
tests/e2e; this script is the larger run, quoted in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from common import Mcp, Proc  # noqa: E402
ID = re.compile(r"\[(#[0-9a-f]{4,})")


def workspace(tmp: Path):
    ws, data = tmp / "ws", tmp / "data"
    ws.mkdir(parents=True, exist_ok=True)
    return ws, data


def lines_file(n: int) -> str:
    return "".join(f"line {i:07d} {'x' * 60}\n" for i in range(n))


# --- parts --------------------------------------------------------------------

def two_sessions(binary, tmp, rounds, size_mb):
    ws, data = workspace(tmp)
    f = ws / "f.txt"
    n = size_mb * 1024 * 1024 // 74
    a, b = Mcp(binary, ws, tmp / "data-a"), Mcp(binary, ws, tmp / "data-b")
    lost = both = refused = 0
    try:
        for r in range(rounds):
            f.write_text(lines_file(n))
            for s in (a, b):
                s.call("read", {"file_path": "f.txt", "limit": 1})
            lines = (7, n - 7)
            ids = [s.start_call("edit", {"file_path": "f.txt", "old_string": f"line {line:07d} ",
                                         "new_string": f"EDIT {line:07d} "}) for s, line in zip((a, b), lines)]
            results = [s.answer(i)["result"] for s, i in zip((a, b), ids)]
            text = f.read_text()
            ok = [not res.get("isError") for res in results]
            for done, line in zip(ok, lines):
                if done and f"EDIT {line:07d} " not in text:
                    lost += 1
            both += all(ok)
            refused += ok.count(False)
    finally:
        a.kill()
        b.kill()
    return {"rounds": rounds, "file_mb": size_mb, "edits_lost": lost, "both_answered_done": both,
            "refused_as_stale": refused}


def outside(binary, tmp, seconds):
    """Saves every 2 ms (a program), then every 20 ms (an editor's autosave)."""
    fast = outside_at(binary, tmp / "2ms", seconds, 0.002)
    slow = outside_at(binary, tmp / "20ms", seconds, 0.020)
    return {"seconds": seconds, **{f"{k}@2ms": v for k, v in fast.items()}, **{f"{k}@20ms": v for k, v in slow.items()},
            "outside_saves_lost": fast["outside_saves_lost"] + slow["outside_saves_lost"]}


def outside_at(binary, tmp, seconds, interval):
    ws, data = workspace(tmp)
    f = ws / "f.txt"
    f.write_text(lines_file(20000))
    stop = threading.Event()
    saved = []

    def writer():
        n, temp = 0, ws / ".outside.tmp"
        while not stop.is_set():
            text = f.read_bytes() + f"outside {n}\n".encode()
            temp.write_bytes(text)
            os.replace(temp, f)
            saved.append(n)
            n += 1
            time.sleep(interval)

    s = Mcp(binary, ws, data)
    thread = threading.Thread(target=writer)
    thread.start()
    done = refused = 0
    deadline = time.time() + seconds
    k = 0
    try:
        while time.time() < deadline:
            # 16 in flight: a read and an edit, eight times over, pipelined.
            pending = []
            for _ in range(8):
                pending.append(s.start_call("read", {"file_path": "f.txt", "limit": 1}))
                pending.append(s.start_call("edit", {"file_path": "f.txt", "old_string": "line 0000000 ",
                                                     "new_string": f"session {k}\nline 0000000 "}))
                k += 1
            for i, id_ in enumerate(pending):
                res = s.answer(id_)["result"]
                if i % 2:
                    if res.get("isError"):
                        refused += 1
                    else:
                        done += 1
    finally:
        stop.set()
        thread.join()
        s.kill()
    text = f.read_text()
    lost = [n for n in saved if f"outside {n}\n" not in text]
    return {"outside_saves": len(saved), "outside_saves_lost": len(lost),
            "session_edits_done": done, "session_edits_refused_as_stale": refused}


def kill_answer(binary, tmp, rounds):
    ws, data = workspace(tmp)
    (ws / "hello.txt").write_text("hello\nworld\n")
    ids: list[str] = []
    lost = 0
    for r in range(rounds):
        s = Mcp(binary, ws, data, "--session", "campaign")
        try:
            if ids:
                probe = random.choice(ids)
                text, err = s.call("recall", {"id": probe})
                lost += err or "1: hello" not in text
            text, _ = s.call("read", {"file_path": "hello.txt"})
            ids.append(ID.match(text).group(1))
        finally:
            s.kill()
    s = Mcp(binary, ws, data, "--session", "campaign")
    try:
        for i in ids:
            text, err = s.call("recall", {"id": i})
            lost += err
    finally:
        s.kill()
    return {"rounds": rounds, "answered_ids_lost": lost, "ids_given_twice": len(ids) - len(set(ids))}


def kill_patch(binary, tmp, rounds):
    ws, data = workspace(tmp)
    old_a = lines_file(30000)
    old_b = old_a.replace("line", "LINE")
    patch = ("*** Begin Patch\n*** Update File: a.txt\n@@\n-line 0000005 " + "x" * 60 + "\n+new 0000005\n"
             "*** Update File: b.txt\n@@\n-LINE 0000005 " + "x" * 60 + "\n+new 0000005\n*** End Patch\n")
    half_before = half_after = temps_visible = temps_left = 0
    durations = []
    for r in range(rounds):
        (ws / "a.txt").write_text(old_a)
        (ws / "b.txt").write_text(old_b)
        s = Mcp(binary, ws, data)
        try:
            s.call("read", {"file_path": "a.txt", "limit": 1})
            s.call("read", {"file_path": "b.txt", "limit": 1})
            started = time.time()
            id_ = s.start_call("apply_patch", {"patch": patch})
            if not durations:
                s.answer(id_)
                durations.append(time.time() - started)
            else:
                time.sleep(random.uniform(0, durations[0] * 1.2))
        finally:
            s.kill()
        state = lambda: ("new 0000005" in (ws / "a.txt").read_text(), "new 0000005" in (ws / "b.txt").read_text())
        a, b = state()
        half_before += a != b
        s = Mcp(binary, ws, data)
        try:
            listing, _ = s.call("list", {})
            temps_visible += ".ctxfs-" in listing
        finally:
            s.kill()
        a, b = state()
        half_after += a != b
        temps_left += sum(".ctxfs-" in p.name for p in ws.iterdir())
    return {"rounds": rounds, "half_applied_before_restart": half_before, "half_applied_after_restart": half_after,
            "temp_files_listed": temps_visible, "temp_files_left": temps_left}


def lsp_frames(binary, tmp, n):
    ws, data = workspace(tmp)
    p = Proc(binary, ["lsp", "--stdio", "--data", str(data)], lines=False)

    def frame(body: bytes) -> bytes:
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    buf = b""
    answers: set = set()
    lock = threading.Lock()

    def reader():
        nonlocal buf
        out = p.proc.stdout
        while True:
            header = b""
            while not header.endswith(b"\r\n\r\n"):
                byte = out.read(1)
                if not byte:
                    return
                header += byte
            length = int(header.split(b"Content-Length:")[1].split(b"\r\n")[0])
            message = json.loads(out.read(length))
            if "id" in message and "method" not in message:
                with lock:
                    answers.add(message["id"])

    threading.Thread(target=reader, daemon=True).start()
    init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "processId": None, "capabilities": {}, "workspaceFolders": [{"uri": ws.as_uri(), "name": "ws"}]}}).encode()
    p.write(frame(init))
    rng = random.Random(7)
    for i in range(1, n + 1):
        bad = json.dumps({"jsonrpc": "2.0", "id": f"bad{i}", "method": "ctxfs/tools", "params": None,
                          "pad": "z" * rng.randrange(60)}).encode()
        m = len(bad)
        kind = rng.randrange(9)
        junk = [
            b"Content-Length: %d\r\n\r\n" % (m + 1 + rng.randrange(200)) + bad,
            b"Content-Length: %d\r\n\r\n" % rng.randrange(m) + bad,
            b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (m, m) + bad,
            b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (m + 7, m) + bad,
            b"Content-Length: %d\r\n" % m + bad,
            b"Content-Length: %d" % m + bad,
            b"Content-Length: %d\r\n\r\n" % m,
            b"Content-Length: x%d\r\n\r\n" % m + bad,
            b"\x00\xffgarbage{{{" + bad,
        ][kind]
        good = json.dumps({"jsonrpc": "2.0", "id": i, "method": "ctxfs/tools"}).encode()
        p.write(junk + frame(good))
    deadline = time.time() + 120
    while time.time() < deadline:
        with lock:
            if all(i in answers for i in range(1, n + 1)):
                break
        time.sleep(0.1)
    with lock:
        unanswered = sum(i not in answers for i in range(1, n + 1))
    p.kill()
    return {"frames": n, "valid_requests_unanswered": unanswered}


def mcp_lines(binary, tmp, n):
    ws, data = workspace(tmp)
    s = Mcp(binary, ws, data)
    rng = random.Random(11)
    kinds = [
        lambda i: b'{"jsonrpc":"2.0","id":"x%d","method":"tools/call","params":{"name":"read","arguments":{"file_path":"a\\udcff"}}}' % i,
        lambda i: b'{"jsonrpc":"2.0","id":"x%d","method":"tools/call","params":{"name":"read","arguments":"nope"}}' % i,
        lambda i: b'{"jsonrpc":"2.0","id":"x%d","method":"tools/call","params":{"name":"read","arguments":[1,2]}}' % i,
        lambda i: b'{"jsonrpc":"2.0","id":"x%d","method":"ping",,,}' % i,
        lambda i: b'{"jsonrpc":"2.0","id":"x%d","method":"tools/call","params":"nope"}' % i,
        lambda i: b"\x00\xff garbage \xfe",
        lambda i: b"[1,2,3]",
        lambda i: b'{"jsonrpc":"2.0","id":"x%d","method":"tools/call","params":{"name":"\\ud800"}}' % i,
    ]
    ids = []
    for i in range(n):
        s.write(rng.choice(kinds)(i) + b"\n")
        ids.append(f"p{i}")
        s.send({"jsonrpc": "2.0", "id": f"p{i}", "method": "ping"})
    unanswered = 0
    for id_ in ids:
        try:
            s.answer(id_, timeout=30)
        except (queue.Empty, EOFError):
            unanswered += 1
    s.kill()
    return {"lines": n, "pings_unanswered": unanswered}


def stall(binary, tmp, rounds):
    ws, data = workspace(tmp)
    with open(ws / "big.txt", "w") as f:
        for _ in range(60_000):
            f.write("y" * 999 + "\n")
    deep = "/".join(["d"] * 4000)
    s = Mcp(binary, ws, data)
    worst = 0.0
    try:
        for r in range(rounds):
            for tool, args in (("read", {"file_path": "big.txt"}), ("read", {"file_path": deep}),
                               ("mkdir", {"path": deep})):
                slow = s.start_call(tool, args)
                sent = time.time()
                s.send({"jsonrpc": "2.0", "id": f"ping{r}{tool}", "method": "ping"})
                s.answer(f"ping{r}{tool}")
                worst = max(worst, time.time() - sent)
                s.answer(slow)
    finally:
        s.kill()
    return {"rounds": rounds, "longest_ping_wait_s": round(worst, 3)}


SIZES = {
    "small": {"two-sessions": (20, 1), "outside": (5,), "kill-answer": (10,), "kill-patch": (10,),
              "lsp-frames": (500,), "mcp-lines": (500,), "stall": (2,)},
    "large": {"two-sessions": (200, 5), "outside": (60,), "kill-answer": (100,), "kill-patch": (250,),
              "lsp-frames": (5000,), "mcp-lines": (10000,), "stall": (10,)},
}
PARTS = {"two-sessions": two_sessions, "outside": outside, "kill-answer": kill_answer, "kill-patch": kill_patch,
         "lsp-frames": lsp_frames, "mcp-lines": mcp_lines, "stall": stall}
MUST_BE_ZERO = {"edits_lost", "both_answered_done", "outside_saves_lost", "answered_ids_lost", "ids_given_twice",
                "half_applied_after_restart", "temp_files_listed", "temp_files_left",
                "valid_requests_unanswered", "pings_unanswered"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ctxfs", default=str(ROOT / "target" / "release" / "ctxfs"))
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("parts", nargs="*", default=list(PARTS))
    args = parser.parse_args()
    if not Path(args.ctxfs).exists():
        sys.exit(f"no binary at {args.ctxfs}: build it first (cargo build --release)")
    failed = False
    for name in args.parts:
        tmp = Path(tempfile.mkdtemp(prefix=f"ctxfs-campaign-{name}-"))
        try:
            started = time.time()
            figures = PARTS[name](args.ctxfs, tmp, *SIZES[args.size][name])
            bad = {k: v for k, v in figures.items() if k in MUST_BE_ZERO and v}
            stalled = figures.get("longest_ping_wait_s", 0) > 1.0
            failed |= bool(bad) or stalled
            verdict = "FAIL" if bad or stalled else "ok"
            print(f"{name:13} {verdict:4} {json.dumps(figures)}  ({time.time() - started:.0f} s)", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""End-to-end: the real `ctxfs mcp` binary against the official MCP Python SDK.

Builds nothing: the binary comes from $CTXFS_BIN (default target/debug/ctxfs,
relative to the repository). Run: CTXFS_BIN=target/debug/ctxfs python3 -m pytest -q tests/e2e
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
import time
from contextlib import asynccontextmanager

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp import types
from mcp.client.stdio import stdio_client

from conftest import BIN, REPO, TIMEOUT, JsonServer

# The tools as the generated schemas list them (one per tool of src/tools/spec.rs).
TOOLS = {p.stem for p in (REPO / "schemas" / "tools").glob("*.json")}
DENIED = re.compile(r"Access denied: .+ is not open to this session\.")


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello\nworld\n")
    (tmp_path / "outside").write_text("secret\n")
    data = tmp_path / "data"
    return ws, data


@asynccontextmanager
async def connect(args, errlog_path, **session_kwargs):
    """Spawns `ctxfs mcp ARGS` and yields (session, initialize result)."""
    # These tests are about tools, not the gate (tests/e2e/test_gate.py): no prompts.
    env = {"CTXFS_LOG": os.environ.get("CTXFS_LOG", "info")}
    params = StdioServerParameters(command=str(BIN), args=["mcp", "--mode", "trust", *args], env=env)
    with open(errlog_path, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write, **session_kwargs) as session:
                with anyio.fail_after(TIMEOUT):
                    init = await session.initialize()
                yield session, init


def text_of(result) -> str:
    assert result.content, result
    return result.content[0].text


async def call(session, name, arguments):
    with anyio.fail_after(TIMEOUT):
        return await session.call_tool(name, arguments)


async def call_fails(session, name, arguments) -> str:
    """Calls a tool that must fail: a tool error answer or a JSON-RPC error, either is fine."""
    try:
        result = await call(session, name, arguments)
    except Exception as e:  # a JSON-RPC error (MCPError) from the SDK
        return str(e)
    assert result.is_error, f"{name}({arguments}) should fail: {result}"
    return text_of(result)


def run(fn):
    anyio.run(fn)


# --- Device posture, through the SDK ----------------------------------------


def test_initialize_lists_the_tools(workspace, tmp_path):
    ws, data = workspace

    async def main():
        async with connect(["--root", str(ws), "--data", str(data)], tmp_path / "stderr.log") as (session, init):
            assert isinstance(init.instructions, str)
            assert init.server_info.name == "ctxfs"
            assert init.capabilities.tools is not None
            with anyio.fail_after(TIMEOUT):
                listed = await session.list_tools()
            by_name = {t.name: t for t in listed.tools}
            missing = TOOLS - set(by_name)
            assert not missing, f"missing tools: {missing}"
            for name in TOOLS:
                tool = by_name[name]
                assert tool.input_schema.get("type") == "object", (name, tool.input_schema)
                assert tool.description, name
                # Titles and hints, which clients use to let reads run unasked (issue 13, item 14).
                assert tool.title and tool.annotations and tool.annotations.title == tool.title, (name, tool)
                assert tool.annotations.open_world_hint is False, (name, tool.annotations)
            # pr and release change nothing: without a forge they only say so.
            reads = {"read", "list", "glob", "grep", "search", "stat", "recall", "skills_list", "skill_view", "pr", "release"}
            for name in TOOLS:
                assert by_name[name].annotations.read_only_hint is (name in reads), (name, by_name[name].annotations)
            assert by_name["rm"].annotations.destructive_hint is True
            assert by_name["mkdir"].annotations.destructive_hint is False
            assert by_name["mkdir"].annotations.idempotent_hint is True
            # A repository's tools add commits, branches and tags and take none away.
            assert by_name["commit"].annotations.destructive_hint is False

    run(main)


def test_write_then_read(workspace, tmp_path):
    ws, data = workspace

    async def main():
        async with connect(["--root", str(ws), "--data", str(data)], tmp_path / "stderr.log") as (session, _):
            written = await call(session, "write", {"file_path": "notes/new.txt", "content": "alpha\nbeta\n"})
            assert not written.is_error, text_of(written)
            assert (ws / "notes" / "new.txt").read_text() == "alpha\nbeta\n"
            read = await call(session, "read", {"file_path": "notes/new.txt"})
            assert not read.is_error, text_of(read)
            text = text_of(read)
            assert text.startswith("[#000"), text
            assert "1: alpha" in text and "2: beta" in text, text

    run(main)


def test_outside_the_root_is_denied(workspace, tmp_path):
    ws, data = workspace

    async def main():
        async with connect(["--root", str(ws), "--data", str(data)], tmp_path / "stderr.log") as (session, _):
            result = await call(session, "read", {"file_path": "../outside"})
            assert result.is_error
            assert DENIED.search(text_of(result)), text_of(result)
            assert "secret" not in text_of(result)

    run(main)


def test_unknown_tool_and_wrong_types_leave_the_session_working(workspace, tmp_path):
    ws, data = workspace

    async def main():
        async with connect(["--root", str(ws), "--data", str(data)], tmp_path / "stderr.log") as (session, _):
            await call_fails(session, "no_such_tool", {"x": 1})
            ok = await call(session, "read", {"file_path": "hello.txt"})
            assert not ok.is_error and "1: hello" in text_of(ok)

            await call_fails(session, "read", {"file_path": 123})
            await call_fails(session, "read", {"file_path": "hello.txt", "offset": "first"})
            await call_fails(session, "write", {"file_path": ["a"], "content": {"b": 1}})
            await call_fails(session, "read", {})
            ok = await call(session, "write", {"file_path": "after.txt", "content": "still here\n"})
            assert not ok.is_error, text_of(ok)
            ok = await call(session, "read", {"file_path": "after.txt"})
            assert not ok.is_error and "1: still here" in text_of(ok), text_of(ok)

    run(main)


def test_client_roots_narrow_the_session(workspace, tmp_path):
    ws, data = workspace
    (ws / "inside").mkdir()
    (ws / "inside" / "a.txt").write_text("in\n")
    (ws / "elsewhere").mkdir()
    (ws / "elsewhere" / "b.txt").write_text("out\n")

    async def list_roots(context):
        return types.ListRootsResult(roots=[types.Root(uri=(ws / "inside").as_uri(), name="inside")])

    async def main():
        async with connect(["--root", str(ws), "--data", str(data)], tmp_path / "stderr.log",
                           list_roots_callback=list_roots) as (session, _):
            ok = await call(session, "read", {"file_path": str(ws / "inside" / "a.txt")})
            assert not ok.is_error, text_of(ok)
            assert "1: in" in text_of(ok)
            # The start moved to the root, and the first result says so (issue 13, item 12).
            assert f"the client's roots narrow this session to {ws / 'inside'}" in text_of(ok), text_of(ok)
            for name, arguments in [("list", {}), ("glob", {"pattern": "**"}), ("grep", {"pattern": "in"})]:
                found = await call(session, name, arguments)
                assert not found.is_error and "a.txt" in text_of(found), (name, text_of(found))
                assert "b.txt" not in text_of(found), (name, text_of(found))
            denied = await call(session, "read", {"file_path": str(ws / "elsewhere" / "b.txt")})
            assert denied.is_error, text_of(denied)
            assert "out" not in text_of(denied).split("\n", 1)[-1]

    run(main)


# --- Tree posture -------------------------------------------------------------


def test_tree_posture_with_a_view(tmp_path):
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "main.txt").write_text("fn main\n")
    (tree / "private").mkdir()
    (tree / "private" / "key.txt").write_text("hunter2\n")
    view = tmp_path / "view.json"
    view.write_text(json.dumps({"grants": {"/src": "commit"}}))
    data = tmp_path / "data"

    async def main():
        args = ["--tree", str(tree), "--view", str(view), "--start", "/src", "--data", str(data)]
        async with connect(args, tmp_path / "stderr.log") as (session, init):
            assert isinstance(init.instructions, str)
            read = await call(session, "read", {"file_path": "/src/main.txt"})
            assert not read.is_error, text_of(read)
            assert "1: fn main" in text_of(read)
            relative = await call(session, "read", {"file_path": "main.txt"})
            assert not relative.is_error, text_of(relative)

            denied = await call(session, "read", {"file_path": "/private/key.txt"})
            assert denied.is_error
            assert DENIED.search(text_of(denied)), text_of(denied)
            assert "hunter2" not in text_of(denied)

            written = await call(session, "write", {"file_path": "/src/new.txt", "content": "x\n"})
            assert not written.is_error, text_of(written)
            assert (tree / "src" / "new.txt").read_text() == "x\n"
            refused = await call(session, "write", {"file_path": "/private/new.txt", "content": "x\n"})
            assert refused.is_error
            assert not (tree / "private" / "new.txt").exists()

    run(main)


# --- Raw stdio: no SDK, hostile input ------------------------------------------


class Raw:
    """The server over plain pipes; stdout lines are collected by a thread."""

    def __init__(self, args, errlog_path):
        self.errlog = open(errlog_path, "w")
        self.proc = subprocess.Popen([str(BIN), "mcp", "--mode", "trust", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errlog, env={**os.environ, "CTXFS_LOG": "info"})
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send_bytes(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message):
        self.send_bytes(json.dumps(message).encode() + b"\n")

    def recv(self, timeout=TIMEOUT):
        line = self.lines.get(timeout=timeout)
        assert line is not None, f"server closed stdout (exit {self.proc.poll()})"
        return json.loads(line)

    def answer_to(self, id_, timeout=TIMEOUT):
        while True:
            message = self.recv(timeout)
            if message.get("id") == id_ and "method" not in message:
                return message

    def close(self):
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.errlog.close()


def initialize(raw, id_=1):
    raw.send({"jsonrpc": "2.0", "id": id_, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "0"}}})
    answer = raw.answer_to(id_)
    assert "result" in answer, answer
    raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return answer["result"]


def tool_call(id_, name, arguments):
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def test_raw_stdio_survives_bad_input(workspace, tmp_path):
    ws, data = workspace
    raw = Raw(["--root", str(ws), "--data", str(data)], tmp_path / "stderr.log")
    try:
        # Garbage first: ignored, and the server stays up.
        raw.send_bytes(b"{this is not json\n")
        raw.send_bytes(b"\n")
        result = initialize(raw)
        assert result["serverInfo"]["name"] == "ctxfs"
        assert isinstance(result.get("instructions"), str)
        raw.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = raw.answer_to(2)["result"]["tools"]
        assert TOOLS <= {t["name"] for t in tools}
        assert raw.proc.poll() is None

        # More garbage after the handshake.
        raw.send_bytes(b"\x00\xff garbage \xfe\n")
        raw.send_bytes(b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":"nope"}\n')
        assert "error" in raw.answer_to(3)
        # Arguments that are not an object: a tool error the model reads, with an id.
        raw.send(tool_call(4, "read", "not an object"))
        answer = raw.answer_to(4)["result"]
        assert answer["isError"] is True and answer["content"][0]["text"].startswith("[#"), answer
        # A lone surrogate (as JavaScript and Python write one): answered, read as U+FFFD.
        raw.send_bytes(b'{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"read","arguments":{"file_path":"a\\udcff"}}}\n')
        answer = raw.answer_to(41)["result"]
        assert answer["isError"] is True and "No such file" in answer["content"][0]["text"], answer
        # Not JSON, but an id can be read: answered "Parse error".
        raw.send_bytes(b'{"jsonrpc":"2.0","id":42,"method":"ping",,,}\n')
        assert raw.answer_to(42)["error"]["code"] == -32700
        raw.send({"jsonrpc": "2.0", "id": 5, "method": "no/such/method"})
        assert raw.answer_to(5)["error"]["code"] == -32601
        raw.send(tool_call(6, "no_such_tool", {}))
        answer = raw.answer_to(6)
        assert "error" in answer or answer["result"]["isError"] is True, answer
        raw.send(tool_call(7, "read", {"file_path": 42}))
        answer = raw.answer_to(7)
        assert "error" in answer or answer["result"]["isError"] is True, answer

        # A message over 16 MiB: answered with an error for its id, then discarded.
        big = "x" * (16 * 1024 * 1024 + 10)
        head = b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"write","arguments":{"file_path":"big.txt","content":"'
        writer = threading.Thread(target=raw.send_bytes, args=(head + big.encode() + b'"}}}\n',))
        writer.start()
        answer = raw.answer_to(8)
        writer.join(timeout=TIMEOUT)
        assert answer["error"]["code"] == -32600, answer
        assert "too large" in answer["error"]["message"]
        assert not (ws / "big.txt").exists()

        # Still serving.
        raw.send(tool_call(9, "read", {"file_path": "hello.txt"}))
        answer = raw.answer_to(9)
        assert answer["result"]["isError"] is False, answer
        assert "1: hello" in answer["result"]["content"][0]["text"]
        assert raw.proc.poll() is None
    finally:
        code = raw.close()
    assert code == 0, (tmp_path / "stderr.log").read_text()


def test_raw_stdio_pipelined_calls_keep_their_order(workspace, tmp_path):
    """Calls sent in one burst run in arrival order: each write needs the read
    just before it (writes to an existing file require a read in the session),
    and each read must see the write just before it."""
    ws, data = workspace
    raw = Raw(["--root", str(ws), "--data", str(data)], tmp_path / "stderr.log")
    try:
        initialize(raw)
        burst = [tool_call(100, "write", {"file_path": "seq.txt", "content": "v0\n"})]
        rounds = 15
        for i in range(1, rounds + 1):
            burst.append(tool_call(100 + 2 * i - 1, "read", {"file_path": "seq.txt"}))
            burst.append(tool_call(100 + 2 * i, "write", {"file_path": "seq.txt", "content": f"v{i}\n"}))
        burst.append(tool_call(1000, "read", {"file_path": "seq.txt"}))
        raw.send_bytes(b"".join(json.dumps(m).encode() + b"\n" for m in burst))

        answers = {}
        while len(answers) < len(burst):
            message = raw.recv()
            if "id" in message and "method" not in message:
                answers[message["id"]] = message
        for i in range(1, rounds + 1):
            read = answers[100 + 2 * i - 1]["result"]
            assert read["isError"] is False, read
            assert f"1: v{i - 1}" in read["content"][0]["text"], (i, read)
            write = answers[100 + 2 * i]["result"]
            assert write["isError"] is False, (i, write)
        last = answers[1000]["result"]["content"][0]["text"]
        assert f"1: v{rounds}" in last, last
        assert (ws / "seq.txt").read_text() == f"v{rounds}\n"
    finally:
        code = raw.close()
    assert code == 0, (tmp_path / "stderr.log").read_text()


def test_answered_results_survive_a_kill_and_the_session_resumes(workspace, tmp_path):
    """An answer leaves only once its result is stored: a `kill -9` right after
    it loses nothing. `--session ID` goes on with the session after a restart,
    and ids are never given twice in one data directory."""
    ws, data = workspace
    ids = []
    for round_ in range(3):
        raw = Raw(["--root", str(ws), "--data", str(data), "--session", "work-1"], tmp_path / f"stderr{round_}.log")
        try:
            result = initialize(raw)
            assert "Session: work-1 " in result["instructions"]
            for earlier in ids:
                raw.send(tool_call(10, "recall", {"id": earlier}))
                answer = raw.answer_to(10)["result"]
                assert answer["isError"] is False, answer
                assert "1: hello" in answer["content"][0]["text"], answer
            raw.send(tool_call(11, "read", {"file_path": "hello.txt"}))
            answer = raw.answer_to(11)["result"]
            ids.append(re.match(r"\[(#[0-9a-f]{4,})", answer["content"][0]["text"]).group(1))
        finally:
            # Killed right after the answer: no chance to write anything more.
            raw.proc.kill()
            raw.proc.wait()
            raw.errlog.close()
    numbers = [int(i[1:], 16) for i in ids]
    assert numbers == sorted(set(numbers)), ids

    # Another session in the same data directory: none of those ids is its own,
    # so recall never shows another session's result under a reused id.
    raw = Raw(["--root", str(ws), "--data", str(data)], tmp_path / "stderr-other.log")
    try:
        result = initialize(raw)
        assert "Session: " in result["instructions"] and "work-1" not in result["instructions"]
        raw.send(tool_call(2, "recall", {"id": ids[0]}))
        answer = raw.answer_to(2)["result"]
        assert answer["isError"] is True and "No stored result" in answer["content"][0]["text"], answer
        first_own = re.match(r"\[(#[0-9a-f]{4,})", answer["content"][0]["text"]).group(1)
        assert int(first_own[1:], 16) > max(numbers), (first_own, ids)
    finally:
        raw.close()


def test_deep_paths_are_refused_and_a_big_read_stalls_nobody(workspace, tmp_path):
    """Paths beyond the platform's limits are refused with a sentence, and a
    call whose cost grows with its input (a read of a big file) runs off the
    protocol thread: a ping sent after it is answered first."""
    ws, data = workspace
    big = ws / "big.txt"
    with open(big, "w") as f:
        line = "y" * 999 + "\n"
        for _ in range(60_000):
            f.write(line)
    raw = Raw(["--root", str(ws), "--data", str(data)], tmp_path / "stderr.log")
    try:
        initialize(raw)
        deep = "/".join(["d"] * 300)
        raw.send(tool_call(2, "mkdir", {"path": deep}))
        answer = raw.answer_to(2)["result"]
        assert answer["isError"] is True and "255 levels" in answer["content"][0]["text"], answer
        assert not (ws / "d").exists()
        raw.send(tool_call(3, "write", {"file_path": "n" * 300, "content": "x"}))
        answer = raw.answer_to(3)["result"]
        assert answer["isError"] is True and "at most 255 bytes" in answer["content"][0]["text"], answer

        # The read goes first, the ping right after it; the ping's answer comes first.
        raw.send(tool_call(4, "read", {"file_path": "big.txt"}))
        raw.send({"jsonrpc": "2.0", "id": 5, "method": "ping"})
        order = []
        while len(order) < 2:
            message = raw.recv()
            if message.get("id") in (4, 5) and "method" not in message:
                order.append(message["id"])
        assert order == [5, 4], order
    finally:
        raw.close()


def test_a_first_search_reports_indexing_progress_to_a_client_that_asked(workspace, tmp_path):
    """A search that indexes first sends notifications/progress for the token the client sent, counting files."""
    ws, data = workspace
    for i in range(40):
        (ws / "src" / f"m{i:02d}").mkdir(parents=True)
        (ws / "src" / f"m{i:02d}" / "lib.rs").write_text(f"fn retry_upload_{i}() {{ send_again(); }}\n" * 30)
    reports = []

    async def on_progress(progress, total, message):
        reports.append((progress, total, message))

    async def main():
        async with connect(["--root", str(ws), "--data", str(data)], tmp_path / "stderr.log") as (session, _):
            with anyio.fail_after(TIMEOUT):
                result = await session.call_tool("search", {"query": "retry the upload"}, progress_callback=on_progress)
            assert not result.is_error, text_of(result)
            assert "/src/m" in text_of(result), text_of(result)
            # Without a token nothing is sent (and the index is already built).
            with anyio.fail_after(TIMEOUT):
                again = await session.call_tool("search", {"query": "send again"})
            assert not again.is_error, text_of(again)

    run(main)
    assert reports, "no progress notification for a search that indexed 41 files"
    done, total, message = reports[-1]
    assert total == 41 and done == 41, reports
    assert "41 of 41 files" in message, message
    assert [r[0] for r in reports] == sorted(r[0] for r in reports), reports


class SlowEmbeddingServer:
    """An OpenAI-compatible `/v1/embeddings` server in this process that takes `delay` seconds a
    request (as a large model on a small machine does) and records every text it was sent.
    Its vectors count a few topic words; what they mean matters less here than when they are asked for."""

    TOPICS = (("upload", "send", "transfer"), ("retry", "again", "backoff"), ("image", "picture", "pixels"))

    def __init__(self, delay):
        self.delay, self.texts, self.requests = delay, [], 0
        self.lock = threading.Lock()
        self.http = JsonServer(self.answer)
        self.url = f"{self.http.base}/v1"

    def answer(self, path, body):
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        time.sleep(self.delay)
        with self.lock:
            self.requests += 1
            self.texts.extend(inputs)
        data = [{"object": "embedding", "index": i, "embedding": self.vector(t)} for i, t in enumerate(inputs)]
        return 200, {"object": "list", "data": data}

    def vector(self, text):
        words = re.findall(r"[a-z]+", text.lower())
        return [float(sum(w in topic for w in words)) for topic in self.TOPICS] + [0.1]

    def close(self):
        self.http.close()


def test_a_slow_embedders_first_search_reports_its_words_stage_and_its_embedding_on_one_bar(workspace, tmp_path):
    """With a slow embedder a first search reads every file's words before it embeds any: the
    client hears both stages, the words stage first, on one scale whose total counts each file twice
    (read, then embedded), and the place on it only goes forward."""
    ws, data = workspace
    files = 30
    (ws / "src").mkdir(exist_ok=True)
    for i in range(files):
        (ws / "src" / f"f{i:02d}.rs").write_text(f"// marker{i:02d}\nfn upload_part_{i}() {{ send(); }}\n")
    found = sum(1 for p in ws.rglob("*") if p.is_file())
    server = SlowEmbeddingServer(delay=0.3)
    args = ["--root", str(ws), "--data", str(data), "--embedder", server.url, "--embedder-model", "slow"]
    reports = []

    async def on_progress(progress, total, message):
        reports.append((progress, total, message))

    async def main():
        async with connect(args, tmp_path / "stderr.log") as (session, _):
            with anyio.fail_after(TIMEOUT):
                result = await session.call_tool("search", {"query": "upload part"}, progress_callback=on_progress)
            assert not result.is_error, text_of(result)
            assert "searched by their words alone" in text_of(result), text_of(result)

    try:
        run(main)
    finally:
        server.close()
    words = [r for r in reports if r[2].startswith("indexing words: ")]
    embedding = [r for r in reports if r[2].startswith("indexing: ")]
    assert words and embedding and len(words) + len(embedding) == len(reports), reports
    assert reports.index(words[-1]) < reports.index(embedding[0]), reports
    assert words[-1][:2] == (found, 2 * found), words
    assert f"{found} of {found} files checked" in words[-1][2], words
    assert embedding[-1][1] == 2 * found and found < embedding[-1][0] < 2 * found, embedding
    # The place moves forward, or stays with a new total (a walk just ended).
    for before, after in zip(reports, reports[1:]):
        assert after[0] > before[0] or (after[0] == before[0] and after[1] != before[1]), reports


def test_indexing_a_search_had_no_time_for_goes_on_in_the_background(workspace, tmp_path):
    """A search that runs out of time says so, having found every file by its words; the rest is
    indexed between calls, each file once, and the next search answers from the whole tree without
    embedding anything but its query."""
    ws, data = workspace
    files = 30
    for i in range(files):
        (ws / "src").mkdir(exist_ok=True)
        (ws / "src" / f"f{i:02d}.rs").write_text(f"// marker{i:02d}\nfn upload_part_{i}() {{ send(); }}\n")
    server = SlowEmbeddingServer(delay=0.3)
    errlog = tmp_path / "stderr.log"
    args = ["--root", str(ws), "--data", str(data), "--embedder", server.url, "--embedder-model", "slow"]

    async def main():
        async with connect(args, errlog) as (session, _):
            first = text_of(await call(session, "search", {"query": "upload part", "limit": files}))
            # Thirty calls of 0.3 s do not fit in a search's 3 s; the embedder is slow, so every file's
            # words went in first and the first search finds each file by them.
            assert "not indexed yet" in first and "in the background" in first, first
            assert "searched by their words alone" in first, first
            assert first.count("/src/f") == files, first
            # Nothing more is asked of the server: the rest is indexed without another call.
            with anyio.fail_after(TIMEOUT):
                while "indexed in the background" not in errlog.read_text():
                    await anyio.sleep(0.1)
            requests = server.requests
            second = text_of(await call(session, "search", {"query": "transfer"}))
            assert "not indexed yet" not in second, second
            assert server.requests == requests + 1, "the second search embedded more than its query"
            assert second.count("/src/f") >= 10, second

    try:
        run(main)
    finally:
        server.close()
    markers = [sum(f"marker{i:02d}" in t for t in server.texts) for i in range(files)]
    assert markers == [1] * files, f"how often each file was embedded: {markers}"


def test_a_session_start_indexes_what_changed_since_the_last_process(workspace, tmp_path):
    """An index an earlier process left is readied when a session starts: a file changed in between
    is embedded before any call, and the first search finds the change without embedding anything but its query."""
    ws, data = workspace
    (ws / "src").mkdir()
    for i in range(5):
        (ws / "src" / f"f{i}.rs").write_text(f"// marker{i}\nfn upload_part_{i}() {{ send(); }}\n")
    server = SlowEmbeddingServer(delay=0)
    args = ["--root", str(ws), "--data", str(data), "--embedder", server.url, "--embedder-model", "slow"]

    async def first_process():
        async with connect(args, tmp_path / "first.log") as (session, _):
            answer = text_of(await call(session, "search", {"query": "transfer"}))
            assert "not indexed yet" not in answer, answer

    async def second_process():
        async with connect(args, tmp_path / "second.log") as (session, _):
            # No call yet: the changed file is indexed in the background all the same.
            with anyio.fail_after(TIMEOUT):
                while not any("marker9" in t for t in server.texts):
                    await anyio.sleep(0.1)
            with anyio.fail_after(TIMEOUT):
                while "indexed in the background" not in (tmp_path / "second.log").read_text():
                    await anyio.sleep(0.1)
            requests = server.requests
            answer = text_of(await call(session, "search", {"query": "transfer"}))
            assert "marker9" in answer and "not indexed yet" not in answer, answer
            assert server.requests == requests + 1, "the first search embedded more than its query"

    try:
        run(first_process)
        assert not any("marker9" in t for t in server.texts)
        (ws / "src" / "f4.rs").write_text("// marker9\nfn upload_part_9() { send(); transfer(); }\n")
        run(second_process)
    finally:
        server.close()
    assert sum("marker9" in t for t in server.texts) == 1, "the changed file was embedded more than once"

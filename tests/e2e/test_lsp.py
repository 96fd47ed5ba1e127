"""End-to-end: the real `ctxfs lsp` binary against a real LSP client (pytest-lsp / pygls).

Builds nothing: the binary comes from $CTXFS_BIN (default target/debug/ctxfs,
relative to the repository). Run: CTXFS_BIN=target/debug/ctxfs python3 -m pytest -q tests/e2e/test_lsp.py
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp.client import client_capabilities, make_test_lsp_client

from conftest import BIN, REPO, TIMEOUT, JsonServer


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello\nworld\n")
    (ws / "src").mkdir()
    (ws / "src" / "main.rs").write_text('fn main() {\n    println!("hi");\n}\n')
    (tmp_path / "outside.txt").write_text("secret\n")
    return ws, tmp_path / "data"


def plain(value):
    """pygls answers custom methods as namedtuples: back to dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def uri(path: Path) -> str:
    return path.resolve().as_uri()


# --- positions, as the editor counts them ---------------------------------------

def line_starts(text: str) -> list[int]:
    starts, i = [0], 0
    while i < len(text):
        c = text[i]
        if c == "\r" and i + 1 < len(text) and text[i + 1] == "\n":
            i += 1
            starts.append(i + 1)
        elif c in "\r\n":
            starts.append(i + 1)
        i += 1
    return starts


def offset_of(text: str, line: int, character: int, encoding: str) -> int:
    """The string index of an LSP position (clamped as LSP says)."""
    starts = line_starts(text)
    if line >= len(starts):
        return len(text)
    start = starts[line]
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    while end > start and text[end - 1] in "\r\n":
        end -= 1
    units, i = 0, start
    while i < end and units < character:
        c = text[i]
        units += len(c.encode("utf-16-le")) // 2 if encoding == "utf-16" else len(c.encode("utf-8"))
        i += 1
    return i


def apply_edits(text: str, edits, encoding: str) -> str:
    """Applies TextEdits, all relative to `text`, as an editor does."""
    spans = []
    for e in edits:
        a = offset_of(text, e.range.start.line, e.range.start.character, encoding)
        b = offset_of(text, e.range.end.line, e.range.end.character, encoding)
        spans.append((a, b, e.new_text))
    for a, b, new in sorted(spans, key=lambda s: s[0], reverse=True):
        text = text[:a] + new + text[b:]
    return text


class Editor:
    """The test's editor: a pygls client that keeps its open buffers and
    answers workspace/applyEdit like an editor (apply, report didChange, answer)."""

    def __init__(self, client, encoding: str):
        self.client = client
        self.encoding = encoding
        self.buffers: dict[str, tuple[str, int]] = {}
        self.edits: list[types.ApplyWorkspaceEditParams] = []
        self.accept = True
        self.delay = 0.0

        @client.feature(types.WORKSPACE_APPLY_EDIT)
        async def on_apply_edit(params: types.ApplyWorkspaceEditParams):
            self.edits.append(params)
            if self.delay:
                await asyncio.sleep(self.delay)
            if not self.accept:
                return types.ApplyWorkspaceEditResult(applied=False, failure_reason="the user said no")
            changes = params.edit.document_changes or []
            for change in changes:
                doc_uri, version = change.text_document.uri, change.text_document.version
                text, current = self.buffers[doc_uri]
                if version is not None and version != current:
                    return types.ApplyWorkspaceEditResult(applied=False, failure_reason="stale version")
                self.set(doc_uri, apply_edits(text, change.edits, self.encoding), change.edits)
            for doc_uri, edits in (params.edit.changes or {}).items():
                text, _ = self.buffers[doc_uri]
                self.set(doc_uri, apply_edits(text, edits, self.encoding), edits)
            return types.ApplyWorkspaceEditResult(applied=True)

    def set(self, doc_uri: str, text: str, edits):
        """The buffer changed (by an applied edit): report it as the editor would."""
        _, version = self.buffers[doc_uri]
        self.buffers[doc_uri] = (text, version + 1)
        changes = [
            types.TextDocumentContentChangePartial(range=e.range, text=e.new_text)
            for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True)
        ]
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=doc_uri, version=version + 1),
            content_changes=changes,
        ))

    def open(self, path: Path, text: str):
        doc_uri = uri(path)
        self.buffers[doc_uri] = (text, 1)
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=doc_uri, language_id="plaintext", version=1, text=text)))

    def type(self, path: Path, start: tuple[int, int], end: tuple[int, int], new: str):
        """The user types: an incremental didChange."""
        doc_uri = uri(path)
        text, version = self.buffers[doc_uri]
        rng = types.Range(start=types.Position(*start), end=types.Position(*end))
        edit = types.TextEdit(range=rng, new_text=new)
        self.buffers[doc_uri] = (apply_edits(text, [edit], self.encoding), version + 1)
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=doc_uri, version=version + 1),
            content_changes=[types.TextDocumentContentChangePartial(range=rng, text=new)],
        ))

    def close(self, path: Path):
        doc_uri = uri(path)
        del self.buffers[doc_uri]
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=doc_uri)))

    def text(self, path: Path) -> str:
        return self.buffers[uri(path)][0]

    async def request(self, method: str, params=None):
        return plain(await asyncio.wait_for(self.client.protocol.send_request_async(method, params), TIMEOUT))

    async def open_session(self, **params):
        return await self.request("ctxfs/openSession", params)

    async def call(self, session: str, tool: str, args: dict):
        return await self.request("ctxfs/call", {"session": session, "tool": tool, "args": args})

    async def ok(self, session: str, tool: str, args: dict):
        answer = await self.call(session, tool, args)
        assert not answer["isError"], f"{tool}({args}): {answer['text']}"
        return answer

    async def fails(self, session: str, tool: str, args: dict):
        answer = await self.call(session, tool, args)
        assert answer["isError"], f"{tool}({args}) should fail: {answer['text']}"
        return answer


def capabilities(*, apply_edit=True, progress=False, utf8=False) -> types.ClientCapabilities:
    return types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(
            apply_edit=apply_edit,
            workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True),
        ),
        window=types.WindowClientCapabilities(work_done_progress=progress),
        general=types.GeneralClientCapabilities(
            position_encodings=[types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf16] if utf8 else None),
    )


@asynccontextmanager
async def editor(folders, data: Path, *, caps=None, options=None, root_uri=None, mode="trust", args=(), on_client=None):
    """Starts `ctxfs lsp` and initializes it like an editor with `folders` open.

    These tests are about the tools, not the gate: sessions run in `mode`
    (initializationOptions), `trust` unless told (None: the server's default,
    ask). `on_client` sees the client before it starts, to add handlers."""
    client = make_test_lsp_client()
    caps = caps or capabilities()
    encodings = (caps.general and caps.general.position_encodings) or []
    utf8 = types.PositionEncodingKind.Utf8 in encodings
    ed = Editor(client, "utf-8" if utf8 else "utf-16")
    if on_client:
        on_client(client)
    await client.start_io(str(BIN), "lsp", *args, env={**os.environ, "CTXFS_LOG": os.environ.get("CTXFS_LOG", "info")})
    try:
        init = {"data": str(data), **({"mode": mode} if mode else {}), **(options or {})}
        result = await asyncio.wait_for(client.initialize_session(types.InitializeParams(
            capabilities=caps,
            client_info=types.ClientInfo(name="pytest-editor"),
            workspace_folders=[types.WorkspaceFolder(uri=uri(f), name=f.name) for f in folders],
            root_uri=root_uri,
            initialization_options=init,
        )), TIMEOUT)
        ed.initialize_result = result
        yield ed
        await asyncio.wait_for(client.shutdown_session(), TIMEOUT)
    finally:
        # After a failure the server was not told to exit: end it, or stop() waits for it.
        server = getattr(client, "_server", None)
        if server is not None and server.returncode is None:
            server.kill()
        await client.stop()


def run(coro):
    asyncio.run(asyncio.wait_for(coro, 4 * TIMEOUT))


# --- tests ----------------------------------------------------------------------

def test_initialize_announces_incremental_sync_and_the_methods(workspace):
    ws, data = workspace

    async def main():
        async with editor([ws], data) as ed:
            caps = ed.initialize_result.capabilities
            assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
            assert caps.text_document_sync.open_close is True
            assert caps.position_encoding in (None, types.PositionEncodingKind.Utf16)
            assert "ctxfs/call" in caps.experimental["ctxfs"]["methods"]
            tools = (await ed.request("ctxfs/tools"))["tools"]
            names = {t["name"] for t in tools}
            on_disk = {p.stem for p in (REPO / "schemas" / "tools").glob("*.json")}
            assert names == on_disk
            assert all(t["inputSchema"]["type"] == "object" and t["description"] for t in tools)
            await asyncio.sleep(0.2)
            logs = [m.message for m in ed.client.log_messages]
            assert any("serving the workspace folder" in m for m in logs), logs

    run(main())


def test_utf8_is_negotiated_when_offered(workspace):
    ws, data = workspace

    async def main():
        caps = client_capabilities("neovim")
        async with editor([ws], data, caps=caps) as ed:
            assert ed.initialize_result.capabilities.position_encoding == types.PositionEncodingKind.Utf8
            f = ws / "u.txt"
            f.write_text("añb😀c\n")
            ed.open(f, "añb😀c\n")
            # UTF-8 columns: 'b' is at byte 3, 'c' at byte 8.
            ed.type(f, (0, 3), (0, 4), "B")
            ed.type(f, (0, 8), (0, 9), "C")
            s = (await ed.open_session())["session"]
            answer = await ed.ok(s, "read", {"file_path": "u.txt"})
            assert "1: añB😀C" in answer["text"]
            assert ed.text(f) == "añB😀C\n"

    run(main())


def test_every_tool(workspace):
    ws, data = workspace

    async def main():
        async with editor([ws], data) as ed:
            opened = await ed.open_session()
            s = opened["session"]
            assert str(ws.resolve()) in opened["instructions"]
            assert opened["resumed"] is False
            assert opened["chain"] == {"files": [], "notes": []}
            (ws / "AGENTS.md").write_text("Be brief.\n")
            again = await ed.open_session()
            files = again["chain"]["files"]
            assert files[0]["path"] == "AGENTS.md" and files[0]["file"] == str(ws.resolve() / "AGENTS.md"), files
            (ws / "AGENTS.md").unlink()
            tools = {t["name"] for t in (await ed.request("ctxfs/tools"))["tools"]}
            done = set()

            async def ok(tool, args):
                done.add(tool)
                return await ed.ok(s, tool, args)

            read = await ok("read", {"file_path": "hello.txt"})
            assert read["text"].startswith("[#0001") and "2: world" in read["text"]
            assert read["facts"]["path"] == str(ws.resolve() / "hello.txt") and len(read["facts"]["sha"]) == 64
            created = await ok("write", {"file_path": "notes/new.md", "content": "# New\n\nfirst\n"})
            assert created["facts"].get("created") is True
            edited = await ok("edit", {"file_path": "hello.txt", "old_string": "world", "new_string": "there"})
            assert "+there" in edited["facts"]["diff"]
            await ok("multiedit", {"file_path": "hello.txt", "edits": [
                {"old_string": "hello", "new_string": "hi"}, {"old_string": "there", "new_string": "you"}]})
            assert (ws / "hello.txt").read_text() == "hi\nyou\n"
            patched = await ok("apply_patch", {"patch": "*** Begin Patch\n*** Update File: hello.txt\n@@\n-hi\n+hey\n you\n*** End Patch\n"})
            assert (ws / "hello.txt").read_text() == "hey\nyou\n", patched["text"]
            assert "notes" in (await ok("list", {"path": "."}))["text"]
            assert "main.rs" in (await ok("glob", {"pattern": "**/*.rs"}))["text"]
            assert "println" in (await ok("grep", {"pattern": "println"}))["text"]
            assert "main.rs" in (await ok("search", {"query": "println main function"}))["text"]
            await ok("mkdir", {"path": "made"})
            await ok("mv", {"source": "notes/new.md", "destination": "made/new.md"})
            assert (ws / "made" / "new.md").exists()
            await ok("stat", {"path": "made/new.md"})
            await ok("rm", {"path": "made/new.md"})
            assert not (ws / "made" / "new.md").exists()
            recalled = await ok("recall", {"id": read["id"]})
            assert "1: hello" in recalled["text"]
            await ok("skill_manage", {"name": "demo-skill", "content": "---\nname: demo-skill\ndescription: a demo\n---\n\nDo it.\n"})
            assert "demo-skill" in (await ok("skills_list", {}))["text"]
            assert "Do it." in (await ok("skill_view", {"name": "demo-skill"}))["text"]
            # Tools added later: they answer (an error is an answer too).
            for tool in sorted(tools - done):
                answer = await ed.call(s, tool, {"path": "hello.txt"})
                assert answer["id"].startswith("#") and answer["text"], (tool, answer)
            # The same over ctxfs/recall.
            again = await ed.request("ctxfs/recall", {"session": s, "id": read["id"], "offset": 2, "limit": 1})
            assert "2: world" in again["text"] and "1: hello" not in again["text"]
            # Outside the boundary: denied, as a tool error the model reads.
            denied = await ed.fails(s, "read", {"file_path": str(ws.parent / "outside.txt")})
            assert "secret" not in denied["text"]
            # Protocol misuse is a JSON-RPC error.
            with pytest.raises(Exception, match="no session"):
                await ed.call("nope", "read", {"file_path": "hello.txt"})

    run(main())


def test_unsaved_buffers_are_what_read_grep_and_search_see(workspace):
    ws, data = workspace
    f = ws / "hello.txt"

    async def main():
        async with editor([ws], data) as ed:
            s = (await ed.open_session())["session"]
            ed.open(f, "hello\nunsaved zebra 😀 line\n")
            read = await ed.ok(s, "read", {"file_path": "hello.txt"})
            assert "2: unsaved zebra 😀 line" in read["text"]
            assert "zebra" in (await ed.ok(s, "grep", {"pattern": "zebra"}))["text"]
            assert "hello.txt" in (await ed.ok(s, "search", {"query": "zebra"}))["text"]
            # Incremental changes, UTF-16 columns: the emoji counts two.
            ed.type(f, (1, 8), (1, 13), "okapi")
            ed.type(f, (1, 17), (1, 21), "LINE")
            read = await ed.ok(s, "read", {"file_path": "hello.txt"})
            assert "2: unsaved okapi 😀 LINE" in read["text"], read["text"]
            assert "hello.txt" not in (await ed.call(s, "grep", {"pattern": "zebra"}))["text"]
            assert "okapi" in (await ed.ok(s, "grep", {"pattern": "okapi"}))["text"]
            # Its hash is the buffer's: the stale guard compares it.
            ed.type(f, (0, 0), (0, 0), "typed ")
            stale = await ed.fails(s, "edit", {"file_path": "hello.txt", "old_string": "okapi", "new_string": "x"})
            assert "changed since" in stale["text"]
            assert f.read_text() == "hello\nworld\n"
            ed.close(f)
            read = await ed.ok(s, "read", {"file_path": "hello.txt"})
            assert "2: world" in read["text"]

    run(main())


def test_an_edit_of_an_open_file_goes_through_the_editor(workspace):
    ws, data = workspace
    f = ws / "src" / "main.rs"
    disk = f.read_text()

    async def main():
        async with editor([ws], data) as ed:
            s = (await ed.open_session())["session"]
            buffer = 'fn main() {\n    println!("hi");\n    // unsaved 😀 note\n}\n'
            ed.open(f, buffer)
            await ed.ok(s, "read", {"file_path": "src/main.rs"})
            answer = await ed.ok(s, "edit", {"file_path": "src/main.rs", "old_string": '"hi"', "new_string": '"hello, world"'})
            assert len(ed.edits) == 1
            change = ed.edits[0].edit.document_changes[0]
            assert change.text_document.version == 1
            assert len(change.edits) == 1 and len(change.edits[0].new_text) < 20, change.edits
            expected = buffer.replace('"hi"', '"hello, world"')
            assert ed.text(f) == expected
            assert f.read_text() == disk, "the disk must be left to the editor"
            assert "+    println!(\"hello, world\");" in answer["facts"]["diff"]
            read = await ed.ok(s, "read", {"file_path": "src/main.rs"})
            assert "unsaved 😀 note" in read["text"] and "hello, world" in read["text"]
            # Every writing tool goes the same way, each as one small edit of the buffer.
            await ed.ok(s, "multiedit", {"file_path": "src/main.rs", "edits": [{"old_string": "note", "new_string": "memo"}]})
            await ed.ok(s, "apply_patch", {"patch": "*** Begin Patch\n*** Update File: src/main.rs\n@@\n fn main() {\n+    let x = 1;\n*** End Patch\n"})
            await ed.ok(s, "write", {"file_path": "src/main.rs", "content": ed.text(f) + "// end\n"})
            assert len(ed.edits) == 4
            assert ed.text(f) == expected.replace("note", "memo").replace("{\n", "{\n    let x = 1;\n", 1) + "// end\n"
            read = await ed.ok(s, "read", {"file_path": "src/main.rs"})
            assert "// end" in read["text"] and "let x = 1;" in read["text"]
            assert f.read_text() == disk
            # A closed file is written to disk, atomically, as always.
            await ed.ok(s, "read", {"file_path": "hello.txt"})
            await ed.ok(s, "edit", {"file_path": "hello.txt", "old_string": "world", "new_string": "disk"})
            assert (ws / "hello.txt").read_text() == "hello\ndisk\n"
            assert len(ed.edits) == 4

    run(main())


def test_a_refused_edit_is_an_error_and_changes_nothing(workspace):
    ws, data = workspace
    f = ws / "src" / "main.rs"
    disk = f.read_text()

    async def main():
        async with editor([ws], data) as ed:
            s = (await ed.open_session())["session"]
            ed.open(f, disk + "// unsaved\n")
            ed.accept = False
            await ed.ok(s, "read", {"file_path": "src/main.rs"})
            refused = await ed.fails(s, "edit", {"file_path": "src/main.rs", "old_string": '"hi"', "new_string": '"no"'})
            # Plain words: the editor refused, the file was not changed (issue 13, item 17).
            assert "The editor refused the edit of " in refused["text"], refused["text"]
            assert "src/main.rs (the user said no); the file was not changed." in refused["text"], refused["text"]
            assert "Cannot access" not in refused["text"], refused["text"]
            assert ed.text(f) == disk + "// unsaved\n"
            assert f.read_text() == disk
            await ed.request("ctxfs/newRequest", {"session": s, "carriesEarlier": False})
            read = await ed.ok(s, "read", {"file_path": "src/main.rs"})
            assert '"hi"' in read["text"] and "// unsaved" in read["text"], read["text"]
            # A patch over a closed file and a refused open one: nothing half-applied.
            await ed.ok(s, "read", {"file_path": "hello.txt"})
            patch = ("*** Begin Patch\n*** Update File: hello.txt\n@@\n-world\n+patched\n"
                     "*** Update File: src/main.rs\n@@\n-// unsaved\n+// saved\n*** End Patch\n")
            failed = await ed.fails(s, "apply_patch", {"patch": patch})
            assert "The editor refused the edit of " in failed["text"] and "Cannot access" not in failed["text"], failed["text"]
            assert (ws / "hello.txt").read_text() == "hello\nworld\n"
            assert ed.text(f) == disk + "// unsaved\n" and f.read_text() == disk
            # Accepted once the user agrees.
            ed.accept = True
            await ed.ok(s, "read", {"file_path": "hello.txt"})
            await ed.ok(s, "read", {"file_path": "src/main.rs"})
            await ed.ok(s, "apply_patch", {"patch": patch})
            assert (ws / "hello.txt").read_text() == "hello\npatched\n"
            assert ed.text(f) == disk + "// saved\n" and f.read_text() == disk

    run(main())


def test_a_pending_apply_edit_stalls_nothing_else(workspace):
    ws, data = workspace
    f = ws / "src" / "main.rs"
    disk = f.read_text()

    async def main():
        async with editor([ws], data) as ed:
            s = (await ed.open_session())["session"]
            other = (await ed.open_session())["session"]
            ed.open(f, disk)
            await ed.ok(s, "read", {"file_path": "src/main.rs"})
            ed.delay = 2.0
            loop = asyncio.get_running_loop()
            started = loop.time()
            edit = asyncio.ensure_future(
                ed.call(s, "edit", {"file_path": "src/main.rs", "old_string": '"hi"', "new_string": '"slow"'}))
            await asyncio.sleep(0.3)
            # While the editor thinks: the server reads, answers, and runs other sessions' calls.
            assert (await ed.request("ctxfs/tools"))["tools"]
            for _ in range(40):
                await ed.ok(other, "read", {"file_path": "hello.txt"})
            assert loop.time() - started < 1.8, "answers waited for the editor"
            assert not edit.done()
            answer = await edit
            assert not answer["isError"], answer["text"]
            assert '"slow"' in ed.text(f)

    run(main())


def test_an_editor_that_does_not_answer_times_the_edit_out(workspace):
    ws, data = workspace
    f = ws / "hello.txt"

    async def main():
        async with editor([ws], data, options={"editTimeoutMs": 300}) as ed:
            s = (await ed.open_session())["session"]
            ed.open(f, "hello\nworld\n")
            await ed.ok(s, "read", {"file_path": "hello.txt"})
            ed.delay = 1.5
            ed.accept = False
            late = await ed.fails(s, "edit", {"file_path": "hello.txt", "old_string": "world", "new_string": "late"})
            assert "did not answer within 0.3 s" in late["text"], late["text"]
            assert f.read_text() == "hello\nworld\n" and ed.text(f) == "hello\nworld\n"
            await asyncio.sleep(1.5)
            # The late refusal is logged; the session goes on.
            assert any("late answer" in m.message for m in ed.client.log_messages)
            await ed.ok(s, "read", {"file_path": "hello.txt"})

    run(main())


def test_without_apply_edit_open_files_are_written_to_disk(workspace):
    ws, data = workspace
    f = ws / "hello.txt"

    async def main():
        async with editor([ws], data, caps=capabilities(apply_edit=False)) as ed:
            s = (await ed.open_session())["session"]
            ed.open(f, "hello\nworld\n")
            await ed.ok(s, "read", {"file_path": "hello.txt"})
            await ed.ok(s, "edit", {"file_path": "hello.txt", "old_string": "world", "new_string": "disk"})
            assert ed.edits == []
            assert f.read_text() == "hello\ndisk\n"
            assert "2: disk" in (await ed.ok(s, "read", {"file_path": "hello.txt"}))["text"]

    run(main())


def test_compaction_rewind_and_new_requests(workspace):
    ws, data = workspace

    async def main():
        async with editor([ws], data) as ed:
            s = (await ed.open_session())["session"]
            first = await ed.ok(s, "read", {"file_path": "hello.txt"})
            await ed.ok(s, "read", {"file_path": "src/main.rs"})
            again = await ed.ok(s, "read", {"file_path": "hello.txt"})
            assert "unchanged" in again["text"] or first["id"] in again["text"], again["text"]
            # A request that does not resend earlier results: no stubs.
            assert await ed.request("ctxfs/newRequest", {"session": s, "carriesEarlier": False}) is None
            fresh = await ed.ok(s, "read", {"file_path": "hello.txt"})
            assert "2: world" in fresh["text"]
            await ed.request("ctxfs/rewind", {"session": s, "to": first["id"]})
            table = (await ed.request("ctxfs/compact", {"session": s}))["text"]
            assert "hello.txt" in table and "main.rs" not in table, table
            assert (await ed.request("ctxfs/compact", {"session": s}))["text"] == ""
            with pytest.raises(Exception, match="not a result id"):
                await ed.request("ctxfs/rewind", {"session": s, "to": "banana"})

    run(main())


def test_calls_of_a_session_run_in_arrival_order(workspace):
    ws, data = workspace
    counter = ws / "counter.txt"
    counter.write_text("0\n")

    async def main():
        async with editor([ws], data) as ed:
            s = (await ed.open_session())["session"]
            # read, write, read, write...: each write needs the read just before it.
            futures = []
            for i in range(1, 31):
                futures.append(ed.call(s, "read", {"file_path": "counter.txt"}))
                futures.append(ed.call(s, "write", {"file_path": "counter.txt", "content": f"{i}\n"}))
            answers = await asyncio.gather(*futures)
            ids = [int(a["id"].lstrip("#"), 16) for a in answers]
            assert ids == sorted(ids), ids
            errors = [a["text"] for a in answers if a["isError"]]
            assert not errors, errors[:3]
            for k, a in enumerate(answers[0::2]):
                assert f"1: {k}" in a["text"], (k, a["text"])
            assert counter.read_text() == "30\n"

    run(main())


def test_long_searches_report_progress(workspace):
    ws, data = workspace

    async def main():
        async with editor([ws], data, caps=capabilities(progress=True), options={"progressAfterMs": 0}) as ed:
            s = (await ed.open_session())["session"]
            await ed.ok(s, "grep", {"pattern": "println"})
            await ed.ok(s, "read", {"file_path": "hello.txt"})
            for _ in range(100):
                reports = ed.client.progress_reports
                if reports and all(r and type(r[-1]).__name__ == "WorkDoneProgressEnd" for r in reports.values()):
                    break
                await asyncio.sleep(0.05)
            assert len(ed.client.progress_reports) == 1, ed.client.progress_reports
            (kinds,) = [[type(r).__name__ for r in v] for v in ed.client.progress_reports.values()]
            assert kinds == ["WorkDoneProgressBegin", "WorkDoneProgressEnd"], kinds

    run(main())


def test_several_folders_are_several_grants(tmp_path):
    a, b, hidden = tmp_path / "a", tmp_path / "b", tmp_path / "hidden"
    for d in (a, b, hidden):
        d.mkdir()
    (a / "x.txt").write_text("in a\n")
    (b / "y.txt").write_text("in b\n")
    (hidden / "z.txt").write_text("secret\n")

    async def main():
        async with editor([a, b], tmp_path / "data") as ed:
            opened = await ed.open_session()
            s = opened["session"]
            assert str(a.resolve()) in opened["instructions"] and str(b.resolve()) in opened["instructions"]
            assert "in a" in (await ed.ok(s, "read", {"file_path": str(a / "x.txt")}))["text"]
            assert "in b" in (await ed.ok(s, "read", {"file_path": str(b / "y.txt")}))["text"]
            await ed.ok(s, "write", {"file_path": str(b / "new.txt"), "content": "made\n"})
            assert (b / "new.txt").read_text() == "made\n"
            denied = await ed.fails(s, "read", {"file_path": str(hidden / "z.txt")})
            assert "secret" not in denied["text"]
            found = await ed.ok(s, "grep", {"pattern": "in|secret", "path": str(a)})
            assert "secret" not in found["text"]

    run(main())


def test_results_changes_and_change_texts_for_editors(workspace):
    ws, data = workspace

    async def main():
        async with editor([ws], data) as ed:
            caps = ed.initialize_result.capabilities.experimental["ctxfs"]
            assert caps["protocol"] >= 2 and caps["version"]
            assert {"ctxfs/results", "ctxfs/changes", "ctxfs/changeText"} <= set(caps["methods"])
            s = (await ed.open_session())["session"]
            read = await ed.ok(s, "read", {"file_path": "hello.txt"})
            again = await ed.ok(s, "read", {"file_path": "hello.txt"})
            assert "Unchanged since" in again["text"]
            await ed.ok(s, "write", {"file_path": "notes/a.md", "content": "one\n"})
            await ed.ok(s, "edit", {"file_path": "hello.txt", "old_string": "world", "new_string": "there"})
            big = "\n".join(f"line {i}" for i in range(1000)) + "\n"
            (ws / "big.txt").write_text(big)
            await ed.ok(s, "grep", {"pattern": "line", "path": "big.txt"})
            await ed.ok(s, "read", {"file_path": "notes/a.md"})
            await ed.ok(s, "apply_patch", {"patch": "*** Begin Patch\n*** Update File: notes/a.md\n@@\n-one\n+two\n*** Delete File: hello.txt\n*** End Patch\n"})
            await ed.ok(s, "mv", {"source": "notes/a.md", "destination": "b.md"})
            await ed.fails(s, "read", {"file_path": "missing.txt"})

            results = (await ed.request("ctxfs/results", {"session": s}))["results"]
            ids = [r["id"] for r in results]
            assert ids == sorted(ids, reverse=True) and ids[-1] == read["id"], ids
            by_id = {r["id"]: r for r in results}
            first = by_id[read["id"]]
            assert first["tool"] == "read" and first["path"] == str(ws.resolve() / "hello.txt")
            assert first["lines"] == 2 and first["size"] > 0 and not first["stub"] and not first["capped"]
            assert first["title"].startswith(f"[{read['id']} hello.txt lines 1-2 of 2")
            assert by_id[again["id"]]["stub"] is True
            assert any(r["tool"] == "grep" and r["capped"] for r in results), results
            assert results[0]["isError"] is True and results[0]["tool"] == "read"
            limited = (await ed.request("ctxfs/results", {"session": s, "limit": 2}))["results"]
            assert [r["id"] for r in limited] == ids[:2]
            # The user reads a stored result: its text, and no new result in the session.
            shown = await ed.request("ctxfs/resultText", {"session": s, "id": read["id"]})
            assert shown["id"] == read["id"] and shown["text"].startswith("1: hello\n2: world"), shown
            after = (await ed.request("ctxfs/results", {"session": s}))["results"]
            assert [r["id"] for r in after] == ids, "resultText records nothing"
            with pytest.raises(Exception, match="no stored result"):
                await ed.request("ctxfs/resultText", {"session": s, "id": "#ffff"})

            changes = (await ed.request("ctxfs/changes", {"session": s}))["changes"]
            shape = [(c["tool"], Path(c["path"]).name, c["kind"]) for c in changes]
            assert shape == [
                ("mv", "b.md", "moved"),
                ("apply_patch", "a.md", "modified"),
                ("apply_patch", "hello.txt", "deleted"),
                ("edit", "hello.txt", "modified"),
                ("write", "a.md", "created"),
            ], shape
            # pygls turns answers into namedtuples, which rename the keyword `from` to `_N`.
            moved_from = [v for k, v in changes[0].items() if k == "from" or k.startswith("_")]
            assert len(moved_from) == 1 and moved_from[0].endswith("notes/a.md"), changes[0]
            assert "-world" in changes[3]["diff"] and "+there" in changes[3]["diff"]
            edit = changes[3]
            texts = await ed.request("ctxfs/changeText", {"session": s, "id": edit["id"], "path": edit["path"]})
            assert texts == {"path": edit["path"], "before": "hello\nworld\n", "after": "hello\nthere\n"}
            deleted = changes[2]
            texts = await ed.request("ctxfs/changeText", {"session": s, "id": deleted["id"], "path": deleted["path"]})
            assert texts["before"] == "hello\nthere\n" and texts["after"] is None
            created = changes[4]
            texts = await ed.request("ctxfs/changeText", {"session": s, "id": created["id"], "path": created["path"]})
            assert texts["before"] is None and texts["after"] == "one\n"
            with pytest.raises(Exception, match="changed no file"):
                await ed.request("ctxfs/changeText", {"session": s, "id": read["id"], "path": edit["path"]})

    run(main())


def test_empty_arrays_and_missing_params_are_taken_as_empty_objects(workspace):
    """Neovim sends a Lua `{}` as `[]`; params whose fields are all optional may be left out."""
    ws, data = workspace
    raw = Raw(["--stdio", "--data", str(data)])
    try:
        raw.send(request(1, "initialize", {"processId": None, "capabilities": {},
                                           "workspaceFolders": [{"uri": uri(ws), "name": "ws"}],
                                           "initializationOptions": []}))
        assert "capabilities" in raw.answer(1)["result"]
        raw.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        raw.send(request(2, "ctxfs/tools", []))
        assert raw.answer(2)["result"]["tools"]
        raw.send(request(3, "ctxfs/openSession", []))
        session = raw.answer(3)["result"]["session"]
        raw.send(request(4, "ctxfs/openSession"))
        assert raw.answer(4)["result"]["session"]
        raw.send(request(5, "ctxfs/call", {"session": session, "tool": "list", "args": []}))
        answer = raw.answer(5)["result"]
        assert not answer["isError"] and "hello.txt" in answer["text"], answer
        raw.send(request(6, "shutdown"))
        assert raw.answer(6)["result"] is None
        raw.send({"jsonrpc": "2.0", "method": "exit"})
        assert raw.proc.wait(timeout=TIMEOUT) == 0
    finally:
        if raw.proc.poll() is None:
            raw.proc.kill()
            raw.proc.wait()


def test_a_session_reopens_after_a_restart(workspace):
    ws, data = workspace

    async def main():
        async with editor([ws], data) as ed:
            s = (await ed.open_session())["session"]
            first = await ed.ok(s, "read", {"file_path": "hello.txt"})
        async with editor([ws], data) as ed:
            opened = await ed.open_session(resume=s)
            assert opened["session"] == s and opened["resumed"] is True
            recalled = await ed.ok(s, "recall", {"id": first["id"]})
            assert "1: hello" in recalled["text"]
            assert recalled["id"] == "#0002"
            with pytest.raises(Exception, match="no session"):
                await ed.open_session(resume="nope-0-0")

    run(main())


def test_initialization_options_override_the_folders(workspace, tmp_path):
    ws, data = workspace
    tree = tmp_path / "tree"
    (tree / "docs").mkdir(parents=True)
    (tree / "docs" / "a.md").write_text("in the tree\n")
    (tree / "private.md").write_text("TOPSECRET\n")
    view = tmp_path / "view.json"
    view.write_text(json.dumps({"grants": {"/docs": "ro"}}))

    async def main():
        async with editor([ws], data, options={"tree": str(tree), "view": str(view), "start": "/docs", "host": "fresh"}) as ed:
            s = (await ed.open_session())["session"]
            assert "in the tree" in (await ed.ok(s, "read", {"file_path": "a.md"}))["text"]
            assert "TOPSECRET" not in (await ed.fails(s, "read", {"file_path": "/private.md"}))["text"]
            await ed.fails(s, "write", {"file_path": "/docs/b.md", "content": "x"})

    run(main())


class FakeEmbedder:
    """A llama.cpp-like embedding server on 127.0.0.1 (`/embedding`, and
    `/tokenize` with whitespace words as tokens) that records what it is asked."""

    def __init__(self):
        self.asked = []
        self.http = JsonServer(self.answer)
        self.url = self.http.base

    def answer(self, path, body):
        self.asked.append((path, body))
        content = body.get("content", "")
        if path == "/tokenize":
            return 200, {"tokens": [{"id": i, "piece": " " + w} for i, w in enumerate(content.split())]}
        return (200 if path == "/embedding" else 404), {"embedding": [len(content.split()), content.count("e"), 1.0]}

    def embedded(self) -> list[str]:
        return [body.get("content") for path, body in self.asked if path == "/embedding"]

    def close(self):
        self.http.close()


class SlowFakeEmbedder(FakeEmbedder):
    """The same server taking `delay` seconds an embedding, as a large model on a small machine does."""

    def __init__(self, delay):
        super().__init__()
        self.delay = delay

    def answer(self, path, body):
        if path == "/embedding":
            time.sleep(self.delay)
        return super().answer(path, body)


def test_a_slow_embedders_first_search_reports_its_words_then_its_embedding_as_one_percentage(workspace):
    """`$/progress` for a first search with a slow embedder: every file's words first (half of the
    bar once all are read), then the embedding, the percentage never going back."""
    ws, data = workspace
    for i in range(30):
        (ws / "src" / f"f{i:02d}.rs").write_text(f"fn upload_part_{i}() {{ send(); }}\n")
    server = SlowFakeEmbedder(delay=0.3)

    async def main():
        options = {"embedder": server.url, "progressAfterMs": 0}
        async with editor([ws], data, caps=capabilities(progress=True), options=options) as ed:
            s = (await ed.open_session())["session"]
            answer = await ed.ok(s, "search", {"query": "upload part"})
            assert "searched by their words alone" in answer["text"], answer["text"]
            for _ in range(200):
                reports = ed.client.progress_reports
                if reports and all(r and type(r[-1]).__name__ == "WorkDoneProgressEnd" for r in reports.values()):
                    break
                await asyncio.sleep(0.05)
            (steps,) = [[r for r in v if type(r).__name__ == "WorkDoneProgressReport"] for v in reports.values()]
            shown = [(r.percentage, r.message) for r in steps if r.message and r.message.startswith("indexing")]
            words = [i for i, (_, m) in enumerate(shown) if m.startswith("indexing words: ")]
            embedding = [i for i, (_, m) in enumerate(shown) if m.startswith("indexing: ")]
            assert words and embedding and words[-1] < embedding[0], shown
            assert shown[words[-1]][0] == 50, shown
            assert [p for p, _ in shown] == sorted(p for p, _ in shown), shown

    try:
        run(main())
    finally:
        server.close()


def test_the_embedder_in_initialization_options_wins_over_the_flag(workspace):
    ws, data = workspace
    server = FakeEmbedder()

    async def main():
        # `--embedder none` alone would send nothing anywhere: the option wins, as every option does.
        async with editor([ws], data, options={"embedder": server.url}, args=("--embedder", "none")) as ed:
            s = (await ed.open_session())["session"]
            answer = await ed.ok(s, "search", {"query": "greeting the planet"})
            assert "hello.txt" in answer["text"]
            embedded = server.embedded()
            assert "greeting the planet" in embedded, embedded
            assert "hello\nworld\n" in embedded, embedded
        # Not an embedder: initialize fails and says why.
        with pytest.raises(Exception, match="is not an embedder"):
            async with editor([ws], data, options={"embedder": "huge"}):
                pass

    try:
        run(main())
    finally:
        server.close()


# --- framing abuse, with raw pipes ---------------------------------------------

class Raw:
    def __init__(self, args):
        self.proc = subprocess.Popen([str(BIN), "lsp", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env={**os.environ, "CTXFS_LOG": os.environ.get("CTXFS_LOG", "info")})
        self.messages: queue.Queue = queue.Queue()
        self.answers: dict = {}
        threading.Thread(target=self._read, daemon=True).start()
        self.stderr: list[bytes] = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self):
        out = self.proc.stdout
        while True:
            header = b""
            while not header.endswith(b"\r\n\r\n"):
                byte = out.read(1)
                if not byte:
                    return
                header += byte
            length = int(header.split(b"Content-Length:")[1].split(b"\r\n")[0])
            self.messages.put(json.loads(out.read(length)))

    def write(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict):
        body = json.dumps(message).encode()
        self.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def answer(self, id_, timeout=TIMEOUT):
        """The answer to request `id_` (notifications are skipped, other answers kept)."""
        while id_ not in self.answers:
            message = self.messages.get(timeout=timeout)
            if "id" in message and "method" not in message:
                self.answers[message["id"]] = message
        return self.answers.pop(id_)


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def request(id_, method, params=None):
    message = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        message["params"] = params
    return message


def test_framing_abuse_is_answered_or_skipped_and_the_server_lives(workspace):
    ws, data = workspace
    raw = Raw(["--stdio"])
    try:
        raw.send(request(1, "initialize", {"processId": None, "capabilities": {},
                                           "workspaceFolders": [{"uri": uri(ws), "name": "ws"}],
                                           "initializationOptions": {"data": str(data)}}))
        assert "capabilities" in raw.answer(1)["result"]
        raw.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})

        # A Content-Length too long: noticed at the next header; both answered.
        body = json.dumps(request(2, "ctxfs/tools")).encode()
        raw.write(b"Content-Length: %d\r\n\r\n" % (len(body) + 400) + body + frame(request(3, "ctxfs/tools")))
        assert "tools" in raw.answer(3)["result"]
        assert "tools" in raw.answer(2)["result"]

        # A Content-Length too short: that message is skipped, the next answered.
        body = json.dumps(request(4, "ctxfs/tools")).encode()
        raw.write(b"Content-Length: 10\r\n\r\n" + body + frame(request(5, "ctxfs/tools")))
        assert "tools" in raw.answer(5)["result"]

        # A truncated body, then a valid message.
        raw.write(b"Content-Length: 200\r\n\r\n{\"jsonrpc\": \"2.0\", \"id\": 6, \"meth" + frame(request(7, "ctxfs/tools")))
        assert "tools" in raw.answer(7)["result"]

        # A huge header (1 MiB), skipped with its body.
        raw.write(b"Content-Length: 40\r\nX-Junk: " + b"a" * (1 << 20) + b"\r\n\r\n" + json.dumps(request(8, "ctxfs/tools")).encode()[:40])
        raw.send(request(9, "ctxfs/tools"))
        assert "tools" in raw.answer(9)["result"]

        # Garbage between messages, and a body that is JSON but not a message.
        raw.write(b"\x00\xffgarbage here\r\n\r\n{{{" + frame(request(10, "ctxfs/tools")) + b"more garbage")
        assert "tools" in raw.answer(10)["result"]
        raw.write(frame({"jsonrpc": "1.0", "id": 11, "method": "ctxfs/tools"}))
        assert raw.answer(11)["error"]["code"] == -32600
        raw.write(b"Content-Length: 9\r\n\r\nnot json!" + b"Content-Length: abc\r\n\r\n" + b"Content-Length: 5\r\n\r\n[1,2]")

        # An unknown method: "method not found"; a bad params shape: "invalid params".
        raw.send(request(12, "ctxfs/nope", {}))
        assert raw.answer(12)["error"]["code"] == -32601
        raw.send(request(13, "ctxfs/call", {"session": 5}))
        assert raw.answer(13)["error"]["code"] == -32602

        # Still serving: a session, a call.
        raw.send(request(14, "ctxfs/openSession", {}))
        session = raw.answer(14)["result"]["session"]
        raw.send(request(15, "ctxfs/call", {"session": session, "tool": "read", "args": {"file_path": "hello.txt"}}))
        assert "1: hello" in raw.answer(15)["result"]["text"]

        raw.send(request(16, "shutdown"))
        assert raw.answer(16)["result"] is None
        raw.send({"jsonrpc": "2.0", "method": "exit"})
        assert raw.proc.wait(timeout=TIMEOUT) == 0
        log = b"".join(raw.stderr).decode(errors="replace")
        assert "skipped" in log, log[-2000:]
    finally:
        if raw.proc.poll() is None:
            raw.proc.kill()
            raw.proc.wait()


def test_the_server_lives_through_a_client_that_leaves(workspace):
    ws, data = workspace
    raw = Raw([])
    raw.send(request(1, "initialize", {"processId": None, "capabilities": {},
                                       "workspaceFolders": [{"uri": uri(ws), "name": "ws"}],
                                       "initializationOptions": {"data": str(data)}}))
    raw.answer(1)
    raw.write(b"Content-Length: 100\r\n\r\n{\"half")
    raw.proc.stdin.close()
    assert raw.proc.wait(timeout=TIMEOUT) == 0


def test_a_new_session_indexes_what_changed_since_the_last_process(workspace):
    """An index an earlier editor process left is readied when a session opens: a file changed in
    between is in the index before any call, and the first search finds the change."""
    import hashlib
    import sqlite3

    ws, data = workspace
    (ws / "code").mkdir()
    for i in range(5):
        (ws / "code" / f"f{i}.rs").write_text(f"// marker{i}\nfn upload_part_{i}() {{ send(); }}\n")
    changed = b"// markernine\nfn upload_part_9() { send(); transfer(); }\n"

    def indexed_sha():
        """The content hash the index holds for code/f4.rs (None before there is one)."""
        for db in data.rglob("index.db"):
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                row = conn.execute("SELECT hex(blob) FROM files WHERE path LIKE '%/code/f4.rs'").fetchone()
                return row and row[0].lower()
        return None

    async def first_process():
        async with editor([ws], data) as ed:
            s = (await ed.open_session())["session"]
            await ed.ok(s, "search", {"query": "upload part"})

    async def second_process():
        async with editor([ws], data) as ed:
            await ed.open_session()
            # No call yet: the changed file is indexed in the background all the same.
            for _ in range(TIMEOUT * 10):
                if indexed_sha() == hashlib.sha256(changed).hexdigest():
                    break
                await asyncio.sleep(0.1)
            assert indexed_sha() == hashlib.sha256(changed).hexdigest(), "the change was not indexed before a call"
            s = (await ed.open_session())["session"]
            answer = await ed.ok(s, "search", {"query": "markernine"})
            assert "markernine" in answer["text"] and "not indexed yet" not in answer["text"], answer["text"]

    run(first_process())
    assert indexed_sha() == hashlib.sha256((ws / "code" / "f4.rs").read_bytes()).hexdigest()
    (ws / "code" / "f4.rs").write_bytes(changed)
    run(second_process())

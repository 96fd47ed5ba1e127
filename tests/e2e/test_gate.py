"""End-to-end: the gate over MCP, with the official Python SDK.

A client with an `elicitation_callback` declares the elicitation capability:
ctxfs asks it before each change (mode ask) with `elicitation/create`, a form
with one required choice `decision`. A client without one cannot be asked:
the session's mode decides alone, and a refusal says why.

Run: CTXFS_BIN=target/debug/ctxfs python3 -m pytest -q tests/e2e/test_gate.py
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp import types
from mcp.client import session as client_session
from mcp.client.stdio import stdio_client
from mcp.shared.message import SessionMessage

from conftest import BIN, TIMEOUT

ALL_OPTIONS = ["allow_once", "allow_session", "always_file", "always_directory", "deny"]


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "todo.md").write_text("buy milk\nwalk\n")
    config = tmp_path / "config"
    config.mkdir()
    return ws, tmp_path / "data", config


class User:
    """Answers prompts from a list, and keeps what it was asked."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.asked: list = []

    async def __call__(self, context, params):
        self.asked.append(params)
        answer = self.answers.pop(0)
        if answer in ("decline", "cancel"):
            return types.ElicitResult(action=answer)
        return types.ElicitResult(action="accept", content={"decision": answer})


@asynccontextmanager
async def connect(ws, data, config, tmp_path, mode=None, user=None, extra=(), tap=None):
    """A session with ctxfs; `tap` is given every message ctxfs sends, as JSON, before the SDK reads it."""
    args = ["mcp", "--root", str(ws), "--data", str(data), "--config", str(config), *extra]
    if mode:
        args += ["--mode", mode]
    params = StdioServerParameters(command=str(BIN), args=args, env={"CTXFS_LOG": "info"})
    kwargs = {"elicitation_callback": user} if user else {}
    with open(tmp_path / "stderr.log", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (incoming, outgoing):
            async with anyio.create_task_group() as tasks:
                if tap:
                    relay_in, read_stream = anyio.create_memory_object_stream(100)

                    async def relay():
                        async with relay_in:
                            async for item in incoming:
                                if isinstance(item, SessionMessage):
                                    tap(item.message.model_dump(by_alias=True, exclude_unset=True))
                                await relay_in.send(item)

                    tasks.start_soon(relay)
                else:
                    read_stream = incoming
                async with ClientSession(read_stream, outgoing, **kwargs) as session:
                    with anyio.fail_after(TIMEOUT):
                        session.init_result = await session.initialize()
                    yield session
                tasks.cancel_scope.cancel()


def text_of(result) -> str:
    assert result.content, result
    return result.content[0].text


async def call(session, name, arguments):
    with anyio.fail_after(TIMEOUT):
        return await session.call_tool(name, arguments)


def choices(params) -> list[str]:
    schema = params.requested_schema
    schema = schema if isinstance(schema, dict) else schema.model_dump(by_alias=True)
    return [c["const"] for c in schema["properties"]["decision"]["oneOf"]]


def test_the_default_mode_asks_and_allow_once_lets_one_change_run(workspace, tmp_path):
    ws, data, config = workspace
    user = User("allow_once", "allow_once")

    async def main():
        async with connect(ws, data, config, tmp_path, user=user) as session:
            instructions = session.init_result.instructions
            assert "the user approves each change" in instructions, instructions
            read = await call(session, "read", {"file_path": "notes/todo.md"})
            assert not read.is_error and not user.asked, "reads never ask"
            edited = await call(session, "edit", {"file_path": "notes/todo.md", "old_string": "milk", "new_string": "bread"})
            assert not edited.is_error, text_of(edited)
            assert len(user.asked) == 1
            prompt = user.asked[0]
            assert prompt.message.startswith("Allow ctxfs to replace 1 occurrence in notes/todo.md"), prompt.message
            assert "-buy milk" in prompt.message and "+buy bread" in prompt.message, prompt.message
            assert choices(prompt) == ALL_OPTIONS
            # Allow once is once: the next change asks again.
            written = await call(session, "write", {"file_path": "notes/new.md", "content": "x\n"})
            assert not written.is_error, text_of(written)
            assert len(user.asked) == 2

    anyio.run(main)
    assert (ws / "notes" / "todo.md").read_text() == "buy bread\nwalk\n"
    assert (ws / "notes" / "new.md").read_text() == "x\n"


def test_deny_and_decline_change_nothing(workspace, tmp_path):
    ws, data, config = workspace
    user = User("deny", "decline", "cancel")

    async def main():
        async with connect(ws, data, config, tmp_path, mode="ask", user=user) as session:
            denied = await call(session, "write", {"file_path": "notes/new.md", "content": "x\n"})
            assert denied.is_error
            assert "Not changed: the user declined" in text_of(denied), text_of(denied)
            declined = await call(session, "rm", {"path": "notes/todo.md"})
            assert declined.is_error and "the user declined" in text_of(declined)
            assert "move notes/todo.md to the trash" in user.asked[1].message
            cancelled = await call(session, "mv", {"source": "notes/todo.md", "destination": "todo.md"})
            assert cancelled.is_error and "got no answer" in text_of(cancelled), text_of(cancelled)
            assert user.asked[2].message.startswith("Allow ctxfs to move notes/todo.md to todo.md?")
            # At the root there is no directory to offer.
            assert choices(user.asked[2]) == ["allow_once", "allow_session", "always_file", "deny"]

    anyio.run(main)
    assert not (ws / "notes" / "new.md").exists()
    assert (ws / "notes" / "todo.md").exists()
    assert not (ws / "todo.md").exists()


def test_always_allow_the_directory_is_remembered(workspace, tmp_path):
    ws, data, config = workspace
    user = User("always_directory")

    async def main():
        async with connect(ws, data, config, tmp_path, user=user) as session:
            first = await call(session, "write", {"file_path": "notes/a.md", "content": "a\n"})
            assert not first.is_error, text_of(first)
        # A new server over the same data directory: the grant still holds.
        async with connect(ws, data, config, tmp_path, user=user) as session:
            second = await call(session, "write", {"file_path": "notes/b.md", "content": "b\n"})
            assert not second.is_error, text_of(second)
            assert len(user.asked) == 1, "notes/* covers notes/b.md"

    anyio.run(main)
    grants = json.loads((data / "grants.json").read_text())
    assert grants["projects"][str(ws.resolve())] == [{"kind": "file", "target": "notes/*"}]


def test_a_client_without_elicitation_gets_refusals_that_say_why(workspace, tmp_path):
    ws, data, config = workspace

    async def main():
        async with connect(ws, data, config, tmp_path) as session:
            # The model is told from the start that nobody can approve (issue 13, item 11).
            instructions = session.init_result.instructions
            assert "this client shows no approval prompts" in instructions, instructions
            assert "the user approves each change" not in instructions, instructions
            refused = await call(session, "write", {"file_path": "notes/new.md", "content": "x\n"})
            assert refused.is_error
            text = text_of(refused)
            assert "(mode ask)" in text and "cannot ask" in text, text
            assert "--mode accept-edits" in text, text
            # Where the rules go, by their paths.
            assert f"{config / 'rules.json'} (every project)" in text, text
            assert f"{data / 'projects'}/" in text and "rules.json (this project only)" in text, text
            read = await call(session, "read", {"file_path": "notes/todo.md"})
            assert not read.is_error, "reads need no approval"
        async with connect(ws, data, config, tmp_path, mode="accept-edits") as session:
            written = await call(session, "write", {"file_path": "notes/new.md", "content": "x\n"})
            assert not written.is_error, text_of(written)
        async with connect(ws, data, config, tmp_path, mode="read-only") as session:
            refused = await call(session, "rm", {"path": "notes/new.md"})
            assert refused.is_error and "(mode read-only)" in text_of(refused)

    anyio.run(main)
    assert (ws / "notes" / "new.md").read_text() == "x\n"


def test_an_allow_rule_needs_no_prompt_and_a_deny_rule_wins(workspace, tmp_path):
    ws, data, config = workspace
    (config / "rules.json").write_text(json.dumps({"allow": {"write": ["notes/*"]}, "deny": {"*": ["notes/secret*"]}}))
    user = User()

    async def main():
        async with connect(ws, data, config, tmp_path, user=user) as session:
            allowed = await call(session, "write", {"file_path": "notes/ok.md", "content": "x\n"})
            assert not allowed.is_error, text_of(allowed)
            denied = await call(session, "write", {"file_path": "notes/secret.md", "content": "x\n"})
            assert denied.is_error and "a deny rule in the user's rules.json" in text_of(denied), text_of(denied)
            assert not user.asked

    anyio.run(main)
    assert not (ws / "notes" / "secret.md").exists()


def test_an_unanswered_prompt_times_out_into_a_refusal(workspace, tmp_path):
    ws, data, config = workspace

    async def never(context, params):
        await anyio.sleep(30)
        return types.ElicitResult(action="accept", content={"decision": "allow_once"})

    async def main():
        async with connect(ws, data, config, tmp_path, user=never, extra=["--approval-timeout", "1"]) as session:
            refused = await call(session, "write", {"file_path": "notes/new.md", "content": "x\n"})
            assert refused.is_error
            assert "nobody answered the prompt" in text_of(refused), text_of(refused)
            # The session goes on.
            read = await call(session, "read", {"file_path": "notes/todo.md"})
            assert not read.is_error

    anyio.run(main)
    assert not (ws / "notes" / "new.md").exists()


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_elicitation_takes_the_form_of_the_negotiated_protocol_version(workspace, tmp_path, monkeypatch, version):
    """Each version gets the prompt its schema defines, and one without elicitation none (issue 13, item 14)."""
    ws, data, config = workspace
    monkeypatch.setattr(client_session, "LATEST_HANDSHAKE_VERSION", version)
    user = User("allow_once")
    sent = []

    async def main():
        async with connect(ws, data, config, tmp_path, user=user, tap=sent.append) as session:
            assert session.init_result.protocol_version == version
            read = await call(session, "read", {"file_path": "notes/todo.md"})
            assert not read.is_error, text_of(read)
            edited = await call(session, "edit", {"file_path": "notes/todo.md", "old_string": "milk", "new_string": "bread"})
            return session.init_result.instructions, edited

    instructions, edited = anyio.run(main)
    asked = [m for m in sent if m.get("method") == "elicitation/create"]
    if version in ("2024-11-05", "2025-03-26"):
        # No elicitation in these versions: never asked, told so from the start, refused with why.
        assert not asked and not user.asked, asked
        assert "this client shows no approval prompts" in instructions, instructions
        assert edited.is_error and "cannot ask" in text_of(edited), text_of(edited)
        assert (ws / "notes" / "todo.md").read_text() == "buy milk\nwalk\n"
        return
    assert len(asked) == 1 and len(user.asked) == 1, sent
    assert not edited.is_error, text_of(edited)
    params = asked[0]["params"]
    decision = params["requestedSchema"]["properties"]["decision"]
    assert decision["type"] == "string" and params["requestedSchema"]["required"] == ["decision"]
    labels = ["Allow once", "Allow notes/todo.md for this session"]
    if version == "2025-06-18":
        # 2025-06-18's EnumSchema: enum and enumNames; no mode, no oneOf, no title on the requested schema.
        assert "mode" not in params, params
        assert "oneOf" not in decision and "title" not in params["requestedSchema"], params
        assert decision["enum"] == ALL_OPTIONS, decision
        assert len(decision["enumNames"]) == len(ALL_OPTIONS) and decision["enumNames"][:2] == labels, decision
    else:
        # 2025-11-25: form mode, a titled single-select enum (oneOf of const and title).
        assert params["mode"] == "form", params
        assert "enum" not in decision and "enumNames" not in decision, decision
        assert [c["const"] for c in decision["oneOf"]] == ALL_OPTIONS, decision
        assert [c["title"] for c in decision["oneOf"]][:2] == labels, decision
    assert (ws / "notes" / "todo.md").read_text() == "buy bread\nwalk\n"

"""End-to-end: the gate over LSP, with a pytest-lsp client as the editor.

In mode ask (the default) every change asks the user first: ctxfs sends a
`ctxfs/approvalRequest` notification (the request as data) and then
`window/showMessageRequest` (type Warning, one button per answer). The
client here answers those prompts each way, late, or not at all.

Run: CTXFS_BIN=target/debug/ctxfs python3 -m pytest -q tests/e2e/test_lsp_gate.py
"""

from __future__ import annotations

import asyncio
import json

import pytest
from lsprotocol import types

import test_lsp as base

TIMEOUT = base.TIMEOUT
# "For this session" covers only the paths asked about, and says which (issue 13, item 18).
ALL_BUTTONS = ["Allow once", "Allow notes/todo.md for this session", "Always allow notes/todo.md", "Always allow notes/*", "Deny"]


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "todo.md").write_text("buy milk\nwalk\n")
    (ws / "top.md").write_text("top\n")
    config = tmp_path / "config"
    config.mkdir()
    return ws, tmp_path / "data", config


class User:
    """The user at the editor: answers prompts from a list of button titles
    (None: closes the prompt; a number: answers "Allow once" that many
    seconds late; an asyncio.Event: answers "Allow once" when it is set),
    and keeps what it was asked and told, in order."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.prompts: list[types.ShowMessageRequestParams] = []
        self.notices: list[dict] = []
        self.events: list[str] = []

    def attach(self, client):
        @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
        async def on_prompt(params: types.ShowMessageRequestParams):
            self.prompts.append(params)
            self.events.append("prompt")
            assert self.answers, f"an unexpected prompt: {params.message}"
            answer = self.answers.pop(0)
            if isinstance(answer, (int, float)):
                await asyncio.sleep(answer)
                answer = "Allow once"
            elif isinstance(answer, asyncio.Event):
                await answer.wait()
                answer = "Allow once"
            if answer is None:
                return None
            titles = [a.title for a in params.actions or []]
            assert answer in titles, (answer, titles)
            return types.MessageActionItem(title=answer)

        @client.feature("ctxfs/approvalRequest")
        def on_notice(params):
            self.notices.append(base.plain(params))
            self.events.append("notice")

    @property
    def asked(self) -> int:
        return len(self.prompts)

    def buttons(self, n=-1) -> list[str]:
        return [a.title for a in self.prompts[n].actions]


def editor(ws, data, config, user=None, *, mode=None, options=None, **kwargs):
    """`ctxfs lsp` on `ws`, sessions in `mode` (None: the server's default)."""
    return base.editor([ws], data, mode=mode, options={"config": str(config), **(options or {})},
                       on_client=user.attach if user else None, **kwargs)


def run(coro):
    base.run(coro)


def test_allow_once_lets_one_change_run_and_asks_again(workspace):
    ws, data, config = workspace
    user = User("Allow once", "Allow once", "Allow once")
    todo = ws / "notes" / "todo.md"

    async def main():
        async with editor(ws, data, config, user) as ed:
            s = (await ed.open_session())["session"]
            assert "mode ask" in (await ed.request("ctxfs/openSession", {"resume": s}))["instructions"]
            await ed.ok(s, "read", {"file_path": "notes/todo.md"})
            assert user.asked == 0, "reads never ask"
            await ed.ok(s, "edit", {"file_path": "notes/todo.md", "old_string": "milk", "new_string": "bread"})
            assert todo.read_text() == "buy bread\nwalk\n"
            assert user.asked == 1
            prompt = user.prompts[0]
            assert prompt.type == types.MessageType.Warning
            assert prompt.message.startswith("Allow ctxfs to replace 1 occurrence in notes/todo.md (+1 −1 lines)?"), prompt.message
            assert "-buy milk" in prompt.message and "+buy bread" in prompt.message, prompt.message
            assert user.buttons(0) == ALL_BUTTONS
            # The same request as data, just before the prompt.
            assert user.events == ["notice", "prompt"]
            notice = user.notices[0]
            assert notice["session"] == s and notice["tool"] == "edit" and notice["mode"] == "ask"
            assert notice["paths"] == ["notes/todo.md"] and notice["message"] == prompt.message
            assert "+buy bread" in notice["summary"] and notice["timeoutMs"] == 120000
            assert [o["approval"] for o in notice["options"]] == [
                "allow_once", "allow_session", "always_file", "always_directory", "deny"]
            assert [o["label"] for o in notice["options"]] == ALL_BUTTONS
            assert notice["options"][3]["targets"] == ["notes/*"]
            # Once is once: the next change asks again.
            await ed.ok(s, "write", {"file_path": "notes/new.md", "content": "x\n"})
            assert user.asked == 2 and (ws / "notes" / "new.md").read_text() == "x\n"
            # An approved change to an open file still goes through the editor.
            ed.open(todo, "buy bread\nwalk\n// unsaved\n")
            await ed.ok(s, "read", {"file_path": "notes/todo.md"})
            await ed.ok(s, "edit", {"file_path": "notes/todo.md", "old_string": "walk", "new_string": "run"})
            assert user.asked == 3 and len(ed.edits) == 1
            assert ed.text(todo) == "buy bread\nrun\n// unsaved\n" and todo.read_text() == "buy bread\nwalk\n"
            assert await ed.request("ctxfs/grants", {"session": s}) == {"grants": []}

    run(main())


def test_deny_and_a_closed_prompt_change_nothing(workspace):
    ws, data, config = workspace
    user = User("Deny", None, "Deny")

    async def main():
        async with editor(ws, data, config, user) as ed:
            s = (await ed.open_session())["session"]
            denied = await ed.fails(s, "write", {"file_path": "notes/new.md", "content": "x\n"})
            assert "Not changed: the user declined" in denied["text"], denied["text"]
            closed = await ed.fails(s, "rm", {"path": "notes/todo.md"})
            assert "got no answer (the user closed the prompt)" in closed["text"], closed["text"]
            assert "move notes/todo.md to the trash" in user.prompts[1].message
            # A file at the root: no directory to offer.
            await ed.ok(s, "read", {"file_path": "top.md"})
            await ed.fails(s, "edit", {"file_path": "top.md", "old_string": "top", "new_string": "bottom"})
            assert user.buttons() == ["Allow once", "Allow top.md for this session", "Always allow top.md", "Deny"]
            assert [o["approval"] for o in user.notices[-1]["options"]] == ["allow_once", "allow_session", "always_file", "deny"]
            assert user.asked == 3

    run(main())
    assert not (ws / "notes" / "new.md").exists()
    assert (ws / "notes" / "todo.md").read_text() == "buy milk\nwalk\n"
    assert (ws / "top.md").read_text() == "top\n"


def test_always_allow_the_file_is_remembered_and_revocable(workspace):
    ws, data, config = workspace
    user = User("Always allow notes/todo.md", "Deny", "Allow once")

    async def main():
        async with editor(ws, data, config, user) as ed:
            s = (await ed.open_session())["session"]
            await ed.ok(s, "read", {"file_path": "notes/todo.md"})
            await ed.ok(s, "edit", {"file_path": "notes/todo.md", "old_string": "milk", "new_string": "bread"})
            await ed.ok(s, "edit", {"file_path": "notes/todo.md", "old_string": "walk", "new_string": "run"})
            assert user.asked == 1, "the second write of the file asks nothing"
            # The file, not its directory.
            await ed.fails(s, "write", {"file_path": "notes/other.md", "content": "x\n"})
            assert user.asked == 2
            grants = await ed.request("ctxfs/grants", {"session": s})
            assert grants == {"grants": [{"target": "notes/todo.md", "scope": "always"}]}
        # A new server over the same data directory: still granted.
        async with editor(ws, data, config, user) as ed:
            s = (await ed.open_session())["session"]
            await ed.ok(s, "read", {"file_path": "notes/todo.md"})
            await ed.ok(s, "write", {"file_path": "notes/todo.md", "content": "rewritten\n"})
            assert user.asked == 2
            revoked = await ed.request("ctxfs/grants", {"session": s, "revoke": "notes/todo.md"})
            assert revoked == {"grants": [], "revoked": 1}
            await ed.ok(s, "write", {"file_path": "notes/todo.md", "content": "again\n"})
            assert user.asked == 3, "revoked: it asks again"

    run(main())
    assert (ws / "notes" / "todo.md").read_text() == "again\n"
    assert not (ws / "notes" / "other.md").exists()
    assert json.loads((data / "grants.json").read_text())["projects"].get(str(ws.resolve()), []) == []


def test_always_allow_the_directory_and_allow_for_the_session(workspace):
    ws, data, config = workspace
    user = User("Always allow notes/*", "Allow top.md for this session", "Deny")

    async def main():
        async with editor(ws, data, config, user) as ed:
            s = (await ed.open_session())["session"]
            await ed.ok(s, "write", {"file_path": "notes/a.md", "content": "a\n"})
            assert user.buttons(0)[3] == "Always allow notes/*"
            await ed.ok(s, "write", {"file_path": "notes/b.md", "content": "b\n"})
            assert user.asked == 1, "notes/* covers notes/b.md"
            # For this session only.
            await ed.ok(s, "read", {"file_path": "top.md"})
            await ed.ok(s, "edit", {"file_path": "top.md", "old_string": "top", "new_string": "TOP"})
            await ed.ok(s, "edit", {"file_path": "top.md", "old_string": "TOP", "new_string": "Top"})
            assert user.asked == 2
            grants = (await ed.request("ctxfs/grants", {"session": s}))["grants"]
            assert grants == [{"target": "top.md", "scope": "session"}, {"target": "notes/*", "scope": "always"}]
            other = (await ed.open_session())["session"]
            await ed.ok(other, "read", {"file_path": "top.md"})
            await ed.fails(other, "edit", {"file_path": "top.md", "old_string": "Top", "new_string": "no"})
            assert user.asked == 3, "another session asks again"
            await ed.ok(other, "write", {"file_path": "notes/c.md", "content": "c\n"})
            assert user.asked == 3
            # `*` revokes them all.
            assert await ed.request("ctxfs/grants", {"session": s, "revoke": "*"}) == {"grants": [], "revoked": 2}

    run(main())
    assert (ws / "top.md").read_text() == "Top\n"
    assert {p.name for p in (ws / "notes").iterdir()} == {"todo.md", "a.md", "b.md", "c.md"}


def test_an_unanswered_prompt_times_out_into_a_refusal(workspace):
    ws, data, config = workspace
    # Answers 1.5 s late (after the gate gave up, before ctxfs stops waiting), then 2.5 s late.
    user = User(1.5, 2.5)

    async def main():
        async with editor(ws, data, config, user, options={"approvalTimeout": 1}) as ed:
            s = (await ed.open_session())["session"]
            loop = asyncio.get_running_loop()
            for name in ("new.md", "other.md"):
                started = loop.time()
                refused = await ed.fails(s, "write", {"file_path": f"notes/{name}", "content": "x\n"})
                assert f"nobody answered the prompt to create notes/{name} (1 line) within 1 second" in refused["text"], refused["text"]
                assert loop.time() - started < 1.8
                # The session goes on.
                await ed.ok(s, "read", {"file_path": "notes/todo.md"})
            assert user.notices[0]["timeoutMs"] == 1000
            # A button pressed late is told it came too late.
            late = lambda: [m.message for m in ed.client.messages if "came too late" in m.message]
            for _ in range(100):
                if len(late()) == 2:
                    break
                await asyncio.sleep(0.05)
            assert len(late()) == 2, ed.client.messages
            assert '"Allow once" came too late' in late()[0] and "nothing was changed" in late()[0], late()

    run(main())
    assert not (ws / "notes" / "new.md").exists() and not (ws / "notes" / "other.md").exists()


def test_modes_read_only_and_trust_and_set_mode(workspace):
    ws, data, config = workspace
    user = User("Allow once")

    async def main():
        async with editor(ws, data, config, user, mode="read-only") as ed:
            s = (await ed.open_session())["session"]
            refused = await ed.fails(s, "write", {"file_path": "notes/new.md", "content": "x\n"})
            assert "(mode read-only)" in refused["text"], refused["text"]
            await ed.ok(s, "read", {"file_path": "notes/todo.md"})
        # The flag, overridden by initializationOptions.
        async with editor(ws, data, config, user, mode="trust", args=["--mode", "read-only"]) as ed:
            s = (await ed.open_session())["session"]
            await ed.ok(s, "write", {"file_path": "notes/new.md", "content": "x\n"})
            await ed.ok(s, "rm", {"path": "notes/new.md"})
        async with editor(ws, data, config, user, args=["--mode", "read-only"]) as ed:
            s = (await ed.open_session())["session"]
            assert "(mode read-only)" in (await ed.fails(s, "mkdir", {"path": "made"}))["text"]
            # The front door changes a session's mode.
            changed = await ed.request("ctxfs/setMode", {"session": s, "mode": "ask"})
            assert changed["mode"] == "ask" and changed["previous"] == "read-only"
            assert "(mode ask)" in changed["instruction"]
            await ed.ok(s, "mkdir", {"path": "made"})
            assert user.asked == 1
            changed = await ed.request("ctxfs/setMode", {"session": s, "mode": "trust"})
            assert changed["instruction"] is None
            await ed.ok(s, "write", {"file_path": "made/x.md", "content": "x\n"})
            with pytest.raises(Exception, match="yolo"):
                await ed.request("ctxfs/setMode", {"session": s, "mode": "yolo"})
            with pytest.raises(Exception, match="no session"):
                await ed.request("ctxfs/setMode", {"session": "nope", "mode": "trust"})
        assert user.asked == 1 and not user.answers

    run(main())
    assert not (ws / "notes" / "new.md").exists()
    assert (ws / "made" / "x.md").read_text() == "x\n"


def test_a_bad_approval_timeout_fails_initialize(workspace):
    ws, data, config = workspace

    async def main():
        with pytest.raises(Exception, match="approvalTimeout"):
            async with editor(ws, data, config, options={"approvalTimeout": -1}):
                pass

    run(main())


def test_an_open_prompt_stalls_nothing_else(workspace):
    ws, data, config = workspace
    todo = ws / "notes" / "todo.md"

    async def main():
        answer = asyncio.Event()
        user = User(answer)
        async with editor(ws, data, config, user) as ed:
            s = (await ed.open_session())["session"]
            other = (await ed.open_session())["session"]
            ed.open(todo, "buy milk\nwalk\n")
            pending = asyncio.ensure_future(ed.call(s, "write", {"file_path": "notes/new.md", "content": "x\n"}))
            for _ in range(200):
                if user.asked:
                    break
                await asyncio.sleep(0.02)
            assert user.asked == 1
            # While the prompt is open: buffers change, other sessions run, the server answers.
            ed.type(todo, (1, 0), (1, 4), "run")
            read = await ed.ok(other, "read", {"file_path": "notes/todo.md"})
            assert "2: run" in read["text"], read["text"]
            for _ in range(20):
                await ed.ok(other, "grep", {"pattern": "run", "path": "notes"})
            assert (await ed.request("ctxfs/grants", {"session": s})) == {"grants": []}
            assert (await ed.request("ctxfs/setMode", {"session": other, "mode": "ask"}))["previous"] == "ask"
            assert (await ed.request("ctxfs/tools"))["tools"]
            assert not pending.done()
            answer.set()
            written = await pending
            assert not written["isError"], written["text"]
            assert (ws / "notes" / "new.md").read_text() == "x\n"

    run(main())

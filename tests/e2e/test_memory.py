"""End-to-end: the memory tool over `ctxfs mcp`, across processes, with the official Python SDK.

What one server process keeps, the next one over the same data directory starts with (in the
`initialize` result's instructions) and can search and change; two processes open at once see
each other's records; another project sees only the user's. A change asks the user in mode ask.

Run: CTXFS_BIN=target/debug/ctxfs python3 -m pytest -q tests/e2e/test_memory.py
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp import types
from mcp.client.stdio import stdio_client

from conftest import BIN, TIMEOUT


@pytest.fixture
def dirs(tmp_path):
    one = tmp_path / "one"
    two = tmp_path / "two"
    for project in (one, two):
        project.mkdir()
        (project / "README.md").write_text(f"{project.name}\n")
    config = tmp_path / "config"
    config.mkdir()
    return one, two, tmp_path / "data", config


@asynccontextmanager
async def server(root, data, config, tmp_path, mode="trust", user=None):
    args = ["mcp", "--root", str(root), "--data", str(data), "--config", str(config), "--mode", mode]
    params = StdioServerParameters(command=str(BIN), args=args, env={"CTXFS_LOG": "info"})
    kwargs = {"elicitation_callback": user} if user else {}
    with open(tmp_path / "stderr.log", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as streams:
            async with ClientSession(streams[0], streams[1], **kwargs) as session:
                with anyio.fail_after(TIMEOUT):
                    session.init_result = await session.initialize()
                yield session


async def memory(session, **arguments) -> str:
    with anyio.fail_after(TIMEOUT):
        result = await session.call_tool("memory", arguments)
    text = result.content[0].text
    assert not result.is_error, text
    return text


async def refused(session, **arguments) -> str:
    with anyio.fail_after(TIMEOUT):
        result = await session.call_tool("memory", arguments)
    assert result.is_error, result.content[0].text
    return result.content[0].text


def test_memory_outlasts_the_process_and_starts_the_next_session(dirs, tmp_path):
    one, two, data, config = dirs

    async def main():
        async with server(one, data, config, tmp_path) as first:
            assert "Memory: no records yet." in first.init_result.instructions
            tools = await first.list_tools()
            tool = next(t for t in tools.tools if t.name == "memory")
            assert tool.annotations.read_only_hint is False and tool.annotations.destructive_hint is True
            assert "at most 1,000 characters" in tool.description
            assert "Remembered as m1 in project memory" in await memory(
                first, action="add", text="Run the tests with `make check`."
            )
            assert "Remembered as m2 in user memory" in await memory(
                first, action="add", scope="user", text="The user wants short answers."
            )
        # A new process over the same data directory: the records are in its instructions.
        async with server(one, data, config, tmp_path) as second:
            instructions = second.init_result.instructions
            assert "- m1: Run the tests with `make check`." in instructions, instructions
            assert "- m2: The user wants short answers." in instructions, instructions
            found = await memory(second, action="search", query="how to run tests")
            assert found.splitlines()[2] == "- m1 (project): Run the tests with `make check`.", found
            assert "Removed m1" in await memory(second, action="remove", id="m1")
            assert "Remembered as m3 " in await memory(second, action="add", text="Tests run with `make check`.")
        # Another project shares the user's memory and nothing of the first project's.
        async with server(two, data, config, tmp_path) as other:
            instructions = other.init_result.instructions
            assert "- m2: The user wants short answers." in instructions, instructions
            assert "make check" not in instructions, instructions
            assert "No memory record m3" in await refused(other, action="replace", id="m3", text="x")

    anyio.run(main)
    assert (data / "memory.db").is_file()


def test_two_processes_at_once_share_the_records(dirs, tmp_path):
    one, _, data, config = dirs

    async def main():
        async with server(one, data, config, tmp_path) as a, server(one, data, config, tmp_path) as b:
            for i in range(5):
                await memory(a, action="add", text=f"fact {i} from a")
                await memory(b, action="add", text=f"fact {i} from b")
            listing = await memory(a, action="list", scope="project")
            assert listing.startswith("[#") and "Project memory: 10 records" in listing, listing
            ids = [line.split(":")[0] for line in listing.splitlines() if line.startswith("- m")]
            assert ids == [f"- m{n}" for n in range(1, 11)], ids
            # Both fill one budget: a record that fits for neither is refused by both.
            big = "y" * 1000
            added = 0
            for _ in range(10):
                for session in (a, b):
                    with anyio.fail_after(TIMEOUT):
                        result = await session.call_tool("memory", {"action": "add", "text": f"{added} {big}"[:1000]})
                    if not result.is_error:
                        added += 1
                    else:
                        assert "Not remembered: project memory holds" in result.content[0].text
            total = await memory(b, action="list", scope="project")
            used = int(total.splitlines()[1].split(", ")[1].split(" of ")[0].replace(",", ""))
            assert used <= 10_000, total

    anyio.run(main)


def test_a_change_to_memory_asks_in_mode_ask(dirs, tmp_path):
    one, _, data, config = dirs
    asked = []

    async def user(context, params):
        asked.append(params)
        return types.ElicitResult(action="accept", content={"decision": "allow_once" if len(asked) == 1 else "deny"})

    async def main():
        async with server(one, data, config, tmp_path, mode="ask", user=user) as session:
            await memory(session, action="list")
            assert not asked, "a look-up never asks"
            assert "Remembered as m1" in await memory(session, action="add", text="Prefer rebase to merge.")
            assert asked[0].message.startswith("Allow ctxfs to add a record to project memory?"), asked[0].message
            assert "Prefer rebase to merge." in asked[0].message
            text = await refused(session, action="remove", id="m1")
            assert text.endswith("Not changed: the user declined to let this session remove m1 from project memory. "
                                 "Ask the user before trying it another way."), text
        async with server(one, data, config, tmp_path, mode="read-only") as session:
            text = await refused(session, action="add", text="x")
            assert "this session is read-only (mode read-only), so it may not add a record to project memory" in text
            assert "- m1: Prefer rebase to merge." in await memory(session, action="list")

    anyio.run(main)


def test_search_ranks_by_meaning_once_the_index_has_its_embedder(dirs, tmp_path):
    """Memory search uses the search index's embedder when a search has loaded it (the static
    table of `scripts/build-embedder`): a query sharing no word with a record still finds it."""
    one, _, data, config = dirs

    async def main():
        async with server(one, data, config, tmp_path) as session:
            await memory(session, action="add", scope="user", text="User writes British English; keep answers short.")
            await memory(session, action="add", text="Prefer `uv run` over bare python in this repo.")
            query = "which language variety should replies use"
            assert "No memory records match" in await memory(session, action="search", query=query)
            with anyio.fail_after(TIMEOUT):
                searched = await session.call_tool("search", {"query": "readme"})
            assert not searched.is_error, searched.content[0].text
            found = await memory(session, action="search", query=query)
            assert found.splitlines()[2] == "- m1 (user): User writes British English; keep answers short.", found

    anyio.run(main)

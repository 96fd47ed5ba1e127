"""What every end-to-end test file shares: where the ctxfs binary is, how long to wait, and the check that it exists.

Builds nothing: the binary comes from $CTXFS_BIN (default target/debug/ctxfs, relative to
the repository); $CTXFS_E2E_TIMEOUT (seconds, default 60) bounds each wait for an answer.
"""

import os
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

#!/usr/bin/env python3
"""Runs the Neovim plugin's headless tests: one `nvim --headless -l` per test file, each with its
own XDG_* and HOME folders, in its own process group, which is checked empty (no editor, no ctxfs
server left) and killed after the test, pass or fail. It does not install anything: the caller
(scripts/test-neovim) passes NVIM and CTXFS_BIN.

Usage: run.py [--nvim PATH] [--ctxfs PATH] [test_name ...]
"""

import argparse
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
PLUGIN = HERE.parent
TIMEOUT = 240  # a safety net for a hung test, not a measurement


def alive_in_group(pgid):
    """The command lines of processes still in a process group (from /proc)."""
    left = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # Fields after the command name (which may hold spaces) start after the last ')'.
            fields = stat[stat.rindex(")") + 2 :].split()
            state, pgrp = fields[0], int(fields[2])
            if pgrp == pgid and state != "Z":
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                left.append(f"{entry.name}: {cmd}")
        except (OSError, ValueError):
            continue
    return left


def run_one(test, nvim, ctxfs, keep):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"ctxfs-nvim-{test.stem}-"))
    env = dict(os.environ)
    home = tmp / "home"
    for sub in ("home", "config", "data", "state", "cache", "runtime", "work"):
        (tmp / sub).mkdir()
    os.chmod(tmp / "runtime", 0o700)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(tmp / "config"),
        XDG_DATA_HOME=str(tmp / "data"),
        XDG_STATE_HOME=str(tmp / "state"),
        XDG_CACHE_HOME=str(tmp / "cache"),
        XDG_RUNTIME_DIR=str(tmp / "runtime"),
        CTXFS_TEST_TMP=str(tmp / "work"),
        CTXFS_BIN=str(ctxfs),
        CTXFS_PLUGIN=str(PLUGIN),
        CTXFS_LOG=env.get("CTXFS_LOG", "warn"),
    )
    cmd = [
        nvim,
        "--headless",
        "--clean",
        "--cmd",
        f"set rtp^={PLUGIN}",
        "-l",
        str(test),
    ]
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, cwd=tmp / "work", start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    pgid = proc.pid
    counts = {"passed": 0, "failed": 0}

    def pump():
        # The test's output, shown as it comes; its closing "N passed, N failed" is counted.
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            print(line, flush=True)
            found = re.match(r"^\s*(\d+) passed, (\d+) failed$", line)
            if found:
                counts["passed"], counts["failed"] = int(found[1]), int(found[2])

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        code = proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        timed_out = True
        code = None
    # Anything still in the group (the editor after a timeout, a server it did not end) is a failure.
    time.sleep(0.2)
    left = alive_in_group(pgid)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if timed_out:
        proc.wait()
    reader.join(timeout=5)
    seconds = time.monotonic() - started
    ok = code == 0 and not left and not timed_out
    if timed_out:
        print(f"FAIL {test.stem}: no end after {TIMEOUT} s (killed)")
    elif code != 0:
        print(f"FAIL {test.stem}: nvim exited with {code}")
    if left:
        print(f"FAIL {test.stem}: processes left running after the test (killed now):")
        for line in left:
            print("    " + line)
    if ok:
        print(f"ok   {test.stem} ({seconds:.1f} s)")
    if ok and not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"     kept {tmp} (the LSP log is in state/nvim/lsp.log)")
    # A file that failed without a failed test (a crash, a leftover process) counts as one failure.
    failed = counts["failed"] + (0 if ok or counts["failed"] else 1)
    return ok, counts["passed"], failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvim", default=os.environ.get("NVIM_BIN", "nvim"))
    parser.add_argument("--ctxfs", default=os.environ.get("CTXFS_BIN"))
    parser.add_argument("--keep", action="store_true", help="keep every test's folder")
    parser.add_argument("tests", nargs="*")
    args = parser.parse_args()
    nvim = shutil.which(args.nvim) or args.nvim
    if not os.access(nvim, os.X_OK):
        print(f"FAIL: no nvim at {args.nvim!r}: the Neovim tests need Neovim 0.11 (scripts/test-neovim installs it)")
        return 1
    version = (subprocess.run([nvim, "--version"], capture_output=True, text=True).stdout.splitlines() or [""])[0]
    parsed = re.match(r"NVIM v(\d+)\.(\d+)\.", version)
    if not parsed or (int(parsed[1]), int(parsed[2])) < (0, 11):
        print(f"FAIL: {nvim} is {version!r}, not Neovim 0.11 or newer")
        return 1
    if not args.ctxfs or not os.access(args.ctxfs, os.X_OK):
        print(f"FAIL: no ctxfs binary at {args.ctxfs!r} (set CTXFS_BIN or --ctxfs)")
        return 1
    ctxfs = pathlib.Path(args.ctxfs).resolve()
    tests = sorted(HERE.glob("test_*.lua"))
    if args.tests:
        tests = [t for t in tests if t.stem in args.tests or t.stem.removeprefix("test_") in args.tests]
        if not tests:
            print(f"FAIL: no test named {args.tests}")
            return 1
    print(f"Neovim plugin tests: {version}, ctxfs {ctxfs}")
    failed_files, passed, failed = [], 0, 0
    for test in tests:
        ok, p, f = run_one(test, nvim, ctxfs, args.keep)
        passed, failed = passed + p, failed + f
        if not ok:
            failed_files.append(test.stem)
    print(f"{len(tests) - len(failed_files)} of {len(tests)} test files passed" + (f"; failed: {', '.join(failed_files)}" if failed_files else ""))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed_files or failed else 0


if __name__ == "__main__":
    sys.exit(main())

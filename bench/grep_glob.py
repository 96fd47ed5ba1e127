#!/usr/bin/env python3
"""grep and glob over large real trees: `ctxfs call` against ripgrep.

Trees (both exist on a fresh machine of this kind once `cargo build` has
fetched the crate's dependencies):
  registry  ~/.cargo/registry/src: the sources of every crate fetched (Rust, Markdown, TOML...)
  docs      $(rustc --print sysroot)/share/doc: the toolchain's HTML docs (rust-docs component)

For each tree and case it prints the match totals of both (they must be
equal: the same files, the same lines), and the median wall time of
  ctxfs   `ctxfs call --root TREE grep|glob JSON` (a new process each time:
          process start, engine setup, the walk, the search, the answer)
  in-proc the same call through `Session::call` in one process (examples/bench_calls.rs)
  rg      ripgrep doing the same work (flags below)
and the ratios ctxfs/rg (target <= 1.3).

ripgrep is made to do what ctxfs does: `--no-require-git` (ctxfs honours
.gitignore outside repositories too), `--no-ignore-parent` and
`--no-ignore-global` (ctxfs reads no ignore file above the root nor git's
global excludes), `--no-config`, and `--count` (ctxfs's count output counts
matching lines, as `--count` does, not matches). Both skip hidden and binary
files. File-name filters on the rg side use `--type-add`, not `-g`, because
rg's `-g` overrides ignore files and ctxfs's glob does not.

Both write to a pipe that this script drains. Runs alternate between the two
tools, after one warm-up each (the page cache is warm for both).

    python3 bench/grep_glob.py [--runs 7] [--trees registry,docs]
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (OtherLoad, build, end, spawn, ensure_ripgrep, example_binary, fail_if, log, machine, revision, median,  # noqa: E402
                    table, wait_quiet)

RG_BASE = ["--no-config", "--no-require-git", "--no-ignore-parent", "--no-ignore-global"]

# (name, ctxfs grep arguments, rg flags and pattern)
GREP_CASES = [
    ("literal `unsafe`", {"pattern": "unsafe", "fixed_strings": True}, ["-F", "unsafe"]),
    ("regex `[A-Z][a-z]+Error\\b`", {"pattern": r"[A-Z][a-z]+Error\b"}, [r"[A-Z][a-z]+Error\b"]),
    ("-i `deprecated`", {"pattern": "deprecated", "ignore_case": True}, ["-i", "deprecated"]),
]


def trees():
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True).stdout.strip()
    return {
        "registry": (cargo_home / "registry" / "src", "*.rs"),
        "docs": (Path(sysroot) / "share" / "doc", "*.html"),
    }


def tree_size(path: Path):
    files, size = 0, 0
    for dirpath, _, names in os.walk(path):
        for n in names:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except OSError:
                continue
            files += 1
            size += st.st_size
    return files, size


def timed(cmd):
    start = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ms = (time.perf_counter() - start) * 1e3
    if p.returncode not in (0, 1):
        sys.exit(f"{cmd[0]} failed ({p.returncode}): {p.stderr.decode()[:500]}")
    return ms, p.stdout


def ctxfs_full_text(ctxfs, tree, data, tool, args):
    """The full (uncapped) text of one call: the call, then `recall` of its whole result,
    window by window, in one `ctxfs replay` session driven step by step."""
    config = os.path.join(data, "config")
    p = spawn([ctxfs, "replay", "--root", tree, "--data", data, "--config", config, "-"],
              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def step(call, call_args):
        p.stdin.write(json.dumps({"call": call, "args": call_args}) + "\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())

    try:
        first = step(tool, args)
        if first.get("is_error"):
            sys.exit(f"ctxfs {tool} failed: {first['text'][:500]}")
        rid = first["id"]
        lines, offset = [], 1
        while True:
            got = step("recall", {"id": rid, "offset": offset, "limit": 2000})
            head, _, body = got["text"].partition("\n")
            m = re.search(r"lines (\d+)-(\d+) of (\d+)\]", head)
            if got.get("is_error") or not m:
                sys.exit(f"ctxfs recall failed: {got['text'][:300]}")
            lines += body.splitlines()
            last, total = int(m.group(2)), int(m.group(3))
            if last >= total or last < offset:
                break
            offset = last + 1
    finally:
        end(p)
    # Older stores kept the result's own `[#0001]` line in the text.
    if lines and re.fullmatch(r"\[#[0-9a-f]+\]", lines[0]):
        lines = lines[1:]
    return "\n".join(lines)


def count_totals(lines):
    """(files, lines matched) from `path:N` lines."""
    files = total = 0
    for l in lines:
        if ":" in l:
            head, _, n = l.rpartition(":")
            if n.isdigit():
                files += 1
                total += int(n)
    return files, total


def in_process(tree, data, tool, args, runs):
    out = subprocess.run([str(example_binary()), "--root", tree, "--data", data, "--runs", str(runs),
                          "--warmup", "1", tool, json.dumps(args)], capture_output=True, check=True)
    r = json.loads(out.stdout)
    return median(r["times_ms"]), r["setup_ms"]


def bench_pair(ctxfs_cmd, rg_cmd, runs):
    timed(ctxfs_cmd), timed(rg_cmd)  # warm-up
    a, b = [], []
    for _ in range(runs):
        a.append(timed(ctxfs_cmd)[0])
        b.append(timed(rg_cmd)[0])
    return median(a), median(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7, help="timed runs per tool and case (after one warm-up)")
    ap.add_argument("--trees", default="registry,docs")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already in target/release")
    ap.add_argument("--no-wait", action="store_true", help="do not wait for the machine to be quiet")
    ap.add_argument("--max-wait", type=float, default=300, help="longest wait (s) for the machine to be quiet")
    opts = ap.parse_args()

    ctxfs = str(build(example=True)) if not opts.no_build else str(Path(__file__).resolve().parents[1] / "target/release/ctxfs")
    rg = ensure_ripgrep()
    rg_version = subprocess.run([rg, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    data = tempfile.mkdtemp(prefix="ctxfs-bench-data-")
    config = os.path.join(data, "config")  # no user config of this machine: an empty one
    os.mkdir(config)
    load0 = wait_quiet(opts.max_wait) if not opts.no_wait else "not checked"
    meter = OtherLoad()
    all_trees = trees()
    rows, notes, failures = [], [], []
    for name in opts.trees.split(","):
        tree, name_glob = all_trees[name]
        if not tree.is_dir():
            notes.append(f"{name}: {tree} is missing, skipped")
            continue
        files, size = tree_size(tree)
        notes.append(f"{name}: {tree} ({files} files, {size / 2**20:.0f} MiB)")
        tree = str(tree)
        call = [ctxfs, "call", "--root", tree, "--data", data, "--config", config]
        log(f"[{name}] warming the page cache")
        timed([rg, *RG_BASE, "--count", "-F", "zzzz-no-such-text", tree])

        for label, args, rg_args in GREP_CASES:
            log(f"[{name}] grep {label}")
            args = {**args, "output": "count"}
            full = ctxfs_full_text(ctxfs, tree, data, "grep", args)
            c_files, c_lines = count_totals(full.splitlines())
            rg_cmd = [rg, *RG_BASE, "--count", *rg_args, tree]
            _, rg_out = timed(rg_cmd)
            r_files, r_lines = count_totals(rg_out.decode(errors="replace").splitlines())
            c_ms, r_ms = bench_pair([*call, "grep", json.dumps(args)], rg_cmd, opts.runs)
            p_ms, setup = in_process(tree, data, "grep", args, opts.runs)
            same = "yes" if (c_files, c_lines) == (r_files, r_lines) else "**NO**"
            if same != "yes":
                failures.append(f"{name}: grep {label}: ctxfs {c_lines} lines in {c_files} files, rg {r_lines} in {r_files}")
            rows.append([name, f"grep {label}", f"{c_lines} in {c_files}", f"{r_lines} in {r_files}", same,
                         f"{c_ms:.0f}", f"{p_ms:.0f}", f"{r_ms:.0f}", f"{c_ms / r_ms:.2f}", f"{p_ms / r_ms:.2f}"])

        for pattern, rg_args in [("**/*", []), (name_glob, ["--type-add", f"bench:{name_glob}", "-t", "bench"])]:
            log(f"[{name}] glob {pattern}")
            args = {"pattern": pattern}
            full = ctxfs_full_text(ctxfs, tree, data, "glob", args)
            m = re.search(r"\(Stopped at \d+ of (\d+) matches", full)
            c_n = int(m.group(1)) if m else sum(1 for l in full.splitlines() if l.startswith("/"))
            rg_cmd = [rg, *RG_BASE, "--files", *rg_args, tree]
            _, rg_out = timed(rg_cmd)
            r_n = len(rg_out.splitlines())
            c_ms, r_ms = bench_pair([*call, "glob", json.dumps(args)], rg_cmd, opts.runs)
            p_ms, setup = in_process(tree, data, "glob", args, opts.runs)
            same = "yes" if c_n == r_n else "**NO**"
            if same != "yes":
                failures.append(f"{name}: glob {pattern}: ctxfs {c_n} files, rg {r_n}")
            rg_label = "rg --files" + (f" -t {name_glob}" if rg_args else "")
            rows.append([name, f"glob `{pattern}` vs {rg_label}", f"{c_n} files", f"{r_n} files", same,
                         f"{c_ms:.0f}", f"{p_ms:.0f}", f"{r_ms:.0f}", f"{c_ms / r_ms:.2f}", f"{p_ms / r_ms:.2f}"])

    shutil.rmtree(data, ignore_errors=True)
    print(f"\n## grep_glob — {datetime.date.today()}, {revision()}, {machine()}, {rg_version}, median of {opts.runs} runs, "
          f"{load0}, "
          f"other load during the run {meter.fraction():.0%} of cores\n")
    for n in notes:
        print(f"- {n}")
    print()
    print(table(["tree", "case", "ctxfs matches", "rg matches", "equal", "ctxfs call ms", "in-proc ms", "rg ms",
                 "ctxfs/rg", "in-proc/rg"], rows))
    print("\nctxfs call = a new `ctxfs call` process per run; in-proc = Session::call in one process "
          "(engine opened once); ratios are times, lower is better (target <= 1.3).")
    fail_if("grep_glob", failures)


if __name__ == "__main__":
    main()

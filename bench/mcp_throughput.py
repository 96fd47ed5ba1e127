#!/usr/bin/env python3
"""`ctxfs mcp` against the official `@modelcontextprotocol/server-filesystem`, over raw stdio.

A minimal JSON-RPC client (newline-delimited, subprocess pipes) drives both
servers the same way, each on its own copy of the same generated tree:

  src/  20 directories x 15 files (.rs/.py/.md), 100 lines each: the mixed run
  lat/  2,050 files of 100 lines: the read-latency run (50 for warm-up)

(a) read latency: 2,000 sequential reads, one request in flight; p50/p95 of
    the round trip. Twice: each read a different file, then one file 2,000
    times (ctxfs answers a re-read of an unchanged file with a short stub
    after reading and hashing it; the peer sends the file again).
(b) 10,000 mixed calls, the same deterministic list for both, sequential
    (window 1) and pipelined (16 requests in flight): total time, calls/s and
    the ratio. Mix per 10 calls:
      4 read    ctxfs read {file_path}            peer read_text_file {path}
      2 stat    ctxfs stat {path}                 peer get_file_info {path}
      1 list    ctxfs list {path}                 peer list_directory {path}
      1 glob    ctxfs glob {pattern:*.EXT, path}  peer search_files {pattern:**/*.EXT, path}
      1 grep    ctxfs grep {pattern, path: one src dir} (content search)
                peer has no content search; nearest: search_files {pattern:**/*WORD*, path: same dir}
                (names only: less work than grep, so this favours the peer)
      1 write   ctxfs write / peer write_file, always a new file (ctxfs wants
                a read before it overwrites one)
(c) idle RSS: a fresh server, initialize, one read, sleep 1 s, VmRSS from
    /proc/PID/status; the same with one write instead of the read; and
    VmRSS/VmHWM after the pipelined mixed run.

The mixed table also gives each server's CPU time (user + system, all
threads, from /proc/PID/stat): less sensitive to other load than wall time.

It prints figures; nothing here asserts a time.

    python3 bench/mcp_throughput.py [--calls 10000] [--reads 2000] [--window 16] [--only latency,mixed,rss]
"""

import argparse
import datetime
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (PEER_PACKAGE, PEER_VERSION, OtherLoad, build, end, spawn, ensure_peer, fail_if, log, machine, revision,  # noqa: E402
                    median, percentile, table, wait_quiet)

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]
EXTS = ["rs", "py", "md"]


# ---------------------------------------------------------------- the tree

def file_text(rng: random.Random, lines=100):
    out = []
    for i in range(lines):
        w = rng.sample(WORDS, 4)
        out.append(f"fn {w[0]}_{i}({w[1]}: u32) -> {w[2].capitalize()} {{ {w[3]}({i}) }} // line {i + 1}")
    return "\n".join(out) + "\n"


def make_tree(root: Path, n_dirs=20, per_dir=15, n_lat=2050):
    rng = random.Random(42)
    for d in range(n_dirs):
        dd = root / "src" / f"d{d:02}"
        dd.mkdir(parents=True)
        for f in range(per_dir):
            (dd / f"{WORDS[f % len(WORDS)]}_{f:02}.{EXTS[f % 3]}").write_text(file_text(rng))
    lat = root / "lat"
    lat.mkdir()
    for i in range(n_lat):
        (lat / f"f{i:04}.txt").write_text(file_text(rng))
    (root / "out").mkdir()


# ---------------------------------------------------------------- the client

class Server:
    """One stdio MCP server and a minimal newline-delimited JSON-RPC client."""

    def __init__(self, name, cmd):
        self.name = name
        self.err = tempfile.TemporaryFile()
        self.p = spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err)
        self.next_id = 1

    def send(self, obj):
        self.p.stdin.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def flush(self):
        self.p.stdin.flush()

    def recv(self):
        """The next response; answers server requests (none expected) and skips notifications."""
        while True:
            line = self.p.stdout.readline()
            if not line:
                self.err.seek(0)
                sys.exit(f"{self.name} closed its output; stderr:\n{self.err.read().decode(errors='replace')[-2000:]}")
            msg = json.loads(line)
            if "method" in msg:
                if "id" in msg:  # a request to the client: we offer nothing
                    self.send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}})
                    self.flush()
                continue
            return msg

    def request(self, method, params):
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        self.flush()
        msg = self.recv()
        assert msg.get("id") == rid, (self.name, msg)
        return msg

    def initialize(self):
        r = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                        "clientInfo": {"name": "ctxfs-bench", "version": "1"}})
        if "error" in r:
            sys.exit(f"{self.name}: initialize failed: {r['error']}")
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.flush()
        return r["result"]

    def call_msg(self, name, args):
        rid = self.next_id
        self.next_id += 1
        return rid, {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": args}}

    def run(self, calls, window):
        """Sends `calls` [(tool, args)] with up to `window` in flight; answers (responses in
        call order, per-call latency in seconds, total seconds)."""
        sent_at, responses = {}, {}
        ids = []
        start = time.perf_counter()
        it = iter(calls)
        inflight = 0
        done = False
        while True:
            while not done and inflight < window:
                try:
                    name, args = next(it)
                except StopIteration:
                    done = True
                    break
                rid, msg = self.call_msg(name, args)
                ids.append(rid)
                self.send(msg)
                sent_at[rid] = time.perf_counter()
                inflight += 1
            self.flush()
            if inflight == 0:
                break
            msg = self.recv()
            now = time.perf_counter()
            rid = msg.get("id")
            responses[rid] = (msg, now - sent_at[rid])
            inflight -= 1
        total = time.perf_counter() - start
        ordered = [responses[i] for i in ids]
        return [m for m, _ in ordered], [lat for _, lat in ordered], total

    def status(self):
        fields = {}
        with open(f"/proc/{self.p.pid}/status") as f:
            for l in f:
                k, _, v = l.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    fields[k] = int(v.split()[0]) / 1024  # MiB
        return fields

    def cpu(self):
        """CPU seconds (user + system, all threads) the server has used so far."""
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self):
        end(self.p, timeout=15)


def text_of(msg):
    res = msg.get("result") or {}
    return "".join(c.get("text", "") for c in res.get("content", []))


def is_error(msg):
    return "error" in msg or bool((msg.get("result") or {}).get("isError"))


# ---------------------------------------------------------------- the calls

class Mapping:
    """Builds each side's (tool, args) for a logical call."""

    def __init__(self, kind, root: Path):
        self.kind, self.root = kind, root

    def p(self, rel):
        return str(self.root / rel)

    def read(self, rel):
        return ("read", {"file_path": self.p(rel)}) if self.kind == "ctxfs" else \
            ("read_text_file", {"path": self.p(rel)})

    def stat(self, rel):
        return ("stat", {"path": self.p(rel)}) if self.kind == "ctxfs" else ("get_file_info", {"path": self.p(rel)})

    def list(self, rel):
        return ("list", {"path": self.p(rel)}) if self.kind == "ctxfs" else ("list_directory", {"path": self.p(rel)})

    def glob(self, rel, ext):
        return ("glob", {"pattern": f"*.{ext}", "path": self.p(rel)}) if self.kind == "ctxfs" else \
            ("search_files", {"pattern": f"**/*.{ext}", "path": self.p(rel)})

    def grep(self, rel, word):
        return ("grep", {"pattern": f"{word}\\(", "path": self.p(rel)}) if self.kind == "ctxfs" else \
            ("search_files", {"pattern": f"**/*{word}*", "path": self.p(rel)})

    def write(self, rel, content):
        return ("write", {"file_path": self.p(rel), "content": content}) if self.kind == "ctxfs" else \
            ("write_file", {"path": self.p(rel), "content": content})


def src_files():
    out = []
    for d in range(20):
        for f in range(15):
            out.append(f"src/d{d:02}/{WORDS[f % len(WORDS)]}_{f:02}.{EXTS[f % 3]}")
    return out


def mixed_plan(n, seed=1):
    """A deterministic list of logical calls: (op, arguments...)."""
    rng = random.Random(seed)
    files = src_files()
    plan = []
    body = "".join(f"written line {i}\n" for i in range(20))
    pattern = ["read", "stat", "read", "list", "read", "glob", "stat", "grep", "read", "write"]
    for i in range(n):
        op = pattern[i % len(pattern)]
        if op in ("read", "stat"):
            plan.append((op, rng.choice(files)))
        elif op == "list":
            plan.append((op, f"src/d{rng.randrange(20):02}"))
        elif op == "glob":
            plan.append((op, "src", rng.choice(EXTS)))
        elif op == "grep":
            plan.append((op, f"src/d{rng.randrange(20):02}", rng.choice(WORDS)))
        else:
            plan.append((op, f"out/w{i:05}.txt", body))
    return plan


def materialize(plan, m: Mapping, tag):
    out = []
    for op, *a in plan:
        if op == "write":
            a = [a[0].replace("out/", f"out/{tag}-"), a[1]]
        out.append(getattr(m, op)(*a))
    return out


# ---------------------------------------------------------------- main

def start(kind, ctxfs, peer_js, root, data):
    if kind == "ctxfs":
        # No approval prompts (the peer has none either) and no user config of this machine.
        config = Path(data).parent / "ctxfs-config"
        config.mkdir(exist_ok=True)
        # A command in front of the server (for example `perf record -g -o FILE --`), for profiling.
        prefix = os.environ.get("CTXFS_BENCH_PREFIX", "").split()
        s = Server("ctxfs", prefix + [ctxfs, "mcp", "--root", str(root), "--data", str(data), "--config", str(config),
                             "--mode", "accept-edits"])
    else:
        s = Server("peer", ["node", str(peer_js), str(root)])
    s.initialize()
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--reads", type=int, default=2_000)
    ap.add_argument("--window", type=int, default=16, help="requests in flight in the pipelined run")
    ap.add_argument("--only", default="latency,mixed,rss", help="parts to run: latency, mixed, rss")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--ctxfs-only", action="store_true", help="skip the peer (for profiling ctxfs)")
    ap.add_argument("--ctxfs", help="the ctxfs binary to run (implies --no-build)")
    ap.add_argument("--no-wait", action="store_true", help="do not wait for the machine to be quiet")
    ap.add_argument("--max-wait", type=float, default=300, help="longest wait (s) for the machine to be quiet")
    opts = ap.parse_args()
    parts = set(opts.only.split(","))

    if opts.ctxfs:
        ctxfs = opts.ctxfs
    else:
        ctxfs = str(build()) if not opts.no_build else str(Path(__file__).resolve().parents[1] / "target/release/ctxfs")
    peer_js = ensure_peer()
    load0 = wait_quiet(opts.max_wait) if not opts.no_wait else "not checked"
    meter = OtherLoad()
    node_version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="ctxfs-bench-mcp-"))
    try:
        roots = {k: work / f"{k}-tree" for k in ("ctxfs", "peer")}
        for r in roots.values():
            make_tree(r)
        data = work / "ctxfs-data"
        kinds = ("ctxfs",) if opts.ctxfs_only else ("ctxfs", "peer")
        maps = {k: Mapping(k, roots[k]) for k in kinds}
        results = {k: {} for k in kinds}

        # (a) read latency, sequential
        for k in kinds if "latency" in parts else ():
            log(f"[{k}] read latency")
            s = start(k, ctxfs, peer_js, roots[k], data)
            m = maps[k]
            s.run([m.read(f"lat/f{i:04}.txt") for i in range(2000, 2050)], 1)  # warm-up
            pings = []
            for _ in range(opts.reads):
                t = time.perf_counter()
                s.request("ping", {})
                pings.append(time.perf_counter() - t)
            results[k]["ping"] = (pings, 0, 0)
            msgs, lat, _ = s.run([m.read(f"lat/f{i % 2000:04}.txt") for i in range(opts.reads)], 1)
            results[k]["distinct"] = (lat, sum(map(is_error, msgs)), median([len(text_of(x)) for x in msgs]))
            msgs, lat, _ = s.run([m.read("lat/f0000.txt") for _ in range(opts.reads)], 1)
            results[k]["same"] = (lat, sum(map(is_error, msgs)), median([len(text_of(x)) for x in msgs]))
            s.close()

        # (b) mixed calls, sequential then pipelined, each on a fresh server
        plan = mixed_plan(opts.calls)
        for k in kinds if "mixed" in parts else ():
            for window in (1, opts.window):
                log(f"[{k}] {opts.calls} mixed calls, window {window}")
                s = start(k, ctxfs, peer_js, roots[k], data)
                cpu0 = s.cpu()
                msgs, lat, total = s.run(materialize(plan, maps[k], f"win{window}"), window)
                cpu = s.cpu() - cpu0
                errors = [text_of(x)[:200] for x in msgs if is_error(x)]
                stubs = sum(1 for x in msgs if " Unchanged since #" in text_of(x) or "] Same result as #" in text_of(x))
                results[k][f"mixed{window}"] = (total, len(errors), errors[:3], stubs,
                                                sum(len(text_of(x)) for x in msgs), lat, cpu)
                if window != 1:
                    results[k]["after_mixed"] = s.status()
                s.close()

        # (c) idle RSS: after one read (the target), and after one write (which may start more machinery)
        for k in kinds if "rss" in parts else ():
            log(f"[{k}] idle RSS")
            for what, call in (("idle", maps[k].read("src/d00/alpha_00.rs")),
                               ("idle_write", maps[k].write("out/idle.txt", "one line\n"))):
                s = start(k, ctxfs, peer_js, roots[k], data)
                s.run([call], 1)
                time.sleep(1)
                results[k][what] = s.status()
                s.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    # ------------------------------------------------------------ report
    # Every call of the plans is one that works on both servers: an error is a fault, not a figure.
    failures = [f"{who} {key}: {value[1]} error answers, e.g. {value[2][:1] if key.startswith('mixed') else ''}"
                for who, runs in results.items() for key, value in runs.items()
                if isinstance(value, tuple) and len(value) > 1 and isinstance(value[1], int) and value[1]]
    if opts.ctxfs_only:
        for key, value in results["ctxfs"].items():
            if key.startswith("mixed"):
                print(f"{key}: {value[0]:.2f} s, {value[6]:.2f} CPU s, {value[1]} errors {value[2]}")
            else:
                print(f"{key}: {value}")
        fail_if("mcp_throughput", failures)
        return
    c, p = results["ctxfs"], results["peer"]
    print(f"\n## mcp_throughput — {datetime.date.today()}, {revision()}, {machine()}, peer {PEER_PACKAGE}@{PEER_VERSION} "
          f"on Node {node_version}, {load0}, "
          f"other load during the run {meter.fraction():.0%} of cores\n")
    if "latency" in parts:
        report_latency(c, p, opts)
    if "mixed" in parts:
        report_mixed(c, p, opts, mixed_plan(opts.calls))
    if "rss" in parts:
        report_memory(c, p, "mixed" in parts)
    print("\nTargets: mixed throughput ctxfs >= 10x the peer's; idle RSS < 30 MB. "
          "Stubs: ctxfs answers that pointed at an earlier identical result instead of repeating it "
          "(the tool still ran).")
    fail_if("mcp_throughput", failures)


def report_latency(c, p, opts):
    rows = []
    for key, label in (("ping", "ping (protocol round trip, no tool)"),
                       ("distinct", "read, a different 100-line file each call"),
                       ("same", "read, the same 100-line file each call")):
        cl, ce, cb = c[key]
        pl, pe, pb = p[key]
        rows.append([label, f"{percentile(cl, 50) * 1e3:.3f}", f"{percentile(cl, 95) * 1e3:.3f}",
                     f"{percentile(pl, 50) * 1e3:.3f}", f"{percentile(pl, 95) * 1e3:.3f}",
                     f"{percentile(pl, 50) / percentile(cl, 50):.1f}x", f"{ce}/{pe}", f"{cb:.0f}/{pb:.0f}"])
    print(f"(a) read latency, {opts.reads} sequential round trips (ms)\n")
    print(table(["case", "ctxfs p50", "ctxfs p95", "peer p50", "peer p95", "peer/ctxfs p50", "errors c/p",
                 "answer chars c/p"], rows))


def report_mixed(c, p, opts, plan):
    rows = []
    for window in (1, opts.window):
        ct, cerr, cex, cstub, cchars, clat, ccpu = c[f"mixed{window}"]
        pt, perr, pex, _, pchars, plat, pcpu = p[f"mixed{window}"]
        rows.append([f"{opts.calls} mixed, {'sequential' if window == 1 else f'{window} in flight'}",
                     f"{ct:.2f}", f"{opts.calls / ct:.0f}", f"{pt:.2f}", f"{opts.calls / pt:.0f}",
                     f"{pt / ct:.1f}x", f"{ccpu:.2f}", f"{pcpu:.2f}", f"{cerr}/{perr}", f"{cstub}",
                     f"{cchars / 1e6:.1f}/{pchars / 1e6:.1f}"])
        for who, ex in (("ctxfs", cex), ("peer", pex)):
            for e in ex:
                print(f"  {who} error (window {window}): {e!r}")
    print("\n(b) mixed calls\n")
    print(table(["run", "ctxfs s", "ctxfs calls/s", "peer s", "peer calls/s", "throughput ctxfs/peer",
                 "ctxfs CPU s", "peer CPU s", "errors c/p", "ctxfs stubs", "MB of answer text c/p"], rows))
    rows = []
    ops = [op for op, *_ in plan]
    for op in ("read", "stat", "list", "glob", "grep", "write"):
        cl = [x for o, x in zip(ops, c["mixed1"][5]) if o == op]
        pl = [x for o, x in zip(ops, p["mixed1"][5]) if o == op]
        rows.append([op, len(cl), f"{median(cl) * 1e3:.3f}", f"{percentile(cl, 95) * 1e3:.3f}",
                     f"{sum(cl):.2f}", f"{median(pl) * 1e3:.3f}", f"{percentile(pl, 95) * 1e3:.3f}",
                     f"{sum(pl):.2f}", f"{median(pl) / median(cl):.1f}x"])
    print("\nPer operation, sequential mixed run (round trip ms; s = time spent on that operation in all)\n")
    print(table(["op", "calls", "ctxfs p50", "ctxfs p95", "ctxfs s", "peer p50", "peer p95", "peer s",
                 "peer/ctxfs p50"], rows))


def report_memory(c, p, after_mixed):
    rows = [
        ["idle VmRSS (initialize, one read, 1 s)", f"{c['idle']['VmRSS']:.1f}", f"{p['idle']['VmRSS']:.1f}",
         f"{p['idle']['VmRSS'] / c['idle']['VmRSS']:.1f}x"],
        ["idle VmRSS (initialize, one write of a new file, 1 s)", f"{c['idle_write']['VmRSS']:.1f}",
         f"{p['idle_write']['VmRSS']:.1f}", f"{p['idle_write']['VmRSS'] / c['idle_write']['VmRSS']:.1f}x"],
    ]
    if after_mixed:
        rows += [
            ["VmRSS after the pipelined mixed run", f"{c['after_mixed']['VmRSS']:.1f}",
             f"{p['after_mixed']['VmRSS']:.1f}", ""],
            ["VmHWM (peak) after the pipelined mixed run", f"{c['after_mixed']['VmHWM']:.1f}",
             f"{p['after_mixed']['VmHWM']:.1f}", ""],
        ]
    print("\n(c) memory (MiB)\n")
    print(table(["", "ctxfs", "peer", "peer/ctxfs"], rows))


if __name__ == "__main__":
    main()

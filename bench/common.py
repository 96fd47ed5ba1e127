"""Shared helpers for the benchmarks: building ctxfs, installing the peers, tables.

Nothing here asserts a time; the benchmarks print figures. What a benchmark
checks besides (answers equal to the peer's, no errors, vectors that agree)
ends it with `fail_if`: a message on stderr and exit status 1, after the
figures, so a broken run is never quoted as a result.
"""

import json
import queue
import re
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PEER_PACKAGE = "@modelcontextprotocol/server-filesystem"
# Pinned so that runs compare against the same peer; bump it deliberately.
PEER_VERSION = "2026.8.31"
PEER_PREFIX = BENCH / ".peer"


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def report(res, path=None) -> None:
    """Prints a benchmark's results as JSON on stdout, and writes them to `path` when given."""
    import json

    out = json.dumps(res, indent=1, default=str)
    if path:
        Path(path).write_text(out)
    print(out)


def fail_if(script: str, failures: list) -> None:
    """Ends the benchmark with exit status 1 when a sanity check failed, naming each one."""
    if not failures:
        return
    print(f"{script}: FAILED: {len(failures)} sanity check(s) did not hold; the figures above are not to be quoted:",
          file=sys.stderr)
    for failure in failures:
        print(f"  - {failure}", file=sys.stderr)
    sys.exit(1)


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))


def build(example: bool = False) -> Path:
    """`cargo build --release` of the binary (and the in-process example): one cargo run."""
    cmd = ["cargo", "build", "--release", "--bin", "ctxfs"]
    if example:
        cmd += ["--example", "bench_calls"]
    log("$", " ".join(cmd))
    subprocess.run(cmd, cwd=REPO, check=True)
    return target_dir() / "release" / "ctxfs"


def example_binary() -> Path:
    return target_dir() / "release" / "examples" / "bench_calls"


def ensure_ripgrep() -> str:
    """The `rg` on PATH, installing Debian's ripgrep when there is none."""
    rg = shutil.which("rg")
    if rg:
        return rg
    log("rg is missing: installing Debian's ripgrep")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "ripgrep"], check=True,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    rg = shutil.which("rg")
    if not rg:
        sys.exit("could not install ripgrep")
    return rg


def ensure_peer() -> Path:
    """The peer MCP server's entry point, installed with npm under bench/.peer (git-ignored)."""
    entry = PEER_PREFIX / "node_modules" / PEER_PACKAGE / "dist" / "index.js"
    pkg = PEER_PREFIX / "node_modules" / PEER_PACKAGE / "package.json"
    if entry.exists() and pkg.exists() and f'"version": "{PEER_VERSION}"' in pkg.read_text():
        return entry
    spec = f"{PEER_PACKAGE}@{PEER_VERSION}"
    log(f"installing {spec} into {PEER_PREFIX}")
    # Check the registry first: a clear message beats npm's when the version is gone.
    view = subprocess.run(["npm", "view", spec, "version"], capture_output=True, text=True)
    if view.returncode != 0 or PEER_VERSION not in view.stdout:
        sys.exit(f"npm has no {spec}: {view.stderr.strip() or view.stdout.strip()}")
    PEER_PREFIX.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error",
                    "--prefix", str(PEER_PREFIX), spec], check=True)
    if not entry.exists():
        sys.exit(f"{spec} installed, but {entry} is missing")
    return entry


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def percentile(xs, p):
    """The p-th percentile (0..100), nearest rank."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def table(headers, rows):
    """A GitHub-flavoured Markdown table, so it can be pasted into the README."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    out = [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def machine() -> str:
    cpu = "?"
    try:
        for l in open("/proc/cpuinfo"):
            if l.startswith("model name"):
                cpu = l.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu})"


def cpu_busy(interval=1.0) -> float:
    """The fraction of all cores busy over `interval` seconds (from /proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v), idle
    t0, i0 = sample()
    import time
    time.sleep(interval)
    t1, i1 = sample()
    return 1 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(max_wait=300, threshold=0.15) -> str:
    """Waits (at most `max_wait` s) until the other work on the machine is below `threshold`
    of its cores, so that figures are not taken beside someone's build. Answers a note."""
    import time
    start = time.monotonic()
    busy = cpu_busy()
    while busy > threshold and time.monotonic() - start < max_wait:
        log(f"machine busy ({busy:.0%} of cores); waiting for it to quiet down")
        time.sleep(4)
        busy = cpu_busy()
    waited = time.monotonic() - start
    return f"other load {busy:.0%} of cores at start" + (f" (after waiting {waited:.0f} s)" if waited > 2 else "")


class OtherLoad:
    """Measures how busy the machine was with work other than this benchmark
    (and its children) between `__init__` and `fraction()`: a figure taken
    beside someone's build is worth less, and this says so."""

    def __init__(self):
        import time
        self.t0 = time.monotonic()
        self.busy0 = self._busy_seconds()
        self.own0 = self._own_seconds()

    @staticmethod
    def _busy_seconds():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return (sum(v) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own_seconds():
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def fraction(self) -> float:
        import time
        wall = time.monotonic() - self.t0
        other = (self._busy_seconds() - self.busy0) - (self._own_seconds() - self.own0)
        return max(0.0, other / max(1e-9, wall * (os.cpu_count() or 1)))


def revision() -> str:
    """The commit the binary was built from, and whether the tree had uncommitted changes."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "src", "Cargo.toml"],
                           cwd=REPO, capture_output=True, text=True).stdout.strip()
    return f"ctxfs {head or '?'}" + (" + uncommitted changes" if dirty else "")


def words(text):
    """ctxfs's word splitter (src/index/terms.rs): alphanumeric runs, cut at lower→upper and `_`, lower-cased."""
    out = []
    for raw in re.split(r"[\W_]+", text):
        current, prev_lower = "", False
        for c in raw:
            if c.isupper() and prev_lower and current:
                out.append(current)
                current = ""
            prev_lower = c.islower() or c.isdigit()
            current += c.lower()
        if current:
            out.append(current)
    return out


def spawn(args, **popen_args) -> subprocess.Popen:
    """`subprocess.Popen` in a process group of its own, so that `end` ends the process and anything it started."""
    return subprocess.Popen(args, start_new_session=True, **popen_args)


def end(p: subprocess.Popen, timeout: float = 30) -> None:
    """Ends a process `spawn` started: its input closed (ctxfs's doors and `replay` stop at the end of
    their input), at most `timeout` seconds to stop, then its whole group killed by its id."""
    try:
        if p.stdin:
            p.stdin.close()
    except OSError:
        pass
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


class Proc:
    """A ctxfs process in its own process group, its stdout lines collected by a thread; its
    stderr (the log) goes to the file `stderr` names, or nowhere."""

    def __init__(self, binary: str, args: list[str], env=None, lines=True, stderr=None):
        self.log = open(stderr, "w") if stderr else None
        self.proc = spawn([binary, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=self.log or subprocess.DEVNULL, env={**os.environ, **(env or {})})
        self.lines: queue.Queue = queue.Queue()
        if lines:
            threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def write(self, data: bytes):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        if self.log:
            self.log.close()


class Mcp(Proc):
    """`ctxfs mcp` over stdio (newline-delimited JSON-RPC), initialised."""

    def __init__(self, binary, ws, data, *extra, env=None, stderr=None):
        args = ["mcp", "--mode", "trust", "--root", str(ws), "--data", str(data), *extra]
        super().__init__(binary, args, env, stderr=stderr)
        self.answers: dict = {}
        self.next_id = 100
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "campaign", "version": "0"}}})
        self.answer(1)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.write(json.dumps(message).encode() + b"\n")

    def answer(self, id_, timeout=60):
        deadline = time.time() + timeout
        while id_ not in self.answers:
            line = self.lines.get(timeout=max(0.01, deadline - time.time()))
            if line is None:
                raise EOFError("the server closed stdout")
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "id" in message and "method" not in message:
                self.answers[message["id"]] = message
        return self.answers.pop(id_)

    def start_call(self, tool, args) -> int:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}})
        return self.next_id

    def call(self, tool, args):
        result = self.answer(self.start_call(tool, args))["result"]
        return result["content"][0]["text"], result.get("isError", False)

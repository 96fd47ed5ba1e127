#!/usr/bin/env python3
"""Search speed on this machine: indexing throughput, query latency at ~100k and ~1M chunks,
incremental updates, and memory while indexing a tree of more than 1 GB.

Corpora (made under --work, default /tmp/ctxfs-speed; reused when present):

* `base`: a copy of every crate in ~/.cargo/registry/src (about 160 MB of Rust, C, Markdown, ...;
  about 140k chunks with the default embedder's tokenizer).
* `big`: --replicas copies of `base` (default 8), each text file with one line of its own put in
  front, so every copy's content is new to the index (no content-hash sharing): about 1.3 GB and
  1.1M chunks.

Steps (each in its own process, so memory is the process's own):

1. `ctxfs index` over `base` into a fresh data directory: MB/s and chunks/s (wall and per CPU
   second), peak RSS. Peer in the same run: one `rg` pass over the same tree (every byte read and
   searched), as the floor of touching the bytes.
2. Query latency at `base`: a `ctxfs replay` process (one session; answers read over a pipe), the
   first query (it loads the vectors) apart, then 10 queries × 3 rounds, fused and each ranking alone
   (`CTXFS_SEARCH_RANKINGS`); `second_ms`, `ready_p50_ms` and `ready_p95_ms` give the second query
   apart too: `replay` does not ready its index at the start as the MCP and LSP doors do, so that
   query may walk the tree again. The index's own stage times from its debug log; RSS after. Peer: `rg -i
   -c` with the query's words as alternatives over the same tree. Once the file watcher covers the
   tree, an unchanged tree is not walked again; fused is also timed with `CTXFS_NO_WATCH=1` (a walk
   on every query, as before the watcher).
3. Incremental update at `base`: an outside change to one file, then a search (its latency minus
   the unchanged query's); a `write` through ctxfs of one file (indexed on the spot); `ctxfs index`
   again after one change. Then the query after one outside change alone, in two processes of the
   same run: with the watcher's change feed (only the changed file is looked at) and with
   `CTXFS_NO_WATCH=1` (a walk of the whole tree), and how many of the feed's queries used the feed
   (from the index's debug log).
4. `ctxfs index` over `big` (RSS sampled every 0.25 s: is it bounded?), then step 2 at `big`, also with
   `meaning+exact` and `fused+exact` (every vector scored exactly instead of the 2,000 its sign bits
   pick), and the overlap of their top 10 with the default's.

Usage: python3 bench/search_speed.py [--ctxfs BIN] [--work DIR] [--replicas N] [--skip-big] [--json FILE]
       [--base DIR] [--reuse-data] [--only-outside-change] [--only-views VIEW.json ...]
`--base DIR` uses that tree as `base` (indexed into --work); `--only-outside-change` runs step 1 and
the outside-change comparison of step 3 alone; `--only-views` serves an existing `big` as a tree
(`--tree`, its own index in the data directory's `projects/`), indexes it through a view that sees
everything, then times fused queries (step 2) through that view and each view file given, so the
same index holds files each narrower view hides.
Stdlib Python 3 only, plus rg.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import build, end, ensure_ripgrep, log, spawn  # noqa: E402

REGISTRY = Path.home() / ".cargo" / "registry" / "src"
QUERIES = [
    "retry a failed request",
    "parse command line arguments",
    "read the configuration file",
    "where are unicode tables generated",
    "spawn a blocking task on a thread pool",
    "escape a string for html",
    "compute a hash of bytes",
    "error when the file does not exist",
    "walk a directory recursively respecting gitignore",
    "serialize a struct to json",
]
STAGE = re.compile(r"\(\"(\w+)\", ([\d.]+)(ms|µs|s|ns)\)")


def rss_kb(pid, field="VmRSS"):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def run_measured(cmd, env=None, sample=False):
    """Runs cmd under /usr/bin/time; answers (stdout, stderr, wall s, cpu s, peak RSS kB, RSS samples [(s, kB)])."""
    timing = Path(f"/tmp/ctxfs-speed-time-{os.getpid()}.txt")
    start = time.perf_counter()
    p = spawn(["/usr/bin/time", "-o", str(timing), "-f", "%e %U %S %M"] + cmd,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    samples = []
    if sample:
        def poll():
            child = None
            while p.poll() is None:
                if child is None:
                    kids = Path(f"/proc/{p.pid}/task/{p.pid}/children")
                    child = int(kids.read_text().split()[0]) if kids.exists() and kids.read_text().split() else None
                kb = rss_kb(child) if child else None
                if kb:
                    samples.append((round(time.perf_counter() - start, 2), kb))
                time.sleep(0.25)
        threading.Thread(target=poll, daemon=True).start()
    out, err = p.communicate()
    wall = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"{cmd[:3]} failed ({p.returncode}): {err[-2000:]}")
    _, user, system, peak = timing.read_text().split()[-4:]
    timing.unlink()
    return out, err, wall, float(user) + float(system), int(peak), samples


def make_base(work):
    base = work / "base"
    if base.exists():
        return base
    index = next(d for d in sorted(REGISTRY.iterdir()) if d.is_dir())
    log(f"copying {index} to {base}")
    shutil.copytree(index, base, symlinks=True)
    return base


def make_big(work, base, replicas):
    big = work / f"big{replicas}"
    if big.exists():
        return big
    log(f"making {big}: {replicas} copies of {base}, each text file with a line of its own in front")
    tmp = work / f"big{replicas}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for r in range(replicas):
        for dirpath, _dirs, files in os.walk(base):
            rel = Path(dirpath).relative_to(base)
            out_dir = tmp / f"copy{r}" / rel
            out_dir.mkdir(parents=True, exist_ok=True)
            for name in files:
                src = Path(dirpath) / name
                if src.is_symlink():
                    continue
                data = src.read_bytes()
                if b"\0" not in data[:8000]:
                    data = f"// copy {r} of {rel / name}\n".encode() + data
                (out_dir / name).write_bytes(data)
    tmp.rename(big)
    return big


def du_bytes(path):
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                total += p.stat().st_size
    return total


def index_tree(binary, root, data, sample=False):
    out, err, wall, cpu, peak, samples = run_measured([binary, "index", "--root", str(root), "--data", str(data)], sample=sample)
    m = re.search(r"(\d+) files \(([\d.]+) MB\); (\d+) new or changed \(([\d.]+) MB, (\d+) chunks", out)
    files, mb, _new, mb_new, chunks = (int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4)), int(m.group(5)))
    return {"summary": out.strip(), "wall_s": wall, "cpu_s": cpu, "files": files, "mb": mb, "mb_indexed": mb_new,
            "chunks": chunks, "mb_per_s": mb_new / wall, "chunks_per_s": chunks / wall, "mb_per_cpu_s": mb_new / cpu,
            "chunks_per_cpu_s": chunks / cpu, "peak_rss_mb": peak / 1024, "rss_samples": samples[::8]}


class Replay:
    def __init__(self, binary, root, data, rankings="fused", walk_always=False, view=None):
        env = dict(os.environ, CTXFS_SEARCH_RANKINGS=rankings, CTXFS_LOG="ctxfs::index::hybrid=debug,ctxfs::index::codes=debug,ctxfs::index::rankings=debug")
        if walk_always:
            # No file watcher: every query walks the tree, as before it existed.
            env["CTXFS_NO_WATCH"] = "1"
        suffix = f"{'-walk' if walk_always else ''}{'-' + Path(view).stem if view else ''}"
        self.err_path = Path(data) / f"replay-{rankings.replace('+', '_')}{suffix}.log"
        self.err = open(self.err_path, "w")
        # With a view file the tree is served as `/` and the view says what the session sees.
        where = ["--tree", str(root), "--view", str(view)] if view else ["--root", str(root)]
        self.p = spawn([binary, "replay", *where, "--data", str(data), "--host", "fresh", "-"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True, bufsize=1, env=env)

    def call(self, tool, args):
        self.p.stdin.write(json.dumps({"event": "new_request", "carries_earlier": False}) + "\n")
        self.p.stdin.flush()
        self.p.stdout.readline()
        start = time.perf_counter()
        self.p.stdin.write(json.dumps({"call": tool, "args": args}) + "\n")
        self.p.stdin.flush()
        answer = json.loads(self.p.stdout.readline())
        return time.perf_counter() - start, answer

    def rss_mb(self):
        return (rss_kb(self.p.pid) or 0) / 1024, (rss_kb(self.p.pid, "VmHWM") or 0) / 1024

    def close(self):
        end(self.p)
        self.err.close()

    def stages(self, skip=1):
        """Mean time per stage of the searches logged so far but the first `skip` (ms), from the index's debug lines."""
        sums, n = {}, 0
        lines = [l for l in self.err_path.read_text(errors="replace").splitlines() if "times=" in l]
        # The first search loads what the others find in memory: it is reported apart.
        for line in lines[skip:]:
            n += 1
            prev = 0.0
            for name, value, unit in STAGE.findall(line):
                ms = float(value) * {"ms": 1, "µs": 1e-3, "s": 1e3, "ns": 1e-6}[unit]
                sums[name] = sums.get(name, 0.0) + (ms - prev)
                prev = ms
        return {k: v / n for k, v in sums.items()} if n else {}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000


PASSAGE = re.compile(r"^(/[^\n]*):(\d+)-(\d+)$", re.M)


def timed_rounds(r, rounds):
    """Asks every query `rounds` times: all times, the first round's, and each query's passages (first round)."""
    times, first_round, lists = [], [], {}
    for n in range(rounds):
        for q in QUERIES:
            t, answer = r.call("search", {"query": q, "limit": 10})
            if answer["is_error"]:
                sys.exit(answer["text"])
            times.append(t)
            if n == 0:
                first_round.append(t)
                lists[q] = [m.group(0) for m in PASSAGE.finditer(answer["text"])]
    return times, first_round, lists


def latency(binary, root, data, rankings, rounds=3, lists=None, walk_always=False, view=None):
    r = Replay(binary, root, data, rankings, walk_always, view)
    first, _ = r.call("search", {"query": "warm up the index", "limit": 10})
    times, _first_round, got = timed_rounds(r, rounds)
    if lists is not None:
        lists.update(got)
    rss, hwm = r.rss_mb()
    r.close()
    stages = r.stages()
    # A process that did not ready its index (`ctxfs replay` does not; the MCP and LSP doors do at a
    # session's start) walks again at its second search when the first came before the file watcher
    # covered the tree; the times after that one are what a session sees once it is ready.
    later = times[1:]
    return {"first_ms": first * 1000, "p50_ms": pct(times, 0.5), "p95_ms": pct(times, 0.95), "n": len(times),
            "second_ms": times[0] * 1000, "ready_p50_ms": pct(later, 0.5), "ready_p95_ms": pct(later, 0.95),
            "rss_mb": rss, "peak_rss_mb": hwm, "stages_ms": stages}


def rg_latency(rg, root):
    times = []
    for q in QUERIES:
        pattern = "|".join(re.escape(w) for w in q.split())
        start = time.perf_counter()
        subprocess.run([rg, "-i", "-c", pattern, str(root)], capture_output=True)
        times.append(time.perf_counter() - start)
    return {"p50_ms": pct(times, 0.5), "p95_ms": pct(times, 0.95), "n": len(times)}


def incremental(binary, root, data):
    """An outside change then a search; writes through ctxfs; `ctxfs index` after one change."""
    candidates = sorted(p for p in Path(root).rglob("*.rs") if 10_000 < p.stat().st_size < 40_000)[:200:20]
    r = Replay(binary, root, data, "fused")
    r.call("search", {"query": "warm up", "limit": 10})
    steady = [r.call("search", {"query": QUERIES[0], "limit": 10})[0] for _ in range(5)]
    after_change = []
    for n, path in enumerate(candidates[:5]):
        with open(path, "a") as f:
            f.write(f"\n// outside change {n} {time.time()}\n")
        after_change.append(r.call("search", {"query": QUERIES[0], "limit": 10})[0])
    writes = []
    for n, path in enumerate(candidates[5:10]):
        t_read, _ = r.call("read", {"file_path": str(path)})
        text = path.read_text(errors="replace") + f"\n// written through ctxfs {n}\n"
        t, answer = r.call("write", {"file_path": str(path), "content": text})
        if answer["is_error"]:
            sys.exit(answer["text"])
        writes.append(t)
    after_write = [r.call("search", {"query": QUERIES[1], "limit": 10})[0] for _ in range(3)]
    r.close()
    with open(candidates[0], "a") as f:
        f.write("\n// one more outside change\n")
    start = time.perf_counter()
    out = subprocess.run([binary, "index", "--root", str(root), "--data", str(data)], capture_output=True, text=True, check=True)
    index_again = time.perf_counter() - start
    return {"steady_search_p50_ms": pct(steady, 0.5), "search_after_outside_change_p50_ms": pct(after_change, 0.5),
            "added_by_one_change_ms": pct(after_change, 0.5) - pct(steady, 0.5), "write_p50_ms": pct(writes, 0.5),
            "search_after_writes_p50_ms": pct(after_write, 0.5), "index_after_one_change_s": index_again,
            "index_after_one_change": out.stdout.strip()}


def outside_change(binary, root, data, walk_always, changes=11):
    """Queries after one outside change each (p50), with the change feed or walking every query."""
    candidates = sorted(p for p in Path(root).rglob("*.rs") if 10_000 < p.stat().st_size < 40_000)[:400:20]
    r = Replay(binary, root, data, "fused", walk_always)
    r.call("search", {"query": "warm up", "limit": 10})
    # The watcher builds its watches in the background after the first query.
    time.sleep(3)
    steady = [r.call("search", {"query": QUERIES[0], "limit": 10})[0] for _ in range(5)]
    after_change = []
    for n, path in enumerate(candidates[:changes]):
        with open(path, "a") as f:
            f.write(f"\n// outside change {n} {time.time()}\n")
        t, answer = r.call("search", {"query": QUERIES[n % len(QUERIES)], "limit": 10})
        if answer["is_error"]:
            sys.exit(answer["text"])
        after_change.append(t)
    r.close()
    fed = r.err_path.read_text(errors="replace").count("brought up to date from the change feed")
    return {"steady_p50_ms": pct(steady, 0.5), "after_outside_change_p50_ms": pct(after_change, 0.5),
            "after_outside_change_p95_ms": pct(after_change, 0.95), "n": len(after_change), "feed_used": fed}


def outside_change_both(binary, root, data):
    """The query after an outside change with the feed and with a walk every query, in the same run."""
    feed = outside_change(binary, root, data, walk_always=False)
    walk = outside_change(binary, root, data, walk_always=True)
    return {"feed": feed, "walk": walk,
            "walk_over_feed_p50": walk["after_outside_change_p50_ms"] / max(1e-9, feed["after_outside_change_p50_ms"])}


def resume_after_kill(binary, root, data, after_s, embedder="static"):
    """`ctxfs index` killed with SIGKILL after `after_s` seconds, then run again: how much the first run kept."""
    import signal
    shutil.rmtree(data, ignore_errors=True)
    p = spawn([binary, "index", "--root", str(root), "--data", str(data), "--embedder", embedder],
              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    time.sleep(after_s)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    start = time.perf_counter()
    out = subprocess.run([binary, "index", "--root", str(root), "--data", str(data), "--embedder", embedder],
                         capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - start
    m = re.search(r"(\d+) files \(([\d.]+) MB\); (\d+) new or changed \(([\d.]+) MB, (\d+) chunks", out)
    files, new = int(m.group(1)), int(m.group(3))
    return {"killed_after_s": after_s, "embedder": embedder, "files": files, "kept_by_first_run": files - new,
            "indexed_by_second_run": new, "second_run_s": wall, "summary": out.strip()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctxfs", help="the ctxfs binary (default: cargo build --release)")
    ap.add_argument("--work", default="/tmp/ctxfs-speed")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--json", help="write all figures here")
    ap.add_argument("--base", help="use this tree as base instead of a copy of ~/.cargo/registry/src")
    ap.add_argument("--reuse-data", action="store_true", help="keep base's index from an earlier run (indexing only what changed)")
    ap.add_argument("--only-outside-change", action="store_true",
                    help="index base, then time the query after an outside change (feed vs walk) alone")
    ap.add_argument("--only-views", nargs="+", metavar="VIEW.json",
                    help="over big as a tree (its files under `/`): index it through a view that sees it all, "
                         "then time fused queries through each view file given")
    args = ap.parse_args()
    binary = args.ctxfs or str(build())
    if args.only_views:
        big = Path(args.work) / f"big{args.replicas}"
        data = Path(args.work) / f"data-big{args.replicas}"
        everything = Path(args.work) / "view-everything.json"
        everything.write_text(json.dumps({"grants": {"/": "ro"}}))
        res = {"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "load_at_start": os.getloadavg()}
        log("indexing big as a tree, through a view that sees it all")
        subprocess.run([binary, "index", "--tree", str(big), "--view", str(everything), "--data", str(data)],
                       check=True, capture_output=True)
        for view in [everything, *map(Path, args.only_views)]:
            log(f"latency at big through {view.name}: {view.read_text().strip()}")
            res[f"latency_big_view_{view.stem}"] = latency(binary, big, data, "fused", rounds=3, view=view)
            log(res[f"latency_big_view_{view.stem}"])
        out = json.dumps(res, indent=1, default=str)
        if args.json:
            Path(args.json).write_text(out)
        print(out)
        return
    rg = None if args.only_outside_change else ensure_ripgrep()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    res = {"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "load_at_start": os.getloadavg()}

    base = Path(args.base) if args.base else make_base(work)
    res["base_bytes"] = du_bytes(base)
    data = work / "data-base"
    if not args.reuse_data:
        shutil.rmtree(data, ignore_errors=True)
    log("indexing base")
    res["index_base"] = index_tree(binary, base, data)
    log(res["index_base"]["summary"])
    if args.only_outside_change:
        log("a query after one outside change at base: change feed vs a walk every query")
        res["outside_change_base"] = outside_change_both(binary, base, data)
        log(res["outside_change_base"])
        out = json.dumps(res, indent=1, default=str)
        if args.json:
            Path(args.json).write_text(out)
        print(out)
        return
    start = time.perf_counter()
    subprocess.run([rg, "-c", "-i", "--no-ignore", "-uu", "retry", str(base)], capture_output=True)
    res["rg_pass_base_s"] = time.perf_counter() - start
    for rankings in ["fused", "words", "meaning", "files"]:
        log(f"latency at base: {rankings}")
        res[f"latency_base_{rankings}"] = latency(binary, base, data, rankings)
        log(res[f"latency_base_{rankings}"])
    log("latency at base: fused, walking on every query (no watcher)")
    res["latency_base_fused_walk"] = latency(binary, base, data, "fused", walk_always=True)
    log(res["latency_base_fused_walk"])
    res["rg_latency_base"] = rg_latency(rg, base)
    log("incremental updates at base")
    res["incremental_base"] = incremental(binary, base, data)
    log(res["incremental_base"])
    log("a query after one outside change at base: change feed vs a walk every query")
    res["outside_change_base"] = outside_change_both(binary, base, data)
    log(res["outside_change_base"])
    log("resume: ctxfs index over base killed with SIGKILL after 6 s, then run again")
    res["resume_base"] = resume_after_kill(binary, base, work / "data-resume", 6.0)
    log(res["resume_base"])

    if not args.skip_big:
        big = make_big(work, base, args.replicas)
        res["big_bytes"] = du_bytes(big)
        data = work / f"data-big{args.replicas}"
        shutil.rmtree(data, ignore_errors=True)
        log(f"indexing big ({res['big_bytes'] / 1e9:.2f} GB)")
        res["index_big"] = index_tree(binary, big, data, sample=True)
        log(res["index_big"]["summary"])
        start = time.perf_counter()
        subprocess.run([rg, "-c", "-i", "--no-ignore", "-uu", "retry", str(big)], capture_output=True)
        res["rg_pass_big_s"] = time.perf_counter() - start
        lists = {}
        for rankings in ["fused", "words", "meaning", "files", "meaning+exact", "fused+exact"]:
            log(f"latency at big: {rankings}")
            lists[rankings] = {}
            res[f"latency_big_{rankings}"] = latency(binary, big, data, rankings, rounds=2, lists=lists[rankings])
            log(res[f"latency_big_{rankings}"])
        log("latency at big: fused, walking on every query (no watcher)")
        res["latency_big_fused_walk"] = latency(binary, big, data, "fused", rounds=2, walk_always=True)
        log(res["latency_big_fused_walk"])
        # What picking passages by their vectors' sign bits costs: overlap of the top 10 with exact scoring.
        for mode in ["meaning", "fused"]:
            overlaps = [len(set(lists[mode][q]) & set(lists[mode + "+exact"][q])) / max(1, len(lists[mode + "+exact"][q]))
                        for q in QUERIES]
            res[f"overlap_at_10_{mode}_vs_exact"] = sum(overlaps) / len(overlaps)
        res["rg_latency_big"] = rg_latency(rg, big)
        res["index_db_big_bytes"] = (data / "index.db").stat().st_size
    res["load_at_end"] = os.getloadavg()
    res["index_db_base_bytes"] = (work / "data-base" / "index.db").stat().st_size
    out = json.dumps(res, indent=1, default=str)
    if args.json:
        Path(args.json).write_text(out)
    print(out)


if __name__ == "__main__":
    main()

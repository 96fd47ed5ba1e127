#!/usr/bin/env python3
"""How many characters context hygiene saves over 500 real agent runs.

Replays the SWE-bench agent traces of /work/shared/data/agent-traces (Gemini 3
Pro in mini-swe-agent, converted into calls of our tool vocabulary) against
`ctxfs replay`, and counts the characters of tool output the model is sent:

  A  without hygiene: every result in full (reads: the full ctxfs read text,
     taken from a `recall` of the read's id; grep/glob/list: the trace's own
     output under a `[#id]` line, uncapped),
  C  with hygiene: what ctxfs sends (reads: its real answers, stubs
     included; grep/glob/list: the spec's rules applied to the trace's own
     output texts: the same call with the same text in the dedupe table is
     `[#0027] Same result as #0026.`, a text over 400 lines or 40,000
     characters keeps its head and tail),
  B  for reference, what mini-swe-agent showed (`chars` in the trace).

Calls that are not reads and do not map cleanly onto ctxfs grep/glob/list
(test runs, scripts, compound commands, piped greps, ...) are counted with
their trace `chars` in every column: hygiene does not reach them.

Two host kinds: `resend` (the dedupe table lasts the whole run, as in a CLI
agent that resends every earlier result; the default) and `fresh` (every
agent step is a new request without earlier results, so nothing earlier can
be pointed at).

While replaying, every read answer is checked against an independent model of
the spec (bracket format, lines, length, hash, when a stub is due); what does
not match is listed under "server problems", and the script then exits 1
with a one-line summary on stderr: its figures are not to be trusted.

Stdlib only:  python3 bench/hygiene_savings.py [--ctxfs target/release/ctxfs]
              [--traces DIR] [--limit N] [--only INSTANCE] [--jobs N]
              [--json OUT.json]
"""

import argparse
import collections
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from common import end, spawn  # noqa: E402
DEFAULT_TRACES = "/work/shared/data/agent-traces/traces"

# The spec's numbers (context.md, loop.json).
CAP_MAX_LINES = 400
CAP_MAX_CHARS = 40_000
HEAD_LINES = 200
HEAD_CHARS = 20_000
TAIL_LINES = 100
TAIL_CHARS = 10_000
READ_WINDOW = 2000

ABS_PREFIX = "__abs__"  # where files outside /testbed go inside the workspace

READ_BRACKET = re.compile(r"^\[(#[0-9a-f]{4,}) (.+) lines (\d+)-(\d+) of (\d+) sha ([0-9a-f]{8})\]$")
EMPTY_BRACKET = re.compile(r"^\[(#[0-9a-f]{4,}) (.+) empty sha ([0-9a-f]{8})\]$")
STUB_TAIL = re.compile(r"^ Unchanged since (#[0-9a-f]{4,}), which already shows lines (\d+)-(\d+)\.$")
RECALL_BRACKET = re.compile(r"^\[(#[0-9a-f]{4,}) recall (#[0-9a-f]{4,}) lines (\d+)-(\d+) of (\d+)\]$")
NUMBERED = re.compile(r"^\d+: ")
SAME_RESULT = re.compile(r"^\[(#[0-9a-f]{4,})\] Same result as (#[0-9a-f]{4,})\.$")

TOOLS = ["read", "grep", "glob", "list"]
SUB = ["read (of these: cut by mini-swe-agent)"]
OUTSIDE = ["grep (not mapped)", "glob (not mapped)", "list (not mapped)", "other", "edit_event"]


# ---------------------------------------------------------------- the spec's cap


def nl_lines(text):
    """The spec's lines: \\n-terminated (str.splitlines would also split on \\r, \\x0b, ...)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def cap(text, full_id):
    """The spec's head/tail cap (context.md §3); None when the text fits."""
    lines = nl_lines(text)
    if len(lines) <= CAP_MAX_LINES and len(text) <= CAP_MAX_CHARS:
        return None
    head = []
    head_lines = head_chars = 0
    if len(lines[0]) > HEAD_CHARS:
        head.append(lines[0][:HEAD_CHARS] + "[…cut]\n")
        head_lines = 1
    else:
        for line in lines:
            if head_lines == HEAD_LINES or head_chars + len(line) > HEAD_CHARS:
                break
            head.append(line)
            head_chars += len(line)
            head_lines += 1
        if head and not head[-1].endswith("\n"):
            head[-1] += "\n"
    tail_start = len(lines)
    tail_chars = 0
    while tail_start > head_lines and len(lines) - tail_start < TAIL_LINES:
        line = lines[tail_start - 1]
        if tail_chars + len(line) > TAIL_CHARS:
            break
        tail_chars += len(line)
        tail_start -= 1
    elided = tail_start - head_lines
    return "".join(head) + "[%d lines elided, full output %s]\n" % (elided, full_id) + "".join(lines[tail_start:])


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------- the workspace


def materialize(rec):
    lines = ["# line %d" % (n + 1) for n in range(rec["length"])]
    for start, seg in rec["segments"]:
        lines[start - 1:start - 1 + len(seg)] = seg
    return "".join(l + "\n" for l in lines)


def ws_rel(path):
    """The trace's path (relative to /testbed, or absolute) as a path inside the workspace."""
    if path.startswith("/"):
        rel = ABS_PREFIX + path
    else:
        rel = path
    rel = os.path.normpath(rel)
    if rel.startswith("..") or os.path.isabs(rel):
        return None
    return rel


# ---------------------------------------------------------------- mapping calls


def bre_to_regex(p):
    """A grep basic regular expression as a Rust (ERE-like) regex."""
    out = []
    i = 0
    while i < len(p):
        c = p[i]
        if c == "\\" and i + 1 < len(p):
            n = p[i + 1]
            if n in "(){}|+?":
                out.append(n)  # \( \| \+ are operators in GNU BRE
            else:
                out.append(c + n)
            i += 2
            continue
        if c in "(){}|+?":
            out.append("\\" + c)  # literal in BRE
        else:
            out.append(c)
        i += 1
    return "".join(out)


SIMPLE_GREP_FLAGS = set("nrRHIsEiFlc")


def map_grep(r):
    """ctxfs grep arguments for a trace grep, or None when it does not map cleanly."""
    if not isinstance(r.get("pattern"), str) or r.get("pipe"):
        return None
    path = r.get("path")
    if path is not None and not isinstance(path, str):
        return None
    args = {"pattern": None}
    inp = r.get("input")
    if inp in (None, "cat", "cat -n", "nl -ba"):
        pass
    else:
        m = re.match(r"^find (\S+) -name '([^']+)' \| xargs$", inp)
        if not m:
            return None
        args["glob"] = m.group(2)
    flags = set()
    context = 0
    for o in r.get("options") or []:
        m = re.match(r"^-([ABC])(\d+)$", o)
        if m:
            context = max(context, int(m.group(2)))
            continue
        if o.startswith("--include="):
            if "glob" in args:
                return None
            args["glob"] = o[len("--include="):].strip("'\"")
            continue
        if re.match(r"^-[A-Za-z]+$", o) and set(o[1:]) <= SIMPLE_GREP_FLAGS:
            flags |= set(o[1:])
            continue
        return None
    if "l" in flags and "c" in flags:
        return None
    pattern = r["pattern"]
    if "F" in flags:
        args["fixed_strings"] = True
    elif "E" not in flags:
        pattern = bre_to_regex(pattern)
    args["pattern"] = pattern
    if path is not None:
        args["path"] = path
    if "i" in flags:
        args["ignore_case"] = True
    if context:
        args["context"] = context
    if "l" in flags:
        args["output"] = "files"
    if "c" in flags:
        args["output"] = "count"
    return args


def map_glob(r):
    if r.get("pipe") or not isinstance(r.get("path"), (str, type(None))):
        return None
    opts = r.get("options") or []
    if len(opts) != 2 or opts[0] != "-name" or not r.get("cmd", "").startswith("find"):
        return None
    args = {"pattern": "**/" + opts[1]}
    if r.get("path") is not None:
        args["path"] = r["path"]
    return args


LIST_FLAGS = set("laAF1hpG")


def map_list(r):
    if r.get("pipe") or not r.get("cmd", "").startswith("ls"):
        return None
    path = r.get("path")
    if path is not None and not isinstance(path, str):
        return None
    for o in r.get("options") or []:
        if not (re.match(r"^-[A-Za-z0-9]+$", o) and set(o[1:]) <= LIST_FLAGS):
            return None
    return {} if path is None else {"path": path}


def ctxfs_path(p):
    """A trace path as a ctxfs call gives it (files outside /testbed live under __abs__)."""
    if isinstance(p, str) and p.startswith("/"):
        return ABS_PREFIX + p
    return p


def full_output(r):
    """The trace's output in full; an output mini-swe-agent cut is rebuilt with an
    estimated middle (lines of the known lines' average length)."""
    out = r.get("output") or ""
    elided = r.get("elided_chars")
    if not elided:
        return out, False
    tail = r.get("output_tail") or ""
    known = re.findall(r"[^\n]*\n", out + tail)
    avg = max(2, round(sum(map(len, known)) / len(known))) if known else 80
    n, rest = divmod(elided, avg)
    middle = ("x" * (avg - 1) + "\n") * n + ("x" * (rest - 1) + "\n" if rest > 1 else "\n" * rest)
    if out and not out.endswith("\n"):
        out += "\n"
    return out + middle + tail, True


# ---------------------------------------------------------------- ctxfs


class Ctxfs:
    def __init__(self, binary, root, data):
        self.err = open(os.path.join(data, "..", "stderr.txt"), "w")
        self.proc = spawn(
            [binary, "replay", "--root", root, "--data", data, "-"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
            text=True, encoding="utf-8", errors="surrogateescape", bufsize=1)
        self.seconds = 0.0
        self.calls = 0
        self.events = 0
        self.timing = {}
        self.last_id = 0
        self.id_problems = []

    def send(self, step):
        t = time.perf_counter()
        self.proc.stdin.write(json.dumps(step, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        took = time.perf_counter() - t
        self.seconds += took
        if "call" in step:
            self.calls += 1
        else:
            self.events += 1
        name = step.get("call") or step.get("event")
        if not self.timing:
            name = "first step incl. process start"
        kind = self.timing.setdefault(name, [0, 0.0])
        kind[0] += 1
        kind[1] += took
        if not line:
            raise RuntimeError("ctxfs ended: " + open(self.err.name).read()[-2000:])
        answer = json.loads(line)
        if "call" in step:
            # Ids count from 1 in lowercase hex, at least 4 digits, one per result.
            want = "#%04x" % (self.last_id + 1)
            if answer.get("id") != want or not answer.get("text", "").startswith("[" + want):
                self.id_problems.append((step, want, answer.get("id"), answer.get("text", "")[:100]))
            self.last_id += 1
        return answer

    def call(self, tool, args):
        return self.send({"call": tool, "args": args})

    def close(self):
        end(self.proc)
        self.err.close()


# ---------------------------------------------------------------- one trace


def new_bucket():
    return {"calls": 0, "B": 0, "A": 0, "C": 0, "stubs": 0, "capped": 0, "estimated": 0}


def load(path):
    meta, files, calls = None, collections.defaultdict(dict), []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["kind"] == "meta":
                meta = r
            elif r["kind"] == "file":
                files[r["path"]][r["version"]] = r
            elif r["kind"] == "call":
                calls.append(r)
    return meta, files, calls


def replay(trace_path, binary, host):
    meta, files, calls = load(trace_path)
    iid = meta["instance_id"]
    res = {"instance": iid, "host": host, "buckets": collections.defaultdict(new_bucket),
           "problems": [], "notes": collections.Counter(), "examples": {},
           "seconds": 0.0, "wall": 0.0, "calls": 0, "events": 0, "timing": {}, "excluded_final": 0}
    tmp = tempfile.mkdtemp(prefix="hygiene-")
    ws, data = os.path.join(tmp, "ws"), os.path.join(tmp, "data")
    os.makedirs(ws)
    os.makedirs(data)
    content = {}  # ws-relative path -> text written now (None: absent)
    version = {}

    def put(path, rec):
        rel = ws_rel(path)
        if rel is None:
            res["notes"]["unsafe path"] += 1
            return
        full = os.path.join(ws, rel)
        version[path] = rec["version"]
        try:
            if rec.get("deleted"):
                if os.path.isfile(full):
                    os.remove(full)
                content[rel] = None
                return
            text = materialize(rec)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
                f.write(text)
            content[rel] = text
        except OSError as e:
            res["notes"]["could not write a file: %s" % e.__class__.__name__] += 1
            content[rel] = None

    wall = time.perf_counter()
    for path, versions in files.items():
        v0 = versions.get(0)
        if v0 is None or v0.get("deleted"):
            continue
        if v0["length"] == 0 and not v0["length_known"] and not v0["segments"]:
            # Nothing was ever seen of it: a path whose read failed (no such file).
            res["notes"]["version 0 never seen, left absent"] += 1
            version[path] = 0
            continue
        put(path, v0)

    ctx = Ctxfs(binary, ws, data)
    B = res["buckets"]
    # My model of the dedupe table, to check ctxfs's reads and to apply the
    # spec to grep/glob/list over the trace's texts.
    table_reads = []  # (rel path, sha hex, first, last, id)
    table_searches = {}  # key -> [(id, text), ...]
    server_searches = {}  # the same over ctxfs's own answers on the workspace
    step = None
    try:
        for r in calls:
            if r.get("final_submission"):
                res["excluded_final"] += r.get("chars", 0)
                continue
            if r["step"] != step:
                step = r["step"]
                carries = host == "resend"
                ctx.send({"event": "new_request", "carries_earlier": carries})
                if not carries:
                    table_reads.clear()
                    table_searches.clear()
                    server_searches.clear()
            tool = r["tool"]
            chars = r.get("chars", 0)

            if tool == "edit_event":
                fp = r.get("file_path")
                if fp == "*" or fp not in files or r.get("version") not in files[fp]:
                    res["notes"]["edit_event without a file version"] += 1
                else:
                    put(fp, files[fp][r["version"]])
                b = B["edit_event"]
                b["calls"] += 1
                for k in "BAC":
                    b[k] += chars
                continue

            if tool == "read":
                do_read(r, ctx, res, content, version, table_reads)
                continue

            args = None
            if tool == "grep":
                args = map_grep(r)
            elif tool == "glob":
                args = map_glob(r)
            elif tool == "list":
                args = map_list(r)
            if args is None:
                name = tool if tool == "other" else tool + " (not mapped)"
                b = B[name]
                b["calls"] += 1
                for k in "BAC":
                    b[k] += chars
                continue
            call_args = dict(args)
            if "path" in call_args:
                call_args["path"] = ctxfs_path(call_args["path"])
            answer = ctx.call(tool, call_args)
            rid = answer["id"]
            check_search(ctx, res, r, tool, call_args, answer, server_searches)
            body, estimated = full_output(r)
            plain = "[%s]" % rid
            full = plain + "\n" + body
            key = tool + " " + canonical(args)
            # Any earlier result of the same call still in the table counts (§6).
            same = [e for e in table_searches.get(key, []) if e[1] == body]
            b = B[tool]
            b["calls"] += 1
            b["B"] += chars
            b["A"] += len(full)
            b["estimated"] += estimated
            if same:
                b["C"] += len("%s Same result as %s." % (plain, same[-1][0]))
                b["stubs"] += 1
                continue
            table_searches.setdefault(key, []).append((rid, body))
            # The cap cuts the result's lines; the bracket stays above them.
            capped = cap(body, rid)
            if capped is None:
                b["C"] += len(full)
            else:
                b["C"] += len(plain) + 1 + len(capped)
                b["capped"] += 1
    except Exception as e:  # keep going with the other traces
        res["problems"].append(("driver or server failure", iid, None, None, repr(e)[:2000]))
    finally:
        ctx.close()
        res["seconds"] = ctx.seconds
        res["calls"] = ctx.calls
        res["events"] = ctx.events
        res["timing"] = ctx.timing
        for step_, want, got, text in ctx.id_problems[:3]:
            res["problems"].append(("an id out of sequence or not in the spec's form", iid, None, step_, "expected %s, got %s: %s" % (want, got, text)))
        res["wall"] = time.perf_counter() - wall
        shutil.rmtree(tmp, ignore_errors=True)
    res["buckets"] = dict(res["buckets"])
    res["notes"] = dict(res["notes"])
    return res


def recall_all(ctx, rid):
    """A stored result in full, through as many recall windows as it takes:
    (the recall's first bracket, the stored text), or (the error, None)."""
    parts, offset, first_head = [], 1, None
    while True:
        rec = ctx.call("recall", {"id": rid, "offset": offset, "limit": 2000})
        head, _, body = rec["text"].partition("\n")
        m = RECALL_BRACKET.match(head)
        if rec["is_error"] or not m:
            return rec["text"], None
        first_head = first_head or head
        parts.append(body)
        last, total = int(m.group(4)), int(m.group(5))
        if last >= total:
            return first_head, "".join(p if p.endswith("\n") else p + "\n" for p in parts[:-1]) + parts[-1]
        offset = last + 1


def check_search(ctx, res, r, tool, args, answer, table):
    """Checks ctxfs's own answer to a grep/glob/list (on the reconstructed
    workspace) against the spec: a stub exactly when the same call's text is
    in the table, and the cap as the spec computes it."""
    iid, text, rid = res["instance"], answer["text"], answer["id"]
    key = tool + " " + canonical(args)
    rhead, body = recall_all(ctx, rid)
    # The store keeps what follows the bracket: the result itself.
    if body is None:
        res["problems"].append(("recall of a listing or search failed", iid, r["i"], args, rhead[:200]))
        return
    if body.startswith("[%s]" % rid):
        res["problems"].append(("stored text of a listing or search keeps its bracket", iid, r["i"], args, body[:200]))
        return
    earlier = table.get(key)
    m = SAME_RESULT.match(text)
    if answer["is_error"]:
        return
    if m:
        res["notes"]["ctxfs stubs on the workspace (%s)" % tool] += 1
        if not earlier or not any(e[1].rstrip("\n") == body.rstrip("\n") for e in earlier):
            res["problems"].append(("a same-result stub where the spec says a full result", iid, r["i"], args, text))
        elif m.group(1) != rid or m.group(2) not in [e[0] for e in earlier if e[1].rstrip("\n") == body.rstrip("\n")]:
            res["problems"].append(("a same-result stub naming the wrong result", iid, r["i"], args, text + " expected one of " + ", ".join(e[0] for e in earlier)))
        return
    if earlier and any(e[1].rstrip("\n") == body.rstrip("\n") for e in earlier):
        res["problems"].append(("a full result where the spec says a same-result stub", iid, r["i"], args, text[:200] + " earlier " + earlier[-1][0]))
    table.setdefault(key, []).append((rid, body))
    plain = "[%s]" % rid
    want = cap(body, rid)
    if want is None:
        if text.rstrip("\n") != (plain + "\n" + body).rstrip("\n"):
            res["problems"].append(("an uncapped result differs from its stored text", iid, r["i"], args, text[:200]))
    else:
        res["notes"]["ctxfs capped on the workspace (%s)" % tool] += 1
        if text.rstrip("\n") != (plain + "\n" + want).rstrip("\n"):
            res["problems"].append(("a capped result differs from the spec's cap", iid, r["i"], args, "%d vs %d chars" % (len(text), len(plain) + 1 + len(want))))


def do_read(r, ctx, res, content, version, table_reads):
    iid = res["instance"]
    b = res["buckets"]["read"]
    b["calls"] += 1
    b["B"] += r.get("chars", 0)
    fp = r["file_path"]
    rel = ws_rel(fp)
    given = ctxfs_path(fp)
    args = {"file_path": given}
    if r.get("offset") not in (None, 1):
        args["offset"] = r["offset"]
    if r.get("limit") is not None:
        args["limit"] = r["limit"]
    if version.get(fp) != r.get("version") and not r.get("error"):
        res["notes"]["read sees another version than the replay wrote"] += 1
    answer = ctx.call("read", args)
    text = answer["text"]
    head, sep, rest = text.partition("\n")
    if answer["is_error"]:
        # A read the trace saw fail, or one past the end of a reconstructed file.
        res["notes"]["read answered with an error" + (" (failed in the trace too)" if r.get("error") else "")] += 1
        res["examples"].setdefault("read error", (args, text[:300]))
        b["A"] += len(text)
        b["C"] += len(text)
        return
    rhead, stored = recall_all(ctx, answer["id"])
    if stored is None:
        res["problems"].append(("recall of a read failed", iid, r["i"], {"id": answer["id"]}, rhead[:300]))
        stored = ""
    # The store keeps a read's body (for a stub, the body of the full read it
    # stands for); the full read the model would be sent without hygiene is
    # the read's bracket above that body (an empty file: the bracket alone).
    bracket = head[:head.find("]") + 1]
    full = bracket + ("\n" + stored if stored else "")
    b["A"] += len(full)
    b["C"] += len(text)
    if r.get("elided_chars"):
        t = res["buckets"]["read (of these: cut by mini-swe-agent)"]
        t["calls"] += 1
        t["B"] += r.get("chars", 0)
        t["A"] += len(full)
        t["C"] += len(text)

    # ---- check the answer against the spec
    cur = content.get(rel)
    if cur is None:
        res["problems"].append(("a read of a file the workspace does not have answered", iid, r["i"], args, head))
        return
    data = cur.encode("utf-8", "surrogatepass")
    sha = hashlib.sha256(data).hexdigest()
    total = cur.count("\n") + (0 if cur.endswith("\n") or not cur else 1)
    stub = None
    m = READ_BRACKET.match(head)
    e = EMPTY_BRACKET.match(head) if not m else None
    if m:
        rid, path, first, last, of, sha8 = m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)), m.group(6)
    else:
        # A stub: the bracket, then the sentence on the same line.
        i = head.find("]")
        m = READ_BRACKET.match(head[:i + 1]) if i >= 0 else None
        t = STUB_TAIL.match(head[i + 1:]) if m else None
        if not (m and t) and not e:
            res["problems"].append(("read bracket not in the spec's format", iid, r["i"], args, head[:300]))
            return
        if e:
            rid, path, first, last, of, sha8 = e.group(1), e.group(2), 1, 0, 0, e.group(3)
        else:
            rid, path, first, last, of, sha8 = m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)), m.group(6)
            stub = (t.group(1), int(t.group(2)), int(t.group(3)))
            # A stub names the lines asked for: past the end when the call asked past it.
            asked_last = args.get("offset", 1) + min(args.get("limit") or READ_WINDOW, READ_WINDOW) - 1
            want = asked_last if args.get("limit") and asked_last > of else min(of, asked_last)
            if last != want:
                res["problems"].append(("a stub's bracket does not name the lines asked for", iid, r["i"], args, head + " expected up to %d" % want))
            last = min(last, of)
    if rid != answer["id"]:
        res["problems"].append(("bracket id is not the answer's id", iid, r["i"], args, head))
    if path != given:
        res["problems"].append(("bracket path is not the call's", iid, r["i"], args, head))
    if sha8 != sha[:8]:
        res["problems"].append(("bracket sha is not the file's (a stale hash?)", iid, r["i"], args, head + " expected " + sha[:8]))
    if of != total:
        res["problems"].append(("bracket length is not the file's", iid, r["i"], args, "%s expected of %d" % (head, total)))
    if total:
        want_first = args.get("offset", 1)
        want_last = min(total, want_first + (args.get("limit") or READ_WINDOW) - 1)
        if (first, last) != (want_first, want_last):
            res["notes"]["read shows other lines than asked (clamped?)"] += 1
            res["examples"].setdefault("read lines", (args, head, "expected %d-%d" % (want_first, want_last)))
    if total and args.get("limit", 0) > READ_WINDOW:
        res["notes"]["read with a limit over 2000: %s" % ("shown in full" if last - first + 1 > READ_WINDOW else "windowed")] += 1
        res["examples"].setdefault("limit over 2000", (args, head))

    # Is a stub due? Any full read of the same file, same hash, holding these lines.
    due = [x for x in table_reads if x[0] == rel and x[1] == sha and x[2] <= first and last <= x[3]] if total else []
    if stub:
        b["stubs"] += 1
        if not due:
            res["problems"].append(("a stub where the spec says a full read", iid, r["i"], args, head))
        elif not any(x[4] == stub[0] and (x[2], x[3]) == stub[1:] for x in due):
            res["problems"].append(("a stub naming the wrong earlier read", iid, r["i"], args, head + " due: %r" % due))
        asked_last = args.get("offset", 1) + (args.get("limit") or READ_WINDOW) - 1
        if args.get("limit") and asked_last > stub[2]:
            res["notes"]["stubs whose explicit range reaches past the earlier read (and past the file's end)"] += 1
            res["notes"]["  chars those stubs save"] += len(full) - len(text)
        # The stored text of a stub is the full read it stands for: the
        # named read's numbered lines first..last.
        named = [x for x in due if x[4] == stub[0]]
        if named:
            x = named[-1]
            numbered = [l for l in nl_lines(x[5]) if NUMBERED.match(l)]
            want = "".join(numbered[first - x[2]:last - x[2] + 1])
            got = "".join(l for l in nl_lines(stored) if NUMBERED.match(l))
            if got != want:
                res["problems"].append(("the stored text of a stub is not the full read", iid, r["i"], args, stored[:200]))
    else:
        if due:
            res["problems"].append(("a full read where the spec says a stub", iid, r["i"], args, head + " earlier: %r" % due[-1:]))
        if full.rstrip("\n") != text.rstrip("\n"):
            res["problems"].append(("recall of a full read differs from the read", iid, r["i"], args, head))
        if total:
            table_reads.append((rel, sha, first, last, rid, stored))


# ---------------------------------------------------------------- the report


def add(into, b):
    for k, v in b.items():
        into[k] += v


def pct(a, c):
    return "%.1f %%" % (100.0 * (a - c) / a) if a else "–"


def table(buckets, title):
    rows = []
    rows.append("| %s | calls | B: mini-swe-agent showed | A: without hygiene | C: with hygiene | saving (A→C) | stubs | capped |" % title)
    rows.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    tot = new_bucket()
    inside = new_bucket()
    for name in TOOLS + SUB + OUTSIDE:
        if name not in buckets:
            continue
        b = buckets[name]
        if name in SUB:
            name = "&nbsp;&nbsp;" + name
        else:
            add(tot, b)
        if name in TOOLS:
            add(inside, b)
        est = " (%d est.)" % b["estimated"] if b["estimated"] else ""
        rows.append("| %s | %d | %s | %s | %s | %s | %d | %d%s |" % (
            name, b["calls"], f"{b['B']:,}", f"{b['A']:,}", f"{b['C']:,}", pct(b["A"], b["C"]), b["stubs"], b["capped"], est))
    for label, b in (("**within reach** (read, grep, glob, list)", inside), ("**total**", tot)):
        rows.append("| %s | %d | %s | %s | %s | **%s** | %d | %d |" % (
            label, b["calls"], f"{b['B']:,}", f"{b['A']:,}", f"{b['C']:,}", pct(b["A"], b["C"]), b["stubs"], b["capped"]))
    return "\n".join(rows), tot, inside


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ctxfs", default=os.path.join(REPO, "target", "release", "ctxfs"))
    ap.add_argument("--traces", default=DEFAULT_TRACES)
    ap.add_argument("--limit", type=int, help="only the first N traces (by name)")
    ap.add_argument("--only", action="append", help="only this instance id (repeatable)")
    ap.add_argument("--hosts", default="resend,fresh")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", help="write the per-trace figures here")
    opts = ap.parse_args()

    paths = sorted(os.path.join(opts.traces, f) for f in os.listdir(opts.traces) if f.endswith(".jsonl.gz"))
    if opts.only:
        paths = [p for p in paths if os.path.basename(p)[:-len(".jsonl.gz")] in opts.only]
    if opts.limit:
        paths = paths[:opts.limit]
    hosts = opts.hosts.split(",")
    jobs = [(p, opts.ctxfs, h) for h in hosts for p in paths]
    t0 = time.perf_counter()
    results = []
    if opts.jobs > 1:
        with ProcessPoolExecutor(opts.jobs) as ex:
            for res in ex.map(replay, *zip(*jobs)):
                results.append(res)
    else:
        for n, job in enumerate(jobs):
            results.append(replay(*job))
            if (n + 1) % 50 == 0:
                print("... %d/%d" % (n + 1, len(jobs)), file=sys.stderr)
    elapsed = time.perf_counter() - t0

    out = []
    out.append("Traces: %d (%s), hosts: %s, %s" % (len(paths), opts.traces, ", ".join(hosts), time.strftime("%Y-%m-%d")))
    summary = {}
    problems = []
    notes = collections.Counter()
    examples = {}
    for h in hosts:
        rs = [r for r in results if r["host"] == h]
        buckets = collections.defaultdict(new_bucket)
        for r in rs:
            for name, b in r["buckets"].items():
                add(buckets[name], b)
            problems += r["problems"]
            for k, v in r["notes"].items():
                notes["%s: %s" % (h, k)] += v
            for k, v in r["examples"].items():
                examples.setdefault(k, (r["instance"],) + tuple(v))
        text, tot, inside = table(buckets, "host `%s`" % h)
        out.append("")
        out.append(text)
        secs = sum(r["seconds"] for r in rs)
        calls = sum(r["calls"] for r in rs)
        events = sum(r["events"] for r in rs)
        wall = sum(r["wall"] for r in rs)
        final = sum(r["excluded_final"] for r in rs)
        timing = {}
        for r in rs:
            for k, (n, t) in r.get("timing", {}).items():
                timing.setdefault(k, [0, 0.0])
                timing[k][0] += n
                timing[k][1] += t
        tool_n = sum(timing.get(k, [0, 0])[0] for k in TOOLS)
        tool_t = sum(timing.get(k, [0, 0.0])[1] for k in TOOLS)
        out.append("")
        out.append("%s throughput: %d tool calls (read, grep, glob, list) in %.2f s of answer round trips: %.0f calls/s; "
                   "all %d steps sent (incl. %d recalls and %d events) %.0f steps/s; per tool: %s. "
                   "Whole run incl. process starts and file writes: %.1f s. Final-submission output left out: %s chars."
                   % (h, tool_n, tool_t, tool_n / tool_t if tool_t else 0, calls + events,
                      timing.get("recall", [0])[0], events, (calls + events) / secs if secs else 0,
                      ", ".join("%s %.0f/s" % (k, n / t) for k, (n, t) in sorted(timing.items()) if t),
                      wall, f"{final:,}"))
        per_run = []
        for r in rs:
            a = sum(b["A"] for n, b in r["buckets"].items() if n not in SUB)
            c = sum(b["C"] for n, b in r["buckets"].items() if n not in SUB)
            ai = sum(r["buckets"][n]["A"] for n in TOOLS if n in r["buckets"])
            ci = sum(r["buckets"][n]["C"] for n in TOOLS if n in r["buckets"])
            per_run.append((100.0 * (a - c) / a if a else 0.0, 100.0 * (ai - ci) / ai if ai else 0.0))
        if per_run:
            def q(xs, f):
                xs = sorted(xs)
                return xs[min(len(xs) - 1, int(f * len(xs)))]
            tot_s = [x[0] for x in per_run]
            in_s = [x[1] for x in per_run]
            out.append("")
            out.append("%s per run: saving of the total median %.1f %%, 90th percentile %.1f %%, max %.1f %%; "
                       "within reach median %.1f %%, 90th percentile %.1f %%, max %.1f %%; runs with any saving: %d of %d"
                       % (h, q(tot_s, .5), q(tot_s, .9), max(tot_s), q(in_s, .5), q(in_s, .9), max(in_s),
                          sum(1 for x in tot_s if x > 0), len(tot_s)))
        summary[h] = {"buckets": dict(buckets), "total": tot, "within_reach": inside, "calls": calls,
                      "events": events, "seconds": secs, "wall": wall}
    out.append("")
    out.append("Elapsed: %.1f s" % elapsed)
    if notes:
        out.append("")
        out.append("Notes:")
        for k, v in sorted(notes.items()):
            out.append("  %s: %d" % (k, v))
        for k, v in examples.items():
            out.append("  example, %s: %s" % (k, json.dumps(v, ensure_ascii=False)[:400]))
    out.append("")
    kinds = collections.Counter(p[0] for p in problems)
    out.append("Server problems: %s" % (", ".join("%s ×%d" % kv for kv in kinds.items()) or "none"))
    seen = set()
    for p in problems:
        if p[0] in seen:
            continue
        seen.add(p[0])
        out.append("  %s: %s call %s args %s -> %s" % (p[0], p[1], p[2], json.dumps(p[3], ensure_ascii=False), p[4][:500]))
    print("\n".join(out))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"summary": summary, "problems": problems, "notes": dict(notes), "traces": results}, f, indent=1, default=str)
    if not results:
        sys.exit("hygiene_savings: FAILED: no traces replayed (is --traces %s right?)" % opts.traces)
    if problems:
        sys.exit("hygiene_savings: FAILED: %d problems (%s); the figures above do not measure ctxfs as the spec "
                 "describes it until these are explained or fixed" % (len(problems), ", ".join("%s ×%d" % kv for kv in kinds.items())))


if __name__ == "__main__":
    main()

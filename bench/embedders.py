#!/usr/bin/env python3
"""Embedder speed on this machine: chunks/s and ms per chunk at ~128 and ~480 tokens; not a test, nothing is asserted.

Embedders: `static` (the distilled table) and `minilm` (ctxfs's own forward pass of
all-MiniLM-L6-v2, src/index/bert.rs), both through `Embedder::embed` in
examples/bench_embedders.rs, and as the peer in the same run the numpy forward pass of
the same weights (scripts/bert_reference.py, one text at a time like ours, on one BLAS
thread; tokenising is left out of its time). Besides wall time, each row has the CPU time
per chunk (all threads), the fair measure of work on a shared machine. The texts are real code: a
crate's `src/` from ~/.cargo/registry/src cut by `ctxfs chunk --tokenizer model` into
pieces of 128 and of 480 tokens, only full-size pieces kept. The same run checks that
ours and numpy's vectors agree on the first texts of each set (cosine).

Usage: python3 bench/embedders.py [--crate NAME-VERSION] [--count N] [--peer-count N] [--rounds N]
(CTXFS_BENCH_NO_BUILD=1 skips the release build.) On a shared machine the rounds alternate ours
and the peer, and each embedder's best round is reported.
Needs numpy (for the peer) and the models (scripts/build-embedder).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, fail_if, log, target_dir  # noqa: E402

# Ours and the numpy forward pass run the same weights; below this they do not compute the same thing.
MIN_COSINE = 0.9999

sys.path.insert(0, str(REPO / "scripts"))
# The peer runs on one BLAS thread: its CPU time per chunk is then its work (OpenBLAS's threads spin
# while they wait, which on a shared machine counts as work), comparable with ours (all threads counted).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from bert_reference import Bert  # noqa: E402

REGISTRY = Path.home() / ".cargo" / "registry" / "src"
SIZES = (128, 480)


def crate_dir(name):
    for index in sorted(REGISTRY.iterdir()):
        if (index / name).is_dir():
            return index / name
    sys.exit(f"{name} is not in {REGISTRY}")


def pieces(binary, src, size, count):
    """Full-size pieces (at least 90% of `size` tokens) of the crate's .rs files, in file order."""
    out = []
    for path in sorted(src.rglob("*.rs")):
        res = subprocess.run([binary, "chunk", "--tokenizer", "model", "--size", str(size), "--overlap", "0", str(path)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            continue
        for line in res.stdout.splitlines():
            piece = json.loads(line)
            if piece["tokens"] >= 0.9 * size:
                out.append(piece["text"])
                if len(out) == count:
                    return out
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--crate", default="clap_builder-4.6.7")
    ap.add_argument("--count", type=int, default=96, help="texts per size for ours (default 96)")
    ap.add_argument("--peer-count", type=int, default=24, help="texts per size for the numpy peer (default 24)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each embedder's best counts (default 3)")
    args = ap.parse_args()

    cmd = ["cargo", "build", "--release", "--bin", "ctxfs", "--example", "bench_embedders"]
    log("$", " ".join(cmd))
    if not os.environ.get("CTXFS_BENCH_NO_BUILD"):
        subprocess.run(cmd, cwd=REPO, check=True)
    binary = target_dir() / "release" / "ctxfs"
    example = target_dir() / "release" / "examples" / "bench_embedders"

    src = crate_dir(args.crate) / "src"
    sets = {str(size): pieces(str(binary), src, size, args.count) for size in SIZES}
    bert = Bert(REPO / "models" / "minilm", exact_erf=False)
    ids = {size: [bert.tok.encode(t) for t in texts[:args.peer_count]] for size, texts in sets.items()}
    loads = [os.getloadavg()[0]]
    rounds, agreement = [], {}
    # Rounds alternate ours and the peer, so both see the same share of a busy machine; each one's best round counts.
    for round_no in range(args.rounds):
        log(f"round {round_no + 1}/{args.rounds}: ours")
        with tempfile.TemporaryDirectory() as tmp:
            texts, out = Path(tmp) / "texts.json", Path(tmp) / "out.json"
            texts.write_text(json.dumps({"sets": sets}))
            subprocess.run([str(example), str(texts), str(out), "static", "minilm"], check=True)
            rows = json.loads(out.read_text())
        log(f"round {round_no + 1}/{args.rounds}: numpy peer")
        for size, sample in ids.items():
            bert.embed_ids(sample[0])
            started, cpu = time.perf_counter(), time.process_time()
            vectors = [bert.embed_ids(i) for i in sample]
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            rows.append({"embedder": "numpy (peer, 1 thread)", "set": size, "chunks": len(sample),
                         "tokens_mean": sum(map(len, sample)) / len(sample), "seconds": seconds,
                         "chunks_per_s": len(sample) / seconds, "ms_per_chunk": seconds * 1000 / len(sample),
                         "cpu_ms_per_chunk": cpu * 1000 / len(sample)})
            ours = next(r for r in rows if r["embedder"] == "minilm" and r["set"] == size)["vectors"]
            cosines = [float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b)) for a, b in zip(ours, vectors)]
            agreement[size] = min(cosines + [agreement.get(size, 1.0)])
        rounds.append(rows)
        loads.append(os.getloadavg()[0])
    best, cpu = {}, {}
    for rows in rounds:
        for r in rows:
            key = (r["set"], r["embedder"])
            cpu[key] = min(cpu.get(key, float("inf")), r["cpu_ms_per_chunk"])
            if key not in best or r["chunks_per_s"] > best[key]["chunks_per_s"]:
                best[key] = r
    order = ["static", "minilm", "numpy (peer, 1 thread)"]
    rows = [dict(best[key], cpu_ms_per_chunk=cpu[key]) for key in sorted(best, key=lambda k: (int(k[0]), order.index(k[1])))]

    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")), "?")
    print(f"{args.crate} src/, pieces of ~128 and ~480 tokens; {os.cpu_count()} cores ({cpu}); best of {args.rounds} rounds; "
          f"load average {min(loads):.1f}-{max(loads):.1f}; numpy {np.__version__}")
    print("| embedder | tokens | chunks | chunks/s (wall) | ms per chunk (wall) | CPU ms per chunk |")
    print("|---|---:|---:|---:|---:|---:|")
    for size in sets:
        for r in (r for r in rows if r["set"] == size):
            print(f"| {r['embedder']} | {r['tokens_mean']:.0f} | {r['chunks']} | {r['chunks_per_s']:,.1f} | "
                  f"{r['ms_per_chunk']:.2f} | {r['cpu_ms_per_chunk']:.2f} |")
    for size in sets:
        per = {r["embedder"]: r["chunks_per_s"] for r in rows if r["set"] == size}
        work = {r["embedder"]: r["cpu_ms_per_chunk"] for r in rows if r["set"] == size}
        print(f"~{size} tokens: CPU per chunk, numpy peer / minilm (ours) = "
              f"{work['numpy (peer, 1 thread)'] / work['minilm']:.1f}x; wall chunks/s, ours (2 threads) / peer (1) = "
              f"{per['minilm'] / per['numpy (peer, 1 thread)']:.1f}x; "
              f"static / minilm = {per['static'] / per['minilm']:,.0f}x; "
              f"min cosine ours vs numpy over {min(len(sets[size]), 8, args.peer_count)} texts, all rounds = {agreement[size]:.6f}")
    # The same weights must give the same vectors: a speed of something else is no figure.
    fail_if("embedders", [f"~{size} tokens: our vectors and numpy's disagree (min cosine {agreement[size]:.6f} < {MIN_COSINE})"
                          for size in sets if agreement[size] < MIN_COSINE])


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Trains ctxfs's static table on (doc comment, code) pairs from locked Rust sources; a set-up step, not a run-time component.

`scripts/distill_embedder.py` calls `train` after distilling, with the source directories
`scripts/build-embedder` found through `cargo metadata --locked` (ctxfs's own locked
dependencies, so the corpus is fixed by Cargo.lock). Each `///` comment's first paragraph
is paired with the item it documents (up to 40 lines of code, the comment left out), and
the table is moved so that a comment's mean row and its code's mean row point the same way
and away from the other pairs of a batch: a symmetric contrastive loss (InfoNCE) over
L2-normalised means, the same vectors ctxfs computes at run time, with Adam applied to the
rows each batch holds (so rows no pair holds keep their distilled values). Crates that the
bench's question sets (bench/search_queries) are written over are left out of the corpus by
name, so those sets stay unseen. Why and what it gained: bench/README.md, "the static table
trained on doc comments".

Only numpy is needed; runs take a few minutes on two cores and are deterministic for a
given corpus (one seeded generator).
"""

import re
import time
from pathlib import Path

try:
    import numpy as np
except ImportError:  # distill_embedder's --is-current imports this without numpy; training checks in its caller.
    np = None

# Crates the bench's question sets ask about; training on them would leak answers into the table.
HELD_OUT = re.compile(r"^(tokio|tower|ureq|rusqlite|libsqlite3|tokenizers|clap|regex-syntax|ignore)")
ITEM = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(unsafe\s+|async\s+|const\s+|extern\s+\"[^\"]*\"\s+)*"
                  r"(fn|struct|enum|trait|type|const|static|mod|union|impl|macro_rules!)\b")
SKIPPED_DIRS = ("tests", "benches", "examples")

EPOCHS = 12
BATCH = 256
LEARNING_RATE = 1e-3
TEMPERATURE = 0.1
MAX_TOKENS = 256
SEED = 3


def doc_text(lines):
    """A doc comment's first paragraph as plain words: code spans, links and URLs dropped."""
    kept = []
    for line in lines:
        s = line.strip()[3:].strip()
        if not s or s.startswith("#") or s.startswith("```"):
            if kept:
                break
            continue
        kept.append(s)
    t = " ".join(kept)
    t = re.sub(r"\[`?([^\]`]*)`?\]\([^)]*\)", r"\1", t)
    t = re.sub(r"\[([^\]]*)\]", r"\1", t)
    t = re.sub(r"`[^`]*`", " ", t)
    t = re.sub(r"https?://\S+", " ", t)
    return re.sub(r"\s+", " ", t).strip()


def pairs_in(text):
    """(comment, code) pairs of one Rust file."""
    lines = text.split("\n")
    found = []
    i = 0
    while i < len(lines):
        if not lines[i].strip().startswith("///"):
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].strip().startswith("///"):
            j += 1
        k = j
        while k < len(lines) and (lines[k].strip().startswith("#[") or lines[k].strip().startswith("//")):
            k += 1
        if k < len(lines) and ITEM.match(lines[k]):
            query = doc_text(lines[i:j])
            body = []
            for line in lines[k:k + 40]:
                if line.strip().startswith("///"):
                    if body:
                        break
                    continue
                body.append(line)
            code = "\n".join(body)
            if 4 <= len(query.split()) <= 60 and len(code) > 40:
                found.append((query, code))
        i = j
    return found


def collect(source_dirs):
    """Every pair in the given crates' sources, in a fixed order, held-out crates left out; and how many crates gave some."""
    pairs = []
    crates = 0
    for root in sorted({Path(d) for d in source_dirs}):
        if HELD_OUT.match(root.name):
            continue
        before = len(pairs)
        for path in sorted(root.rglob("*.rs")):
            if any(part in SKIPPED_DIRS for part in path.relative_to(root).parts):
                continue
            try:
                pairs.extend(pairs_in(path.read_text(errors="replace")))
            except OSError:
                continue
        crates += len(pairs) > before
    return pairs, crates


class Bags:
    """Token-id lists as one flat array with offsets, for gathering mean rows."""

    def __init__(self, id_lists):
        self.lengths = np.array([len(x) for x in id_lists], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.flat = np.concatenate(id_lists).astype(np.int64)

    def batch(self, picks):
        lengths = self.lengths[picks]
        ids = np.concatenate([self.flat[s:s + n] for s, n in zip(self.starts[picks], lengths)])
        owner = np.repeat(np.arange(len(picks)), lengths)
        return ids, owner, lengths


def means(table, ids, lengths):
    """Each bag's mean row; `ids` holds the bags one after another."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.add.reduceat(table[ids], starts, axis=0) / lengths[:, None].astype(np.float32)


def row_sums(ids, values):
    """The distinct ids and, for each, the sum of the rows of `values` at its places (a sparse product)."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    firsts = np.flatnonzero(np.concatenate([[True], sorted_ids[1:] != sorted_ids[:-1]]))
    return sorted_ids[firsts], np.add.reduceat(values[order], firsts, axis=0)


def softmax_rows(x):
    """Each row's softmax (shifted by its maximum, so large logits do not overflow)."""
    e = np.exp(x - x.max(1, keepdims=True))
    e /= e.sum(1, keepdims=True)
    return e


def train(table, encode, skip, source_dirs, log, epochs=EPOCHS):
    """Returns the table trained on the sources' pairs (float32), and a summary for the README.

    `encode(text)` gives a text's token ids; ids in `skip` (special tokens) are dropped,
    as ctxfs drops them when it embeds.
    """
    started = time.time()
    pairs, crates = collect(source_dirs)
    if len(pairs) < 1000:
        raise SystemExit(f"only {len(pairs)} (comment, code) pairs found: not enough to train the table")

    def ids_of(text):
        ids = [i for i in encode(text) if i not in skip][:MAX_TOKENS]
        return ids or [0]

    queries = Bags([ids_of(q) for q, _ in pairs])
    codes = Bags([ids_of(c) for _, c in pairs])
    log(f"  {len(pairs)} pairs from {crates} crates, tokenised in {time.time() - started:.0f} s")
    rng = np.random.default_rng(SEED)
    t = table.astype(np.float32)
    m = np.zeros_like(t)
    v = np.zeros_like(t)
    beta1, beta2 = 0.9, 0.999
    steps = int(epochs * len(pairs) / BATCH)
    eye = np.eye(BATCH, dtype=np.float32)
    seen = np.zeros(len(t), dtype=np.int64)  # each row's own step count, for Adam's bias correction
    loss = float("nan")
    for step in range(1, steps + 1):
        picks = rng.choice(len(pairs), BATCH, replace=False)
        qi, qo, qn = queries.batch(picks)
        ci, co, cn = codes.batch(picks)
        vq, vc = means(t, qi, qn), means(t, ci, cn)
        nq = np.maximum(np.linalg.norm(vq, axis=1, keepdims=True), 1e-9)
        nc = np.maximum(np.linalg.norm(vc, axis=1, keepdims=True), 1e-9)
        uq, uc = vq / nq, vc / nc
        logits = uq @ uc.T / TEMPERATURE
        p_rows, p_cols = softmax_rows(logits), softmax_rows(logits.T)
        loss = float(-np.log(np.diag(p_rows) + 1e-12).mean())
        d_logits = ((p_rows - eye) + (p_cols - eye).T) / (2 * BATCH * TEMPERATURE)
        d_uq, d_uc = d_logits @ uc, d_logits.T @ uq
        d_vq = (d_uq - uq * (uq * d_uq).sum(1, keepdims=True)) / nq / qn[:, None]
        d_vc = (d_uc - uc * (uc * d_uc).sum(1, keepdims=True)) / nc / cn[:, None]
        # Adam on the rows this batch holds only (as a sparse Adam does): the others keep still.
        rows, g = row_sums(np.concatenate([qi, ci]), np.concatenate([d_vq[qo], d_vc[co]]))
        seen[rows] += 1
        m[rows] = beta1 * m[rows] + (1 - beta1) * g
        v[rows] = beta2 * v[rows] + (1 - beta2) * g * g
        k = seen[rows][:, None]
        t[rows] -= LEARNING_RATE * (m[rows] / (1 - beta1 ** k)) / (np.sqrt(v[rows] / (1 - beta2 ** k)) + 1e-8)
        if step % 200 == 0 or step == steps:
            log(f"  step {step}/{steps}, batch loss {loss:.3f}, {time.time() - started:.0f} s")
    t[sorted(skip)] = 0.0
    summary = {"pairs": len(pairs), "crates": crates, "steps": steps, "final_loss": loss,
               "seconds": time.time() - started}
    return t, summary

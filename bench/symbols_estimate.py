#!/usr/bin/env python3
"""Would definitions' names and doc comments help search? Two offline estimates on the held-out sets.

A file's *symbol text* is the names after `fn`, `struct`, `enum`, `trait`, `type`, `mod`, `const`,
`static`, `union` and `macro_rules!`, and the text of its `///`, `//!` and `/** */` comments, split and
stemmed as ctxfs splits words. Two ways of letting it vote are measured:

* a ranking of its own: BM25 over each file's symbol text, fused with ctxfs's fused file order (its
  answer at `limit` 40, files deduplicated) by reciprocal ranks (k 10) at weight w;
* BM25F-like, on the whole-file BM25 peer itself: each word of a name or doc comment counts beta more
  times in its file.

The tuning halves decide; the held-out figures are printed beside them (choose nothing on them). The
crates and ctxfs's indexes come from `search_heldout.py --work DIR`, run first with the same DIR.

Usage: python3 bench/symbols_estimate.py --ctxfs BIN --work DIR
Needs the `snowballstemmer` package (as ctxfs stems its words).
"""

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import snowballstemmer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_heldout as heldout  # noqa: E402
from common import words  # noqa: E402

STEMMER = snowballstemmer.stemmer("english")
# Function words a query drops before stemming (a short list; ctxfs's own is in src/index/terms.rs).
STOP = {"a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "is", "are", "be", "by", "with", "as", "at",
        "it", "its", "this", "that", "from", "when", "if", "into", "not", "no", "do", "does", "how", "what",
        "which", "where", "so", "they", "them", "my", "own", "one", "all", "every", "each", "can", "may"}
DEFINED = re.compile(r"\b(?:fn|struct|enum|trait|type|mod|const|static|union|macro_rules!)\s+(\w+)")
DOC_LINE = re.compile(r"^\s*(?://[/!]|\*|/\*\*)(.*)$", re.M)


def split(text):
    return [STEMMER.stemWord(w) for w in words(text)]


def symbol_text(text, names=True, docs=True):
    parts = DEFINED.findall(text) if names else []
    if docs:
        parts += [m.group(1) for m in DOC_LINE.finditer(text)]
    return " ".join(parts)


def query_terms(query):
    return {t for t in split(query) if t not in STOP}


def fuse(rankings, k=10):
    scores = {}
    for weight, ranking in rankings:
        for at, f in enumerate(ranking, 1):
            scores[f] = scores.get(f, 0.0) + weight / (k + at)
    return sorted(scores, key=lambda f: (-scores[f], f))


def pooled_mrr(sets, ranking_of):
    """MRR@10 pooled over the sets' questions, per half, and per set and half."""
    totals, per_set = {"tune": [0.0, 0], "held": [0.0, 0]}, {}
    for crate, qs, extra in sets:
        ranking = ranking_of(crate, qs, extra)
        for half in ("tune", "held"):
            sub = [q for q in qs if q["half"] == half]
            _, mrr = heldout.metrics(sub, ranking)
            totals[half][0] += mrr * len(sub)
            totals[half][1] += len(sub)
            per_set[f"{crate} {half}"] = round(mrr, 3)
    return {half: round(s / max(1, n), 3) for half, (s, n) in totals.items()}, per_set


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctxfs", required=True)
    ap.add_argument("--work", required=True, help="the --work directory of an earlier search_heldout.py run")
    args = ap.parse_args()
    work = Path(args.work)
    sets = []
    for path in sorted(heldout.SETS.glob("*.json")):
        data = json.loads(path.read_text())
        crate, qs = data["crate"], data["questions"]
        root = (work / crate).resolve()
        data_dir = work / f"data-{crate}-static"
        if not data_dir.exists():
            sys.exit(f"{data_dir} is missing: run search_heldout.py --work {work} first")
        ctxfs, _ = heldout.ctxfs_files(args.ctxfs, root, data_dir, "fused", qs, "static", 40)
        texts = {str(p.relative_to(root)): p.read_text(encoding="utf-8", errors="replace") for p in heldout.corpus_files(root)}
        sets.append((crate, qs, {"ctxfs": ctxfs, "texts": texts}))

    print("A ranking of its own, fused with ctxfs's files (MRR@10 pooled; per set)")
    for what, names, docs in (("names and comments", True, True), ("names", True, False), ("comments", False, True)):
        for weight in (0.0, 0.25, 0.5, 1.0):
            def ranking_of(crate, qs, extra):
                symbols = {f: Counter(split(symbol_text(t, names, docs))) for f, t in extra["texts"].items()}
                rank_by = heldout.bm25_ranker(symbols)
                return {q["id"]: fuse([(1.0, extra["ctxfs"][q["id"]]), (weight, rank_by(query_terms(q["query"])))])
                        for q in qs}
            pooled, per_set = pooled_mrr(sets, ranking_of)
            print(f"  {what}, w {weight}: tune {pooled['tune']}, held {pooled['held']}  {per_set}")

    print("Whole-file BM25 with names' and comments' words counted beta more times (the peer itself)")
    for what, names, docs in (("names and comments", True, True), ("names", True, False), ("comments", False, True)):
        for beta in (0, 1, 2, 4):
            def ranking_of(crate, qs, extra):
                files = {}
                for f, text in extra["texts"].items():
                    counts = Counter(split(text))
                    for t, n in Counter(split(symbol_text(text, names, docs))).items():
                        counts[t] += beta * n
                    files[f] = counts
                rank_by = heldout.bm25_ranker(files)
                return {q["id"]: rank_by(query_terms(q["query"])) for q in qs}
            pooled, per_set = pooled_mrr(sets, ranking_of)
            print(f"  {what}, beta {beta}: tune {pooled['tune']}, held {pooled['held']}  {per_set}")


if __name__ == "__main__":
    main()

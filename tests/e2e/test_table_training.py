"""The set-up step that trains the static table (scripts/train_table.py): what it pairs, what it leaves out, and that training makes pairs find each other; not the distillation and not ctxfs itself."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import train_table  # noqa: E402

RUST = '''
/// Waits with a growing delay before the next attempt. See [`Backoff`](crate::Backoff)
/// and <https://example.com>.
///
/// # Examples
/// ```
/// let b = backoff();
/// ```
#[inline]
pub fn next_delay(&mut self) -> Duration {
    let d = self.base * 2u32.pow(self.tries);
    self.tries += 1;
    d
}

/// Too short.
fn tiny() {}

/// A comment on nothing that is an item.
let x = 1;
'''


def test_a_doc_comment_is_paired_with_the_code_it_documents():
    pairs = train_table.pairs_in(RUST)
    assert len(pairs) == 1
    comment, code = pairs[0]
    # The first paragraph only, with code spans and URLs dropped and a link's text kept.
    assert comment.startswith("Waits with a growing delay before the next attempt. See Backoff and")
    assert not any(gone in comment for gone in ("https", "`", "crate::", "Examples", "let b"))
    assert code.startswith("pub fn next_delay") and code.rstrip().endswith("d\n}")
    assert "///" not in code and "Examples" not in code


def test_the_question_sets_crates_are_left_out(tmp_path):
    for name in ("tokio-1.54.1", "tower-layer-0.3.3", "backoff-0.4.0"):
        (tmp_path / name / "src").mkdir(parents=True)
        (tmp_path / name / "src" / "lib.rs").write_text(RUST)
        (tmp_path / name / "tests").mkdir()
        (tmp_path / name / "tests" / "t.rs").write_text(RUST)
    pairs, crates = train_table.collect([str(p) for p in tmp_path.iterdir()])
    assert crates == 1
    assert len(pairs) == 1  # backoff's src/lib.rs; its tests/ is skipped too


def test_training_brings_each_comment_nearest_its_code(tmp_path, monkeypatch):
    # Forty concepts, each with its own words in comments (c…) and in code (k…); a random table
    # knows nothing of which go together, so a comment finds its code at about chance (1 in 40).
    rng = np.random.default_rng(0)
    concepts = 40
    pairs = []
    for i in range(1200):
        c = i % concepts
        comment = " ".join(f"c{c}_{rng.integers(3)}" for _ in range(4)) + " the of"
        code = " ".join(f"k{c}_{rng.integers(3)}" for _ in range(6)) + " let fn"
        pairs.append((comment, code))
    vocab = {}

    def encode(text):
        return [vocab.setdefault(w, len(vocab)) for w in text.split()]

    for comment, code in pairs:
        encode(comment), encode(code)
    # Rows about as long as the distilled table's (SIF-weighted, centred).
    table = (0.05 * rng.normal(size=(len(vocab), 16))).astype(np.float16)
    monkeypatch.setattr(train_table, "collect", lambda dirs: (pairs, 1))

    def accuracy(t):
        def unit(text):
            v = t[encode(text)].astype(np.float32).mean(0)
            return v / np.linalg.norm(v)
        firsts = pairs[:concepts]
        q = np.stack([unit(a) for a, _ in firsts])
        k = np.stack([unit(b) for _, b in firsts])
        return float(np.mean(np.argmax(q @ k.T, axis=1) == np.arange(concepts)))

    before = accuracy(table)
    trained, summary = train_table.train(table, encode, set(), ["x"], lambda message: None, epochs=24)
    assert summary["pairs"] == 1200 and summary["steps"] == int(24 * 1200 / train_table.BATCH)
    assert before < 0.3
    assert accuracy(trained) > 0.9

//! The local models' tokenizer: the model's own `tokenizer.json` through the `tokenizers` crate, with a fast exact path for BERT's uncased WordPiece over printable ASCII; not an embedder, and not the chunker (which it serves through `chunk::Tokenizer`).

use super::chunk;
use super::embed::EmbedError;
use std::ops::Range;
use std::path::Path;

/// The model's own tokenizer (`tokenizer.json`), with the truncation and
/// padding it ships with turned off and no special tokens added.
///
/// For a BERT WordPiece tokenizer (lower-casing, as all-MiniLM-L6-v2's is)
/// runs of printable ASCII between whitespace are tokenized by `FastWordPiece`,
/// which gives the same ids and spans as the `tokenizers` crate, faster;
/// any other run (non-ASCII, control characters, a literal special token)
/// goes through the `tokenizers` crate. This is exact because BERT's
/// normaliser works character by character and its pre-tokenizer splits at
/// whitespace first, so runs between whitespace never interact; a test
/// checks it against the crate on this crate's sources and random text.
///
/// Why the fast path is kept rather than the crate alone (the rule is to use
/// the crate unless a measurement says otherwise): tokenizing is most of the
/// static embedder's work, and `table::tests::static_throughput` measures,
/// in the same run over this crate's sources, 1.07 MB/s for the fast path
/// against 0.66 MB/s for the `tokenizers` crate even in a debug build, where
/// this code runs unoptimised and the crate at opt-level 1 (issue 12's
/// measurement); optimised, 102 MB/s against 3.8 (bench/README.md).
pub struct ModelTokenizer {
    inner: tokenizers::Tokenizer,
    /// Whether each id is a special token (`[CLS]`, `[SEP]`, `[UNK]`, ...): counted as a token but given no weight in a mean.
    special: Vec<bool>,
    fast: Option<FastWordPiece>,
}

impl ModelTokenizer {
    /// Loads `tokenizer.json`.
    pub fn load(path: &Path) -> Result<ModelTokenizer, EmbedError> {
        let err = |message: String| EmbedError::Model { path: path.to_path_buf(), message };
        let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        let mut inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| err(e.to_string()))?;
        // The file bakes in truncation at 128 and fixed padding to 128: either would miscount.
        inner.with_truncation(None).map_err(|e| err(e.to_string()))?;
        inner.with_padding(None);
        let special_ids: Vec<usize> = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| id as usize)
            .collect();
        let mut special = vec![false; special_ids.iter().max().map_or(0, |m| m + 1)];
        special_ids.into_iter().for_each(|id| special[id] = true);
        let fast = serde_json::from_slice(&bytes).ok().and_then(|spec| FastWordPiece::from_spec(&spec));
        Ok(ModelTokenizer { inner, special, fast })
    }

    /// Calls `each(id, span)` for every token of the text, in order, without special tokens added.
    pub fn for_each_token(&self, text: &str, mut each: impl FnMut(u32, Range<usize>)) {
        let Some(fast) = &self.fast else {
            self.slow(text, 0, &mut each);
            return;
        };
        let bytes = text.as_bytes();
        let mut pieces = Vec::with_capacity(32);
        let mut at = 0;
        while at < bytes.len() {
            if is_run_break(bytes[at]) {
                at += 1;
                continue;
            }
            let start = at;
            let mut plain = true;
            while at < bytes.len() && !is_run_break(bytes[at]) {
                plain &= (0x21..0x7f).contains(&bytes[at]);
                at += 1;
            }
            // Runs end at ASCII whitespace, so `start..at` lies on character boundaries.
            let run = &bytes[start..at];
            if plain && !fast.holds_added_token(run) {
                fast.run(run, start, &mut pieces, &mut each);
            } else {
                self.slow(&text[start..at], start, &mut each);
            }
        }
    }

    /// The `tokenizers` crate over a part of a text that starts at byte `shift`.
    fn slow(&self, text: &str, shift: usize, each: &mut impl FnMut(u32, Range<usize>)) {
        if let Ok(encoding) = self.inner.encode(text, false) {
            for (&id, &(s, e)) in encoding.get_ids().iter().zip(encoding.get_offsets()) {
                each(id, shift + s.min(text.len())..shift + e.min(text.len()));
            }
        }
    }

    /// The token ids of the text, without special tokens added.
    pub fn ids(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3);
        self.for_each_token(text, |id, _| out.push(id));
        out
    }

    /// The byte span of each token, in order.
    pub fn spans(&self, text: &str) -> Vec<Range<usize>> {
        let mut out = Vec::with_capacity(text.len() / 3);
        self.for_each_token(text, |_, span| out.push(span));
        out
    }

    /// The ids and spans from the `tokenizers` crate alone, to check the fast path against.
    pub fn reference(&self, text: &str) -> Vec<(u32, Range<usize>)> {
        let mut out = Vec::new();
        self.slow(text, 0, &mut |id, span| out.push((id, span)));
        out
    }

    /// How many tokens the vocabulary holds, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Whether the id is a special token (it carries no content of the text).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }
}

/// The ASCII whitespace BERT's pre-tokenizer parts words at and its
/// normaliser keeps (it drops a vertical tab or form feed, joining the words
/// around it): the fast path's runs end there.
fn is_run_break(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// The pieces of a vocabulary that may stand at one place in a word, as a trie that finds the
/// longest of them the rest of a word begins with (WordPiece's greedy longest match).
///
/// Why a double-array trie (`yada`): the hash map this replaced was asked for every length from
/// the longest piece down, each a hash and a comparison, and that was most of tokenizing. An
/// `aho-corasick` automaton, already built for `regex`, was tried first and measured slower than
/// the map (65 MB/s against 71 over this crate's sources): its tables for 30,000 pieces do not
/// stay in the cache.
struct Pieces {
    trie: yada::DoubleArray<Vec<u8>>,
}

impl Pieces {
    /// Only pieces of printable ASCII are kept, as only they can match a run the fast path takes;
    /// None if there is none, or two pieces are the same.
    fn new(mut pieces: Vec<(&[u8], u32)>) -> Option<Pieces> {
        pieces.retain(|(piece, _)| !piece.is_empty() && piece.iter().all(|b| (0x21..0x7f).contains(b)));
        pieces.sort_unstable();
        let trie = yada::builder::DoubleArrayBuilder::build(&pieces).ok()?;
        Some(Pieces { trie: yada::DoubleArray::new(trie).ok()? })
    }

    /// The id and length of the longest piece the text begins with, if any.
    fn longest_at_start(&self, text: &[u8]) -> Option<(u32, usize)> {
        self.trie.common_prefix_search(text).last()
    }
}

/// BERT's uncased WordPiece over runs of printable ASCII, the same as the `tokenizers` crate gives.
struct FastWordPiece {
    /// Pieces that begin a word.
    first: Pieces,
    /// Pieces that continue a word, without their `##`.
    rest: Pieces,
    unk: u32,
    max_word: usize,
    /// Added tokens (`[CLS]`, ...), which the `tokenizers` crate matches in the raw text.
    added: Vec<Vec<u8>>,
    /// Whether a byte begins an added token, in either case.
    added_starts: [bool; 256],
}

impl FastWordPiece {
    /// The fast path for a `tokenizer.json` it is exact for: a lower-casing `BertNormalizer`, `BertPreTokenizer`, `WordPiece`.
    fn from_spec(spec: &serde_json::Value) -> Option<FastWordPiece> {
        let normalizer = &spec["normalizer"];
        let ok = normalizer["type"] == "BertNormalizer"
            && normalizer["lowercase"] == true
            && normalizer["clean_text"] == true
            && spec["pre_tokenizer"]["type"] == "BertPreTokenizer"
            && spec["model"]["type"] == "WordPiece";
        if !ok {
            return None;
        }
        let model = &spec["model"];
        let prefix = model["continuing_subword_prefix"].as_str()?;
        let vocab = model["vocab"].as_object()?;
        let unk = vocab.get(model["unk_token"].as_str()?)?.as_u64()? as u32;
        let max_word = model["max_input_chars_per_word"].as_u64()? as usize;
        if max_word > 256 {
            return None;
        }
        let (mut first, mut rest) = (Vec::new(), Vec::new());
        for (piece, id) in vocab {
            let id = u32::try_from(id.as_u64()?).ok()?;
            match piece.strip_prefix(prefix) {
                Some(tail) if !tail.is_empty() => rest.push((tail.as_bytes(), id)),
                _ => first.push((piece.as_bytes(), id)),
            };
        }
        let added: Vec<Vec<u8>> = spec["added_tokens"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["content"].as_str())
                    .map(|c| c.as_bytes().to_vec())
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let mut added_starts = [false; 256];
        for first in added.iter().filter_map(|token| token.first()) {
            added_starts[usize::from(first.to_ascii_lowercase())] = true;
            added_starts[usize::from(first.to_ascii_uppercase())] = true;
        }
        Some(FastWordPiece { first: Pieces::new(first)?, rest: Pieces::new(rest)?, unk, max_word, added, added_starts })
    }

    fn holds_added_token(&self, run: &[u8]) -> bool {
        // Without regard to case: a wider test only sends more runs down the exact slow path. Only
        // the places holding an added token's first byte are compared: comparing every place had
        // been a sixth of tokenizing.
        (0..run.len()).any(|at| {
            self.added_starts[usize::from(run[at])]
                && self.added.iter().any(|t| run[at..].get(..t.len()).is_some_and(|w| w.eq_ignore_ascii_case(t)))
        })
    }

    /// A run of printable ASCII starting at byte `at`: punctuation characters are words of their own.
    /// `pieces` is room for a word's pieces, reused from word to word.
    fn run(
        &self,
        run: &[u8],
        at: usize,
        pieces: &mut Vec<(u32, usize, usize)>,
        each: &mut impl FnMut(u32, Range<usize>),
    ) {
        let mut i = 0;
        while i < run.len() {
            if run[i].is_ascii_punctuation() {
                self.word(&run[i..i + 1], at + i, pieces, each);
                i += 1;
                continue;
            }
            let start = i;
            while i < run.len() && !run[i].is_ascii_punctuation() {
                i += 1;
            }
            self.word(&run[start..i], at + start, pieces, each);
        }
    }

    /// Greedy longest-match-first WordPiece; a word that cannot be covered, or is too long, is one `[UNK]`.
    ///
    /// A word's pieces wait in `pieces` until the whole word is covered. An
    /// array with room for the longest word's pieces, made and zeroed for
    /// every word, had been a fifth of indexing's time.
    fn word(
        &self,
        word: &[u8],
        at: usize,
        pieces: &mut Vec<(u32, usize, usize)>,
        each: &mut impl FnMut(u32, Range<usize>),
    ) {
        if word.len() > self.max_word {
            each(self.unk, at..at + word.len());
            return;
        }
        let mut lower = [0u8; 256];
        let lower = &mut lower[..word.len()];
        lower.copy_from_slice(word);
        lower.make_ascii_lowercase();
        pieces.clear();
        let mut pos = 0;
        while pos < lower.len() {
            let pieces_here = if pos == 0 { &self.first } else { &self.rest };
            let Some((id, len)) = pieces_here.longest_at_start(&lower[pos..]) else {
                each(self.unk, at..at + word.len());
                return;
            };
            pieces.push((id, pos, pos + len));
            pos += len;
        }
        for &(id, s, e) in pieces.iter() {
            each(id, at + s..at + e);
        }
    }
}

impl chunk::Tokenizer for ModelTokenizer {
    fn tokens(&self, text: &str) -> Vec<Range<usize>> {
        self.spans(text)
    }

    fn count(&self, text: &str) -> usize {
        self.ids(text).len()
    }

    /// Only for BERT's WordPiece, the tokenizer whose rules `keeps_apart` knows.
    fn token_ids(&self, text: &str) -> Option<chunk::TokenIds> {
        self.fast.as_ref()?;
        let mut out =
            chunk::TokenIds { ids: Vec::with_capacity(text.len() / 3), starts: Vec::with_capacity(text.len() / 3) };
        self.for_each_token(text, |id, span| {
            out.ids.push(id);
            out.starts.push(span.start);
        });
        Some(out)
    }

    /// BERT's normaliser works a character at a time and its pre-tokenizer
    /// cuts words at whitespace and punctuation, so a place next to a space,
    /// tab, line break or ASCII punctuation mark parts two words on its own.
    /// Other whitespace is not taken: the normaliser drops control
    /// characters (a vertical tab or form feed joins the words around it).
    fn keeps_apart(&self, text: &str, at: usize) -> bool {
        let parts = |b: &u8| is_run_break(*b) || b.is_ascii_punctuation();
        let bytes = text.as_bytes();
        self.fast.is_some() && (at == 0 || at >= bytes.len() || parts(&bytes[at - 1]) || parts(&bytes[at]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_find_the_longest_piece_a_text_begins_with() {
        let pieces = Pieces::new(vec![
            (b"ab".as_slice(), 2),
            (b"a".as_slice(), 1),
            (b"abc".as_slice(), 3),
            (b"b".as_slice(), 4),
            ("\u{e9}t\u{e9}".as_bytes(), 5),
            (b"".as_slice(), 6),
        ])
        .expect("the pieces make a trie");
        assert_eq!(pieces.longest_at_start(b"abd"), Some((2, 2)));
        assert_eq!(pieces.longest_at_start(b"abcabc"), Some((3, 3)));
        assert_eq!(pieces.longest_at_start(b"ba"), Some((4, 1)));
        assert_eq!(pieces.longest_at_start(b"xab"), None);
        assert_eq!(pieces.longest_at_start(b""), None);
        // A piece outside printable ASCII is left out: no run the fast path takes could hold it.
        assert_eq!(pieces.longest_at_start("\u{e9}t\u{e9}".as_bytes()), None);
        assert!(Pieces::new(vec![(b"a".as_slice(), 1), (b"a".as_slice(), 2)]).is_none(), "the same piece twice");
    }

    /// A piece that comes with ids has exactly the ids it would be given on
    /// its own, over this crate's sources and texts that tempt a wrong cut
    /// (long words, control characters, accents, added tokens, CJK), in
    /// pieces small enough that cuts fall everywhere.
    #[test]
    fn pieces_with_ids_have_their_own_ids() {
        let dir = super::super::models::find_model_dir(Path::new("/nonexistent-ctxfs-data"))
            .expect("no embedding table is installed: run scripts/build-embedder (scripts/test does)");
        let t = ModelTokenizer::load(&dir.join("tokenizer.json")).expect("the installed tokenizer loads");
        let long_word = "supercalifragilistic".repeat(12);
        let mut texts: Vec<String> = vec![
            format!("{long_word} {long_word}x{long_word}"),
            "alpha\u{b}beta gamma\u{c}delta e\u{301}psilon [CLS]zeta[SEP] \u{65e5}\u{672c}\u{8a9e} theta".repeat(20),
            "word\u{1}word another\u{7f}one; (paren) x.y::z ".repeat(30),
        ];
        texts.extend(super::super::testing::crate_sources());
        let (mut with_ids, mut pieces_n) = (0, 0);
        for text in &texts {
            for (size, overlap) in [(480, 64), (16, 4), (5, 2)] {
                let (pieces, ids) = chunk::chunk_with_ids(text, &t, size, overlap);
                assert_eq!(ids, t.ids(text), "the whole text's ids");
                let plain = chunk::chunk(text, &t, size, overlap);
                assert_eq!(pieces.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(), plain, "the same pieces");
                for (piece, own) in &pieces {
                    pieces_n += 1;
                    if let Some(own) = own {
                        with_ids += 1;
                        assert_eq!(&ids[own.clone()], t.ids(&piece.text).as_slice(), "the ids of {:?}", piece.text);
                    }
                }
            }
        }
        // A form feed is dropped by the normaliser, so it joins the words around it: no place beside it parts them.
        let joined = "gamma\u{c}delta";
        assert_ne!(t.ids(joined), [t.ids(&joined[..6]), t.ids(&joined[6..])].concat());
        assert!(!chunk::Tokenizer::keeps_apart(&t, joined, 6) && !chunk::Tokenizer::keeps_apart(&t, joined, 5));
        assert!(chunk::Tokenizer::keeps_apart(&t, "gamma delta", 6) && chunk::Tokenizer::keeps_apart(&t, "a.b", 1));
        assert!(!chunk::Tokenizer::keeps_apart(&t, "gammadelta", 5));
        // Most cuts fall between words: the ids are not given up on everywhere.
        assert!(with_ids * 10 > pieces_n * 8, "{with_ids} of {pieces_n} pieces came with ids");
    }

    #[test]
    fn fast_tokenizer_matches_the_tokenizers_crate() {
        let dir = super::super::models::find_model_dir(Path::new("/nonexistent-ctxfs-data"))
            .expect("no embedding table is installed: run scripts/build-embedder (scripts/test does)");
        let t = ModelTokenizer::load(&dir.join("tokenizer.json")).expect("the installed tokenizer loads");
        assert!(t.fast.is_some(), "the model's tokenizer.json should take the fast path");
        let mut texts: Vec<String> = [
            "Hello, world!",
            "fn main() { println!(\"{}\", x.to_string()); } // CamelCaseName snake_case_name",
            "[CLS] a [SEP] b[MASK]c [cls] [Unk]",
            "control\u{1}chars\u{0}here and\u{7f}del \u{b}vt\u{c}ff",
            "café naïve Ünïcödé — “quotes” 日本語のテキスト → ⌈x⌉ émoji 🦀 \u{a0}nbsp\u{3000}ideographic",
            "e\u{301}combining",
            &"a".repeat(100),
            &"b".repeat(101),
            &format!("{} tail", "xyz".repeat(40)),
            "\t\r\n  \r\n\n",
            "",
            "0x7fff_ffff 3.14159e-10 1_000_000 @#$%^&*()_+-=[]{}|;':\",./<>?`~",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Random strings over printable ASCII, whitespace, controls and a few wider characters.
        let alphabet: Vec<char> = (0x20u8..0x7f).map(char::from).chain("\t\n\r\u{1}\u{b}é—日\u{a0}".chars()).collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..300 {
            let mut text = String::new();
            for _ in 0..(seed % 200) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                text.push(alphabet[(seed % alphabet.len() as u64) as usize]);
            }
            texts.push(text);
        }
        texts.extend(super::super::testing::crate_sources());
        for text in &texts {
            let fast: Vec<(u32, Range<usize>)> = t.ids(text).into_iter().zip(t.spans(text)).collect();
            let reference = t.reference(text);
            if fast != reference {
                let at =
                    fast.iter().zip(&reference).position(|(a, b)| a != b).unwrap_or(fast.len().min(reference.len()));
                panic!(
                    "differs at token {at} of {:?}...: fast {:?} vs reference {:?}",
                    &text.chars().take(60).collect::<String>(),
                    &fast[at.saturating_sub(2)..(at + 3).min(fast.len())],
                    &reference[at.saturating_sub(2)..(at + 3).min(reference.len())]
                );
            }
        }
    }
}

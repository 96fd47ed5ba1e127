//! The words search counts: text split into lowercase words, identifiers cut at `_` and case changes and also kept joined, each word stemmed; not the ranking, the store or the embedder's tokens.
//!
//! `words` is the plain splitter (`retryFailedUpload` → `retry`, `failed`,
//! `upload`). `terms` is what the index stores and a query is matched by:
//! the same words, and after the parts of every identifier of two parts or
//! more the parts joined (`readexact`, `spawnblocking`), so a question that
//! names an identifier matches it more sharply than its parts scattered
//! through a file; then each reduced to its English stem (Snowball's Porter
//! 2: `padding` and `pads` are `pad`, `retrying` and `retries` are `retri`),
//! so a question that says what code does in other forms of its words still
//! meets them. English function words are left out of a query by
//! `query_terms`, unless nothing else is left.

use rust_stemmers::{Algorithm, Stemmer};
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::OnceLock;

/// Splits text into lowercase words, cutting identifiers at `_` and case changes.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for raw in text.split(|c: char| !c.is_alphanumeric()) {
        split_run(raw, &mut out);
    }
    out
}

/// The parts of one alphanumeric run, cut where a lowercase letter or digit meets an uppercase one.
fn split_run(raw: &str, out: &mut Vec<String>) {
    for_each_part(raw, &mut String::new(), |part| out.push(part.to_owned()));
}

/// `split_run`'s parts, each lowercased into `buffer` and handed to `each`.
fn for_each_part(raw: &str, buffer: &mut String, each: impl FnMut(&str)) {
    if raw.is_ascii() {
        ascii_parts(raw, buffer, each)
    } else {
        char_parts(raw, buffer, each)
    }
}

/// `for_each_part` a character at a time, for any run.
fn char_parts(raw: &str, buffer: &mut String, mut each: impl FnMut(&str)) {
    buffer.clear();
    let mut prev_lower = false;
    for c in raw.chars() {
        if c.is_uppercase() && prev_lower && !buffer.is_empty() {
            each(buffer);
            buffer.clear();
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        buffer.extend(c.to_lowercase());
    }
    if !buffer.is_empty() {
        each(buffer);
    }
}

/// `for_each_part` for a run of ASCII, nearly every run of code: the same
/// parts, each cut whole and lowercased in place. Lowercasing a character at
/// a time into a growing string was a tenth of indexing's samples
/// (bench/README.md).
fn ascii_parts(raw: &str, buffer: &mut String, mut each: impl FnMut(&str)) {
    let mut part = |range: std::ops::Range<usize>| {
        buffer.clear();
        buffer.push_str(&raw[range]);
        buffer.make_ascii_lowercase();
        each(buffer);
    };
    let bytes = raw.as_bytes();
    let (mut start, mut prev_lower) = (0, false);
    for (at, b) in bytes.iter().enumerate() {
        if b.is_ascii_uppercase() && prev_lower && at > start {
            part(start..at);
            start = at;
        }
        prev_lower = b.is_ascii_lowercase() || b.is_ascii_digit();
    }
    if start < bytes.len() {
        part(start..bytes.len());
    }
}

/// The words of a text for the index: `words`, and after the parts of each
/// identifier (a run of letters, digits and `_`) that has two or more, the
/// parts joined; each stemmed (`stem_all`).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = unstemmed_terms(text);
    stem_all(&mut out);
    out
}

/// A text's `terms` counted: each distinct term with how often `terms` gives it.
///
/// What the index stores of a passage. Counting as the words are cut, with one
/// buffer for the word being cut and one string a distinct term, saves making
/// a string of every word: a string a word, then sorting them to count them,
/// had been a fifth of indexing's samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CountedTerms {
    /// Each distinct term and its count.
    pub counts: fnv::FnvHashMap<String, u32>,
    /// How many terms the text gives, repeats included (`terms(text).len()`).
    pub total: usize,
}

impl CountedTerms {
    /// Counts the terms of a text.
    pub fn of(text: &str) -> CountedTerms {
        let mut counted = CountedTerms::default();
        for_each_unstemmed_term(text, |word| counted.add(word));
        counted
    }

    /// Counts one unstemmed word, by its stem.
    fn add(&mut self, word: &str) {
        self.total += 1;
        with_stem(word, |stem| match self.counts.get_mut(stem) {
            Some(count) => *count += 1,
            None => {
                self.counts.insert(stem.to_owned(), 1);
            }
        });
    }
}

/// `terms` before stemming.
fn unstemmed_terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_unstemmed_term(text, |term| out.push(term.to_owned()));
    out
}

/// `unstemmed_terms`, each handed to `each` as it is cut: an identifier's
/// parts, then, for one of two parts or more, the parts joined.
fn for_each_unstemmed_term(text: &str, mut each: impl FnMut(&str)) {
    let (mut part, mut joined) = (String::new(), String::new());
    for ident in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        let mut parts = 0;
        joined.clear();
        for raw in ident.split('_') {
            for_each_part(raw, &mut part, |part| {
                parts += 1;
                joined.push_str(part);
                each(part);
            });
        }
        if parts >= 2 {
            each(&joined);
        }
    }
}

/// A lowercase word's English stem, as `terms` stores it (for tests that look up a word's postings).
#[cfg(test)]
pub(crate) fn stem(word: &str) -> String {
    let mut word = word.to_owned();
    stem_in_place(&mut word);
    word
}

/// Each word reduced to its English stem (Snowball's Porter 2), the same
/// for the index and the query. On the held-out questions' tuning halves,
/// whole-file BM25 over stems ranks the answer higher on every set
/// (bench/README.md).
fn stem_all(words: &mut [String]) {
    for word in words {
        stem_in_place(word);
    }
}

fn stem_in_place(word: &mut String) {
    let mut stemmed = None;
    with_stem(word, |stem| {
        if stem != word.as_str() {
            stemmed = Some(stem.to_owned());
        }
    });
    if let Some(stemmed) = stemmed {
        *word = stemmed;
    }
}

/// Calls `each` with the word's English stem (the word itself where Porter 2 leaves it as it is).
fn with_stem(word: &str, each: impl FnOnce(&str)) {
    static ENGLISH: OnceLock<Stemmer> = OnceLock::new();
    /// How many words a thread remembers the stems of before it starts over.
    const REMEMBERED: usize = 1 << 16;
    thread_local! {
        // A memo of a pure function, not state: code repeats its words, and a
        // look-up costs a fraction of the stemmer (a first index of 128k
        // passages took 17 % more CPU time stemming every word, 9 % with
        // this; bench/README.md, "Held-out questions with stemmed words").
        static STEMS: RefCell<fnv::FnvHashMap<String, Option<String>>> = RefCell::new(fnv::FnvHashMap::default());
    }
    // Porter 2 leaves words of one or two letters as they are.
    if word.len() <= 2 {
        return each(word);
    }
    STEMS.with_borrow_mut(|stems| {
        if let Some(stemmed) = stems.get(word) {
            return each(stemmed.as_deref().unwrap_or(word));
        }
        if stems.len() >= REMEMBERED {
            stems.clear();
        }
        let stemmed = match ENGLISH.get_or_init(|| Stemmer::create(Algorithm::English)).stem(word) {
            Cow::Owned(stemmed) => Some(stemmed),
            Cow::Borrowed(_) => None,
        };
        each(stemmed.as_deref().unwrap_or(word));
        stems.insert(word.to_owned(), stemmed);
    });
}

/// English function words, left out of a query's word rankings (see `query_terms`).
const STOP: [&str; 64] = [
    "a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "is", "are", "be", "by", "with", "as", "at", "it",
    "its", "this", "that", "from", "when", "if", "into", "not", "no", "do", "does", "how", "what", "which", "where",
    "we", "you", "can", "will", "all", "any", "such", "than", "then", "there", "these", "those", "was", "were", "has",
    "have", "had", "should", "would", "may", "so", "but", "also", "only", "our", "your", "their", "them", "they", "i",
    "s",
];

/// The query's words for the word rankings: `terms`, without repeats, and
/// without English function words unless nothing else is left. A question in
/// plain English ("where do we retry the failed upload") otherwise weighs
/// "the" and "we" by their rarity in code, where they live in the odd comment.
/// Function words are told before stemming (`does` would be `doe`).
pub fn query_terms(query: &str) -> Vec<String> {
    stemmed_without_function_words(unstemmed_terms(query))
}

/// Whether a query names identifiers: a word holding `_` or a lower-case
/// letter followed by a capital (`layer_fn`, `ServiceBuilder`; also a product
/// name such as `RoBERTa`). Such a query asks for where the names are, so a
/// file ranking votes for the file's passage that holds them (`rankings`).
pub fn names_identifiers(query: &str) -> bool {
    query.split_whitespace().any(|word| {
        word.contains('_') || word.chars().zip(word.chars().skip(1)).any(|(a, b)| a.is_lowercase() && b.is_uppercase())
    })
}

/// `query_terms` without the joined identifiers (for measuring what joining them gives).
pub fn query_words(query: &str) -> Vec<String> {
    stemmed_without_function_words(words(query))
}

fn stemmed_without_function_words(mut out: Vec<String>) -> Vec<String> {
    if out.iter().any(|t| !STOP.contains(&t.as_str())) {
        out.retain(|t| !STOP.contains(&t.as_str()));
    }
    stem_all(&mut out);
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The ASCII path cuts and lowercases exactly as the general one.
        #[test]
        fn ascii_runs_split_as_any_run_does(raw in "[a-zA-Z0-9]{0,24}") {
            let (mut fast, mut general) = (Vec::new(), Vec::new());
            ascii_parts(&raw, &mut String::new(), |part| fast.push(part.to_owned()));
            char_parts(&raw, &mut String::new(), |part| general.push(part.to_owned()));
            proptest::prop_assert_eq!(fast, general);
        }

        /// Counting as the words are cut gives what counting `terms` gives.
        #[test]
        fn counted_terms_are_the_terms_counted(text in "[a-zA-Z0-9_ .,(){}\n\u{e9}\u{c9}\u{df}\u{130}\u{65e5}-]{0,120}") {
            let words = terms(&text);
            let mut expected: fnv::FnvHashMap<String, u32> = fnv::FnvHashMap::default();
            for word in &words {
                *expected.entry(word.clone()).or_default() += 1;
            }
            let counted = CountedTerms::of(&text);
            proptest::prop_assert_eq!(counted.total, words.len());
            proptest::prop_assert_eq!(counted.counts, expected);
        }
    }

    #[test]
    fn counted_terms_count_parts_joined_identifiers_and_stems() {
        let counted = CountedTerms::of("spawn_blocking(spawn) PaddingBytes padding");
        let expected: Vec<(&str, u32)> =
            vec![("block", 1), ("byte", 1), ("pad", 2), ("paddingbyt", 1), ("spawn", 2), ("spawnblock", 1)];
        let mut got: Vec<(&str, u32)> = counted.counts.iter().map(|(t, &n)| (t.as_str(), n)).collect();
        got.sort();
        assert_eq!(got, expected);
        assert_eq!(counted.total, 8);
    }

    #[test]
    fn words_split_identifiers() {
        assert_eq!(
            words("retryFailedUpload snake_case HTTPServer"),
            ["retry", "failed", "upload", "snake", "case", "httpserver"]
        );
    }

    #[test]
    fn terms_keep_identifiers_joined_after_their_parts() {
        assert_eq!(
            terms("fn read_exact(TcpStream) plain x2y"),
            ["fn", "read", "exact", "readexact", "tcp", "stream", "tcpstream", "plain", "x2i"]
        );
        assert_eq!(terms("__init__ a-b"), ["init", "a", "b"]);
        // Joined from the parts as written, then stemmed like every other word.
        assert_eq!(terms("spawn_blocking PaddingBytes"), ["spawn", "block", "spawnblock", "pad", "byte", "paddingbyt"]);
    }

    #[test]
    fn queries_naming_identifiers_are_told_from_questions() {
        for named in
            ["ServiceBuilder layer_fn option_layer", "block_in_place", "RwLock guard", "post-process RoBERTa pairs"]
        {
            assert!(names_identifiers(named), "{named}");
        }
        for question in ["where do we retry the failed upload", "Retry a call", "HTTP client", "a", ""] {
            assert!(!names_identifiers(question), "{question}");
        }
    }

    #[test]
    fn query_terms_drop_function_words_unless_nothing_else_is_left() {
        assert_eq!(query_terms("where is the spawn_blocking pool"), ["block", "pool", "spawn", "spawnblock"]);
        assert_eq!(query_terms("the it"), ["it", "the"]);
        assert_eq!(query_words("where is the spawn_blocking pool"), ["block", "pool", "spawn"]);
        // Function words are told before stemming, and forms of one word are asked once.
        assert_eq!(query_terms("does it retry retries"), ["retri"]);
        assert_eq!(stem("padding"), "pad");
    }
}

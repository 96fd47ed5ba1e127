//! Cutting a text into pieces by tokens for the search index (`chunk`, and `chunk_with_ids`, which also hands each piece its token ids where they are its own), and halving a piece an embedder refuses (`split_for_embedder`).
//!
//! This module only measures and cuts text: it runs no model, reads no file
//! and stores nothing. A `Tokenizer` says where a text's tokens are; the
//! stand-ins here (`Whitespace`, `HalfBytes`, `Characters`) need no model,
//! and the embedder's own tokenizer plugs in through the same trait.
//!
//! The rules are filesystem.md's "Indexing, by tokens", fixed as data by
//! `conformance/chunk.json` (the `Characters` tokenizer, which makes this the
//! plain character splitter) and `conformance/chunk_tokens.json` (the
//! `Whitespace` tokenizer):
//!
//! - A text of at most `size` tokens is one piece, whatever its length; only a
//!   text with no character but whitespace gives no piece at all.
//! - Otherwise, from the current start, the window runs up to the start of the
//!   token `size` tokens on, so it holds at most `size` tokens (and, for a
//!   tokenizer that skips whitespace, the whitespace after its last token).
//! - The cut is looked for in the window's last third by characters (its last
//!   `⌊L/3⌋` characters, `L` the window's characters); a separator must lie
//!   wholly inside that stretch. The cut is just after the last paragraph break
//!   there (`\n\n`, or `\n\r\n`, so that `\r\n\r\n` counts), else just after
//!   the last line break (`\n`, which ends `\r\n` too), else just after the
//!   last `. `, else at the window's end.
//! - The next piece begins at the start of the token `overlap` tokens before
//!   the cut, counting the tokens that start before the cut. It always moves
//!   on: it begins at least one token after the current start, so when the
//!   piece has `overlap` tokens or fewer before its cut the overlap is all of
//!   them but the first. With no overlap it begins at the first token at or
//!   after the cut, so whitespace between a cut and the next token belongs to
//!   no piece.
//! - When the text was cut, a piece whose text, trimmed of whitespace (Rust's
//!   `char::is_whitespace`), holds fewer than 40 characters is dropped. Piece
//!   texts themselves are never trimmed: `text` is exactly `text[start..end]`.
//!
//! Tokens are counted once over the whole text; a piece's tokens are those
//! that start inside it. Only where tokens start matters to the cuts. Offsets
//! are UTF-8 byte offsets and always lie on character boundaries; lines count
//! from 1 and a line ends at `\n`.

use std::ops::Range;

/// The most tokens a piece holds by default: room for an embedder's own
/// markers under a context of 512.
pub const SIZE: usize = 480;

/// How many tokens a piece repeats from the one before it, by default.
pub const OVERLAP: usize = 64;

/// A piece of a text that was cut, trimmed, with fewer characters than this is dropped.
pub const MIN_CHARS: usize = 40;

/// Finds the tokens of a text.
///
/// `tokens` answers the byte span of each token in order, each on character
/// boundaries. Spans may leave gaps (whitespace no token holds) and several
/// tokens may share a start (a character the tokenizer splits into bytes);
/// only the starts are used to cut. A HuggingFace `tokenizers::Tokenizer`
/// fits as it is, with its truncation and padding turned off:
/// `encode(text, false)` (no special tokens), then
/// `get_offsets().iter().map(|&(s, e)| s..e)`, which are byte offsets.
pub trait Tokenizer: Send + Sync {
    /// The byte spans of the text's tokens, in order.
    fn tokens(&self, text: &str) -> Vec<Range<usize>>;

    /// How many tokens the text holds.
    fn count(&self, text: &str) -> usize {
        self.tokens(text).len()
    }

    /// The tokens' ids and where each starts (byte offsets on character
    /// boundaries, in order), for a tokenizer with ids whose tokens
    /// `keeps_apart` can vouch for; `None` otherwise.
    fn token_ids(&self, _text: &str) -> Option<TokenIds> {
        None
    }

    /// Whether the tokens of `text[..at]` and of `text[at..]`, each on its
    /// own, are exactly the tokens of the whole text on either side of `at`,
    /// so that a piece cut there keeps its part of the whole text's ids.
    /// `false` when unsure.
    fn keeps_apart(&self, _text: &str, _at: usize) -> bool {
        false
    }
}

/// Pieces of a text, each with the range of the text's token ids that is its
/// own where it has one, and those ids (`chunk_with_ids`).
pub type PiecesAndIds<P> = (Vec<(P, Option<Range<usize>>)>, Vec<u32>);

/// A text's tokens as ids, with where each starts in the text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenIds {
    pub ids: Vec<u32>,
    pub starts: Vec<usize>,
}

/// A shared tokenizer counts as its inner one (the embedder hands its own out as an `Arc`).
impl<T: Tokenizer + ?Sized> Tokenizer for std::sync::Arc<T> {
    fn tokens(&self, text: &str) -> Vec<Range<usize>> {
        (**self).tokens(text)
    }

    fn count(&self, text: &str) -> usize {
        (**self).count(text)
    }

    fn token_ids(&self, text: &str) -> Option<TokenIds> {
        (**self).token_ids(text)
    }

    fn keeps_apart(&self, text: &str, at: usize) -> bool {
        (**self).keeps_apart(text, at)
    }
}

/// The stand-in of `chunk_tokens.json`: a token is a run of non-whitespace.
#[derive(Debug, Clone, Copy, Default)]
pub struct Whitespace;

impl Tokenizer for Whitespace {
    fn tokens(&self, text: &str) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let mut open = None;
        for (i, c) in text.char_indices() {
            match (c.is_whitespace(), open) {
                (true, Some(s)) => {
                    out.push(s..i);
                    open = None;
                }
                (false, None) => open = Some(i),
                _ => {}
            }
        }
        if let Some(s) = open {
            out.push(s..text.len());
        }
        out
    }
}

/// The stand-in the spec names where an embedder cannot count: a text of `n`
/// UTF-8 bytes holds `⌈n/2⌉` tokens.
///
/// Token `k` begins at the first character boundary at or after byte `2k` and
/// ends where token `k + 1` begins (the text's end for the last one). Two-byte
/// runs of ASCII are tokens; a character of three or four bytes holds one
/// token and sometimes also an empty one that starts where the next character
/// does, the way a model tokenizer gives several tokens for one character.
#[derive(Debug, Clone, Copy, Default)]
pub struct HalfBytes;

impl Tokenizer for HalfBytes {
    fn tokens(&self, text: &str) -> Vec<Range<usize>> {
        let n = text.len();
        let boundary = |at: usize| ceil_boundary(text, at.min(n));
        (0..n.div_ceil(2)).map(|k| boundary(2 * k)..boundary(2 * k + 2)).collect()
    }

    fn count(&self, text: &str) -> usize {
        text.len().div_ceil(2)
    }
}

/// Every character is a token: `chunk` with it is the plain character
/// splitter of `chunk.json`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Characters;

impl Tokenizer for Characters {
    fn tokens(&self, text: &str) -> Vec<Range<usize>> {
        text.char_indices().map(|(i, c)| i..i + c.len_utf8()).collect()
    }

    fn count(&self, text: &str) -> usize {
        text.chars().count()
    }
}

/// One piece of a text, as the index embeds and shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Where the piece begins in the text, in bytes.
    pub start: usize,
    /// Where the piece ends in the text, in bytes (exclusive).
    pub end: usize,
    /// The line of the piece's first character that is not whitespace (of its
    /// first character, when all are), counting from 1.
    pub first_line: usize,
    /// The line of the piece's last character that is not whitespace (the
    /// first line, when all are whitespace).
    pub last_line: usize,
    /// How many of the text's tokens start inside the piece.
    pub tokens: usize,
    /// `text[start..end]`, untrimmed.
    pub text: String,
}

/// Cuts `text` into pieces of at most `size` tokens that repeat `overlap`
/// tokens of the piece before, by the rules of this module's header.
///
/// A `size` of 0 counts as 1. A piece exceeds `size` tokens only when more
/// than `size` tokens start on one character, which cannot be parted.
pub fn chunk(text: &str, tokenizer: &dyn Tokenizer, size: usize, overlap: usize) -> Vec<Piece> {
    chunk_at_starts(text, &token_starts(text, tokenizer), size, overlap)
}

/// `chunk`, and the text's token ids where the tokenizer has them, each
/// piece with the range of them that is its own where the tokenizer vouches
/// that the piece, tokenized on its own, gives the same ids
/// (`Tokenizer::keeps_apart` at both its ends): its embedder can skip
/// tokenizing it again.
pub fn chunk_with_ids(text: &str, tokenizer: &dyn Tokenizer, size: usize, overlap: usize) -> PiecesAndIds<Piece> {
    let usable = |t: &TokenIds| {
        t.ids.len() == t.starts.len()
            && t.starts.is_sorted()
            && t.starts.iter().all(|&s| s <= text.len() && text.is_char_boundary(s))
    };
    let Some(TokenIds { ids, starts }) = tokenizer.token_ids(text).filter(usable) else {
        return (chunk(text, tokenizer, size, overlap).into_iter().map(|piece| (piece, None)).collect(), Vec::new());
    };
    let pieces = chunk_at_starts(text, &starts, size, overlap)
        .into_iter()
        .map(|piece| {
            let own = (tokenizer.keeps_apart(text, piece.start) && tokenizer.keeps_apart(text, piece.end))
                .then(|| starts.partition_point(|&s| s < piece.start)..starts.partition_point(|&s| s < piece.end));
            (piece, own)
        })
        .collect();
    (pieces, ids)
}

/// `chunk` with the tokens' starts already found (sorted, on character boundaries).
fn chunk_at_starts(text: &str, starts: &[usize], size: usize, overlap: usize) -> Vec<Piece> {
    let spans = cut_spans(text, starts, size, overlap);
    let lines = Lines::new(text, 1);
    let fits = spans.len() == 1;
    spans
        .into_iter()
        .filter(|r| {
            let trimmed = text[r.clone()].trim();
            if fits {
                !trimmed.is_empty()
            } else {
                trimmed.chars().count() >= MIN_CHARS
            }
        })
        .map(|r| {
            let tokens = starts.partition_point(|&s| s < r.end) - starts.partition_point(|&s| s < r.start);
            lines.piece(text, 0, r, tokens)
        })
        .collect()
}

/// Halves a piece the embedder refused for its length, or answers `None` when
/// it holds a single character.
///
/// The same cuts as `chunk`, looked for around the middle: in the piece's
/// middle third by characters, a paragraph break, else a line break, else a
/// `. `, the one of that kind nearest the middle (the earlier on a tie; one
/// that ends the piece does not count); else at the start of the piece's
/// middle token (by `tokenizer`, over the piece's own text); else at its middle
/// character. The halves share nothing and
/// together are the piece: nothing is dropped. Their `tokens` are counted over
/// their own texts.
pub fn split_for_embedder(piece: &Piece, tokenizer: &dyn Tokenizer) -> Option<(Piece, Piece)> {
    let text = piece.text.as_str();
    let chars: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let count = chars.len();
    if count < 2 {
        return None;
    }
    let at = |index: usize| chars.get(index).copied().unwrap_or(text.len());
    let char_index = |byte: usize| chars.partition_point(|&b| b < byte);
    let (low, high, middle) = (at(count / 3), at(count - count / 3), count / 2);
    let near_middle = |cuts: Vec<usize>| cuts.into_iter().min_by_key(|&c| (char_index(c).abs_diff(middle), c));
    let region = &text[low..high];
    let separated = [
        separator_cuts(region, Separator::Paragraph),
        separator_cuts(region, Separator::Line),
        separator_cuts(region, Separator::Sentence),
    ]
    .into_iter()
    .find_map(|cuts| near_middle(cuts.into_iter().map(|c| low + c).filter(|&c| c < text.len()).collect()));
    let cut = separated.unwrap_or_else(|| {
        let starts = token_starts(text, tokenizer);
        starts[starts.len() / 2..].iter().copied().find(|&s| s > 0 && s < text.len()).unwrap_or(at(middle))
    });
    // The line at the piece's start, from its first line and the breaks before its first non-whitespace.
    let lead = text.len() - text.trim_start().len();
    let first =
        if lead == text.len() { piece.first_line } else { piece.first_line - text[..lead].matches('\n').count() };
    let lines = Lines::new(text, first);
    let half = |r: Range<usize>| lines.piece(text, piece.start, r.clone(), tokenizer.count(&text[r]));
    Some((half(0..cut), half(cut..text.len())))
}

/// Why `embed_fitted` gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FitError<E> {
    /// The embedder failed for a reason other than length.
    Embedder(E),
    /// The embedder refused a piece of a single character for its length.
    Indivisible(Piece),
}

/// Embeds a piece, halving it with `split_for_embedder` as often as the
/// embedder refuses a part for its length, and answers the parts in order
/// with their embeddings. `embed` answers `Ok(None)` for a refusal by length.
pub fn embed_fitted<T, E>(
    piece: Piece,
    tokenizer: &dyn Tokenizer,
    mut embed: impl FnMut(&Piece) -> Result<Option<T>, E>,
) -> Result<Vec<(Piece, T)>, FitError<E>> {
    let mut out = Vec::new();
    // A stack of parts still to embed, the next one last, so the answer keeps the text's order.
    let mut todo = vec![piece];
    while let Some(part) = todo.pop() {
        match embed(&part).map_err(FitError::Embedder)? {
            Some(value) => out.push((part, value)),
            None => match split_for_embedder(&part, tokenizer) {
                Some((first, second)) => {
                    todo.push(second);
                    todo.push(first);
                }
                None => return Err(FitError::Indivisible(part)),
            },
        }
    }
    Ok(out)
}

/// The byte offsets where the text's tokens start, in order, each on a character boundary.
fn token_starts(text: &str, tokenizer: &dyn Tokenizer) -> Vec<usize> {
    let mut starts: Vec<usize> =
        tokenizer.tokens(text).into_iter().map(|r| floor_boundary(text, r.start.min(text.len()))).collect();
    // Tokenizers answer in order; sorting only guards the search below against one that does not.
    starts.sort_unstable();
    starts
}

/// Every piece's byte range, before any is dropped: the cutting rules alone.
fn cut_spans(text: &str, starts: &[usize], size: usize, overlap: usize) -> Vec<Range<usize>> {
    let size = size.max(1);
    let n = starts.len();
    let mut out = Vec::new();
    let mut start = 0;
    // The first token that starts at or after `start`.
    let mut first = 0;
    loop {
        if n - first <= size {
            out.push(start..text.len());
            return out;
        }
        let mut window_end = starts[first + size];
        if window_end <= start {
            // More than `size` tokens start on the character at `start`: take that one character.
            window_end = ceil_boundary(text, start + 1);
        }
        let cut = find_cut(text, start, window_end);
        out.push(start..cut);
        let before_cut = starts.partition_point(|&s| s < cut);
        let mut next = before_cut.saturating_sub(overlap).max(first + 1).min(before_cut);
        while next < n && starts[next] <= start {
            next += 1;
        }
        start = if next < n { starts[next] } else { cut };
        first = starts.partition_point(|&s| s < start);
    }
}

/// Where the window `text[start..end]` is cut: just after the last separator
/// of the best kind lying wholly in its last third by characters, else at its end.
fn find_cut(text: &str, start: usize, end: usize) -> usize {
    let window = &text[start..end];
    let count = window.chars().count();
    let from = start + window.char_indices().nth(count - count / 3).map_or(window.len(), |(i, _)| i);
    let region = &text[from..end];
    [Separator::Paragraph, Separator::Line, Separator::Sentence]
        .into_iter()
        .find_map(|kind| separator_cuts(region, kind).into_iter().max())
        .map_or(end, |c| from + c)
}

/// The kinds of place a piece may end, best first.
#[derive(Debug, Clone, Copy)]
enum Separator {
    Paragraph,
    Line,
    Sentence,
}

/// The offsets just after each separator of a kind that lies wholly in `region`.
fn separator_cuts(region: &str, kind: Separator) -> Vec<usize> {
    let after = |pattern: &str| region.match_indices(pattern).map(|(i, m)| i + m.len()).collect::<Vec<_>>();
    match kind {
        Separator::Paragraph => {
            // Overlapping matches matter for `\n\n\n`, so each `\n` is tried as a paragraph's end.
            let bytes = region.as_bytes();
            (1..bytes.len())
                .filter(|&i| {
                    bytes[i] == b'\n'
                        && (bytes[i - 1] == b'\n' || (i >= 2 && bytes[i - 1] == b'\r' && bytes[i - 2] == b'\n'))
                })
                .map(|i| i + 1)
                .collect()
        }
        Separator::Line => after("\n"),
        Separator::Sentence => after(". "),
    }
}

/// Line numbers of byte offsets in a text whose offset 0 lies on line `first`.
struct Lines {
    breaks: Vec<usize>,
    first: usize,
}

impl Lines {
    fn new(text: &str, first: usize) -> Lines {
        Lines { breaks: text.match_indices('\n').map(|(i, _)| i).collect(), first }
    }

    fn at(&self, byte: usize) -> usize {
        self.first + self.breaks.partition_point(|&b| b < byte)
    }

    /// The piece `text[range]`, placed `base` bytes into the whole text.
    fn piece(&self, text: &str, base: usize, range: Range<usize>, tokens: usize) -> Piece {
        let body = &text[range.clone()];
        let lead = body.len() - body.trim_start().len();
        let (first_line, last_line) = match body.trim_end().char_indices().next_back() {
            Some((last, _)) => (self.at(range.start + lead), self.at(range.start + last)),
            None => (self.at(range.start), self.at(range.start)),
        };
        Piece {
            start: base + range.start,
            end: base + range.end,
            first_line,
            last_line,
            tokens,
            text: body.to_string(),
        }
    }
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spans(text: &str, tokenizer: &dyn Tokenizer, size: usize, overlap: usize) -> Vec<Range<usize>> {
        cut_spans(text, &token_starts(text, tokenizer), size, overlap)
    }

    fn tokens_in(text: &str, tokenizer: &dyn Tokenizer, r: &Range<usize>) -> usize {
        let starts = token_starts(text, tokenizer);
        starts.partition_point(|&s| s < r.end) - starts.partition_point(|&s| s < r.start)
    }

    #[test]
    fn whitespace_tokens_are_runs_of_non_whitespace() {
        assert_eq!(Whitespace.tokens("  ab\u{a0}c\n\nd "), vec![2..4, 6..7, 9..10]);
        assert!(Whitespace.tokens(" \t\r\n").is_empty());
    }

    #[test]
    fn half_bytes_counts_half_the_bytes_rounded_up() {
        for text in ["", "a", "ab", "abc", "é", "中", "中中a", "😀x", "a😀"] {
            let spans = HalfBytes.tokens(text);
            assert_eq!(spans.len(), text.len().div_ceil(2), "{text:?}");
            assert_eq!(spans.len(), HalfBytes.count(text));
            for s in &spans {
                assert!(text.is_char_boundary(s.start) && text.is_char_boundary(s.end), "{text:?} {s:?}");
            }
        }
        assert_eq!(HalfBytes.tokens("中中"), vec![0..3, 3..6, 6..6]);
    }

    #[test]
    fn a_text_that_fits_is_one_piece_however_short() {
        let pieces = chunk("Hello.\n", &Characters, 480, 64);
        assert_eq!(pieces.len(), 1);
        assert_eq!((pieces[0].start, pieces[0].end, pieces[0].first_line, pieces[0].last_line), (0, 7, 1, 1));
        assert!(chunk(" \n\t\r\n ", &Characters, 480, 64).is_empty());
        assert!(chunk("", &Whitespace, 480, 64).is_empty());
    }

    #[test]
    fn lines_name_the_first_and_last_non_whitespace() {
        let text = format!("\n\n{}\n{}\n\n\n", "a".repeat(50), "b".repeat(50));
        let pieces = chunk(&text, &Characters, 480, 64);
        assert_eq!((pieces[0].first_line, pieces[0].last_line), (3, 4));
    }

    #[test]
    fn the_paragraph_break_wins_and_the_overlap_is_counted_back_from_the_cut() {
        let text = format!("{}\n\n{}. {}\n{}", "a".repeat(70), "b".repeat(5), "c".repeat(5), "d".repeat(100));
        let got = spans(&text, &Characters, 90, 10);
        assert_eq!(got[0], 0..72);
        assert_eq!(got[1].start, 62);
    }

    #[test]
    fn split_prefers_a_paragraph_near_the_middle_and_keeps_everything() {
        let text = format!("{}\n{}\n\n{}", "a".repeat(30), "b".repeat(20), "c".repeat(40));
        let piece = chunk(&text, &Characters, 480, 0).remove(0);
        let (a, b) = split_for_embedder(&piece, &Characters).unwrap();
        assert_eq!(a.end, 53);
        assert_eq!(format!("{}{}", a.text, b.text), text);
        assert_eq!((a.first_line, a.last_line, b.first_line, b.last_line), (1, 2, 4, 4));
        assert_eq!((a.start, b.end), (piece.start, piece.end));
    }

    #[test]
    fn split_without_separators_halves_the_tokens() {
        let text = "x".repeat(10) + &"中".repeat(10);
        let piece = chunk(&text, &Characters, 480, 0).remove(0);
        let (a, b) = split_for_embedder(&piece, &Whitespace).unwrap();
        assert_eq!((a.text.chars().count(), b.text.chars().count()), (10, 10));
        let (a, b) = split_for_embedder(&piece, &Characters).unwrap();
        assert_eq!((a.tokens, b.tokens), (10, 10));
        // A separator that ends the piece is no cut: "a\n" halves at its middle character.
        let short = chunk("a\n", &Characters, 480, 0).remove(0);
        let (a, b) = split_for_embedder(&short, &Characters).unwrap();
        assert_eq!((a.text.as_str(), b.text.as_str()), ("a", "\n"));
        let one = Piece { start: 3, end: 4, first_line: 1, last_line: 1, tokens: 1, text: "x".into() };
        assert_eq!(split_for_embedder(&one, &Characters), None);
    }

    #[test]
    fn embed_fitted_halves_until_accepted_and_drops_nothing() {
        let text = (0..40).map(|i| format!("Sentence number {i} is here. ")).collect::<String>();
        let piece = chunk(&text, &Whitespace, 480, 0).remove(0);
        let parts = embed_fitted(piece, &Whitespace, |p: &Piece| {
            Ok::<_, ()>((Whitespace.count(&p.text) <= 30).then_some(p.start))
        })
        .unwrap();
        assert!(parts.len() > 1);
        assert_eq!(parts.iter().map(|(p, _)| p.text.as_str()).collect::<String>(), text);
        assert!(parts.iter().all(|(p, v)| *v == p.start && Whitespace.count(&p.text) <= 30));
        let refused =
            embed_fitted(chunk(&text, &Whitespace, 480, 0).remove(0), &Whitespace, |_| Ok::<Option<()>, ()>(None));
        assert!(matches!(refused, Err(FitError::Indivisible(p)) if p.text.chars().count() == 1));
    }

    fn check_spans(text: &str, tokenizer: &dyn Tokenizer, size: usize, overlap: usize) -> Result<(), TestCaseError> {
        let got = spans(text, tokenizer, size, overlap);
        let starts = token_starts(text, tokenizer);
        prop_assert!(!got.is_empty());
        prop_assert_eq!(got[0].start, 0);
        prop_assert_eq!(got.last().unwrap().end, text.len());
        for r in &got {
            prop_assert!(r.start < r.end || text.is_empty(), "empty piece {:?}", r);
            prop_assert!(text.is_char_boundary(r.start) && text.is_char_boundary(r.end));
            let single_char = text[r.clone()].chars().count() == 1;
            prop_assert!(tokens_in(text, tokenizer, r) <= size.max(1) || single_char, "{:?} holds too many tokens", r);
        }
        for pair in got.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            // Progress, and nothing but whitespace between a cut and the next piece.
            prop_assert!(after.start > before.start);
            if after.start > before.end {
                prop_assert!(text[before.end..after.start].trim().is_empty());
            }
            // The overlap is `overlap` tokens, or all but the first of the piece's tokens before its cut.
            let first = starts.partition_point(|&s| s < before.start);
            let before_cut = starts.partition_point(|&s| s < before.end);
            let shared = tokens_in(text, tokenizer, &(after.start..before.end.max(after.start)));
            let expected = if before_cut > first { overlap.min(before_cut - first - 1) } else { 0 };
            prop_assert_eq!(shared, expected, "overlap between {:?} and {:?}", before, after);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn cuts_cover_the_text_in_order_with_exact_overlaps(
            text in "[ab .\n\r\té中😀]{0,300}",
            size in 1usize..40,
            overlap in 0usize..12,
        ) {
            check_spans(&text, &Whitespace, size, overlap)?;
            check_spans(&text, &Characters, size, overlap)?;
        }

        #[test]
        fn half_bytes_cuts_make_progress_and_respect_size(
            text in "[ab .\n中😀]{0,200}",
            size in 2usize..30,
            overlap in 0usize..8,
        ) {
            let got = spans(&text, &HalfBytes, size, overlap);
            prop_assert_eq!(got.last().unwrap().end, text.len());
            for pair in got.windows(2) {
                prop_assert!(pair[1].start > pair[0].start);
            }
            for r in &got {
                prop_assert!(tokens_in(&text, &HalfBytes, r) <= size);
            }
        }

        #[test]
        fn kept_pieces_are_their_text_and_long_enough(
            text in "[ab .\n中]{0,400}",
            size in 1usize..80,
            overlap in 0usize..10,
        ) {
            let pieces = chunk(&text, &Characters, size, overlap);
            let fits = text.chars().count() <= size;
            for p in &pieces {
                prop_assert_eq!(&p.text, &text[p.start..p.end]);
                prop_assert!(p.first_line <= p.last_line);
                prop_assert!(fits || p.text.trim().chars().count() >= MIN_CHARS);
            }
            prop_assert_eq!(fits && !text.trim().is_empty(), fits && pieces.len() == 1);
        }

        #[test]
        fn splitting_partitions_the_piece(text in "[ab .\n中]{2,200}") {
            let piece = Lines::new(&text, 1).piece(&text, 0, 0..text.len(), 0);
            let (a, b) = split_for_embedder(&piece, &HalfBytes).unwrap();
            prop_assert!(a.start < a.end && a.end == b.start && b.start < b.end);
            prop_assert_eq!(a.text + &b.text, text);
        }
    }
}

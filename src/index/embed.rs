//! The `Embedder` trait (text in, unit vectors out), its typed errors, and what every embedder shares (unit length, the dot product, a query cut to the embedder's context); not an embedder itself, the chunker, the store or the ranking.
//!
//! The embedders, all optional to the index, which falls back to words only:
//!
//! - `table::StaticEmbedder`, the default: a Model2Vec-style table (one row
//!   per vocabulary entry of all-MiniLM-L6-v2) and that model's
//!   `tokenizer.json`. It needs nothing at run time: `scripts/build-embedder`
//!   makes the table at set-up, and `models` finds it.
//! - `http::HttpEmbedder`: a server the user runs and names, either
//!   llama.cpp's `/embedding` with `/tokenize` or an OpenAI-compatible
//!   `/v1/embeddings`. It never talks to any other address.
//! - `bert::BertEmbedder`: the full transformer, all-MiniLM-L6-v2 itself,
//!   over the unchanged `model.safetensors` and `tokenizer.json` the set-up
//!   installs in `models/minilm/`; the model's own vectors, much slower.
//!
//! Which one the index uses is the user's choice (`index::EmbedderChoice`:
//! `--embedder`, else `"embedder"` in config.json, else the static table).
//!
//! Tokens are the embedder's own (`wordpiece::ModelTokenizer` for the local
//! ones), and they also serve the chunker, so pieces are measured in the
//! tokens the embedder sees.

use std::ops::Range;
use std::path::PathBuf;

/// Turns texts into vectors of one fixed length, each of unit length (or all zeros for a text without tokens).
pub trait Embedder: Send + Sync {
    /// A name that changes whenever the vectors would differ (another model, table or server model).
    fn name(&self) -> &str;
    /// The length of every vector.
    fn dims(&self) -> usize;
    /// The most tokens one text may hold; `embed` refuses a longer one with `EmbedError::TooLong`.
    fn max_tokens(&self) -> usize;
    /// How many tokens the text holds, by the embedder's own tokenizer (no special tokens).
    fn count_tokens(&self, text: &str) -> usize;
    /// The byte span of each token in the text, in order, on character boundaries.
    fn token_spans(&self, text: &str) -> Vec<Range<usize>>;
    /// One vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// The tokens' ids and starts (`chunk::TokenIds`), for an embedder whose
    /// `embed_tokenized` takes ids and that knows where its tokens part
    /// (`keeps_tokens_apart`); `None` for the others.
    fn token_ids(&self, _text: &str) -> Option<super::chunk::TokenIds> {
        None
    }

    /// Whether `text[..at]` and `text[at..]` tokenized each on its own give
    /// the whole text's tokens on either side of `at`; `false` when unsure.
    fn keeps_tokens_apart(&self, _text: &str, _at: usize) -> bool {
        false
    }

    /// `embed`, with the ids of the texts whose tokens the caller already
    /// has from `token_ids` (a passage cut where `keeps_tokens_apart`
    /// vouches for it), so an embedder that works from ids need not
    /// tokenize them again. By default the ids are not used.
    fn embed_tokenized(&self, texts: &[(&str, Option<&[u32]>)]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(&texts.iter().map(|(text, _)| *text).collect::<Vec<_>>())
    }
    /// Whether embedding costs about what cutting a text into passages and
    /// words does (a table lookup), so that taking a file's words in first
    /// and its vectors later would only do the work twice. A model run
    /// whole, or a server, is not: the index takes in every new file's words
    /// before it embeds any (a search's own time to index and each round in
    /// the background do). Not cheap unless an embedder says so.
    fn is_cheap(&self) -> bool {
        false
    }
    /// How much the meaning ranking counts in a search's fusion, the
    /// passages by words counting 1: a stronger model's ranking earns more
    /// (`EmbedderChoice::meaning_weight` says how much). 1, the static
    /// table's, unless an embedder says otherwise.
    fn meaning_weight(&self) -> f64 {
        1.0
    }
    /// The vector of a search query: the query as it is, or, when the
    /// embedder refuses it for its length, its first tokens (`embed_head`),
    /// rather than no meaning ranking at all.
    fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        embed_head(self, query)
    }
}

/// Why an embedder gave no vectors.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// A text is longer than the embedder takes: the chunker halves it and tries again.
    #[error("text {index} holds {tokens} tokens, more than the embedder's {max}")]
    TooLong { index: usize, tokens: usize, max: usize },
    /// The table or tokenizer could not be loaded, or is malformed.
    #[error("embedding model {path}: {message}")]
    Model { path: PathBuf, message: String },
    /// The embedding server failed or answered something unexpected.
    #[error("embedding server {url}: {message}")]
    Http { url: String, message: String },
    /// The embedder answered, but not a vector for each text.
    #[error("the embedder answered {got} vectors for {asked} texts")]
    Count { asked: usize, got: usize },
}

/// Scales the vector to unit length; a zero vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// The dot product, which is the cosine for unit vectors.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Embeds one text, cut to its first tokens when the embedder refuses it for
/// its length, as sentence-transformers truncates a long input: first to as
/// many tokens as the embedder says it takes, then to half as many while it
/// still refuses (a server whose own limit is lower than the one it was
/// given). For a search query: its beginning still ranks by meaning, where
/// a refusal would leave the query none. Says on the log when it cuts.
pub fn embed_head<E: Embedder + ?Sized>(embedder: &E, text: &str) -> Result<Vec<f32>, EmbedError> {
    let (mut end, mut kept) = (text.len(), None);
    loop {
        let head = &text[..end];
        match embedder.embed(&[head]) {
            Ok(mut vectors) => {
                if let Some(kept) = kept {
                    tracing::info!(
                        "a search query too long for the embedder ranks by meaning with its first {kept} tokens"
                    );
                }
                return Ok(vectors.pop().unwrap_or_default());
            }
            Err(EmbedError::TooLong { index, tokens, max }) => {
                let spans = embedder.token_spans(head);
                let keep = if spans.len() > max { max } else { spans.len() / 2 };
                // Up to the first token left out, without the whitespace before it.
                let cut = spans.get(keep).map_or(0, |s| s.start.min(head.len()));
                let cut = head[..cut].trim_end().len();
                if keep == 0 || cut == 0 || cut >= end {
                    return Err(EmbedError::TooLong { index, tokens, max });
                }
                (end, kept) = (cut, Some(keep));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_makes_unit_vectors_and_leaves_zero_alone() {
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut z = vec![0.0; 3];
        normalize(&mut z);
        assert_eq!(z, vec![0.0; 3]);
        assert!((dot(&v, &v) - 1.0).abs() < 1e-6);
    }
}

//! The search index: token chunks, embeddings, full text, fused ranks.
//!
//! Keyed by content hash and stored under `--data`. It ranks only what the
//! session's view shows, computing its word statistics over that alone, so
//! hidden files change neither results nor order. It never decides access
//! itself: every path goes through `access`.

pub mod background;
pub mod bert;
pub mod chunk;
mod codes;
mod damage;
pub mod embed;
pub mod http;
pub mod hybrid;
mod maxscore;
pub mod models;
mod postings;
pub(crate) mod rank;
pub(crate) mod rankings;
pub mod store;
pub mod table;
pub(crate) mod tensors;
pub mod terms;
#[doc(hidden)]
pub mod testing;
pub mod wordpiece;

use std::path::Path;
use std::sync::Arc;

/// The default models: the static embedder when its table is
/// installed (with its own tokenizer for chunking), else words only with the
/// bytes/2 stand-in for counting tokens. Says so once when it falls back.
pub fn default_models(data_dir: &Path) -> (Option<Arc<dyn embed::Embedder>>, Arc<dyn chunk::Tokenizer>) {
    // `default_static` says once that it fell back when no table is installed.
    match models::default_static(data_dir) {
        Some(embedder) => {
            let tokenizer = embedder.tokenizer();
            (Some(embedder as Arc<dyn embed::Embedder>), tokenizer)
        }
        None => (None, Arc::new(chunk::HalfBytes)),
    }
}

/// Says once per process that search falls back to words only, and why
/// (for every embedder, the static table's fallback included).
pub(crate) fn warn_once(message: &str) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!("{message}; search ranks by words only");
    }
}

/// The environment variable with the API key sent to an embedding server (`Authorization: Bearer`).
pub const EMBEDDER_KEY_ENV: &str = "CTXFS_EMBEDDER_KEY";

/// The most tokens a text sent to an embedding server may hold (pieces are cut at 480).
const HTTP_MAX_TOKENS: usize = 512;

/// Which embedder the index uses: `--embedder`, else `"embedder"` in the
/// user's config.json, else the static table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EmbedderChoice {
    /// The static table distilled at set-up (`table::StaticEmbedder`): fast, the default.
    #[default]
    Static,
    /// The full transformer, all-MiniLM-L6-v2 (`bert::BertEmbedder`): better, much slower.
    MiniLm,
    /// paraphrase-MiniLM-L3-v2 run whole by the same forward pass: three layers, about twice as fast as `MiniLm`.
    ParaphraseL3,
    /// No embedder: search ranks by words, paths and tags only.
    None,
    /// A server the user runs (`http::HttpEmbedder`), and the model name to ask it for.
    Http { url: String, model: Option<String> },
}

impl std::str::FromStr for EmbedderChoice {
    type Err = String;

    /// `static`, `minilm`, `paraphrase-l3`, `none` or an `http://HOST:PORT[/path]` URL.
    fn from_str(text: &str) -> Result<EmbedderChoice, String> {
        match text.trim() {
            "static" => Ok(EmbedderChoice::Static),
            "minilm" => Ok(EmbedderChoice::MiniLm),
            "paraphrase-l3" => Ok(EmbedderChoice::ParaphraseL3),
            "none" => Ok(EmbedderChoice::None),
            url if url.starts_with("http://") => Ok(EmbedderChoice::Http { url: url.to_owned(), model: None }),
            other => Err(format!(
                "{other:?} is not an embedder; use static, minilm, paraphrase-l3, none or an http://HOST:PORT URL"
            )),
        }
    }
}

impl std::fmt::Display for EmbedderChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmbedderChoice::Static => f.write_str("static"),
            EmbedderChoice::MiniLm => f.write_str("minilm"),
            EmbedderChoice::ParaphraseL3 => f.write_str("paraphrase-l3"),
            EmbedderChoice::None => f.write_str("none"),
            EmbedderChoice::Http { url, .. } => f.write_str(url),
        }
    }
}

impl EmbedderChoice {
    /// How much this embedder's meaning ranking counts in a search's fusion
    /// (`Embedder::meaning_weight`), chosen on the tuning halves of the
    /// held-out questions (bench/README.md): all-MiniLM-L6-v2 run whole ranks
    /// paraphrases far better by meaning alone than the table does and is
    /// best at 2.5; paraphrase-MiniLM-L3 is best at the table's 1 (0.75, 1.5
    /// and 2.5 lost), and a server, whose model cannot be measured here,
    /// keeps 1 too.
    pub fn meaning_weight(&self) -> f64 {
        match self {
            EmbedderChoice::MiniLm => 2.5,
            _ => 1.0,
        }
    }

    /// The choice in force. `flag` (`--embedder`) wins over `configured`
    /// (the user's config.json: `"embedder"`, and `"embedder_model"` for a
    /// server); without either, the static table. `model` (`--embedder-model`)
    /// wins over the configured model. A configured value that is not an
    /// embedder means words only, said once.
    pub fn resolve(
        flag: Option<EmbedderChoice>,
        model: Option<String>,
        configured: impl Fn(&str) -> Option<String>,
    ) -> EmbedderChoice {
        let choice = match flag {
            Some(choice) => choice,
            None => match configured("embedder").map(|text| text.parse::<EmbedderChoice>()) {
                Some(Ok(choice)) => choice,
                Some(Err(e)) => {
                    warn_once(&format!("config.json's \"embedder\": {e}"));
                    EmbedderChoice::None
                }
                None => EmbedderChoice::Static,
            },
        };
        match choice {
            EmbedderChoice::Http { url, model: None } => {
                EmbedderChoice::Http { url, model: model.or_else(|| configured("embedder_model")) }
            }
            other => other,
        }
    }
}

/// The vectorizer and the chunker's tokenizer for a choice. A choice that
/// cannot be had (the model is not installed, the server does not answer)
/// means words only with the bytes/2 stand-in for counting tokens, said once
/// (the static table keeps its tokenizer for chunking when only it is asked
/// for); an embedder that fails later says so once too.
pub fn models(
    choice: &EmbedderChoice,
    data_dir: &Path,
) -> (Option<Arc<dyn embed::Embedder>>, Arc<dyn chunk::Tokenizer>) {
    let words_only = || (None, Arc::new(chunk::HalfBytes) as Arc<dyn chunk::Tokenizer>);
    let embedder: Arc<dyn embed::Embedder> = match choice {
        EmbedderChoice::None => return words_only(),
        // `default_static` says once that it fell back when no table is installed.
        EmbedderChoice::Static => return default_models(data_dir),
        EmbedderChoice::MiniLm | EmbedderChoice::ParaphraseL3 => {
            let (name, env) = match choice {
                EmbedderChoice::MiniLm => (bert::DIR_NAME, bert::DIR_ENV),
                _ => (bert::L3_DIR_NAME, bert::L3_DIR_ENV),
            };
            let Some(dir) = models::find_named(name, env, data_dir) else {
                warn_once(&format!("the {choice} model is not installed (scripts/build-embedder installs it)"));
                return words_only();
            };
            match bert::BertEmbedder::load(&dir) {
                Ok(embedder) => Arc::new(embedder),
                Err(e) => {
                    warn_once(&format!("the {choice} model could not be loaded ({e})"));
                    return words_only();
                }
            }
        }
        EmbedderChoice::Http { url, model } => {
            let key = std::env::var(EMBEDDER_KEY_ENV).ok().filter(|k| !k.is_empty());
            match http::HttpEmbedder::connect(url, model.as_deref(), key.as_deref(), HTTP_MAX_TOKENS) {
                Ok(embedder) => Arc::new(embedder),
                Err(e) => {
                    warn_once(&format!("the embedding server does not answer ({e})"));
                    return words_only();
                }
            }
        }
    };
    let tokenizer = Arc::new(EmbedderTokens(embedder.clone()));
    (Some(Arc::new(Reporting(embedder, choice.meaning_weight()))), tokenizer)
}

/// An embedder's own tokens, for the chunker.
struct EmbedderTokens(Arc<dyn embed::Embedder>);

impl chunk::Tokenizer for EmbedderTokens {
    fn tokens(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        self.0.token_spans(text)
    }

    fn count(&self, text: &str) -> usize {
        self.0.count_tokens(text)
    }

    fn token_ids(&self, text: &str) -> Option<chunk::TokenIds> {
        self.0.token_ids(text)
    }

    fn keeps_apart(&self, text: &str, at: usize) -> bool {
        self.0.keeps_tokens_apart(text, at)
    }
}

/// An embedder that says once when it fails (a text too long for it is the
/// chunker's business, not a failure), and how much its meaning ranking
/// counts (`EmbedderChoice::meaning_weight`).
struct Reporting(Arc<dyn embed::Embedder>, f64);

impl embed::Embedder for Reporting {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn dims(&self) -> usize {
        self.0.dims()
    }

    fn max_tokens(&self) -> usize {
        self.0.max_tokens()
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.0.count_tokens(text)
    }

    fn token_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        self.0.token_spans(text)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, embed::EmbedError> {
        reported(self.0.embed(texts))
    }

    fn token_ids(&self, text: &str) -> Option<chunk::TokenIds> {
        self.0.token_ids(text)
    }

    fn keeps_tokens_apart(&self, text: &str, at: usize) -> bool {
        self.0.keeps_tokens_apart(text, at)
    }

    fn embed_tokenized(&self, texts: &[(&str, Option<&[u32]>)]) -> Result<Vec<Vec<f32>>, embed::EmbedError> {
        reported(self.0.embed_tokenized(texts))
    }

    fn is_cheap(&self) -> bool {
        self.0.is_cheap()
    }

    fn meaning_weight(&self) -> f64 {
        self.1
    }

    fn embed_query(&self, query: &str) -> Result<Vec<f32>, embed::EmbedError> {
        reported(embed::embed_head(&*self.0, query))
    }
}

/// Says once when the embedder failed for a reason other than length.
fn reported<T>(answer: Result<T, embed::EmbedError>) -> Result<T, embed::EmbedError> {
    if let Err(e) = &answer {
        if !matches!(e, embed::EmbedError::TooLong { .. }) {
            warn_once(&format!("the embedder failed ({e})"));
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_from_their_names_and_urls() {
        assert_eq!("static".parse(), Ok(EmbedderChoice::Static));
        assert_eq!("minilm".parse(), Ok(EmbedderChoice::MiniLm));
        assert_eq!(" none ".parse(), Ok(EmbedderChoice::None));
        let url = "http://127.0.0.1:8080/v1";
        assert_eq!(url.parse(), Ok(EmbedderChoice::Http { url: url.into(), model: None }));
        assert_eq!(EmbedderChoice::Http { url: url.into(), model: None }.to_string(), url);
        let error = "https://api.example/v1".parse::<EmbedderChoice>().unwrap_err();
        assert_eq!(
            error,
            "\"https://api.example/v1\" is not an embedder; use static, minilm, paraphrase-l3, none or an http://HOST:PORT URL"
        );
    }

    #[test]
    fn the_flag_wins_over_config_json_which_wins_over_the_default() {
        let config = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| v.to_string())
        };
        assert_eq!(EmbedderChoice::resolve(None, None, config(&[])), EmbedderChoice::Static);
        assert_eq!(EmbedderChoice::resolve(None, None, config(&[("embedder", "minilm")])), EmbedderChoice::MiniLm);
        assert_eq!(
            EmbedderChoice::resolve(Some(EmbedderChoice::None), None, config(&[("embedder", "minilm")])),
            EmbedderChoice::None
        );
        let server = config(&[("embedder", "http://localhost:8080/v1"), ("embedder_model", "nomic")]);
        let from_config = EmbedderChoice::Http { url: "http://localhost:8080/v1".into(), model: Some("nomic".into()) };
        assert_eq!(EmbedderChoice::resolve(None, None, server), from_config);
        let flagged = EmbedderChoice::resolve(None, Some("bge".into()), server);
        assert_eq!(flagged, EmbedderChoice::Http { url: "http://localhost:8080/v1".into(), model: Some("bge".into()) });
        // A value that is not an embedder means words only (and says so once).
        assert_eq!(EmbedderChoice::resolve(None, None, config(&[("embedder", "huge")])), EmbedderChoice::None);
    }

    /// Whitespace words as tokens, vectors of `[words, 1]`. It refuses a text
    /// of more than `max` words for its length, and one of more than `server`
    /// as well (a server whose own limit is lower than the one it was given).
    struct Words {
        max: usize,
        server: usize,
        asked: std::sync::Mutex<Vec<String>>,
    }

    impl embed::Embedder for Words {
        fn name(&self) -> &str {
            "words"
        }
        fn dims(&self) -> usize {
            2
        }
        fn max_tokens(&self) -> usize {
            self.max
        }
        fn count_tokens(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
        fn token_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
            chunk::Tokenizer::tokens(&chunk::Whitespace, text)
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, embed::EmbedError> {
            self.asked.lock().unwrap().extend(texts.iter().map(|t| t.to_string()));
            let mut out = Vec::new();
            for (index, text) in texts.iter().enumerate() {
                let tokens = self.count_tokens(text);
                if tokens > self.max.min(self.server) {
                    return Err(embed::EmbedError::TooLong { index, tokens, max: self.max });
                }
                out.push(vec![tokens as f32, 1.0]);
            }
            Ok(out)
        }
    }

    #[test]
    fn a_query_too_long_for_the_embedder_is_cut_to_its_first_tokens() {
        let query = |max: usize, server: usize, text: &str| {
            let words = Arc::new(Words { max, server, asked: Default::default() });
            let vectorizer = Reporting(words.clone(), 1.0);
            let vector = embed::Embedder::embed_query(&vectorizer, text).ok();
            let asked = words.asked.lock().unwrap().clone();
            (vector, asked)
        };
        let long = "one two three four five six seven eight";
        // As many tokens as the embedder takes, cut before the first one left out.
        assert_eq!(
            query(5, 5, long),
            (Some(vec![5.0, 1.0]), vec![long.to_owned(), "one two three four five".to_owned()])
        );
        // A server refusing below the embedder's limit: halved until it takes the query's head.
        let (vector, asked) = query(5, 2, long);
        assert_eq!(vector, Some(vec![2.0, 1.0]));
        assert_eq!(asked[1..], ["one two three four five".to_owned(), "one two".to_owned()]);
        // A query that fits is sent as it is; one whose first token is refused gets no vector.
        assert_eq!(query(5, 5, "one two"), (Some(vec![2.0, 1.0]), vec!["one two".to_owned()]));
        assert_eq!(query(5, 0, "one two").0, None);
        // The batch path is unchanged: a long text is refused, for the chunker to halve.
        let vectorizer = Reporting(Arc::new(Words { max: 5, server: 5, asked: Default::default() }), 1.0);
        let refused = embed::Embedder::embed(&vectorizer, &[long]).unwrap_err();
        assert!(matches!(refused, embed::EmbedError::TooLong { tokens: 8, max: 5, .. }));
    }

    #[test]
    fn a_minilm_query_over_510_tokens_ranks_by_its_first_510() {
        assert!(
            bert::find_dir(Path::new("/nonexistent")).is_some(),
            "models/minilm is not installed: run scripts/build-embedder (scripts/test does)"
        );
        let (Some(vectorizer), _) = models(&EmbedderChoice::MiniLm, Path::new("/nonexistent")) else {
            panic!("minilm is installed but did not load")
        };
        // About 600 tokens: "open the file" is three, so its first 170 repeats are the 510 the model takes.
        let query = format!("{}resize the picture", "open the file ".repeat(198));
        assert!(vectorizer.embed(&[query.as_str()]).is_err());
        let cut = vectorizer.embed_query(&query).unwrap();
        let head = vectorizer.embed(&["open the file ".repeat(170).trim_end()]).unwrap().remove(0);
        assert_eq!(cut.len(), 384);
        assert!(embed::dot(&cut, &head) > 0.9999, "{}", embed::dot(&cut, &head));
    }

    #[test]
    fn none_means_words_only() {
        let (vectorizer, tokenizer) = models(&EmbedderChoice::None, Path::new("/nonexistent"));
        assert!(vectorizer.is_none());
        assert_eq!(tokenizer.count("abcd"), 2);
    }
}

//! The search index: token chunks, embeddings, full text, fused ranks.
//!
//! Keyed by content hash and stored under `--data`. It ranks only what the
//! session's view shows, computing its word statistics over that alone, so
//! hidden files change neither results nor order. It never decides access
//! itself: every path goes through `access`.

pub mod bert;
pub mod chunk;
pub mod embed;
pub mod hybrid;
pub mod store;

use std::path::Path;
use std::sync::Arc;

/// The default models: the embedded static embedder when its table is
/// installed (with its own tokenizer for chunking), else words only with the
/// bytes/2 stand-in for counting tokens. Says so once when it falls back.
pub fn default_models(data_dir: &Path) -> (Option<Arc<dyn hybrid::Vectorizer>>, Arc<dyn chunk::Tokenizer>) {
    // `default_static` says once that it fell back when no table is installed.
    match embed::default_static(data_dir) {
        Some(embedder) => {
            let tokenizer = embedder.tokenizer();
            (Some(embedder as Arc<dyn hybrid::Vectorizer>), tokenizer)
        }
        None => (None, Arc::new(chunk::HalfBytes)),
    }
}

/// Says once per process that search falls back to words only, and why
/// (the static table's own fallback says so in `embed`).
fn warn_once(message: &str) {
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
    /// The static table distilled at set-up (`embed::StaticEmbedder`): fast, the default.
    #[default]
    Static,
    /// The full transformer, all-MiniLM-L6-v2 (`bert::BertEmbedder`): better, much slower.
    MiniLm,
    /// No embedder: search ranks by words, paths and tags only.
    None,
    /// A server the user runs (`embed::HttpEmbedder`), and the model name to ask it for.
    Http { url: String, model: Option<String> },
}

impl std::str::FromStr for EmbedderChoice {
    type Err = String;

    /// `static`, `minilm`, `none` or an `http://HOST:PORT[/path]` URL.
    fn from_str(text: &str) -> Result<EmbedderChoice, String> {
        match text.trim() {
            "static" => Ok(EmbedderChoice::Static),
            "minilm" => Ok(EmbedderChoice::MiniLm),
            "none" => Ok(EmbedderChoice::None),
            url if url.starts_with("http://") => Ok(EmbedderChoice::Http { url: url.to_owned(), model: None }),
            other => Err(format!("{other:?} is not an embedder; use static, minilm, none or an http://HOST:PORT URL")),
        }
    }
}

impl std::fmt::Display for EmbedderChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmbedderChoice::Static => f.write_str("static"),
            EmbedderChoice::MiniLm => f.write_str("minilm"),
            EmbedderChoice::None => f.write_str("none"),
            EmbedderChoice::Http { url, .. } => f.write_str(url),
        }
    }
}

impl EmbedderChoice {
    /// The choice in force. `flag` (`--embedder`) wins over `configured`
    /// (the user's config.json: `"embedder"`, and `"embedder_model"` for a
    /// server); without either, the static table. `model` (`--embedder-model`)
    /// wins over the configured model. A configured value that is not an
    /// embedder means words only, said once.
    pub fn resolve(flag: Option<EmbedderChoice>, model: Option<String>, configured: impl Fn(&str) -> Option<String>) -> EmbedderChoice {
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
            EmbedderChoice::Http { url, model: None } => EmbedderChoice::Http { url, model: model.or_else(|| configured("embedder_model")) },
            other => other,
        }
    }
}

/// The vectorizer and the chunker's tokenizer for a choice. A choice that
/// cannot be had (the model is not installed, the server does not answer)
/// means words only with the bytes/2 stand-in for counting tokens, said once
/// (the static table keeps its tokenizer for chunking when only it is asked
/// for); an embedder that fails later says so once too.
pub fn models(choice: &EmbedderChoice, data_dir: &Path) -> (Option<Arc<dyn hybrid::Vectorizer>>, Arc<dyn chunk::Tokenizer>) {
    let words_only = || (None, Arc::new(chunk::HalfBytes) as Arc<dyn chunk::Tokenizer>);
    let embedder: Arc<dyn embed::Embedder> = match choice {
        EmbedderChoice::None => return words_only(),
        // `default_static` says once that it fell back when no table is installed.
        EmbedderChoice::Static => return default_models(data_dir),
        EmbedderChoice::MiniLm => {
            let Some(dir) = bert::find_dir(data_dir) else {
                warn_once("the minilm model is not installed (scripts/build-embedder installs it)");
                return words_only();
            };
            match bert::BertEmbedder::load(&dir) {
                Ok(embedder) => Arc::new(embedder),
                Err(e) => {
                    warn_once(&format!("the minilm model could not be loaded ({e})"));
                    return words_only();
                }
            }
        }
        EmbedderChoice::Http { url, model } => {
            let key = std::env::var(EMBEDDER_KEY_ENV).ok().filter(|k| !k.is_empty());
            match embed::HttpEmbedder::connect(url, model.as_deref(), key.as_deref(), HTTP_MAX_TOKENS) {
                Ok(embedder) => Arc::new(embedder),
                Err(e) => {
                    warn_once(&format!("the embedding server does not answer ({e})"));
                    return words_only();
                }
            }
        }
    };
    let tokenizer = Arc::new(EmbedderTokens(embedder.clone()));
    (Some(Arc::new(Reporting(embedder))), tokenizer)
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
}

/// An embedder as the index's vectorizer that says once when it fails (a
/// text too long for it is the chunker's business, not a failure).
struct Reporting(Arc<dyn embed::Embedder>);

impl hybrid::Vectorizer for Reporting {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn embed(&self, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        let vectors = self.0.embed(texts);
        if let Err(e) = &vectors {
            if !matches!(e, embed::EmbedError::TooLong { .. }) {
                warn_once(&format!("the embedder failed ({e})"));
            }
        }
        Ok(vectors?)
    }
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
        assert_eq!(error, "\"https://api.example/v1\" is not an embedder; use static, minilm, none or an http://HOST:PORT URL");
    }

    #[test]
    fn the_flag_wins_over_config_json_which_wins_over_the_default() {
        let config = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| v.to_string())
        };
        assert_eq!(EmbedderChoice::resolve(None, None, config(&[])), EmbedderChoice::Static);
        assert_eq!(EmbedderChoice::resolve(None, None, config(&[("embedder", "minilm")])), EmbedderChoice::MiniLm);
        assert_eq!(EmbedderChoice::resolve(Some(EmbedderChoice::None), None, config(&[("embedder", "minilm")])), EmbedderChoice::None);
        let server = config(&[("embedder", "http://localhost:8080/v1"), ("embedder_model", "nomic")]);
        let from_config = EmbedderChoice::Http { url: "http://localhost:8080/v1".into(), model: Some("nomic".into()) };
        assert_eq!(EmbedderChoice::resolve(None, None, server), from_config);
        let flagged = EmbedderChoice::resolve(None, Some("bge".into()), server);
        assert_eq!(flagged, EmbedderChoice::Http { url: "http://localhost:8080/v1".into(), model: Some("bge".into()) });
        // A value that is not an embedder means words only (and says so once).
        assert_eq!(EmbedderChoice::resolve(None, None, config(&[("embedder", "huge")])), EmbedderChoice::None);
    }

    #[test]
    fn none_means_words_only() {
        let (vectorizer, tokenizer) = models(&EmbedderChoice::None, Path::new("/nonexistent"));
        assert!(vectorizer.is_none());
        assert_eq!(tokenizer.count("abcd"), 2);
    }
}

//! The HTTP embedder: a server the user runs on their machine (llama.cpp's `/embedding` and `/tokenize`, or an OpenAI-compatible `/v1/embeddings`), asked through `ureq`; not a server, and never any address but the one given.

use super::chunk;
use super::embed::{normalize, EmbedError, Embedder};
use std::ops::Range;
use std::time::Duration;

/// Which protocol an embedding server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpApi {
    /// llama.cpp's server: `POST /embedding {"content": text}` and `POST /tokenize {"content": text, "with_pieces": true}`.
    LlamaCpp,
    /// `POST /v1/embeddings {"input": [texts], "model": name}`; no tokenizer endpoint, so tokens are counted by the ⌈bytes/2⌉ stand-in.
    OpenAi,
}

/// An embedder on a server at a URL the user gave (plain `http://`, meant for a local server).
///
/// `http://HOST:PORT` (or a path ending in `/embedding`) speaks llama.cpp's
/// API; a path ending in `/v1` or `/v1/embeddings` speaks OpenAI's. Vectors
/// are L2-normalised here whatever the server does. A text the server
/// refuses for its length comes back as `EmbedError::TooLong`.
pub struct HttpEmbedder {
    host: String,
    port: u16,
    /// The path before `/embedding`, `/tokenize` or `/embeddings`, without a trailing `/`.
    prefix: String,
    api: HttpApi,
    model: Option<String>,
    api_key: Option<String>,
    max_tokens: usize,
    dims: usize,
    name: String,
    /// The HTTP client: no proxy, no redirects, no pooled connections (see `agent`).
    agent: ureq::Agent,
    /// Whether `/tokenize` answered at connection; else tokens are counted by the stand-in.
    tokenize: bool,
}

impl HttpEmbedder {
    /// Reads the URL, then embeds one probe text to learn the vectors' length (and, for llama.cpp, checks `/tokenize`).
    pub fn connect(
        url: &str,
        model: Option<&str>,
        api_key: Option<&str>,
        max_tokens: usize,
    ) -> Result<HttpEmbedder, EmbedError> {
        let bad = |message: &str| EmbedError::Http { url: url.to_owned(), message: message.to_owned() };
        let rest =
            url.strip_prefix("http://").ok_or_else(|| bad("only http:// URLs are supported (a local server)"))?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && !p.contains(']') => (h, p.parse::<u16>().map_err(|_| bad("bad port"))?),
            _ => (authority, 80),
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let path = path.trim_end_matches('/');
        let (api, prefix) = if let Some(p) = path.strip_suffix("/v1/embeddings") {
            (HttpApi::OpenAi, format!("{p}/v1"))
        } else if path.ends_with("/v1") {
            (HttpApi::OpenAi, path.to_owned())
        } else if let Some(p) = path.strip_suffix("/embedding") {
            (HttpApi::LlamaCpp, p.to_owned())
        } else {
            (HttpApi::LlamaCpp, path.to_owned())
        };
        let mut embedder = HttpEmbedder {
            host: host.to_owned(),
            port,
            prefix,
            api,
            model: model.map(str::to_owned),
            api_key: api_key.map(str::to_owned),
            max_tokens,
            dims: 0,
            name: String::new(),
            agent: agent(),
            tokenize: false,
        };
        let probe = embedder.embed_batch(&["ctxfs"], 0)?;
        embedder.dims =
            probe.first().map(Vec::len).filter(|&d| d > 0).ok_or_else(|| bad("the probe gave an empty vector"))?;
        embedder.tokenize = api == HttpApi::LlamaCpp && embedder.tokenize_pieces("ctxfs").is_ok();
        let api_name = match api {
            HttpApi::LlamaCpp => "llama.cpp",
            HttpApi::OpenAi => "openai",
        };
        embedder.name = format!("http:{api_name}:{url}:{}:{}", model.unwrap_or("-"), embedder.dims);
        Ok(embedder)
    }

    /// Which protocol the URL chose.
    pub fn api(&self) -> HttpApi {
        self.api
    }

    fn url(&self) -> String {
        format!("http://{}:{}{}", self.host, self.port, self.prefix)
    }

    fn error(&self, message: impl Into<String>) -> EmbedError {
        EmbedError::Http { url: self.url(), message: message.into() }
    }

    /// One POST with a JSON body; answers the status and the parsed JSON body (or its text when it is not JSON).
    fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<(u16, Result<serde_json::Value, String>), EmbedError> {
        let body = serde_json::to_vec(body).map_err(|e| self.error(e.to_string()))?;
        let mut request = self
            .agent
            .post(format!("{}{path}", self.url()))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json");
        if let Some(key) = &self.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let mut answer = request.send(&body[..]).map_err(|e| self.error(e.to_string()))?;
        let status = answer.status().as_u16();
        let body = match answer.body_mut().with_config().limit(MAX_RESPONSE as u64).read_to_vec() {
            Ok(body) => body,
            Err(ureq::Error::BodyExceedsLimit(_)) => return Err(self.error("the answer is too large")),
            Err(e) => return Err(self.error(e.to_string())),
        };
        Ok((status, serde_json::from_slice(&body).map_err(|_| String::from_utf8_lossy(&body).into_owned())))
    }

    /// Embeds texts, `first` being the index of `texts[0]` in the caller's batch (for `TooLong`).
    fn embed_batch(&self, texts: &[&str], first: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let too_long = |index: usize, text: &str| EmbedError::TooLong {
            index,
            tokens: self.count_tokens(text),
            max: self.max_tokens,
        };
        let refused = |status: u16, body: &Result<serde_json::Value, String>| {
            let text = match body {
                Ok(v) => v.to_string(),
                Err(t) => t.clone(),
            };
            let lower = text.to_lowercase();
            let by_length =
                ["too long", "too large", "maximum context", "context length", "exceeds", "too many tokens"]
                    .iter()
                    .any(|m| lower.contains(m));
            (by_length, format!("status {status}: {}", text.chars().take(300).collect::<String>()))
        };
        match self.api {
            HttpApi::LlamaCpp => {
                let mut out = Vec::with_capacity(texts.len());
                for (i, text) in texts.iter().enumerate() {
                    if self.tokenize {
                        let tokens = self.count_tokens(text);
                        if tokens > self.max_tokens {
                            return Err(EmbedError::TooLong { index: first + i, tokens, max: self.max_tokens });
                        }
                    }
                    let (status, body) = self.post("/embedding", &serde_json::json!({ "content": text }))?;
                    if status != 200 {
                        let (by_length, message) = refused(status, &body);
                        return Err(if by_length { too_long(first + i, text) } else { self.error(message) });
                    }
                    let body =
                        body.map_err(|t| self.error(format!("not JSON: {}", t.chars().take(200).collect::<String>())))?;
                    out.push(llama_vector(&body).ok_or_else(|| self.error("no `embedding` in the answer"))?);
                }
                Ok(out)
            }
            HttpApi::OpenAi => {
                let mut request = serde_json::json!({ "input": texts, "encoding_format": "float" });
                if let Some(model) = &self.model {
                    request["model"] = serde_json::Value::String(model.clone());
                }
                let (status, body) = self.post("/embeddings", &request)?;
                if status != 200 {
                    let (by_length, message) = refused(status, &body);
                    if by_length && texts.len() > 1 {
                        // Find which text was refused: one at a time.
                        let mut out = Vec::with_capacity(texts.len());
                        for (i, text) in texts.iter().enumerate() {
                            out.extend(self.embed_batch(&[text], first + i)?);
                        }
                        return Ok(out);
                    }
                    return Err(if by_length { too_long(first, texts[0]) } else { self.error(message) });
                }
                let body =
                    body.map_err(|t| self.error(format!("not JSON: {}", t.chars().take(200).collect::<String>())))?;
                let data =
                    body.get("data").and_then(|d| d.as_array()).ok_or_else(|| self.error("no `data` in the answer"))?;
                let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
                for (k, item) in data.iter().enumerate() {
                    let index = item.get("index").and_then(|i| i.as_u64()).map(|i| i as usize).unwrap_or(k);
                    let vector = item
                        .get("embedding")
                        .and_then(floats)
                        .ok_or_else(|| self.error("an item has no `embedding`"))?;
                    if let Some(slot) = out.get_mut(index) {
                        *slot = Some(unit(vector));
                    }
                }
                out.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| self.error("the answer misses some texts"))
            }
        }
    }

    /// llama.cpp's `/tokenize` with pieces, turned into byte spans over the text.
    fn tokenize_pieces(&self, text: &str) -> Result<Vec<Range<usize>>, EmbedError> {
        let (status, body) = self.post("/tokenize", &serde_json::json!({ "content": text, "with_pieces": true }))?;
        let body = match (status, body) {
            (200, Ok(body)) => body,
            (status, _) => return Err(self.error(format!("/tokenize answered status {status}"))),
        };
        let tokens =
            body.get("tokens").and_then(|t| t.as_array()).ok_or_else(|| self.error("no `tokens` in the answer"))?;
        let pieces: Vec<Option<Vec<u8>>> = tokens
            .iter()
            .map(|t| match t.get("piece") {
                Some(serde_json::Value::String(s)) => Some(s.as_bytes().to_vec()),
                Some(serde_json::Value::Array(bytes)) => {
                    Some(bytes.iter().filter_map(|b| b.as_u64().map(|b| b as u8)).collect())
                }
                _ => None,
            })
            .collect();
        Ok(align_pieces(text, &pieces))
    }
}

/// The most bytes an answer may have.
const MAX_RESPONSE: usize = 256 << 20;

/// The HTTP client (`ureq`, plain HTTP only) for a server the user runs on
/// their own machine: it goes to the URL given and nowhere else, so no proxy
/// from the environment and no redirects (a 3xx is an answer like any
/// other); a new connection for each request, as the hand-written client
/// this replaced made; an answer whose status is an error is read, not
/// thrown, so a refusal by length can be told from a failure.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .proxy(None)
        .max_redirects(0)
        .http_status_as_error(false)
        .max_idle_connections(0)
        .max_idle_connections_per_host(0)
        .timeout_connect(Some(Duration::from_secs(10)))
        .timeout_per_read(Some(Duration::from_secs(120)))
        .timeout_per_write(Some(Duration::from_secs(120)))
        .build()
        .into()
}

impl Embedder for HttpEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dims(&self) -> usize {
        self.dims
    }

    fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    fn count_tokens(&self, text: &str) -> usize {
        if self.tokenize {
            if let Ok(spans) = self.tokenize_pieces(text) {
                return spans.len();
            }
        }
        text.len().div_ceil(2)
    }

    fn token_spans(&self, text: &str) -> Vec<Range<usize>> {
        if self.tokenize {
            if let Ok(spans) = self.tokenize_pieces(text) {
                return spans;
            }
        }
        chunk::Tokenizer::tokens(&chunk::HalfBytes, text)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let vectors = self.embed_batch(texts, 0)?;
        if let Some(bad) = vectors.iter().find(|v| v.len() != self.dims) {
            return Err(self.error(format!("a vector of {} dimensions, expected {}", bad.len(), self.dims)));
        }
        Ok(vectors)
    }
}

/// A JSON array of numbers as f32s.
fn floats(v: &serde_json::Value) -> Option<Vec<f32>> {
    v.as_array()?.iter().map(|x| x.as_f64().map(|x| x as f32)).collect()
}

/// A unit copy of the vector.
fn unit(mut v: Vec<f32>) -> Vec<f32> {
    normalize(&mut v);
    v
}

/// The vector in a llama.cpp `/embedding` answer: `{"embedding": [..]}` (older
/// servers) or `[{"index": 0, "embedding": [[..]]}]` (newer ones; several
/// rows, one per token under `--pooling none`, are meaned).
fn llama_vector(body: &serde_json::Value) -> Option<Vec<f32>> {
    let item = match body {
        serde_json::Value::Array(items) => items.first()?,
        other => other,
    };
    let embedding = item.get("embedding")?;
    if let Some(v) = floats(embedding) {
        return Some(unit(v));
    }
    let rows: Vec<Vec<f32>> = embedding.as_array()?.iter().map(floats).collect::<Option<_>>()?;
    let dims = rows.first()?.len();
    let mut mean = vec![0f32; dims];
    for row in rows.iter().filter(|r| r.len() == dims) {
        mean.iter_mut().zip(row).for_each(|(m, x)| *m += x);
    }
    Some(unit(mean))
}

/// Byte spans for the server's token pieces, found in order in the text.
///
/// A piece is looked for at the current position, then without its leading
/// whitespace (SentencePiece models prefix a space the text may not have),
/// then a little further on; a piece not found (or missing) takes no bytes.
/// Spans are widened to character boundaries, since a piece may be part of
/// a character.
fn align_pieces(text: &str, pieces: &[Option<Vec<u8>>]) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let mut at = 0usize;
    let mut out = Vec::with_capacity(pieces.len());
    for piece in pieces {
        let Some(piece) = piece else {
            out.push(at..at);
            continue;
        };
        let trimmed = {
            let lead = piece.iter().take_while(|b| b.is_ascii_whitespace()).count();
            &piece[lead..]
        };
        let found = [&piece[..], trimmed].iter().filter(|p| !p.is_empty()).find_map(|p| {
            let window = &bytes[at..(at + p.len() + 16).min(bytes.len())];
            window.windows(p.len()).position(|w| w == *p).map(|off| (at + off, at + off + p.len()))
        });
        match found {
            Some((s, e)) => {
                out.push(s..e);
                at = e;
            }
            None => out.push(at..at),
        }
    }
    let floor = |mut i: usize| {
        while i > 0 && !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let ceil = |mut i: usize| {
        while i < text.len() && !text.is_char_boundary(i) {
            i += 1;
        }
        i
    };
    out.into_iter().map(|r| floor(r.start)..ceil(r.end)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::{self, FakeServer};
    use super::*;
    use std::net::TcpListener;
    use std::sync::atomic::Ordering;

    // ----- Fake embedding servers on 127.0.0.1 (`index::testing`), for the HTTP embedder.

    /// The fake vector of a text: its length, its count of `e`, and 1.
    fn fake_vector(text: &str) -> Vec<f32> {
        vec![text.len() as f32, text.matches('e').count() as f32, 1.0]
    }

    /// A llama.cpp-like server (see `testing::llama_cpp`) with `fake_vector`.
    fn llama_server(new_format: bool, max: usize) -> FakeServer {
        testing::llama_cpp(fake_vector, new_format, max)
    }

    fn assert_unit_fake(v: &[f32], text: &str) {
        let mut want = fake_vector(text);
        normalize(&mut want);
        assert_eq!(v.len(), 3);
        for (a, b) in v.iter().zip(&want) {
            assert!((a - b).abs() < 1e-6, "{v:?} vs {want:?}");
        }
    }

    #[test]
    fn llama_cpp_server_embeds_counts_and_spans() {
        for new_format in [false, true] {
            let server = llama_server(new_format, 100);
            let e = HttpEmbedder::connect(&server.url, None, None, 100).unwrap();
            assert_eq!(e.api(), HttpApi::LlamaCpp);
            assert_eq!(e.dims(), 3);
            assert!(e.name().starts_with("http:llama.cpp:"));
            let texts = ["here we embed", "three texts", "every one"];
            let vectors = e.embed(&texts).unwrap();
            for (v, t) in vectors.iter().zip(texts) {
                assert_unit_fake(v, t);
            }
            let text = "héllo  big\nworld";
            assert_eq!(e.count_tokens(text), 3);
            let spans = e.token_spans(text);
            let words: Vec<&str> = spans.iter().map(|r| &text[r.clone()]).collect();
            // A piece's own leading space counts when the text has it, as a BPE span would.
            assert_eq!(words, vec!["héllo", " big", "world"]);
        }
    }

    #[test]
    fn llama_cpp_refusal_by_length_is_too_long() {
        let server = llama_server(false, 3);
        // The client's limit is above the server's, so the server's own refusal is what is read.
        let e = HttpEmbedder::connect(&server.url, None, None, 10).unwrap();
        match e.embed(&["short", "one two three four five"]) {
            Err(EmbedError::TooLong { index: 1, tokens: 5, max: 10 }) => {}
            other => panic!("{other:?}"),
        }
        // With the client's limit below, the refusal comes before any request is sent.
        let e = HttpEmbedder::connect(&server.url, None, None, 2).unwrap();
        let before = server.requests.load(Ordering::Relaxed);
        assert!(matches!(e.embed(&["one two three"]), Err(EmbedError::TooLong { index: 0, tokens: 3, max: 2 })));
        // One /tokenize request and no /embedding request.
        assert_eq!(server.requests.load(Ordering::Relaxed) - before, 1);
    }

    #[test]
    fn openai_server_embeds_in_one_batch_in_index_order() {
        let server = testing::openai(fake_vector, "mini", 40);
        let url = format!("{}/v1/embeddings", server.url);
        let e = HttpEmbedder::connect(&url, Some("mini"), Some("secret"), 512).unwrap();
        assert_eq!(e.api(), HttpApi::OpenAi);
        let before = server.requests.load(Ordering::Relaxed);
        let texts = ["first text", "the second one", "e e e"];
        let vectors = e.embed(&texts).unwrap();
        assert_eq!(server.requests.load(Ordering::Relaxed) - before, 1);
        for (v, t) in vectors.iter().zip(texts) {
            assert_unit_fake(v, t);
        }
        // No tokenizer endpoint: the ⌈bytes/2⌉ stand-in.
        assert_eq!(e.count_tokens("abcde"), 3);
        let long = "x".repeat(50);
        match e.embed(&["fine", &long]) {
            Err(EmbedError::TooLong { index: 1, tokens: 25, .. }) => {}
            other => panic!("{other:?}"),
        }
        // The wrong model is an error, not a refusal by length.
        let e2 = HttpEmbedder::connect(&format!("{}/v1", server.url), Some("other"), None, 512);
        assert!(matches!(e2, Err(EmbedError::Http { .. })));
    }

    #[test]
    fn bad_urls_and_dead_servers_are_errors() {
        assert!(matches!(HttpEmbedder::connect("https://127.0.0.1:1/", None, None, 8), Err(EmbedError::Http { .. })));
        assert!(matches!(HttpEmbedder::connect("http://:80", None, None, 8), Err(EmbedError::Http { .. })));
        // A port nothing listens on: bind one, learn its number, close it.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert!(matches!(
            HttpEmbedder::connect(&format!("http://127.0.0.1:{port}"), None, None, 8),
            Err(EmbedError::Http { .. })
        ));
    }

    #[test]
    fn pieces_align_to_the_text_even_when_spaced_or_split() {
        let text = "fn héllo()";
        let pieces = vec![
            Some(b" fn".to_vec()),
            Some(b" h".to_vec()),
            Some(vec![0xc3]),
            Some(vec![0xa9]),
            Some(b"llo".to_vec()),
            None,
            Some(b"()".to_vec()),
        ];
        let spans = align_pieces(text, &pieces);
        let got: Vec<&str> = spans.iter().map(|r| &text[r.clone()]).collect();
        // The two halves of `é` each widen to the whole character.
        assert_eq!(got, vec!["fn", " h", "é", "é", "llo", "", "()"]);
    }
}

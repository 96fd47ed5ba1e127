//! Fake embedding servers on 127.0.0.1 for tests (llama.cpp's `/embedding` + `/tokenize`, OpenAI's `/v1/embeddings`), and this crate's own sources as test text; not a server anyone should run, and not used by ctxfs itself.
//!
//! It is public (and hidden from the docs) so that the unit tests of
//! `http::HttpEmbedder` and the integration tests that run the `ctxfs`
//! binary against a server share one implementation. A server answers one
//! HTTP/1.1 request a connection, in a thread, until it is dropped (and for
//! at most five minutes), and records every request it read.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A request the server read: its path, its headers (names in lower case) and its JSON body (`Null` when it had none).
#[derive(Debug, Clone)]
pub struct Request {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: serde_json::Value,
}

impl Request {
    /// The value of a header, by its name in any case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// An answer: the status, the body text, and whether to send it chunked.
pub type Answer = (u16, String, bool);

/// A fake server; it stops when dropped.
pub struct FakeServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// How many requests it answered.
    pub requests: Arc<AtomicUsize>,
    /// Every request it read, in order.
    pub seen: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeServer {
    /// The requests read so far.
    pub fn seen(&self) -> Vec<Request> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().ok();
        }
    }
}

/// Starts a server whose handler maps each request to an answer.
pub fn serve(handler: impl Fn(&Request) -> Answer + Send + 'static) -> FakeServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port on 127.0.0.1");
    listener.set_nonblocking(true).expect("a non-blocking listener");
    let url = format!("http://{}", listener.local_addr().expect("the listener's address"));
    let stop = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (stop2, requests2, seen2) = (stop.clone(), requests.clone(), seen.clone());
    let thread = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(300);
        while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            };
            stream.set_nonblocking(false).ok();
            stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let Some(request) = read_request(&mut stream) else { continue };
            requests2.fetch_add(1, Ordering::Relaxed);
            let (status, text, chunked) = handler(&request);
            seen2.lock().unwrap_or_else(|e| e.into_inner()).push(request);
            let answer = if chunked {
                let (a, b) = text.split_at(text.len() / 2);
                format!(
                    "HTTP/1.1 {status} X\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                    a.len(),
                    b.len()
                )
            } else {
                format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                )
            };
            stream.write_all(answer.as_bytes()).ok();
        }
    });
    FakeServer { url, requests, seen, stop, thread: Some(thread) }
}

/// Reads one request with a `Content-Length` body; `None` when the client left first.
fn read_request(stream: &mut impl Read) -> Option<Request> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).unwrap_or(0);
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
        let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let path = lines.next().unwrap_or("").split_whitespace().nth(1).unwrap_or("").to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let length = headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
        if raw.len() >= end + 4 + length {
            let body = serde_json::from_slice(&raw[end + 4..end + 4 + length]).unwrap_or(serde_json::Value::Null);
            return Some(Request { path, headers, body });
        }
    }
}

/// A llama.cpp-like server: whitespace words are tokens (pieces with a
/// leading space, as a SentencePiece server gives them); a text of more than
/// `max_words` words is refused as llama.cpp refuses one too large for its
/// batch. `new_format` answers `/embedding` as newer servers do (a list of
/// rows, chunked).
pub fn llama_cpp(vector: fn(&str) -> Vec<f32>, new_format: bool, max_words: usize) -> FakeServer {
    serve(move |request| {
        let content = request.body["content"].as_str().unwrap_or("");
        match request.path.as_str() {
            "/tokenize" => {
                let tokens: Vec<serde_json::Value> = content
                    .split_whitespace()
                    .enumerate()
                    .map(|(i, w)| serde_json::json!({"id": i, "piece": format!(" {w}")}))
                    .collect();
                (200, serde_json::json!({ "tokens": tokens }).to_string(), false)
            }
            "/embedding" if content.split_whitespace().count() > max_words => (
                500,
                r#"{"error":{"code":500,"message":"input is too large to process. increase the physical batch size"}}"#
                    .to_owned(),
                false,
            ),
            "/embedding" if new_format => {
                (200, serde_json::json!([{"index": 0, "embedding": [vector(content)]}]).to_string(), true)
            }
            "/embedding" => (200, serde_json::json!({"embedding": vector(content)}).to_string(), false),
            _ => (404, "not found".to_owned(), false),
        }
    })
}

/// An OpenAI-compatible server at `/v1/embeddings`: it knows one `model`,
/// refuses a batch holding a text of more than `max_bytes` bytes as OpenAI
/// refuses one beyond the model's context, and answers the items in reverse
/// order (a client must go by their `index`).
pub fn openai(vector: fn(&str) -> Vec<f32>, model: &'static str, max_bytes: usize) -> FakeServer {
    serve(move |request| {
        if request.path != "/v1/embeddings" {
            return (404, "{}".to_owned(), false);
        }
        if request.body["model"] != model {
            return (400, r#"{"error":{"message":"unknown model"}}"#.to_owned(), false);
        }
        let inputs: Vec<&str> =
            request.body["input"].as_array().map(|a| a.iter().filter_map(|s| s.as_str()).collect()).unwrap_or_default();
        if inputs.iter().any(|t| t.len() > max_bytes) {
            return (
                400,
                r#"{"error":{"message":"This model's maximum context length is 8 tokens"}}"#.to_owned(),
                false,
            );
        }
        let data: Vec<serde_json::Value> = inputs
            .iter()
            .enumerate()
            .rev()
            .map(|(i, t)| serde_json::json!({"object": "embedding", "index": i, "embedding": vector(t)}))
            .collect();
        (200, serde_json::json!({"object": "list", "data": data}).to_string(), false)
    })
}

/// Topics a `topic_vector` has a dimension for, each a few words of one meaning.
pub const TOPICS: [&[&str]; 6] = [
    &["upload", "uploads", "send", "transfer", "push", "network"],
    &["retry", "retries", "again", "backoff", "repeat", "attempt"],
    &["image", "picture", "photo", "thumbnail", "resize", "resizing", "pixels"],
    &["database", "postgres", "sql", "query", "table", "rows"],
    &["password", "hash", "salt", "bcrypt", "secret", "credentials"],
    &["colour", "color", "paint", "palette", "hue", "shade"],
];

/// A vector that stands for meaning: how many words of each of `TOPICS` the
/// text holds (lower-cased, split at anything but letters), and a small
/// constant so a text without any is not the zero vector. Texts on one topic
/// are close whatever words they use.
pub fn topic_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; TOPICS.len() + 1];
    for word in text.split(|c: char| !c.is_alphabetic()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        if let Some(t) = TOPICS.iter().position(|topic| topic.contains(&word.as_str())) {
            v[t] += 1.0;
        }
    }
    v[TOPICS.len()] = 0.1;
    v
}

/// The text of every `.rs` file under this crate's `src/`: real code for
/// tests and measurements of tokenizers and embedders to work on.
pub fn crate_sources() -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.extend(std::fs::read_to_string(&path).ok());
            }
        }
    }
    out
}

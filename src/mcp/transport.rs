//! MCP over stdio: one JSON-RPC message per line, read defensively.
//!
//! rmcp's own `AsyncRwTransport` caps lines too, but it drops an over-long
//! line silently (the client then waits forever for its answer) and a
//! well-formed message before `initialize` ends the server. This transport:
//!
//! - caps a line at [`MAX_MESSAGE`] bytes without ever buffering more, and
//!   answers an over-long request with a JSON-RPC error carrying its id when
//!   the id can be read from the line's start or end;
//! - ignores lines that are not JSON (as the official SDKs do: answering
//!   garbage can start an error storm), answers well-formed JSON that is not
//!   a message with "Invalid request";
//! - before the handshake, passes on requests only (a stray notification or
//!   response would make rmcp give up the connection);
//! - stamps each tool call, and each notification that re-opens the session,
//!   with a [`Ticket`](super::order::Ticket) in arrival order (see `order`).

use super::order::Sequencer;
use rmcp::model::{
    ClientNotification, ClientRequest, ErrorCode, ErrorData, GetExtensions, GetMeta, JsonRpcMessage, NumberOrString,
    ProtocolVersion, RequestId,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The largest message accepted: 16 MiB, without the line's end.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// How much of an over-long line's start and end is kept to find its id.
const KEEP_HEAD: usize = 4096;
const KEEP_TAIL: usize = 512;

type Writer<W> = Arc<Mutex<Option<W>>>;

pub struct LineTransport<R, W> {
    read: BufReader<R>,
    write: Writer<W>,
    max: usize,
    line: Vec<u8>,
    /// Set while the rest of an over-long line is being skipped.
    oversized: Option<Oversized>,
    /// Whether a request has opened the lifecycle (see `opens_lifecycle`).
    open: bool,
    sequencer: Arc<Sequencer>,
}

#[derive(Default)]
struct Oversized {
    head: Vec<u8>,
    tail: Vec<u8>,
    length: usize,
}

enum Read {
    Line,
    Oversized(Oversized),
    Eof,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    pub fn new(read: R, write: W, sequencer: Arc<Sequencer>) -> Self {
        LineTransport {
            read: BufReader::with_capacity(64 * 1024, read),
            write: Arc::new(Mutex::new(Some(write))),
            max: MAX_MESSAGE,
            line: Vec::new(),
            oversized: None,
            open: false,
            sequencer,
        }
    }

    #[cfg(test)]
    pub fn with_max(mut self, max: usize) -> Self {
        self.max = max;
        self
    }

    /// Reads one line into `self.line` (without its `\n`), never holding more
    /// than `max` bytes of it. Cancel-safe: `receive` runs inside rmcp's
    /// `select!`, so all progress lives in `self`, and bytes are consumed from
    /// the reader only right after they were copied, with no await between.
    async fn read_line(&mut self) -> std::io::Result<Read> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                // A last line without `\n` is incomplete: drop it.
                return Ok(Read::Eof);
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let chunk = &available[..newline.unwrap_or(available.len())];
            let taken = chunk.len() + usize::from(newline.is_some());
            if let Some(over) = self.oversized.as_mut() {
                over.length += chunk.len();
                keep_tail(&mut over.tail, chunk);
            } else if self.line.len() + chunk.len() > self.max {
                let mut over = Oversized { length: self.line.len() + chunk.len(), ..Default::default() };
                let mut start = std::mem::take(&mut self.line);
                start.extend_from_slice(&chunk[..chunk.len().min(KEEP_HEAD)]);
                start.truncate(KEEP_HEAD);
                start.shrink_to_fit();
                over.head = start;
                keep_tail(&mut over.tail, chunk);
                self.oversized = Some(over);
            } else {
                self.line.extend_from_slice(chunk);
            }
            self.read.consume(taken);
            if newline.is_some() {
                return Ok(match self.oversized.take() {
                    Some(over) => Read::Oversized(over),
                    None => Read::Line,
                });
            }
        }
    }

    /// Sends an error answer from a task of its own, so that a `receive`
    /// cancelled by rmcp's `select!` cannot lose it halfway.
    fn answer_error(&self, error: ErrorData, id: Option<RequestId>) {
        let send = write_message::<W>(self.write.clone(), JsonRpcMessage::error(error, id));
        tokio::spawn(async move {
            if let Err(e) = send.await {
                tracing::warn!("could not send an error answer: {e}");
            }
        });
    }

    /// Turns one complete line into a message, or answers it and returns None.
    fn parse(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let line = std::mem::take(&mut self.line);
        let parsed = self.parse_line(&line, true);
        self.line = line;
        parsed
    }

    fn parse_line(&self, line: &[u8], repair: bool) -> Option<RxJsonRpcMessage<RoleServer>> {
        let mut line: &[u8] = line;
        if let Some(rest) = line.strip_suffix(b"\r") {
            line = rest;
        }
        if let Some(rest) = line.strip_prefix(b"\xEF\xBB\xBF") {
            line = rest;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
            // A tools/call rmcp could not read as one (its arguments are not an
            // object): answered by the tool as a tool error, which the model reads.
            Ok(JsonRpcMessage::Request(request)) if repair && is_unread_tool_call(&request.request) => {
                let mut value: serde_json::Value = serde_json::from_slice(line).ok()?;
                if !arguments_not_an_object(&value) {
                    return Some(JsonRpcMessage::Request(request));
                }
                let params = &mut value["params"];
                let given = params["arguments"].take();
                params["arguments"] = serde_json::json!({ NOT_AN_OBJECT: given });
                let bytes = serde_json::to_vec(&value).unwrap_or_default();
                self.parse_line(&bytes, false)
            }
            Ok(message) => Some(message),
            Err(error) => {
                match serde_json::from_slice::<serde_json::Value>(line) {
                    Err(_) if repair => {
                        // JavaScript and Python write a lone surrogate as `\udcff`,
                        // which JSON parsers refuse: read it as U+FFFD instead.
                        if let Some(repaired) = replace_lone_surrogates(line) {
                            return self.parse_line(&repaired, false);
                        }
                        self.not_json(line, &error);
                    }
                    Err(_) => self.not_json(line, &error),
                    Ok(value) => {
                        let id = value.get("id").and_then(request_id);
                        let method = value.get("method").and_then(serde_json::Value::as_str);
                        match (method, value.get("id")) {
                            (Some(_), None) => tracing::warn!("ignored a malformed notification: {error}"),
                            (Some(method), Some(_)) if id.is_some() => {
                                tracing::warn!("answered a request with malformed params: {error}");
                                self.answer_error(
                                    ErrorData::invalid_params(format!("Invalid params for {method}: {error}"), None),
                                    id,
                                );
                            }
                            _ => {
                                tracing::warn!("answered a malformed message: {error}");
                                self.answer_error(
                                    ErrorData::invalid_request(format!("Invalid request: {error}"), None),
                                    id,
                                );
                            }
                        }
                    }
                }
                None
            }
        }
    }

    /// A line that is not JSON: answered "Parse error" when an id can still
    /// be read from its start or end, else only logged.
    fn not_json(&self, line: &[u8], error: &serde_json::Error) {
        match id_from_head(line).or_else(|| id_from_tail(line)) {
            Some(id) => {
                tracing::warn!("answered a line that is not JSON ({} bytes): {error}", line.len());
                self.answer_error(
                    ErrorData::new(ErrorCode::PARSE_ERROR, format!("Parse error: {error}"), None),
                    Some(id),
                );
            }
            None => tracing::warn!("ignored a line that is not JSON ({} bytes): {error}", line.len()),
        }
    }

    /// Gives tool calls, and the notifications that re-open the session, their place.
    fn stamp(&self, message: &mut RxJsonRpcMessage<RoleServer>) {
        match message {
            JsonRpcMessage::Request(request) => {
                if let ClientRequest::CallToolRequest(call) = &mut request.request {
                    call.extensions_mut().insert(self.sequencer.issue());
                }
            }
            JsonRpcMessage::Notification(notification) => match &mut notification.notification {
                ClientNotification::InitializedNotification(n) => {
                    n.extensions.insert(self.sequencer.issue());
                }
                ClientNotification::RootsListChangedNotification(n) => {
                    n.extensions.insert(self.sequencer.issue());
                }
                _ => {}
            },
            _ => {}
        }
    }
}

/// Whether rmcp leaves its pre-handshake loop for this request: `initialize`,
/// or a request carrying complete 2026-07-28 inline metadata of a version it serves.
fn opens_lifecycle(request: &ClientRequest) -> bool {
    match request {
        ClientRequest::InitializeRequest(_) => true,
        ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_) => false,
        other => {
            let meta = other.get_meta();
            meta.missing_required_keys(&ProtocolVersion::V_2026_07_28).is_empty()
                && meta.protocol_version().is_some_and(|v| ProtocolVersion::KNOWN_VERSIONS.contains(&v))
        }
    }
}

/// The key a `tools/call` whose `arguments` is not an object carries them
/// under, so the call reaches the tool (which refuses it in words the model
/// reads) instead of failing as a JSON-RPC error.
pub(crate) const NOT_AN_OBJECT: &str = "\u{0}ctxfs:arguments-not-an-object";

fn is_unread_tool_call(request: &ClientRequest) -> bool {
    matches!(request, ClientRequest::CustomRequest(custom) if custom.method == "tools/call")
}

fn arguments_not_an_object(value: &serde_json::Value) -> bool {
    value.get("method").and_then(serde_json::Value::as_str) == Some("tools/call")
        && value.get("params").and_then(|p| p.get("arguments")).is_some_and(|a| !a.is_object() && !a.is_null())
}

/// The line with every `\uXXXX` escape of a lone surrogate (one not part of
/// a pair) replaced by `\ufffd`; `None` when there is none.
fn replace_lone_surrogates(line: &[u8]) -> Option<Vec<u8>> {
    let hex4 = |b: &[u8]| -> Option<u16> { u16::from_str_radix(std::str::from_utf8(b.get(..4)?).ok()?, 16).ok() };
    let mut out = Vec::with_capacity(line.len());
    let mut changed = false;
    let mut i = 0;
    while i < line.len() {
        if line[i] == b'\\' && i + 1 < line.len() {
            if line[i + 1] == b'u' {
                if let Some(unit) = hex4(&line[i + 2..]) {
                    let is_high = (0xD800..0xDC00).contains(&unit);
                    let is_low = (0xDC00..0xE000).contains(&unit);
                    let next_low = line.get(i + 6..i + 8) == Some(b"\\u")
                        && hex4(&line[i + 8..]).is_some_and(|u| (0xDC00..0xE000).contains(&u));
                    if is_high && next_low {
                        out.extend_from_slice(&line[i..i + 12]);
                        i += 12;
                        continue;
                    }
                    if is_high || is_low {
                        out.extend_from_slice(b"\\ufffd");
                        changed = true;
                        i += 6;
                        continue;
                    }
                }
            }
            out.extend_from_slice(&line[i..i + 2]);
            i += 2;
            continue;
        }
        out.push(line[i]);
        i += 1;
    }
    changed.then_some(out)
}

fn keep_tail(tail: &mut Vec<u8>, chunk: &[u8]) {
    tail.extend_from_slice(&chunk[chunk.len().saturating_sub(KEEP_TAIL)..]);
    if tail.len() > KEEP_TAIL {
        tail.drain(..tail.len() - KEEP_TAIL);
    }
}

fn request_id(value: &serde_json::Value) -> Option<RequestId> {
    match value {
        serde_json::Value::Number(n) => n.as_i64().map(NumberOrString::Number),
        serde_json::Value::String(s) => Some(NumberOrString::String(s.as_str().into())),
        _ => None,
    }
}

fn write_message<W: AsyncWrite + Send + Unpin + 'static>(
    write: Writer<W>,
    message: TxJsonRpcMessage<RoleServer>,
) -> impl std::future::Future<Output = std::io::Result<()>> + Send + 'static {
    let bytes = serde_json::to_vec(&message).map(|mut b| {
        b.push(b'\n');
        b
    });
    async move {
        let bytes = bytes.map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let mut guard = write.lock().await;
        let Some(writer) = guard.as_mut() else {
            return Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "transport closed"));
        };
        writer.write_all(&bytes).await?;
        writer.flush().await
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        write_message(self.write.clone(), item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Err(e) => {
                    tracing::error!("reading stdin failed: {e}");
                    return None;
                }
                Ok(Read::Eof) => return None,
                Ok(Read::Oversized(over)) => {
                    let id = id_from_head(&over.head).or_else(|| id_from_tail(&over.tail));
                    tracing::warn!(length = over.length, ?id, "discarded a message over {} bytes", self.max);
                    self.answer_error(
                        ErrorData::invalid_request(
                            format!(
                                "Message too large: {} bytes, the limit is {} bytes (16 MiB). Send smaller pieces.",
                                over.length, self.max
                            ),
                            None,
                        ),
                        id,
                    );
                }
                Ok(Read::Line) => {
                    let parsed = self.parse();
                    self.line.clear();
                    if self.line.capacity() > 1024 * 1024 {
                        self.line.shrink_to(64 * 1024);
                    }
                    let Some(mut message) = parsed else { continue };
                    if !self.open {
                        match &message {
                            JsonRpcMessage::Request(request) => {
                                self.open = opens_lifecycle(&request.request);
                            }
                            _ => {
                                tracing::warn!("ignored a message other than a request before initialize");
                                continue;
                            }
                        }
                    }
                    self.stamp(&mut message);
                    return Some(message);
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut guard = self.write.lock().await;
        if let Some(mut writer) = guard.take() {
            let _ = writer.shutdown().await;
        }
        Ok(())
    }
}

// --- Finding the id of a message too long to parse -------------------------

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The end of the JSON string starting at `b[i] == '"'`, just past its closing quote.
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Parses a scalar id (`123`, `"abc"`) at `b[i..]`.
fn scalar_id(b: &[u8], i: usize) -> Option<RequestId> {
    let end = if b.get(i) == Some(&b'"') {
        string_end(b, i)?
    } else {
        let mut j = i;
        while j < b.len() && (b[j] == b'-' || b[j].is_ascii_digit()) {
            j += 1;
        }
        j
    };
    request_id(&serde_json::from_slice(b.get(i..end)?).ok()?)
}

/// The top-level `"id"` of an object whose start is `b`, if it comes before
/// any nested value (as clients that write `jsonrpc`, `id`, `method` first do).
pub(crate) fn id_from_head(b: &[u8]) -> Option<RequestId> {
    let b = b.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(b);
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        let key = &b[i + 1..key_end - 1];
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        if key == b"id" {
            return scalar_id(b, i);
        }
        // Skip a scalar value; give up at a nested one.
        match b.get(i)? {
            b'"' => i = string_end(b, i)?,
            b'{' | b'[' => return None,
            _ => {
                while i < b.len() && !matches!(b[i], b',' | b'}') && !b[i].is_ascii_whitespace() {
                    i += 1;
                }
            }
        }
        i = skip_ws(b, i);
        if b.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
}

/// The top-level `"id"` of an object whose end is `b`, if it is the last
/// member (as clients that add `id` after the params do). The last `}` of a
/// line closes the top-level object, so `"id": V }` right before it is a
/// member of that object: inside a string it could not be followed by the
/// string's end and then the object's.
pub(crate) fn id_from_tail(b: &[u8]) -> Option<RequestId> {
    let mut end = b.len();
    while end > 0 && b[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    if end == 0 || b[end - 1] != b'}' {
        return None;
    }
    end -= 1;
    while end > 0 && b[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    // The value: a number or a string without escapes.
    let start = if end > 0 && b[end - 1] == b'"' {
        let open = b[..end - 1].iter().rposition(|c| *c == b'"')?;
        if b[open + 1..end - 1].contains(&b'\\') {
            return None;
        }
        open
    } else {
        let mut s = end;
        while s > 0 && (b[s - 1] == b'-' || b[s - 1].is_ascii_digit()) {
            s -= 1;
        }
        if s == end {
            return None;
        }
        s
    };
    let id = scalar_id(&b[..end], start)?;
    let mut k = start;
    while k > 0 && b[k - 1].is_ascii_whitespace() {
        k -= 1;
    }
    if k == 0 || b[k - 1] != b':' {
        return None;
    }
    k -= 1;
    while k > 0 && b[k - 1].is_ascii_whitespace() {
        k -= 1;
    }
    let key = b"\"id\"";
    if k < key.len() || &b[k - key.len()..k] != key {
        return None;
    }
    k -= key.len();
    while k > 0 && b[k - 1].is_ascii_whitespace() {
        k -= 1;
    }
    // Preceded by a member separator or the object's start (or cut off).
    if k > 0 && !matches!(b[k - 1], b',' | b'{') {
        return None;
    }
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(n: i64) -> Option<RequestId> {
        Some(NumberOrString::Number(n))
    }

    #[test]
    fn ids_from_the_head() {
        assert_eq!(id_from_head(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x"#), num(7));
        assert_eq!(id_from_head(br#" { "id" : "a-1" , "method""#), Some(NumberOrString::String("a-1".into())));
        assert_eq!(id_from_head(br#"{"method":"tools/call","params":{"id":3,"#), None);
        assert_eq!(id_from_head(br#"{"jsonrpc":"2.0","method":"x","id":-2,"params""#), num(-2));
        assert_eq!(id_from_head(b"[1,2"), None);
    }

    #[test]
    fn ids_from_the_tail() {
        assert_eq!(id_from_tail(br#"aaaa"}},"jsonrpc":"2.0","id":42}"#), num(42));
        assert_eq!(id_from_tail(br#"aa"}, "id" : "x7" } "#), Some(NumberOrString::String("x7".into())));
        assert_eq!(id_from_tail(br#"aa","id":5}}"#), None);
        assert_eq!(id_from_tail(br#"aa\"id\":5}"#), None);
        assert_eq!(id_from_tail(br#"aa"}}"#), None);
    }

    #[test]
    fn lone_surrogates_become_replacement_characters_and_pairs_stay() {
        let repaired = replace_lone_surrogates(br#"{"a":"x\udcffy","b":"\ud83d\ude00","c":"\ud800"}"#).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&repaired).unwrap();
        assert_eq!(value["a"], "x\u{fffd}y");
        assert_eq!(value["b"], "\u{1f600}");
        assert_eq!(value["c"], "\u{fffd}");
        assert!(replace_lone_surrogates(br#"{"a":"\\udcff"}"#).is_none(), "an escaped backslash is no escape");
    }
}

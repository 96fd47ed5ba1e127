//! Content-Length framing, read defensively.
//!
//! tower-lsp's own decoder ends the connection at the first frame it cannot
//! decode (a bad header, a body that is not a JSON-RPC message). This
//! [`Deframer`] sits in front of it and never gives up: it hands on only
//! complete bodies, and resynchronises on the next `Content-Length:` after
//! anything else.
//!
//! - bytes between messages are skipped (kept at most a few at a time);
//! - a header block longer than [`MAX_HEADER`], or without a readable
//!   `Content-Length`, is skipped with its body;
//! - a body longer than [`MAX_BODY`] is skipped without being kept;
//! - a `Content-Length` that is wrong is noticed when a new header turns up
//!   inside the body: the line `Content-Length: N` followed by a line break
//!   cannot occur in a JSON text (a raw line break is not allowed inside a
//!   string, and the words are not JSON outside one). The body then ends
//!   there: if what came before the header is a whole message it is kept
//!   (a declared length too long), otherwise skipped;
//! - a body cut short by the end of input is dropped.
//!
//! What the bodies mean is the caller's business (see `super::transport`).

/// The largest header block kept.
pub const MAX_HEADER: usize = 8 * 1024;
/// The largest body kept: a whole 64 MiB file, escaped, in a `didOpen`.
pub const MAX_BODY: usize = 160 * 1024 * 1024;

const NAME: &[u8] = b"content-length";
/// Bytes kept of a body being dropped: enough for `Content-Length: N`.
const TAIL: usize = 64;

/// What the deframer found.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A complete body.
    Body(Vec<u8>),
    /// Something skipped, and why (for the log).
    Skipped(Skip),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// Bytes outside any frame.
    Garbage(usize),
    /// A header block over [`MAX_HEADER`] bytes.
    HugeHeader,
    /// A header block without a usable `Content-Length`.
    BadHeader(String),
    /// A body over [`MAX_BODY`] bytes (declared length).
    TooLarge(usize),
    /// A body that ended at a new header before its declared length.
    Cut { declared: usize, found: usize },
    /// The input ended inside a frame.
    Truncated,
}

#[derive(Debug)]
enum State {
    /// Looking for the next `Content-Length`.
    Seek,
    /// In a header block starting at `pos`.
    Header,
    /// In a body starting at `pos`, `len` bytes long; `keep` is false for a
    /// body too large to keep. `scanned` is how far (from `pos`) the body
    /// was searched for a new header.
    Body { len: usize, keep: bool, scanned: usize, dropped: usize },
}

/// Turns a byte stream into message bodies. Feed it with [`push`](Self::push),
/// take events with [`next`](Self::next) until `None`, repeat; call
/// [`finish`](Self::finish) at the end of input.
#[derive(Debug)]
pub struct Deframer {
    buf: Vec<u8>,
    pos: usize,
    state: State,
    /// Non-blank bytes skipped in `Seek` since the last report.
    garbage: usize,
}

impl Default for Deframer {
    fn default() -> Self {
        Deframer { buf: Vec::new(), pos: 0, state: State::Seek, garbage: 0 }
    }
}

impl Deframer {
    pub fn new() -> Deframer {
        Deframer::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 && (self.pos >= self.buf.len() / 2 || self.pos > 1 << 20) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next event the buffered bytes allow, or `None` when more input is needed.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Event> {
        loop {
            match self.state {
                State::Seek => {
                    let rest = &self.buf[self.pos..];
                    match find_name(rest) {
                        Some(at) => {
                            self.count_garbage(at);
                            self.pos += at;
                            self.state = State::Header;
                            if self.garbage > 0 {
                                return Some(Event::Skipped(Skip::Garbage(std::mem::take(&mut self.garbage))));
                            }
                        }
                        None => {
                            // Drop whole lines (so that a header line is judged whole),
                            // keeping a tail that may be the start of the name.
                            let keep_from = rest.len().saturating_sub(NAME.len() - 1);
                            let drop = match rest[..keep_from].iter().rposition(|b| *b == b'\n') {
                                Some(i) => i + 1,
                                None if rest.len() > MAX_HEADER => keep_from,
                                None => 0,
                            };
                            self.count_garbage(drop);
                            self.pos += drop;
                            return None;
                        }
                    }
                }
                State::Header => {
                    let rest = &self.buf[self.pos..];
                    let Some((block, end)) = header_end(rest) else {
                        if rest.len() > MAX_HEADER {
                            self.pos += 1;
                            self.state = State::Seek;
                            return Some(Event::Skipped(Skip::HugeHeader));
                        }
                        return None;
                    };
                    if block > MAX_HEADER {
                        self.pos += 1;
                        self.state = State::Seek;
                        return Some(Event::Skipped(Skip::HugeHeader));
                    }
                    let parsed = content_length(&rest[..block]);
                    match parsed {
                        Ok(len) => {
                            self.pos += end;
                            self.state = State::Body { len, keep: len <= MAX_BODY, scanned: 0, dropped: 0 };
                            if len > MAX_BODY {
                                return Some(Event::Skipped(Skip::TooLarge(len)));
                            }
                        }
                        Err(why) => {
                            // Skip just the name found: a real header may start
                            // later in what looked like this header block (a
                            // missing blank line, a missing line break).
                            self.pos += NAME.len();
                            self.state = State::Seek;
                            return Some(Event::Skipped(Skip::BadHeader(why)));
                        }
                    }
                }
                State::Body { len, keep, scanned, dropped } => {
                    let have = self.buf.len() - self.pos;
                    let want = len - dropped;
                    let upto = have.min(want);
                    // A new header inside the declared body means the length was wrong.
                    if let Some(at) = find_header_line(&self.buf[self.pos..self.pos + upto], scanned) {
                        let body = trim_end(&self.buf[self.pos..self.pos + at]);
                        let found = dropped + at;
                        let event = if keep && !body.is_empty() && looks_whole(body) {
                            Event::Body(body.to_vec())
                        } else {
                            Event::Skipped(Skip::Cut { declared: len, found })
                        };
                        self.pos += at;
                        self.state = State::Header;
                        return Some(event);
                    }
                    if have >= want {
                        let start = self.pos;
                        self.pos += want;
                        self.state = State::Seek;
                        if keep {
                            let body = &self.buf[start..start + want];
                            if !framed_like_a_message(body) {
                                // A length too long ends inside the next frame (or too
                                // short, inside this one): look for a header from the
                                // body's start again, so the next frame is found.
                                self.pos = start;
                                return Some(Event::Skipped(Skip::Cut { declared: len, found: want }));
                            }
                            return Some(Event::Body(body.to_vec()));
                        }
                        continue;
                    }
                    // Wait for more; a body too large to keep is dropped as it comes,
                    // but for a tail that may hold the start of a header line.
                    // Every line break before `upto` was looked at.
                    let mut scanned = upto;
                    let mut dropped = dropped;
                    if !keep {
                        // A header line is recognised by its end: a short tail is enough.
                        let drop = have.saturating_sub(TAIL);
                        self.pos += drop;
                        dropped += drop;
                        scanned = 0;
                    }
                    self.state = State::Body { len, keep, scanned, dropped };
                    return None;
                }
            }
        }
    }

    /// The input ended: reports a frame left incomplete.
    pub fn finish(&mut self) -> Option<Event> {
        let event = match self.state {
            State::Seek if self.garbage > 0 => Some(Event::Skipped(Skip::Garbage(std::mem::take(&mut self.garbage)))),
            State::Seek => None,
            State::Header | State::Body { .. } => Some(Event::Skipped(Skip::Truncated)),
        };
        self.buf.clear();
        self.pos = 0;
        self.state = State::Seek;
        event
    }

    fn count_garbage(&mut self, n: usize) {
        for line in self.buf[self.pos..self.pos + n].split(|b| *b == b'\n') {
            let line = line.trim_ascii();
            // A `Content-Type` header before `Content-Length` is a header, not garbage.
            if line.len() >= 13 && line[..13].eq_ignore_ascii_case(b"content-type:") {
                continue;
            }
            self.garbage += line.iter().filter(|b| !b.is_ascii_whitespace()).count();
        }
    }
}

/// The first case-insensitive `content-length` in `hay`.
fn find_name(hay: &[u8]) -> Option<usize> {
    if hay.len() < NAME.len() {
        return None;
    }
    (0..=hay.len() - NAME.len()).find(|&i| {
        (hay[i] | 0x20) == b'c' && hay[i..i + NAME.len()].iter().zip(NAME).all(|(a, b)| a.to_ascii_lowercase() == *b)
    })
}

/// The end of a header block: (length of the block without the blank line,
/// length with it). Lines end with CRLF or LF.
fn header_end(rest: &[u8]) -> Option<(usize, usize)> {
    let limit = rest.len().min(MAX_HEADER + 4);
    let mut i = 0;
    while i < limit {
        if rest[i] == b'\n' {
            if rest.get(i + 1) == Some(&b'\n') {
                return Some((i, i + 2));
            }
            if rest.get(i + 1) == Some(&b'\r') && rest.get(i + 2) == Some(&b'\n') {
                return Some((i, i + 3));
            }
        }
        i += 1;
    }
    None
}

/// The `Content-Length` of a header block; other headers are ignored.
fn content_length(block: &[u8]) -> Result<usize, String> {
    let text = std::str::from_utf8(block).map_err(|_| "the header is not text".to_string())?;
    let mut length = None;
    for line in text.split('\n') {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("a header line without a colon: {:?}", cut(line)));
        };
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(format!("a line that is not a header: {:?}", cut(line)));
        }
        if name.eq_ignore_ascii_case("content-length") {
            let value = value.trim();
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("Content-Length is not a number: {:?}", cut(value)));
            }
            let value = value.parse::<usize>().map_err(|_| format!("Content-Length is too large: {}", cut(value)))?;
            if length.is_some_and(|earlier| earlier != value) {
                return Err("two different Content-Length values".to_string());
            }
            length = Some(value);
        }
    }
    length.ok_or_else(|| "no Content-Length".to_string())
}

fn cut(text: &str) -> String {
    text.chars().take(40).collect()
}

/// The start of a header line (`Content-Length: N` and a line break) in
/// `body`, looking at line breaks from `from` on.
fn find_header_line(body: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(nl) = body[i..].iter().position(|b| *b == b'\n') {
        let end = i + nl;
        // A header line is recognised by its end: look back a little only.
        let window = end.saturating_sub(TAIL);
        let line_start = body[window..end].iter().rposition(|b| *b == b'\n').map(|p| window + p + 1).unwrap_or(window);
        let mut line = &body[line_start..end];
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        if let Some(at) = header_in_line(line) {
            return Some(line_start + at);
        }
        i = end + 1;
    }
    None
}

/// Where `Content-Length: digits` ends a line, if it does.
fn header_in_line(line: &[u8]) -> Option<usize> {
    let colon = line.iter().rposition(|b| *b == b':')?;
    let value = line[colon + 1..].trim_ascii();
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let name_end = colon;
    let name_start = name_end.checked_sub(NAME.len())?;
    line[name_start..name_end].eq_ignore_ascii_case(NAME).then_some(name_start)
}

fn trim_end(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|b| !b.is_ascii_whitespace()).map(|i| i + 1).unwrap_or(0);
    &bytes[..end]
}

/// Whether a body of its declared length starts and ends as a JSON-RPC
/// message does (an object, or a batch): a cheap check, without parsing,
/// that the length was right.
fn framed_like_a_message(body: &[u8]) -> bool {
    let body = body.trim_ascii();
    matches!((body.first(), body.last()), (Some(b'{'), Some(b'}')) | (Some(b'['), Some(b']')))
}

/// Whether a cut-short body is a whole JSON value (a declared length too long).
fn looks_whole(body: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &str) -> Vec<u8> {
        format!("Content-Length: {}\r\n\r\n{}", body.len(), body).into_bytes()
    }

    fn run(chunks: &[&[u8]]) -> Vec<Event> {
        let mut d = Deframer::new();
        let mut out = Vec::new();
        for chunk in chunks {
            d.push(chunk);
            while let Some(e) = d.next() {
                out.push(e);
            }
        }
        out.extend(d.finish());
        out
    }

    fn bodies(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Body(b) => Some(String::from_utf8(b.clone()).unwrap()),
                _ => None,
            })
            .collect()
    }

    const A: &str = r#"{"jsonrpc":"2.0","id":1,"method":"a"}"#;
    const B: &str = r#"{"jsonrpc":"2.0","id":2,"method":"b","params":{"text":"Content-Length: 5\n\n"}}"#;

    #[test]
    fn plain_frames_in_any_chunking() {
        let mut all = frame(A);
        all.extend(frame(B));
        all.extend(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n".iter());
        all.extend(frame(A));
        for size in [1, 2, 3, 7, 64, all.len()] {
            let chunks: Vec<&[u8]> = all.chunks(size).collect();
            let events = run(&chunks);
            assert_eq!(bodies(&events), vec![A, B, A], "chunks of {size}");
            assert!(events.iter().all(|e| matches!(e, Event::Body(_))), "chunks of {size}: {events:?}");
        }
    }

    #[test]
    fn lf_only_headers_and_lower_case_names() {
        let input = format!("content-length: {}\n\n{}", A.len(), A);
        assert_eq!(bodies(&run(&[input.as_bytes()])), vec![A]);
    }

    #[test]
    fn garbage_between_messages_is_skipped() {
        let mut all = b"garbage!\r\n\r\n{}".to_vec();
        all.extend(frame(A));
        all.extend(b"xx yy zz");
        all.extend(frame(B));
        let events = run(&[&all]);
        assert_eq!(bodies(&events), vec![A, B]);
        assert!(events.contains(&Event::Skipped(Skip::Garbage(10))), "{events:?}");
    }

    #[test]
    fn a_length_too_long_is_noticed_at_the_next_header() {
        let mut all = format!("Content-Length: {}\r\n\r\n{}", A.len() + 500, A).into_bytes();
        all.extend(frame(B));
        // Nothing more comes: the second frame must still be found.
        let events = run(&[&all]);
        assert_eq!(bodies(&events), vec![A, B]);
    }

    #[test]
    fn a_length_too_short_skips_one_message() {
        let mut all = format!("Content-Length: {}\r\n\r\n{}", 10, A).into_bytes();
        all.extend(frame(B));
        let events = run(&[&all]);
        // The cut body is not a message: skipped, and the next one comes through.
        assert_eq!(bodies(&events), vec![B]);
        assert!(events.iter().any(|e| matches!(e, Event::Skipped(Skip::Cut { declared: 10, .. }))), "{events:?}");
    }

    #[test]
    fn a_truncated_body_before_the_next_message() {
        let mut all = format!("Content-Length: {}\r\n\r\n{}", A.len(), &A[..12]).into_bytes();
        all.extend(frame(B));
        let events = run(&[&all]);
        assert_eq!(bodies(&events), vec![B]);
        assert!(events.iter().any(|e| matches!(e, Event::Skipped(Skip::Cut { .. }))), "{events:?}");
        let events = run(&[&all[..30]]);
        assert_eq!(events.last(), Some(&Event::Skipped(Skip::Truncated)));
    }

    #[test]
    fn huge_and_bad_headers_are_skipped() {
        let mut all = b"Content-Length: 12\r\nX-Junk: ".to_vec();
        all.extend(std::iter::repeat_n(b'a', 100_000));
        all.extend(b"\r\n\r\n{\"junk\":true}");
        all.extend(frame(A));
        all.extend(b"Content-Length: -5\r\n\r\n{}");
        all.extend(b"Content-Length: 99999999999999999999999\r\n\r\n{}");
        all.extend(b"Content-Length: 12\r\nno colon here\r\n\r\n{}");
        all.extend(frame(B));
        for size in [1000, all.len()] {
            let chunks: Vec<&[u8]> = all.chunks(size).collect();
            let events = run(&chunks);
            assert_eq!(bodies(&events), vec![A, B], "chunks of {size}: {events:?}");
            assert!(events.contains(&Event::Skipped(Skip::HugeHeader)));
        }
    }

    #[test]
    fn a_body_too_large_is_dropped_without_keeping_it() {
        let mut d = Deframer::new();
        d.push(format!("Content-Length: {}\r\n\r\n", MAX_BODY + 10).as_bytes());
        assert_eq!(d.next(), Some(Event::Skipped(Skip::TooLarge(MAX_BODY + 10))));
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..20 {
            d.push(&chunk);
            assert_eq!(d.next(), None);
            assert!(d.buf.len() - d.pos < 2 << 20, "kept {}", d.buf.len() - d.pos);
        }
        d.push(&frame(A));
        assert_eq!(d.next().map(|e| matches!(e, Event::Skipped(Skip::Cut { .. }))), Some(true));
        assert_eq!(d.next(), Some(Event::Body(A.as_bytes().to_vec())));
    }

    /// 5,000 malformed frames of the kinds clients and attackers send, each
    /// followed by a well-formed request in random chunks: every well-formed
    /// request comes out whole.
    #[test]
    fn the_next_well_formed_frame_always_comes_through() {
        let mut seed: u64 = 0x853c_49e6_748f_ea9b;
        let mut random = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n.max(1)
        };
        let mut lost = Vec::new();
        for case in 0..5000u64 {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{case},"method":"m","params":{{"x":"{}"}}}}"#,
                "y".repeat(random(50) as usize)
            );
            let bad_body = format!(
                r#"{{"jsonrpc":"2.0","id":"bad","method":"m","params":{{"x":"{}"}}}}"#,
                "z".repeat(random(50) as usize)
            );
            let n = bad_body.len();
            let kind = random(9);
            let bad: Vec<u8> = match kind {
                // A length too long, too short, a duplicate length, conflicting lengths.
                0 => format!("Content-Length: {}\r\n\r\n{bad_body}", n + 1 + random(200) as usize).into(),
                1 => format!("Content-Length: {}\r\n\r\n{bad_body}", random(n as u64)).into(),
                2 => format!("Content-Length: {n}\r\nContent-Length: {n}\r\n\r\n{bad_body}").into(),
                3 => format!("Content-Length: {}\r\nContent-Length: {n}\r\n\r\n{bad_body}", n + 7).into(),
                // No blank line after the header, or no line break at all.
                4 => format!("Content-Length: {n}\r\n{bad_body}").into(),
                5 => format!("Content-Length: {n}{bad_body}").into(),
                // A header and nothing else; a header whose value is not a number.
                6 => format!("Content-Length: {n}\r\n\r\n").into(),
                7 => format!("Content-Length: x{n}\r\n\r\n{bad_body}").into(),
                // A body cut in the middle.
                _ => format!("Content-Length: {n}\r\n\r\n{}", &bad_body[..n / 2]).into(),
            };
            let mut input = bad;
            input.extend(frame(&body));
            let mut chunks = Vec::new();
            let mut rest = &input[..];
            while !rest.is_empty() {
                let take = (1 + random(rest.len() as u64) as usize).min(rest.len());
                chunks.push(&rest[..take]);
                rest = &rest[take..];
            }
            let got = bodies(&run(&chunks));
            if !got.contains(&body) {
                lost.push((kind, String::from_utf8_lossy(&input).into_owned()));
            }
        }
        let kinds: std::collections::BTreeSet<u64> = lost.iter().map(|(k, _)| *k).collect();
        assert!(lost.is_empty(), "{} of 5000 lost (kinds {kinds:?}), first: {:?}", lost.len(), lost.first());
    }
}

//! `ctxfs replay`: runs a script of tool calls and session events headless.
//!
//! A script is JSON lines. Each line is a tool call, `{"call": "read",
//! "args": {...}}`, or a session event: `{"event": "new_request",
//! "carries_earlier": false}`, `{"event": "compact"}`, `{"event": "rewind",
//! "to": "#0005"}`, `{"event": "reopen"}` (the server restarts and the
//! session is reopened by id). Each answer is printed as one JSON line. This
//! is the form conformance cases and bug reports use. Blank lines and lines
//! starting with `//` are skipped.

use crate::engine::{Engine, Session, SessionOptions};
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::sync::Arc;

/// One line of a replay script.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Step {
    Call {
        call: String,
        #[serde(default)]
        args: Value,
    },
    Event {
        event: String,
        #[serde(default)]
        carries_earlier: Option<bool>,
        #[serde(default)]
        to: Option<String>,
    },
}

/// Runs one step against a session, answering the JSON line to print.
/// `reopen` needs the engine, so it is handled by `run`.
pub fn step(session: &Session, step: &Step) -> Value {
    match step {
        Step::Call { call, args } => {
            let answer = session.call(call, args.clone());
            json!({"id": answer.id, "text": answer.text, "is_error": answer.is_error, "facts": crate::wire::CallFacts::from(answer.facts)})
        }
        Step::Event { event, carries_earlier, to } => match event.as_str() {
            "new_request" => {
                session.new_request(carries_earlier.unwrap_or(true));
                json!({"event": "new_request"})
            }
            "compact" => json!({"event": "compact", "text": session.compact()}),
            "rewind" => match session.rewind(to.as_deref().unwrap_or("")) {
                Ok(()) => json!({"event": "rewind"}),
                Err(e) => json!({"event": "rewind", "error": e}),
            },
            other => json!({"event": other, "error": format!("unknown event {other:?}")}),
        },
    }
}

/// Runs a whole script from `input`, printing answers to `output`. Every step runs; the
/// answer is whether every line was a step the replay knows (a tool's refusal is an
/// answer, not a bad step), so `ctxfs replay` can exit non-zero after a bad one.
pub fn run(engine: &Engine, input: impl BufRead, mut output: impl Write) -> anyhow::Result<bool> {
    let mut session: Arc<Session> = engine.open_session(SessionOptions::default())?;
    let mut all_known = true;
    for (number, line) in input.lines().enumerate() {
        let line = line?;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        let answer = match serde_json::from_str::<Step>(trimmed) {
            Ok(Step::Event { event, .. }) if event == "reopen" => {
                let id = session.id().to_string();
                drop(session);
                session = engine.reopen_session(&id, SessionOptions::default())?;
                json!({"event": "reopen", "session": id})
            }
            Ok(parsed) => step(&session, &parsed),
            Err(e) => json!({"line": number + 1, "error": format!("not a step: {e}")}),
        };
        // An answer with "error" is a step the replay could not take (a tool's error is "is_error").
        all_known &= answer.get("error").is_none();
        writeln!(output, "{answer}")?;
        // A driver may wait for each answer before writing the next step.
        output.flush()?;
    }
    Ok(all_known)
}

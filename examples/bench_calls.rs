//! Times tool calls in process: one `Engine` and one session, opened once,
//! then the same call run again and again through `Session::call`. Used by
//! `bench/grep_glob.py` to separate the tool's own cost from process start
//! and engine setup (which `ctxfs call` pays every time).
//!
//! ```text
//! cargo run --release --example bench_calls -- --root DIR --data DIR [--runs N] [--warmup N] TOOL 'JSON'
//! ```
//!
//! Prints one JSON line: the wall time of each timed run in milliseconds,
//! the setup time (engine and session), and the first line of the last answer.
//! It prints figures only; it asserts nothing about them.

// A measurement program: its figures are its output.
#![allow(clippy::print_stdout)]

use ctxfs::engine::{Config, Engine, Posture, SessionOptions};
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut root, mut data, mut runs, mut warmup) = (None, None, 5usize, 1usize);
    let mut rest = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--root" => root = args.next().map(PathBuf::from),
            "--data" => data = args.next().map(PathBuf::from),
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).expect("--runs N"),
            "--warmup" => warmup = args.next().and_then(|n| n.parse().ok()).expect("--warmup N"),
            _ => rest.push(arg),
        }
    }
    let (Some(root), [tool, json]) = (root, rest.as_slice()) else {
        eprintln!("usage: bench_calls --root DIR [--data DIR] [--runs N] [--warmup N] TOOL 'JSON'");
        std::process::exit(2);
    };
    let call_args: serde_json::Value = serde_json::from_str(json).expect("the arguments must be JSON");

    let setup = Instant::now();
    let config = Config {
        start: None,
        data_dir: data.map(|d| std::path::absolute(d).expect("data")),
        ..Config::new(Posture::Device { root: std::path::absolute(&root).expect("root") })
    };
    let engine = Engine::new(config).expect("engine");
    let session = engine.open_session(SessionOptions::default()).expect("session");
    let setup_ms = setup.elapsed().as_secs_f64() * 1e3;

    let mut times = Vec::with_capacity(runs);
    let mut first_line = String::new();
    let mut is_error = false;
    for i in 0..warmup + runs {
        let start = Instant::now();
        let answer = session.call(tool, call_args.clone());
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if i >= warmup {
            times.push(ms);
        }
        first_line = answer.text.lines().next().unwrap_or("").to_string();
        is_error = answer.is_error;
    }
    println!(
        "{}",
        serde_json::json!({"times_ms": times, "setup_ms": setup_ms, "first_line": first_line, "is_error": is_error})
    );
}

//! Benchmark of the result store (issue 3): what hygiene costs per result,
//! and whether a long session stays small.
//!
//! Not a test: it prints figures. Run with
//! `cargo run --release --example bench_store -- [RESULTS] [BYTES_PER_RESULT]`
//! (defaults 100000 and 10240, about 1 GB of results).
//!
//! 1. A 100-line read through the whole path (`Session::call`: access check,
//!    read, hash, bracket, dedupe lookup, SQLite insert), against reading
//!    the same file with `std::fs::read` plus numbering its lines, the floor
//!    any read tool pays.
//! 2. A session of RESULTS results of BYTES each stored through `Hygiene`
//!    and SQLite: insert rate, RSS (VmRSS and VmHWM) before and after.
//! 3. Recall of random ids across that session: latency p50/p95/max.

// A measurement program: its figures are its output.
#![allow(clippy::print_stdout)]

use ctxfs::engine::{Config, Engine, Posture, SessionOptions};
use ctxfs::hygiene::{HostKind, Hygiene, SqliteStore};
use ctxfs::tools::Outcome;
use serde_json::json;
use std::time::Instant;

fn rss_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let results: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let bytes: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(10_240);
    let scratch = tempfile::tempdir()?;
    let ws = scratch.path().join("ws");
    std::fs::create_dir_all(&ws)?;
    let file = ws.join("hundred.rs");
    let text: String =
        (1..=100).map(|i| format!("    let value_{i} = compute({i}, \"some text on line {i}\");\n")).collect();
    std::fs::write(&file, &text)?;

    // 1. A 100-line read, whole path vs the floor.
    let engine = Engine::new(Config {
        start: None,
        data_dir: Some(scratch.path().join("data")),
        ..Config::new(Posture::Device { root: ws.clone() })
    })?;
    let session = engine.open_session(SessionOptions::default())?;
    let rounds = 20_000;
    // A fresh request each time, so every read is a full read (no stub).
    let start = Instant::now();
    for _ in 0..rounds {
        session.new_request(false);
        let answer = session.call("read", json!({"file_path": "hundred.rs"}));
        assert!(!answer.is_error);
    }
    let whole = start.elapsed().as_secs_f64() / rounds as f64;
    let start = Instant::now();
    for _ in 0..rounds {
        let data = std::fs::read(&file)?;
        let text = String::from_utf8(data)?;
        let mut out = String::with_capacity(text.len() + 800);
        for (i, line) in text.lines().enumerate() {
            out.push_str(&format!("{}: {line}\n", i + 1));
        }
        std::hint::black_box(out);
    }
    let floor = start.elapsed().as_secs_f64() / rounds as f64;
    println!("100-line read through the whole path: {:.1} µs per call", whole * 1e6);
    println!("  std::fs::read + numbering (the floor):  {:.1} µs ({:.1}× the floor)", floor * 1e6, whole / floor);

    // 2. A long session through Hygiene and SQLite.
    let db = scratch.path().join("sessions.db");
    let mut hygiene = Hygiene::new(HostKind::Resend, Box::new(SqliteStore::open(&db, "long")?));
    let line = "x".repeat(99) + "\n";
    let body: String = line.repeat(bytes / 100);
    let rss_before = rss_kib("VmRSS:");
    let start = Instant::now();
    for i in 0..results {
        // Each result differs, as real outputs do.
        let text = format!("result {i}\n{body}");
        let answer = hygiene.answer("grep", &json!({"pattern": i}), Ok(Outcome::text(text)), None);
        std::hint::black_box(answer);
    }
    let insert = start.elapsed().as_secs_f64();
    let total_mb = results as f64 * bytes as f64 / 1e6;
    println!(
        "{results} results of {bytes} bytes ({total_mb:.0} MB) stored in {insert:.1} s: {:.0} results/s, {:.1} µs each",
        results as f64 / insert,
        insert / results as f64 * 1e6
    );
    println!(
        "  RSS before {} MiB, after {} MiB, peak {} MiB; database {} MiB",
        rss_before / 1024,
        rss_kib("VmRSS:") / 1024,
        rss_kib("VmHWM:") / 1024,
        std::fs::metadata(&db)?.len() / (1024 * 1024)
    );

    // 3. Recall of random ids.
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut times = Vec::new();
    for _ in 0..2000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let id = seed % results + 1;
        let start = Instant::now();
        let answer = hygiene.recall(&format!("#{id:04x}"), None, None);
        times.push(start.elapsed().as_secs_f64() * 1e3);
        assert!(!answer.is_error, "{}", answer.text);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "recall of random ids: p50 {:.2} ms, p95 {:.2} ms, max {:.2} ms",
        percentile(&times, 0.5),
        percentile(&times, 0.95),
        times[times.len() - 1]
    );
    println!("  RSS after recalls {} MiB", rss_kib("VmRSS:") / 1024);
    Ok(())
}

//! Benchmark of the embedders (issue 6): chunks per second through `Embedder::embed`, as the index calls it; not a test, and not the driver (bench/embedders.py makes the texts, runs the numpy peer and prints the table).
//!
//! `cargo run --release --example bench_embedders -- TEXTS.json OUT.json [static|minilm]...`
//!
//! TEXTS.json is `{"sets": {"NAME": ["text", ...], ...}}`. For each embedder
//! and set: one warm-up call, then the texts in calls of `BATCH` (a file's
//! chunks arrive together), timed. OUT.json gets one row per embedder and
//! set, plus the vectors of each set's first `KEEP` texts (for the driver to
//! compare with the numpy forward pass). Each row has the wall time and the
//! process's CPU time (all threads), so a run on a shared machine still says
//! how much work a chunk is.

// A measurement program: its figures are its output.
#![allow(clippy::print_stdout)]

use ctxfs::index::bert::{self, BertEmbedder};
use ctxfs::index::embed::Embedder;
use ctxfs::index::models;
use ctxfs::index::table::StaticEmbedder;
use std::path::Path;
use std::time::Instant;

/// Texts per `embed` call.
const BATCH: usize = 32;
/// Vectors kept per set, for the driver's agreement check.
const KEEP: usize = 8;

/// The CPU time of the whole process (every thread, user and system) from /proc, in seconds (10 ms steps).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th of them.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: f64 = rest.split_whitespace().skip(11).take(2).filter_map(|t| t.parse::<f64>().ok()).sum();
    ticks / 100.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [texts, out, names @ ..] = &args[..] else {
        return Err("usage: bench_embedders TEXTS.json OUT.json [static|minilm]...".into());
    };
    let input: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(texts)?)?;
    let sets = input["sets"].as_object().ok_or("TEXTS.json has no \"sets\"")?;
    let data = Path::new("/nonexistent");
    let mut rows = Vec::new();
    for name in names {
        let started = Instant::now();
        let embedder: Box<dyn Embedder> = match name.as_str() {
            "static" => {
                Box::new(StaticEmbedder::load(&models::find_model_dir(data).ok_or("no static table installed")?)?)
            }
            "minilm" => Box::new(BertEmbedder::load(&bert::find_dir(data).ok_or("no minilm model installed")?)?),
            other => return Err(format!("unknown embedder {other}").into()),
        };
        let load_s = started.elapsed().as_secs_f64();
        for (set, list) in sets {
            let list: Vec<&str> =
                list.as_array().ok_or("a set is not a list")?.iter().filter_map(|t| t.as_str()).collect();
            let tokens: usize = list.iter().map(|t| embedder.count_tokens(t)).sum();
            embedder.embed(&list[..list.len().min(2)])?;
            let (started, cpu) = (Instant::now(), cpu_seconds());
            let mut kept = Vec::new();
            for batch in list.chunks(BATCH) {
                let vectors = embedder.embed(batch)?;
                kept.extend(vectors.into_iter().take(KEEP.saturating_sub(kept.len())));
            }
            let seconds = started.elapsed().as_secs_f64();
            let cpu = cpu_seconds() - cpu;
            let row = serde_json::json!({
                "embedder": name,
                "set": set,
                "chunks": list.len(),
                "tokens_mean": tokens as f64 / list.len().max(1) as f64,
                "seconds": seconds,
                "chunks_per_s": list.len() as f64 / seconds,
                "ms_per_chunk": seconds * 1000.0 / list.len().max(1) as f64,
                "cpu_ms_per_chunk": cpu * 1000.0 / list.len().max(1) as f64,
                "load_s": load_s,
                "vectors": kept,
            });
            eprintln!(
                "{name} {set}: {} chunks in {seconds:.2} s ({:.1} chunks/s)",
                list.len(),
                list.len() as f64 / seconds
            );
            rows.push(row);
        }
    }
    std::fs::write(out, serde_json::to_string(&rows)?)?;
    Ok(())
}

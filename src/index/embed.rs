//! Embedders: text in, unit vectors out, behind one trait (`Embedder`); not the chunker, the store or the ranking.
//!
//! Three kinds, all optional to the index, which falls back to words only:
//!
//! - `StaticEmbedder`, the default: a Model2Vec-style table (one row per
//!   vocabulary entry of all-MiniLM-L6-v2) and that model's `tokenizer.json`.
//!   A text's vector is the mean of its tokens' rows, L2-normalised. It needs
//!   nothing at run time: `scripts/build-embedder` makes the table at set-up,
//!   and `default_embedder` finds it (see `model_dir_candidates`).
//! - `HttpEmbedder`: a server the user runs and names, either llama.cpp's
//!   `/embedding` with `/tokenize` or an OpenAI-compatible `/v1/embeddings`.
//!   It never talks to any other address.
//! - `bert::BertEmbedder` (in `bert.rs`): the full transformer, all-MiniLM-L6-v2
//!   itself, over the unchanged `model.safetensors` and `tokenizer.json` the
//!   set-up installs in `models/minilm/`; the model's own vectors, much slower.
//!
//! Which one the index uses is the user's choice (`index::EmbedderChoice`:
//! `--embedder`, else `"embedder"` in config.json, else the static table).
//!
//! Tokens are the embedder's own: `ModelTokenizer` (the model's WordPiece
//! tokenizer with truncation and padding turned off, no special tokens
//! added) also serves the chunker through `chunk::Tokenizer`, so pieces are
//! measured in the tokens the embedder sees.

use super::chunk;
use super::hybrid;
use super::tensors::{self, map_file};
use super::warn_once;
use safetensors::Dtype;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The directory name of the default table, under each place it is looked for.
pub const MODEL_DIR_NAME: &str = "minilm-static";

/// The environment variable naming the table's directory, looked at first.
pub const MODEL_DIR_ENV: &str = "CTXFS_MODEL_DIR";

/// Turns texts into vectors of one fixed length, each of unit length (or all zeros for a text without tokens).
pub trait Embedder: Send + Sync {
    /// A name that changes whenever the vectors would differ (another model, table or server model).
    fn name(&self) -> &str;
    /// The length of every vector.
    fn dims(&self) -> usize;
    /// The most tokens one text may hold; `embed` refuses a longer one with `EmbedError::TooLong`.
    fn max_tokens(&self) -> usize;
    /// How many tokens the text holds, by the embedder's own tokenizer (no special tokens).
    fn count_tokens(&self, text: &str) -> usize;
    /// The byte span of each token in the text, in order, on character boundaries.
    fn token_spans(&self, text: &str) -> Vec<Range<usize>>;
    /// One vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Why an embedder gave no vectors.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// A text is longer than the embedder takes: the chunker halves it and tries again.
    #[error("text {index} holds {tokens} tokens, more than the embedder's {max}")]
    TooLong { index: usize, tokens: usize, max: usize },
    /// The table or tokenizer could not be loaded, or is malformed.
    #[error("embedding model {path}: {message}")]
    Model { path: PathBuf, message: String },
    /// The embedding server failed or answered something unexpected.
    #[error("embedding server {url}: {message}")]
    Http { url: String, message: String },
}

/// Scales the vector to unit length; a zero vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// The dot product, which is the cosine for unit vectors.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

// ---------------------------------------------------------------------------
// The model tokenizer.

/// The model's own tokenizer (`tokenizer.json`), with the truncation and
/// padding it ships with turned off and no special tokens added.
///
/// For a BERT WordPiece tokenizer (lower-casing, as all-MiniLM-L6-v2's is)
/// runs of printable ASCII between whitespace are tokenized by `FastWordPiece`,
/// which gives the same ids and spans as the `tokenizers` crate about ten
/// times faster; any other run (non-ASCII, control characters, a literal
/// special token) goes through the `tokenizers` crate. This is exact because
/// BERT's normaliser works character by character and its pre-tokenizer
/// splits at whitespace first, so runs between whitespace never interact.
pub struct ModelTokenizer {
    inner: tokenizers::Tokenizer,
    /// Whether each id is a special token (`[CLS]`, `[SEP]`, `[UNK]`, ...): counted as a token but given no weight in a mean.
    special: Vec<bool>,
    fast: Option<FastWordPiece>,
}

impl ModelTokenizer {
    /// Loads `tokenizer.json`.
    pub fn load(path: &Path) -> Result<ModelTokenizer, EmbedError> {
        let err = |message: String| EmbedError::Model { path: path.to_path_buf(), message };
        let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        let mut inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| err(e.to_string()))?;
        // The file bakes in truncation at 128 and fixed padding to 128: either would miscount.
        inner.with_truncation(None).map_err(|e| err(e.to_string()))?;
        inner.with_padding(None);
        let special_ids: Vec<usize> = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| id as usize)
            .collect();
        let mut special = vec![false; special_ids.iter().max().map_or(0, |m| m + 1)];
        special_ids.into_iter().for_each(|id| special[id] = true);
        let fast = serde_json::from_slice(&bytes).ok().and_then(|spec| FastWordPiece::from_spec(&spec));
        Ok(ModelTokenizer { inner, special, fast })
    }

    /// Calls `each(id, span)` for every token of the text, in order, without special tokens added.
    pub fn for_each_token(&self, text: &str, mut each: impl FnMut(u32, Range<usize>)) {
        let Some(fast) = &self.fast else {
            self.slow(text, 0, &mut each);
            return;
        };
        let bytes = text.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            if matches!(bytes[at], b' ' | b'\t' | b'\n' | b'\r') {
                at += 1;
                continue;
            }
            let start = at;
            let mut plain = true;
            while at < bytes.len() && !matches!(bytes[at], b' ' | b'\t' | b'\n' | b'\r') {
                plain &= (0x21..0x7f).contains(&bytes[at]);
                at += 1;
            }
            // Runs end at ASCII whitespace, so `start..at` lies on character boundaries.
            let run = &bytes[start..at];
            if plain && !fast.holds_added_token(run) {
                fast.run(run, start, &mut each);
            } else {
                self.slow(&text[start..at], start, &mut each);
            }
        }
    }

    /// The `tokenizers` crate over a part of a text that starts at byte `shift`.
    fn slow(&self, text: &str, shift: usize, each: &mut impl FnMut(u32, Range<usize>)) {
        if let Ok(encoding) = self.inner.encode(text, false) {
            for (&id, &(s, e)) in encoding.get_ids().iter().zip(encoding.get_offsets()) {
                each(id, shift + s.min(text.len())..shift + e.min(text.len()));
            }
        }
    }

    /// The token ids of the text, without special tokens added.
    pub fn ids(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3);
        self.for_each_token(text, |id, _| out.push(id));
        out
    }

    /// The byte span of each token, in order.
    pub fn spans(&self, text: &str) -> Vec<Range<usize>> {
        let mut out = Vec::with_capacity(text.len() / 3);
        self.for_each_token(text, |_, span| out.push(span));
        out
    }

    /// The ids and spans from the `tokenizers` crate alone, to check the fast path against.
    pub fn reference(&self, text: &str) -> Vec<(u32, Range<usize>)> {
        let mut out = Vec::new();
        self.slow(text, 0, &mut |id, span| out.push((id, span)));
        out
    }

    /// Whether the id is a special token (it carries no content of the text).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }
}

type FnvMap = std::collections::HashMap<Box<[u8]>, u32, fnv::FnvBuildHasher>;

/// BERT's uncased WordPiece over runs of printable ASCII, the same as the `tokenizers` crate gives.
struct FastWordPiece {
    /// Pieces that begin a word.
    first: FnvMap,
    /// Pieces that continue a word, without their `##`.
    rest: FnvMap,
    longest_first: usize,
    longest_rest: usize,
    unk: u32,
    max_word: usize,
    /// Added tokens (`[CLS]`, ...), which the `tokenizers` crate matches in the raw text.
    added: Vec<Vec<u8>>,
}

impl FastWordPiece {
    /// The fast path for a `tokenizer.json` it is exact for: a lower-casing `BertNormalizer`, `BertPreTokenizer`, `WordPiece`.
    fn from_spec(spec: &serde_json::Value) -> Option<FastWordPiece> {
        let normalizer = &spec["normalizer"];
        let ok = normalizer["type"] == "BertNormalizer"
            && normalizer["lowercase"] == true
            && normalizer["clean_text"] == true
            && spec["pre_tokenizer"]["type"] == "BertPreTokenizer"
            && spec["model"]["type"] == "WordPiece";
        if !ok {
            return None;
        }
        let model = &spec["model"];
        let prefix = model["continuing_subword_prefix"].as_str()?;
        let vocab = model["vocab"].as_object()?;
        let unk = vocab.get(model["unk_token"].as_str()?)?.as_u64()? as u32;
        let max_word = model["max_input_chars_per_word"].as_u64()? as usize;
        if max_word > 256 {
            return None;
        }
        let (mut first, mut rest) = (FnvMap::default(), FnvMap::default());
        for (piece, id) in vocab {
            let id = id.as_u64()? as u32;
            match piece.strip_prefix(prefix) {
                Some(tail) if !tail.is_empty() => rest.insert(tail.as_bytes().into(), id),
                _ => first.insert(piece.as_bytes().into(), id),
            };
        }
        let longest = |m: &FnvMap| m.keys().map(|k| k.len()).max().unwrap_or(0);
        let added = spec["added_tokens"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["content"].as_str())
                    .map(|c| c.as_bytes().to_vec())
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Some(FastWordPiece {
            longest_first: longest(&first),
            longest_rest: longest(&rest),
            first,
            rest,
            unk,
            max_word,
            added,
        })
    }

    fn holds_added_token(&self, run: &[u8]) -> bool {
        // Without regard to case: a wider test only sends more runs down the exact slow path.
        self.added.iter().any(|t| run.len() >= t.len() && run.windows(t.len()).any(|w| w.eq_ignore_ascii_case(t)))
    }

    /// A run of printable ASCII starting at byte `at`: punctuation characters are words of their own.
    fn run(&self, run: &[u8], at: usize, each: &mut impl FnMut(u32, Range<usize>)) {
        let mut i = 0;
        while i < run.len() {
            if run[i].is_ascii_punctuation() {
                self.word(&run[i..i + 1], at + i, each);
                i += 1;
                continue;
            }
            let start = i;
            while i < run.len() && !run[i].is_ascii_punctuation() {
                i += 1;
            }
            self.word(&run[start..i], at + start, each);
        }
    }

    /// Greedy longest-match-first WordPiece; a word that cannot be covered, or is too long, is one `[UNK]`.
    fn word(&self, word: &[u8], at: usize, each: &mut impl FnMut(u32, Range<usize>)) {
        if word.len() > self.max_word {
            each(self.unk, at..at + word.len());
            return;
        }
        let mut lower = [0u8; 256];
        let lower = &mut lower[..word.len()];
        lower.copy_from_slice(word);
        lower.make_ascii_lowercase();
        let mut pieces = [(0u32, 0usize, 0usize); 256];
        let mut count = 0;
        let mut pos = 0;
        while pos < lower.len() {
            let (map, longest) =
                if pos == 0 { (&self.first, self.longest_first) } else { (&self.rest, self.longest_rest) };
            let mut end = lower.len().min(pos + longest);
            let found = loop {
                if end <= pos {
                    break None;
                }
                if let Some(&id) = map.get(&lower[pos..end]) {
                    break Some(id);
                }
                end -= 1;
            };
            let Some(id) = found else {
                each(self.unk, at..at + word.len());
                return;
            };
            pieces[count] = (id, pos, end);
            count += 1;
            pos = end;
        }
        for &(id, s, e) in &pieces[..count] {
            each(id, at + s..at + e);
        }
    }
}

impl chunk::Tokenizer for ModelTokenizer {
    fn tokens(&self, text: &str) -> Vec<Range<usize>> {
        self.spans(text)
    }

    fn count(&self, text: &str) -> usize {
        self.ids(text).len()
    }
}

// ---------------------------------------------------------------------------
// The static table.

/// The default embedder: a static table of token vectors and the model's tokenizer.
///
/// A text's vector is the mean of its tokens' rows, special tokens left out,
/// L2-normalised. Special tokens are left out because their rows are not
/// content: `[UNK]` stands for any unknown character, and a literal `[CLS]`
/// in a file would otherwise pull every vector towards one direction. The
/// table has no context window, so it takes texts of any length.
pub struct StaticEmbedder {
    name: String,
    dims: usize,
    rows: usize,
    table: Rows,
    tokenizer: Arc<ModelTokenizer>,
}

/// The table's rows as `i8` with one `f32` scale per row (a quarter of the
/// f32 table's size; the mean of many rows hides the rounding).
enum Rows {
    /// Mapped from `model.i8.safetensors` (written by the set-up): only the
    /// pages of rows a text touches are resident, and every ctxfs process on
    /// the machine shares them.
    Mapped { map: memmap2::Mmap, rows: Range<usize>, scales: Vec<f32> },
    /// Quantised at load from `model.safetensors` when there is no such file.
    Owned { rows: Vec<i8>, scales: Vec<f32> },
}

impl Rows {
    /// Adds `row` of the table, scaled back to f32, to `sum`.
    fn add_row(&self, row: usize, dims: usize, sum: &mut [f32]) {
        let span = row * dims..(row + 1) * dims;
        match self {
            Rows::Mapped { map, rows, scales } => {
                let bytes = &map[rows.start + span.start..rows.start + span.end];
                let scale = scales[row];
                sum.iter_mut().zip(bytes).for_each(|(s, &b)| *s += f32::from(b as i8) * scale);
            }
            Rows::Owned { rows, scales } => {
                let scale = scales[row];
                sum.iter_mut().zip(&rows[span]).for_each(|(s, &q)| *s += f32::from(q) * scale);
            }
        }
    }
}

impl StaticEmbedder {
    /// Loads `model.safetensors` (tensor `embeddings`, F16 or F32, `[vocab, dims]`) and `tokenizer.json` from the directory,
    /// with the rows mapped from `model.i8.safetensors` when the set-up wrote one for this table.
    pub fn load(dir: &Path) -> Result<StaticEmbedder, EmbedError> {
        let tokenizer = Arc::new(ModelTokenizer::load(&dir.join("tokenizer.json"))?);
        let path = dir.join("model.safetensors");
        // Mapped, not read: the pages leave this process's memory with the map.
        let source = map_file(&path)?;
        let table = parse_table(&source).map_err(|message| EmbedError::Model { path: path.clone(), message })?;
        let (rows, dims) = (table.rows, table.dims);
        let vocab = tokenizer.inner.get_vocab_size(true);
        if rows < vocab {
            return Err(EmbedError::Model {
                path,
                message: format!("the table has {rows} rows, the tokenizer {vocab} tokens"),
            });
        }
        let recipe = std::fs::read_to_string(dir.join("config.json"))
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|config| config.get("ctxfs_recipe").and_then(|r| r.as_str()).map(str::to_owned))
            .unwrap_or_else(|| "model2vec".to_owned());
        let label =
            dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| MODEL_DIR_NAME.to_owned());
        let name = format!("static:{label}:{recipe}:{:016x}", tensors::fingerprint(&source));
        let i8_path = dir.join(I8_TABLE);
        let table = match i8_path.exists().then(|| map_quantised(&i8_path, rows, dims, source.len())) {
            Some(Ok(mapped)) => mapped,
            Some(Err(message)) => {
                tracing::warn!(path = %i8_path.display(), "{message}; quantising model.safetensors instead");
                quantise(&table)
            }
            None => quantise(&table),
        };
        Ok(StaticEmbedder { name, dims, rows, table, tokenizer })
    }

    /// The tokenizer the table belongs to, for the chunker.
    pub fn tokenizer(&self) -> Arc<ModelTokenizer> {
        self.tokenizer.clone()
    }

    fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut sum = vec![0f32; self.dims];
        let mut count = 0usize;
        self.tokenizer.for_each_token(text, |id, _| {
            let id = id as usize;
            if id < self.rows && !self.tokenizer.is_special(id as u32) {
                self.table.add_row(id, self.dims, &mut sum);
                count += 1;
            }
        });
        // The mean and the sum point the same way; normalising makes them equal.
        if count > 0 {
            normalize(&mut sum);
        }
        sum
    }
}

impl Embedder for StaticEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dims(&self) -> usize {
        self.dims
    }

    fn max_tokens(&self) -> usize {
        usize::MAX
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.tokenizer.ids(text).len()
    }

    fn token_spans(&self, text: &str) -> Vec<Range<usize>> {
        self.tokenizer.spans(text)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

/// The quantised table's file beside `model.safetensors`.
const I8_TABLE: &str = "model.i8.safetensors";

/// Quantises the table to `i8` rows with one scale each, a row at a time:
/// scale = max |v| / 127 (1 for a zero row), q = round(v / scale), all in f32.
/// `scripts/distill_embedder.py` writes the same bytes to `model.i8.safetensors`.
fn quantise(table: &Table<'_>) -> Rows {
    let mut rows = Vec::with_capacity(table.rows * table.dims);
    let mut scales = Vec::with_capacity(table.rows);
    let mut row = vec![0f32; table.dims];
    for r in 0..table.rows {
        table.row(r, &mut row);
        let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        scales.push(scale);
        rows.extend(row.iter().map(|v| (v / scale).round().clamp(-127.0, 127.0) as i8));
    }
    Rows::Owned { rows, scales }
}

/// Maps `model.i8.safetensors` (tensors `embeddings`, I8 `[rows, dims]`, and `scales`, F32 `[rows]`),
/// checking that it was made from a source table of `source_size` bytes with this shape.
fn map_quantised(path: &Path, rows: usize, dims: usize, source_size: usize) -> Result<Rows, String> {
    let map = map_file(path).map_err(|e| e.to_string())?;
    let made_from = tensors::metadata(&map)?.remove("source_size");
    if made_from != Some(source_size.to_string()) {
        return Err("it was made from another model.safetensors".to_owned());
    }
    let file = tensors::parse(&map)?;
    let (dtype, shape, table) = tensors::tensor(&file, "embeddings")?;
    if dtype != Dtype::I8 || shape != [rows, dims] {
        return Err(format!("`embeddings` is {dtype} {shape:?}, not I8 [{rows}, {dims}]"));
    }
    let rows_at = table.as_ptr() as usize - map.as_ptr() as usize;
    let (shape, scales) = tensors::f32_tensor(&file, "scales")?;
    if shape != [rows] {
        return Err(format!("`scales` is {shape:?}, not F32 [{rows}]"));
    }
    Ok(Rows::Mapped { rows: rows_at..rows_at + rows * dims, map, scales })
}

/// The `embeddings` tensor of a Model2Vec table, read in place.
struct Table<'b> {
    rows: usize,
    dims: usize,
    data: &'b [u8],
    /// Bytes per value: 2 (F16) or 4 (F32).
    width: usize,
}

impl Table<'_> {
    /// Row `r` as f32, into `out` (`dims` long).
    fn row(&self, r: usize, out: &mut [f32]) {
        let bytes = &self.data[r * self.dims * self.width..(r + 1) * self.dims * self.width];
        if self.width == 2 {
            out.iter_mut()
                .zip(bytes.chunks_exact(2))
                .for_each(|(o, b)| *o = half::f16::from_le_bytes([b[0], b[1]]).to_f32());
        } else {
            out.iter_mut()
                .zip(bytes.chunks_exact(4))
                .for_each(|(o, b)| *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        }
    }
}

/// The `embeddings` tensor (F16 or F32, 2-D) of safetensors bytes.
fn parse_table(bytes: &[u8]) -> Result<Table<'_>, String> {
    let file = tensors::parse(bytes)?;
    let (dtype, shape, data) = tensors::tensor(&file, "embeddings")?;
    let &[rows, dims] = shape.as_slice() else {
        return Err(format!("`embeddings` must be 2-D, got shape {shape:?}"));
    };
    let width = match dtype {
        Dtype::F16 => 2,
        Dtype::F32 => 4,
        other => return Err(format!("dtype {other} is not F16 or F32")),
    };
    if rows == 0 || dims == 0 {
        return Err(format!("`embeddings` is empty ({rows}×{dims})"));
    }
    Ok(Table { rows, dims, data, width })
}

// ---------------------------------------------------------------------------
// Finding the default table.

/// Where the default table is looked for, in order: `$CTXFS_MODEL_DIR`;
/// `<data dir>/models/minilm-static`; `../share/ctxfs/minilm-static` beside
/// the executable's directory; the source tree's `models/minilm-static`
/// (where `scripts/build-embedder` puts it).
pub fn model_dir_candidates(env: Option<&std::ffi::OsStr>, data_dir: &Path, exe: Option<&Path>) -> Vec<PathBuf> {
    candidates_named(MODEL_DIR_NAME, env, data_dir, exe)
}

/// The places a model directory called `name` is looked for, in the order
/// `model_dir_candidates` says (`env`: the value of its own variable).
pub(crate) fn candidates_named(
    name: &str,
    env: Option<&std::ffi::OsStr>,
    data_dir: &Path,
    exe: Option<&Path>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = env.filter(|d| !d.is_empty()) {
        out.push(PathBuf::from(dir));
    }
    out.push(data_dir.join("models").join(name));
    if let Some(bin) = exe.and_then(Path::parent) {
        out.push(bin.join("..").join("share").join("ctxfs").join(name));
    }
    out.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name));
    out
}

/// The first place for the model directory `name` (overridden by the
/// variable `env_var`) that holds `model.safetensors` and `tokenizer.json`.
pub(crate) fn find_named(name: &str, env_var: &str, data_dir: &Path) -> Option<PathBuf> {
    let env = std::env::var_os(env_var);
    let exe = std::env::current_exe().ok();
    candidates_named(name, env.as_deref(), data_dir, exe.as_deref())
        .into_iter()
        .find(|d| d.join("model.safetensors").is_file() && d.join("tokenizer.json").is_file())
}

/// The first candidate directory that holds both files of a table.
pub fn find_model_dir(data_dir: &Path) -> Option<PathBuf> {
    find_named(MODEL_DIR_NAME, MODEL_DIR_ENV, data_dir)
}

/// The default static embedder, or `None` (said once per process) when no table is installed or it fails to load.
pub fn default_static(data_dir: &Path) -> Option<Arc<StaticEmbedder>> {
    let Some(dir) = find_model_dir(data_dir) else {
        warn_once("no embedding table is installed (scripts/build-embedder makes one)");
        return None;
    };
    match StaticEmbedder::load(&dir) {
        Ok(embedder) => Some(Arc::new(embedder)),
        Err(e) => {
            warn_once(&format!("the embedding table could not be loaded ({e})"));
            None
        }
    }
}

/// The default embedder as a trait object; `None` means words only.
pub fn default_embedder(data_dir: &Path) -> Option<Box<dyn Embedder>> {
    let embedder = default_static(data_dir)?;
    Some(Box::new(Shared(embedder)))
}

/// The default table's tokenizer alone, for counting and chunking.
pub fn model_tokenizer(data_dir: &Path) -> Option<Arc<ModelTokenizer>> {
    ModelTokenizer::load(&find_model_dir(data_dir)?.join("tokenizer.json")).ok().map(Arc::new)
}

/// An `Arc`'d embedder as a boxed one.
struct Shared<E: Embedder>(Arc<E>);

impl<E: Embedder> Embedder for Shared<E> {
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
    fn token_spans(&self, text: &str) -> Vec<Range<usize>> {
        self.0.token_spans(text)
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.0.embed(texts)
    }
}

/// Any embedder as the index's `Vectorizer`.
pub struct EmbedderVectorizer(pub Arc<dyn Embedder>);

impl hybrid::Vectorizer for EmbedderVectorizer {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn embed(&self, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        Ok(self.0.embed(texts)?)
    }
    fn embed_query(&self, query: &str) -> anyhow::Result<Vec<f32>> {
        Ok(embed_head(&*self.0, query)?)
    }
}

/// Embeds one text, cut to its first tokens when the embedder refuses it for
/// its length, as sentence-transformers truncates a long input: first to as
/// many tokens as the embedder says it takes, then to half as many while it
/// still refuses (a server whose own limit is lower than the one it was
/// given). For a search query: its beginning still ranks by meaning, where
/// a refusal would leave the query none. Says on the log when it cuts.
pub fn embed_head(embedder: &dyn Embedder, text: &str) -> Result<Vec<f32>, EmbedError> {
    let (mut end, mut kept) = (text.len(), None);
    loop {
        let head = &text[..end];
        match embedder.embed(&[head]) {
            Ok(mut vectors) => {
                if let Some(kept) = kept {
                    tracing::info!(
                        "a search query too long for the embedder ranks by meaning with its first {kept} tokens"
                    );
                }
                return Ok(vectors.pop().unwrap_or_default());
            }
            Err(EmbedError::TooLong { index, tokens, max }) => {
                let spans = embedder.token_spans(head);
                let keep = if spans.len() > max { max } else { spans.len() / 2 };
                // Up to the first token left out, without the whitespace before it.
                let cut = spans.get(keep).map_or(0, |s| s.start.min(head.len()));
                let cut = head[..cut].trim_end().len();
                if keep == 0 || cut == 0 || cut >= end {
                    return Err(EmbedError::TooLong { index, tokens, max });
                }
                (end, kept) = (cut, Some(keep));
            }
            Err(e) => return Err(e),
        }
    }
}

impl hybrid::Vectorizer for StaticEmbedder {
    fn name(&self) -> &str {
        Embedder::name(self)
    }
    fn embed(&self, texts: &[&str]) -> anyhow::Result<Vec<Vec<f32>>> {
        Ok(Embedder::embed(self, texts)?)
    }
}

// ---------------------------------------------------------------------------
// A server the user runs.

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
    use std::time::Instant;

    #[test]
    fn normalize_makes_unit_vectors_and_leaves_zero_alone() {
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut z = vec![0.0; 3];
        normalize(&mut z);
        assert_eq!(z, vec![0.0; 3]);
        assert!((dot(&v, &v) - 1.0).abs() < 1e-6);
    }

    /// A safetensors file with one tensor `embeddings` of F16 values.
    fn tiny_table(rows: usize, dims: usize, values: &[f32]) -> Vec<u8> {
        let data: Vec<u8> = values
            .iter()
            .flat_map(|&v| {
                // Only values exactly representable by small halves are used here.
                let h: u16 = match v {
                    0.0 => 0,
                    1.0 => 0x3c00,
                    -1.0 => 0xbc00,
                    2.0 => 0x4000,
                    0.5 => 0x3800,
                    _ => panic!("unsupported test value"),
                };
                h.to_le_bytes()
            })
            .collect();
        let header =
            format!(r#"{{"embeddings":{{"dtype":"F16","shape":[{rows},{dims}],"data_offsets":[0,{}]}}}}"#, data.len());
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&data);
        out
    }

    #[test]
    fn parses_a_hand_made_safetensors_table() {
        let bytes = tiny_table(2, 3, &[1.0, 0.0, -1.0, 0.5, 2.0, 0.0]);
        let table = parse_table(&bytes).unwrap();
        assert_eq!((table.rows, table.dims), (2, 3));
        let mut row = vec![0f32; 3];
        table.row(1, &mut row);
        assert_eq!(row, vec![0.5, 2.0, 0.0]);
        assert!(parse_table(&bytes[..bytes.len() - 1]).is_err());
        assert!(parse_table(b"\x02\0\0\0\0\0\0\0{}").is_err());
    }

    /// Writes the quantised rows as `model.i8.safetensors` would hold them.
    fn i8_file(rows: &Rows, n: usize, dims: usize, source_size: usize) -> Vec<u8> {
        let Rows::Owned { rows, scales } = rows else { panic!("owned rows expected") };
        let header = format!(
            r#"{{"__metadata__":{{"source_size":"{source_size}"}},"embeddings":{{"dtype":"I8","shape":[{n},{dims}],"data_offsets":[0,{e}]}},"scales":{{"dtype":"F32","shape":[{n}],"data_offsets":[{e},{end}]}}}}"#,
            e = n * dims,
            end = n * dims + 4 * n
        );
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend(rows.iter().map(|&q| q as u8));
        scales.iter().for_each(|s| out.extend_from_slice(&s.to_le_bytes()));
        out
    }

    fn sum_of(rows: &Rows, n: usize, dims: usize) -> Vec<Vec<f32>> {
        (0..n)
            .map(|r| {
                let mut sum = vec![0f32; dims];
                rows.add_row(r, dims, &mut sum);
                sum
            })
            .collect()
    }

    #[test]
    fn mapped_rows_are_the_rows_quantised_at_load_and_a_stale_file_is_refused() {
        let bytes = tiny_table(3, 2, &[1.0, 0.5, 0.0, 0.0, 2.0, -1.0]);
        let table = parse_table(&bytes).unwrap();
        let owned = quantise(&table);
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(I8_TABLE);
        std::fs::write(&path, i8_file(&owned, 3, 2, bytes.len())).unwrap();
        let mapped = map_quantised(&path, 3, 2, bytes.len()).unwrap();
        assert!(matches!(mapped, Rows::Mapped { .. }));
        assert_eq!(sum_of(&mapped, 3, 2), sum_of(&owned, 3, 2));
        assert_eq!(sum_of(&owned, 3, 2)[1], vec![0.0, 0.0], "a zero row stays zero");
        assert!(map_quantised(&path, 3, 2, bytes.len() + 1).err().unwrap().contains("another model.safetensors"));
        assert!(map_quantised(&path, 3, 3, bytes.len()).is_err());
    }

    #[test]
    fn the_installed_i8_file_matches_quantising_at_load() {
        let dir = find_model_dir(Path::new("/nonexistent-ctxfs-data"))
            .expect("no embedding table is installed: run scripts/build-embedder (scripts/test does)");
        let source = map_file(&dir.join("model.safetensors")).unwrap();
        let table = parse_table(&source).unwrap();
        // scripts/test builds the table with this file; an older table has none.
        let Ok(mapped) = map_quantised(&dir.join(I8_TABLE), table.rows, table.dims, source.len()) else {
            panic!("{} is missing or stale: run scripts/build-embedder --force", dir.join(I8_TABLE).display());
        };
        let Rows::Owned { rows, scales } = quantise(&table) else { unreachable!() };
        let Rows::Mapped { map, rows: span, scales: mapped_scales } = &mapped else { unreachable!() };
        assert_eq!(mapped_scales, &scales, "the scales differ from the Rust quantisation");
        let mapped_rows = &map[span.clone()];
        let differing = rows.iter().zip(mapped_rows).filter(|(a, b)| **a as u8 != **b).count();
        assert_eq!(differing, 0, "rows differ from the Rust quantisation");
    }

    #[test]
    fn the_model_dir_is_looked_for_in_order() {
        let data = Path::new("/data");
        let exe = Path::new("/opt/ctxfs/bin/ctxfs");
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/minilm-static");
        let all = model_dir_candidates(Some(std::ffi::OsStr::new("/env/table")), data, Some(exe));
        assert_eq!(
            all,
            vec![
                PathBuf::from("/env/table"),
                PathBuf::from("/data/models/minilm-static"),
                PathBuf::from("/opt/ctxfs/bin/../share/ctxfs/minilm-static"),
                repo.clone(),
            ]
        );
        // An unset or empty variable and an unknown executable are skipped.
        assert_eq!(
            model_dir_candidates(Some(std::ffi::OsStr::new("")), data, None),
            vec![PathBuf::from("/data/models/minilm-static"), repo]
        );
    }

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

    // ----- The real table, when scripts/build-embedder has made it.

    /// The installed table; a missing one fails the test (scripts/test installs it with scripts/build-embedder).
    fn installed() -> Option<StaticEmbedder> {
        let dir = find_model_dir(Path::new("/nonexistent-ctxfs-data"))
            .expect("no embedding table is installed: run scripts/build-embedder (scripts/test does)");
        Some(StaticEmbedder::load(&dir).expect("the installed table loads"))
    }

    #[test]
    fn static_table_ranks_related_above_unrelated() {
        let Some(e) = installed() else { return };
        assert_eq!(e.dims(), 384);
        let pairs = [
            ("retry failed uploads", "if the upload fails, wait with exponential backoff and send the file again"),
            ("parse command line arguments", "the option parser reads flags such as --verbose and --output from argv"),
            ("connect to the database", "open a connection pool to postgres using the DATABASE_URL setting"),
            ("hash the user's password", "store passwords with bcrypt and a random salt, never as plain text"),
            ("resize an image", "scale the picture down to a thumbnail of 128 by 128 pixels"),
        ];
        let queries = e.embed(&pairs.map(|p| p.0)).unwrap();
        let passages = e.embed(&pairs.map(|p| p.1)).unwrap();
        for (i, q) in queries.iter().enumerate() {
            assert!((dot(q, q) - 1.0).abs() < 1e-4);
            let related = dot(q, &passages[i]);
            for (j, p) in passages.iter().enumerate().filter(|(j, _)| *j != i) {
                let unrelated = dot(q, p);
                assert!(
                    related > unrelated,
                    "{:?}: related {related:.3} <= {unrelated:.3} for {:?}",
                    pairs[i].0,
                    pairs[j].1
                );
            }
        }
        // Tokens: no special tokens added, spans on the text, truncation off.
        let text = "Hello, world! ".repeat(100);
        assert_eq!(e.count_tokens("Hello, world!"), 4);
        assert_eq!(e.count_tokens(&text), 400);
        let spans = e.token_spans("Hello, world!");
        assert_eq!(spans, vec![0..5, 5..6, 7..12, 12..13]);
        assert_eq!(chunk::Tokenizer::count(&*e.tokenizer(), &text), 400);
        // Nothing to embed gives the zero vector; a literal special token adds nothing.
        assert_eq!(e.embed(&[""]).unwrap()[0], vec![0.0; 384]);
        let plain = e.embed(&["open the file"]).unwrap();
        let marked = e.embed(&["[CLS] open the file [SEP]"]).unwrap();
        assert!((dot(&plain[0], &marked[0]) - 1.0).abs() < 1e-5);
    }

    #[test]
    fn fast_tokenizer_matches_the_tokenizers_crate() {
        let Some(e) = installed() else { return };
        let t = e.tokenizer();
        assert!(t.fast.is_some(), "the model's tokenizer.json should take the fast path");
        let mut texts: Vec<String> = [
            "Hello, world!",
            "fn main() { println!(\"{}\", x.to_string()); } // CamelCaseName snake_case_name",
            "[CLS] a [SEP] b[MASK]c [cls] [Unk]",
            "control\u{1}chars\u{0}here and\u{7f}del \u{b}vt\u{c}ff",
            "café naïve Ünïcödé — “quotes” 日本語のテキスト → ⌈x⌉ émoji 🦀 \u{a0}nbsp\u{3000}ideographic",
            "e\u{301}combining",
            &"a".repeat(100),
            &"b".repeat(101),
            &format!("{} tail", "xyz".repeat(40)),
            "\t\r\n  \r\n\n",
            "",
            "0x7fff_ffff 3.14159e-10 1_000_000 @#$%^&*()_+-=[]{}|;':\",./<>?`~",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Random strings over printable ASCII, whitespace, controls and a few wider characters.
        let alphabet: Vec<char> = (0x20u8..0x7f).map(char::from).chain("\t\n\r\u{1}\u{b}é—日\u{a0}".chars()).collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..300 {
            let mut text = String::new();
            for _ in 0..(seed % 200) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                text.push(alphabet[(seed % alphabet.len() as u64) as usize]);
            }
            texts.push(text);
        }
        let mut stack = vec![PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    texts.push(std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        for text in &texts {
            let fast: Vec<(u32, Range<usize>)> = t.ids(text).into_iter().zip(t.spans(text)).collect();
            let reference = t.reference(text);
            if fast != reference {
                let at =
                    fast.iter().zip(&reference).position(|(a, b)| a != b).unwrap_or(fast.len().min(reference.len()));
                panic!(
                    "differs at token {at} of {:?}...: fast {:?} vs reference {:?}",
                    &text.chars().take(60).collect::<String>(),
                    &fast[at.saturating_sub(2)..(at + 3).min(fast.len())],
                    &reference[at.saturating_sub(2)..(at + 3).min(reference.len())]
                );
            }
        }
    }

    /// Indexing throughput of the static embedder over this crate's own sources, in ~400-token pieces.
    /// Run with `cargo test --release --lib static_throughput -- --ignored --nocapture`.
    #[test]
    #[ignore]
    #[allow(clippy::print_stdout)] // a measurement, read with --nocapture
    fn static_throughput() {
        let Some(e) = installed() else { return };
        let started = Instant::now();
        let loaded = StaticEmbedder::load(&find_model_dir(Path::new("/nonexistent")).unwrap()).unwrap();
        println!("load: {:.0} ms", started.elapsed().as_secs_f64() * 1e3);
        drop(loaded);
        let mut text = String::new();
        let mut stack = vec![PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    text.push_str(&std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        let tokenizer = e.tokenizer();
        let pieces: Vec<String> = chunk::chunk(&text, &*tokenizer, 400, 0).into_iter().map(|p| p.text).collect();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let bytes: usize = refs.iter().map(|p| p.len()).sum();
        let tokens: usize = refs.iter().map(|p| e.count_tokens(p)).sum();
        // Best of five rounds: the machine may be shared with builds.
        let best = |f: &dyn Fn()| {
            (0..5)
                .map(|_| {
                    let started = Instant::now();
                    f();
                    started.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        println!(
            "{} pieces of {:.0} tokens on average ({:.2} MB, {} tokens)",
            refs.len(),
            tokens as f64 / refs.len() as f64,
            bytes as f64 / 1e6,
            tokens
        );
        for threads in [1usize, 2] {
            let secs = best(&|| {
                std::thread::scope(|s| {
                    for part in refs.chunks(refs.len().div_ceil(threads)) {
                        let e = &e;
                        s.spawn(move || e.embed(part).unwrap());
                    }
                })
            });
            println!(
                "embed, {threads} thread(s): {:.0} chunks/s, {:.2} MB/s",
                refs.len() as f64 / secs,
                bytes as f64 / 1e6 / secs
            );
        }
        let secs = best(&|| {
            refs.iter().map(|p| tokenizer.ids(p).len()).sum::<usize>();
        });
        println!("token ids alone, 1 thread: {:.2} MB/s", bytes as f64 / 1e6 / secs);
        let secs = best(&|| {
            refs.iter().map(|p| tokenizer.reference(p).len()).sum::<usize>();
        });
        println!("the tokenizers crate alone, 1 thread: {:.2} MB/s", bytes as f64 / 1e6 / secs);
    }
}

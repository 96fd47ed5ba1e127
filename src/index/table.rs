//! The static embedder, the default: a Model2Vec-style table of token vectors (quantised to `i8`, mapped from `model.i8.safetensors` when the set-up wrote it) and the model's tokenizer; not where the table is found (`models`), nor the tokenizer itself (`wordpiece`).

use super::embed::{normalize, EmbedError, Embedder};
use super::models::MODEL_DIR_NAME;
use super::tensors::{self, map_file};
use super::wordpiece::ModelTokenizer;
use safetensors::Dtype;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

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
    /// Adds `row` of the table, scaled back to f32, `times` times to `sum`.
    fn add_row_times(&self, row: usize, dims: usize, times: f32, sum: &mut [f32]) {
        let span = row * dims..(row + 1) * dims;
        match self {
            Rows::Mapped { map, rows, scales } => {
                let bytes = &map[rows.start + span.start..rows.start + span.end];
                let scale = scales[row] * times;
                sum.iter_mut().zip(bytes).for_each(|(s, &b)| *s += f32::from(b as i8) * scale);
            }
            Rows::Owned { rows, scales } => {
                let scale = scales[row] * times;
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
        let vocab = tokenizer.vocab_size();
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

    /// A text's vector: the mean of its tokens' rows, normalised. Each
    /// distinct token's row is added once, times its count: a passage of code
    /// holds each of its tokens four times on average (a quarter of them are
    /// distinct), and adding every occurrence's row was a sixth of indexing
    /// (bench/README.md).
    fn embed_one(&self, text: &str, ids: Option<&[u32]>, counts: &mut TokenCounts) -> Vec<f32> {
        let mut count = |id: u32| {
            let at = id as usize;
            if at < self.rows && !self.tokenizer.is_special(id) {
                if counts.times[at] == 0 {
                    counts.order.push(id);
                }
                counts.times[at] += 1;
            }
        };
        match ids {
            Some(ids) => ids.iter().for_each(|&id| count(id)),
            None => self.tokenizer.for_each_token(text, |id, _| count(id)),
        }
        let mut sum = vec![0f32; self.dims];
        for &id in &counts.order {
            let times = std::mem::take(&mut counts.times[id as usize]);
            self.table.add_row_times(id as usize, self.dims, times as f32, &mut sum);
        }
        // The mean and the sum point the same way; normalising makes them equal.
        if !counts.order.is_empty() {
            normalize(&mut sum);
        }
        counts.order.clear();
        sum
    }
}

/// How often each token occurs in the text being embedded (`times`, by
/// token; all zero between texts) and the tokens met, in the order first
/// met: one for all the texts of an `embed` call.
struct TokenCounts {
    times: Vec<u32>,
    order: Vec<u32>,
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

    fn is_cheap(&self) -> bool {
        true
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.tokenizer.ids(text).len()
    }

    fn token_spans(&self, text: &str) -> Vec<Range<usize>> {
        self.tokenizer.spans(text)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_tokenized(&texts.iter().map(|text| (*text, None)).collect::<Vec<_>>())
    }

    fn token_ids(&self, text: &str) -> Option<super::chunk::TokenIds> {
        super::chunk::Tokenizer::token_ids(&*self.tokenizer, text)
    }

    fn keeps_tokens_apart(&self, text: &str, at: usize) -> bool {
        super::chunk::Tokenizer::keeps_apart(&*self.tokenizer, text, at)
    }

    /// A passage's ids, when given, are counted as they are: the chunker
    /// had them from this table's own tokenizer, and tokenizing every
    /// passage a second time had been a tenth of indexing.
    fn embed_tokenized(&self, texts: &[(&str, Option<&[u32]>)]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut counts = TokenCounts { times: vec![0; self.rows], order: Vec::new() };
        Ok(texts.iter().map(|(text, ids)| self.embed_one(text, *ids, &mut counts)).collect())
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

#[cfg(test)]
mod tests {
    use super::super::chunk;
    use super::super::embed::dot;
    use super::super::models::find_model_dir;
    use super::*;
    use std::time::Instant;

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
                rows.add_row_times(r, dims, 1.0, &mut sum);
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

    /// The installed table; a missing one fails the test (scripts/test installs it with scripts/build-embedder).
    fn installed() -> Option<StaticEmbedder> {
        let dir = find_model_dir(Path::new("/nonexistent-ctxfs-data"))
            .expect("no embedding table is installed: run scripts/build-embedder (scripts/test does)");
        Some(StaticEmbedder::load(&dir).expect("the installed table loads"))
    }

    /// A text's vector, each token's row added once per occurrence, in order: what `embed_one`
    /// computes with its counts, up to the order of the additions.
    fn plain_vector(e: &StaticEmbedder, text: &str) -> Vec<f32> {
        let mut sum = vec![0f32; e.dims];
        e.tokenizer.for_each_token(text, |id, _| {
            if (id as usize) < e.rows && !e.tokenizer.is_special(id) {
                e.table.add_row_times(id as usize, e.dims, 1.0, &mut sum);
            }
        });
        normalize(&mut sum);
        sum
    }

    /// Rows added once a token, times its count, give the vector of every
    /// occurrence added; and the counts of one text never reach the next of
    /// the same call.
    #[test]
    fn counted_rows_give_every_occurrences_vector_and_each_text_its_own() {
        let Some(e) = installed() else { return };
        let texts = [
            "fn read(&self) -> io::Result<usize> { self.read(buf)?; self.read(buf)?; Ok(0) }",
            "retry the upload retry the upload retry",
            "a",
            "",
            "fn read(&self) -> io::Result<usize> { self.read(buf)?; self.read(buf)?; Ok(0) }",
        ];
        let together = e.embed(&texts).unwrap();
        for (text, vector) in texts.iter().zip(&together) {
            assert_eq!(vector, &e.embed(&[text]).unwrap()[0], "{text:?}: another text's counts reached it");
            if !text.is_empty() {
                let cosine = dot(vector, &plain_vector(&e, text));
                assert!((cosine - 1.0).abs() < 1e-5, "{text:?}: cosine {cosine}");
            }
        }
        assert_eq!(together[0], together[4]);
        // Given the texts' ids, the table counts them as they are, with or without a neighbour's.
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| e.tokenizer().ids(t)).collect();
        let tokenized: Vec<(&str, Option<&[u32]>)> = texts
            .iter()
            .zip(&ids)
            .enumerate()
            .map(|(i, (t, ids))| (*t, (i % 2 == 0).then_some(ids.as_slice())))
            .collect();
        assert_eq!(e.embed_tokenized(&tokenized).unwrap(), together);
    }

    #[test]
    fn static_table_ranks_related_above_unrelated() {
        let Some(e) = installed() else { return };
        assert_eq!(e.dims(), 384);
        // A lookup a token: the index embeds as it reads, with no round of words first.
        assert!(e.is_cheap());
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
        let text = super::super::testing::crate_sources().concat();
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

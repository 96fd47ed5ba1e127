//! Model files on disk: mapping one read-only, reading its tensors through the `safetensors` crate (the one reader of the format here), and its fingerprint; not the models, their tokenizers or where they are found.

use super::embed::EmbedError;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::Path;

/// Maps a file read-only.
pub(crate) fn map_file(path: &Path) -> Result<memmap2::Mmap, EmbedError> {
    let file = std::fs::File::open(path)
        .map_err(|e| EmbedError::Model { path: path.to_path_buf(), message: e.to_string() })?;
    // SAFETY: the map is read-only and private to this process. The set-up
    // replaces a model by renaming a new directory into place, never by
    // writing into these files, so the mapped bytes do not change under us.
    unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| EmbedError::Model { path: path.to_path_buf(), message: e.to_string() })
}

/// The tensors of a safetensors file's bytes (checked by the crate: the
/// header, each tensor's span against its dtype and shape, and that the
/// data fills the file).
pub(crate) fn parse(bytes: &[u8]) -> Result<SafeTensors<'_>, String> {
    SafeTensors::deserialize(bytes).map_err(|e| format!("not a safetensors file: {e}"))
}

/// The free-form `__metadata__` of a safetensors file's header.
pub(crate) fn metadata(bytes: &[u8]) -> Result<HashMap<String, String>, String> {
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
    Ok(header.metadata().clone().unwrap_or_default())
}

/// The named tensor's dtype, shape and data bytes.
pub(crate) fn tensor<'b>(file: &SafeTensors<'b>, name: &str) -> Result<(Dtype, Vec<usize>, &'b [u8]), String> {
    let view = file.tensor(name).map_err(|_| format!("no tensor named `{name}`"))?;
    Ok((view.dtype(), view.shape().to_vec(), view.data()))
}

/// An F32 tensor's shape and values.
pub(crate) fn f32_tensor(file: &SafeTensors<'_>, name: &str) -> Result<(Vec<usize>, Vec<f32>), String> {
    let (dtype, shape, data) = tensor(file, name)?;
    if dtype != Dtype::F32 {
        return Err(format!("{name} is {dtype}, not F32"));
    }
    Ok((shape, data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()))
}

/// A cheap content hash of a model file for its embedder's name (FNV-1a's
/// constants over 8-byte words, then the length): it must stay as it is,
/// since a new name means every stored vector is made again.
pub(crate) fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().unwrap_or_default())).wrapping_mul(0x0100_0000_01b3);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ bytes.len() as u64
}

//! Where the local models' files are found (`$CTXFS_MODEL_DIR` and its kin, the data directory, beside the executable, the source tree) and the default table loaded from there; not the models themselves, nor which one the user chose (`EmbedderChoice`).

use super::table::StaticEmbedder;
use super::warn_once;
use super::wordpiece::ModelTokenizer;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directory name of the default table, under each place it is looked for.
pub const MODEL_DIR_NAME: &str = "minilm-static";

/// The environment variable naming the table's directory, looked at first.
pub const MODEL_DIR_ENV: &str = "CTXFS_MODEL_DIR";

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

/// The default table's tokenizer alone, for counting and chunking.
pub fn model_tokenizer(data_dir: &Path) -> Option<Arc<ModelTokenizer>> {
    ModelTokenizer::load(&find_model_dir(data_dir)?.join("tokenizer.json")).ok().map(Arc::new)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

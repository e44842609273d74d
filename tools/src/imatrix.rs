//! Collecting an importance matrix ([`ImportanceMatrix`]): the CPU reference run over windows
//! of a calibration text, as `llama-imatrix` does, summing each weight matrix's squared inputs.

use std::path::Path;

use hearth_engine::{BackendKind, Engine, EngineOptions};
use hearth_model::quantize::imatrix::ImportanceMatrix;
use hearth_model::{Backend, Error, Logits, Result};
use hearth_models::{resolve_gguf, GgufFile};
use hearth_reference::CpuModel;

/// How [`collect`] reads the text.
#[derive(Clone, Debug)]
pub struct CollectOptions {
    /// Tokens per window; each window runs from an empty cache.
    pub window: usize,
    /// Most windows to run; `None`: the whole text.
    pub max_windows: Option<usize>,
    /// The text's name, recorded in the file.
    pub dataset: String,
}

/// The importance matrix of the model in `path` over `text`: the text is cut into windows of
/// `opts.window` tokens, each run through the CPU reference from an empty cache, and every
/// token's inputs to every matrix are summed. `progress(done, total)` after each window; it
/// returning `false` cancels.
pub fn collect(
    path: &Path,
    text: &str,
    opts: &CollectOptions,
    progress: &mut dyn FnMut(usize, usize) -> bool,
) -> Result<ImportanceMatrix> {
    if opts.window < 2 {
        return Err(Error::options(
            "ctx-size",
            "a window needs at least 2 tokens",
        ));
    }
    let file = GgufFile::open(path)?;
    let model = resolve_gguf(&file)?;
    let options = EngineOptions {
        backend: BackendKind::Reference,
        n_ctx: Some(opts.window),
        ..EngineOptions::default()
    };
    let mut engine = Engine::load(path, &options, &mut |_| true)?;
    let tokens = engine.tokenize(text);
    let available = tokens.len() / opts.window;
    let windows = opts.max_windows.map_or(available, |n| n.min(available));
    if windows == 0 {
        return Err(Error::options(
            "file",
            format!(
                "the text has {} tokens; a window needs {} (lower --ctx-size)",
                tokens.len(),
                opts.window
            ),
        ));
    }
    let backend = engine.session_mut().fresh_backend();
    let cpu = backend
        .as_any_mut()
        .downcast_mut::<CpuModel>()
        .ok_or_else(|| Error::options("backend", "importance matrices run on the CPU reference"))?;
    cpu.collect_activations();
    for (w, window) in tokens.chunks_exact(opts.window).take(windows).enumerate() {
        cpu.truncate(0);
        cpu.forward(window, Logits::Last)?;
        if !progress(w + 1, windows) {
            return Err(Error::Cancelled);
        }
    }
    let activations = cpu.take_activations().unwrap_or_default();
    Ok(ImportanceMatrix {
        datasets: vec![opts.dataset.clone()],
        chunk_count: windows as u32,
        chunk_size: opts.window as u32,
        ..ImportanceMatrix::from_activations(&model, &activations)
    })
}

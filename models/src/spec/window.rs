//! Sliding-window (local) attention: the window's size and which layers it covers.

use super::ModelSpec;
use crate::error::{Error, Result};
use crate::gguf::{GgufFile, MetaArray, MetaValue};

/// Sliding-window (local) attention: the layers it applies to attend only to the `size` most
/// recent positions, their own included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlidingWindow {
    pub size: usize,
    /// One per layer: whether the layer is windowed.
    pub layers: Vec<bool>,
}

impl SlidingWindow {
    /// Layer `l`'s window, `None` for a global layer.
    pub fn of_layer(&self, l: usize) -> Option<usize> {
        self.layers
            .get(l)
            .copied()
            .unwrap_or(false)
            .then_some(self.size)
    }
}

impl ModelSpec {
    /// The window from `{arch}.attention.sliding_window` (absent or 0: none) and the layers
    /// it covers: the file's `sliding_window_pattern` (a flag per layer, or a period) or the
    /// spec's `attention.window_period`.
    pub(super) fn sliding_window(
        &self,
        file: &GgufFile,
        key: &dyn Fn(&str) -> String,
        n_layer: usize,
        n_ctx_train: usize,
    ) -> Result<Option<SlidingWindow>> {
        let path = file.path();
        let size_key = key("attention.sliding_window");
        let size = match file.get::<u32>(&size_key)? {
            Some(0) => return Ok(None),
            Some(s) => s as usize,
            // A default window as long as the context changes nothing.
            None => match self.attention.window_default {
                Some(s) if (s as usize) < n_ctx_train => s as usize,
                _ => return Ok(None),
            },
        };
        if size > n_ctx_train {
            return Err(Error::metadata(
                path,
                &size_key,
                format!(
                    "window of {size} positions is longer than the context of {n_ctx_train} \
                     (`{}`)",
                    key("context_length")
                ),
            ));
        }
        let pattern_key = key("attention.sliding_window_pattern");
        let by_period = |period: u32| -> Vec<bool> {
            (0..n_layer)
                .map(|l| (l as u32) % period < period - 1 || period == 1)
                .collect()
        };
        let layers = match file.metadata().get(&pattern_key) {
            None => by_period(self.attention.window_period),
            Some(MetaValue::Array(MetaArray::Bool(flags))) => {
                if flags.len() != n_layer {
                    return Err(Error::metadata(
                        path,
                        &pattern_key,
                        format!("{} flags for {n_layer} layers", flags.len()),
                    ));
                }
                flags.clone()
            }
            Some(v) => match v.as_u64() {
                Some(period) if (1..=u32::MAX as u64).contains(&period) => by_period(period as u32),
                _ => {
                    return Err(Error::metadata(
                        path,
                        &pattern_key,
                        "must be a flag per layer or a positive period",
                    ))
                }
            },
        };
        Ok(Some(SlidingWindow { size, layers }))
    }
}

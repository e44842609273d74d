//! The `{arch}.*` metadata of a converted file, collected as it is written.

use std::path::Path;

use crate::error::{Error, Result};
use crate::gguf::MetaValue;

/// Metadata under `{arch}.` being written.
pub(crate) struct Meta {
    pub arch: &'static str,
    pub entries: Vec<(String, MetaValue)>,
}

impl Meta {
    pub fn set(&mut self, key: &str, value: MetaValue) {
        let key = format!("{}.{key}", self.arch);
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    pub fn u32(&mut self, key: &str, value: u64) -> Result<()> {
        let v = u32::try_from(value).map_err(|_| {
            Error::metadata(
                Path::new("config.json"),
                key,
                format!("{value} is too large"),
            )
        })?;
        self.set(key, MetaValue::U32(v));
        Ok(())
    }

    pub fn f32(&mut self, key: &str, value: f64) {
        self.set(key, MetaValue::F32(value as f32));
    }
}

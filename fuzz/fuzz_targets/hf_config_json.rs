//! Arbitrary bytes as a Hugging Face folder's `config.json` (the other files a tiny Llama's):
//! converting the folder must return an error naming the file and field, or a model that
//! survives what a loaded model goes through; never a panic, a hang or an allocation without
//! bound.
#![no_main]

use hearth_models::open_model;
use hearth_models_fuzz::{exercise, folder_with};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = open_model(folder_with("config.json", data)) {
        exercise(&file);
    }
});

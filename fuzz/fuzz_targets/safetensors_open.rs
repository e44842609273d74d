//! Arbitrary bytes as a folder's `model.safetensors`: opening must return an error naming the
//! file or weights whose every tensor lies inside the file with the size its shape and type
//! give; never a panic, a hang or an allocation without bound.
#![no_main]

use hearth_models::SafetensorsWeights;
use hearth_models_fuzz::folder_with;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = folder_with("model.safetensors", data);
    let Ok(weights) = SafetensorsWeights::open(dir) else {
        return;
    };
    for (_, info) in weights.tensors() {
        let _ = weights.bytes(info);
    }
});

//! Arbitrary bytes as a PyTorch checkpoint (`pytorch_model.bin`, either layout): reading must
//! return an error naming the file or tensors whose bytes lie inside it, as many as their
//! shape and type give; never a panic, a hang, an allocation without bound, or anything run.
#![no_main]

use std::path::Path;

use hearth_models::pickle::read_checkpoint;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("pytorch_model.bin");
    match read_checkpoint(path, data) {
        Ok(tensors) => {
            for t in tensors.values() {
                let bytes = data.get(t.bytes.clone()).expect("inside the file");
                let numel: usize = t.shape.iter().product();
                assert_eq!(bytes.len(), numel * t.dtype.size());
            }
        }
        Err(e) => assert!(e.to_string().starts_with("pytorch_model.bin"), "{e}"),
    }
});

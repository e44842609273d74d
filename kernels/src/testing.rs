//! Shared test support: one validated device per test binary, random data, tolerant comparison.

use std::sync::{Arc, OnceLock};

use rand::{Rng, SeedableRng};

use crate::vk::{Buffer, Device, DeviceDesc, Recorder};

/// The test device, with the validation layer on where it is installed. Outside CI a machine
/// without Vulkan skips GPU tests (each caller records its skip); in CI a missing device fails
/// them.
#[track_caller]
pub fn device() -> Option<Arc<Device>> {
    static DEVICE: OnceLock<Result<Arc<Device>, String>> = OnceLock::new();
    let device = DEVICE.get_or_init(|| {
        let index = std::env::var("HEARTH_DEVICE")
            .ok()
            .and_then(|s| s.parse().ok());
        Device::new(DeviceDesc {
            index,
            validation: true,
        })
        .map_err(|e| e.to_string())
    });
    hearth_testkit::or_skip(device.clone(), "Vulkan device")
}

/// Fails the test if the validation layer reported anything.
pub fn finish(device: &Device) {
    let messages = device.take_validation_messages();
    assert!(
        messages.is_empty(),
        "validation messages:\n{}",
        messages.join("\n")
    );
}

/// `n` values uniform in [-scale, scale], reproducible from `seed`.
pub fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-scale..=scale)).collect()
}

pub fn upload(device: &Arc<Device>, data: &[f32]) -> Buffer {
    Buffer::from_slice(device, "test input", data).unwrap()
}

/// Quantizes `w` into `format` and uploads it as a weight buffer; returns the buffer and the
/// values it holds (the reference dequantization), which kernels are compared against.
pub fn upload_weights(
    device: &Arc<Device>,
    w: &[f32],
    format: crate::WeightFormat,
) -> (Buffer, Vec<f32>) {
    let mut packed = vec![0u8; format.bytes_for(w.len()).unwrap()];
    format.quantize(w, &mut packed).unwrap();
    let mut values = vec![0f32; w.len()];
    format.dequantize(&packed, &mut values).unwrap();
    let buffer = crate::weight_buffer(device, "test weights", &packed).unwrap();
    (buffer, values)
}

pub fn zeros(device: &Arc<Device>, n: usize) -> Buffer {
    Buffer::from_slice(device, "test output", &vec![0f32; n]).unwrap()
}

/// Records with `record`, submits, and waits.
pub fn run<'a>(device: &'a Device, record: impl FnOnce(&mut Recorder<'a>)) {
    let mut rec = Recorder::new(device).unwrap();
    record(&mut rec);
    rec.submit().unwrap();
}

/// Asserts |got[i] - want[i]| <= tol(i) everywhere, reporting the worst element.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: impl Fn(usize) -> f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst: Option<(usize, f32)> = None;
    for i in 0..got.len() {
        let err = (got[i] - want[i]).abs();
        // NaN compares as unordered and so fails.
        let within = err.partial_cmp(&tol(i)).is_some_and(|o| o.is_le());
        if !within && worst.is_none_or(|(_, w)| err.is_nan() || err > w) {
            worst = Some((i, err));
        }
    }
    if let Some((i, err)) = worst {
        panic!(
            "{what}: element {i} is {} but should be {} (error {err:e} > tolerance {:e})",
            got[i],
            want[i],
            tol(i)
        );
    }
}

//! Tests of the Vulkan layer itself: device choice, buffers, transfers, errors, timing.

use super::*;
use crate::testing::{device, finish};

#[test]
fn validation_layer_is_active_where_installed() {
    let Some(dev) = device() else { return };
    // scripts/setup installs the layer, so in CI every kernel test runs validated.
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        assert!(
            dev.validating(),
            "CI must run with the Khronos validation layer"
        );
    }
    finish(&dev);
}

#[test]
fn lists_devices_with_capabilities() {
    if device().is_none() {
        return;
    }
    let devices = list_devices().unwrap();
    assert!(!devices.is_empty());
    for d in &devices {
        assert!(
            d.subgroup.size >= 1 && d.limits.max_workgroup_invocations >= 128,
            "{d:?}"
        );
        assert!(!d.memory.heaps.is_empty());
    }
}

#[test]
fn bad_device_index_is_a_clear_error() {
    if device().is_none() {
        return;
    }
    let err = Device::new(DeviceDesc {
        index: Some(999),
        validation: false,
    })
    .err()
    .unwrap();
    assert!(
        err.to_string().contains("device 999 does not exist"),
        "{err}"
    );
}

#[test]
fn chunked_upload_and_download_round_trip() {
    let Some(dev) = device() else { return };
    // Larger than one 64 MiB staging chunk, and not a multiple of it.
    let n = (80 << 20) / 4 + 3;
    let data: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let buf = Buffer::from_slice(&dev, "big", &data).unwrap();
    assert_eq!(buf.memory(), MemoryKind::DeviceLocal);
    assert_eq!(buf.download::<u32>(n).unwrap(), data);
    // Partial access at an offset.
    let mut part = vec![0u32; 5];
    buf.download_into(4 * 1000, &mut part).unwrap();
    assert_eq!(part, data[1000..1005]);
    finish(&dev);
}

#[test]
fn host_visible_buffers_are_written_directly() {
    let Some(dev) = device() else { return };
    let buf = Buffer::new(&dev, BufferDesc::host_visible("pool", 64)).unwrap();
    // New memory is not cleared (it may be a reused suballocation).
    buf.upload(0, &[0f32; 16]).unwrap();
    buf.upload(8, &[1.5f32, 2.5]).unwrap();
    assert_eq!(buf.download::<f32>(4).unwrap(), [0.0, 0.0, 1.5, 2.5]);
    let err = buf.upload(60, &[1.0f32, 2.0]).unwrap_err();
    assert!(err.to_string().contains("past the end"), "{err}");
    finish(&dev);
}

#[test]
fn oversized_buffer_names_its_size_and_limit() {
    let Some(dev) = device() else { return };
    let err = Buffer::new(&dev, BufferDesc::device_local("huge tensor", 1 << 50))
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(
        text.contains("huge tensor") && text.contains(&(1u64 << 50).to_string()),
        "{text}"
    );
    finish(&dev);
}

#[test]
fn push_constant_size_mismatch_is_caught() {
    let Some(dev) = device() else { return };
    let pipeline = dev.pipeline(hearth_shaders::SWIGLU, &[64]).unwrap();
    let buf = Buffer::from_slice(&dev, "b", &[0f32; 64]).unwrap();
    let mut rec = Recorder::new(&dev).unwrap();
    let err = rec
        .dispatch(&pipeline, &[&buf, &buf, &buf], &[0u32; 2], [1, 1, 1])
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("push constants are 16 bytes in the shader but 8"),
        "{err}"
    );
    let err = rec
        .dispatch(&pipeline, &[&buf], &0u32, [1, 1, 1])
        .unwrap_err();
    assert!(err.to_string().contains("expects 3 buffers"), "{err}");
    finish(&dev);
}

#[test]
fn pipelines_are_cached_per_specialization() {
    let Some(dev) = device() else { return };
    let a = dev.pipeline(hearth_shaders::SWIGLU, &[64]).unwrap();
    let b = dev.pipeline(hearth_shaders::SWIGLU, &[64]).unwrap();
    let c = dev.pipeline(hearth_shaders::SWIGLU, &[32]).unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    assert!(!std::sync::Arc::ptr_eq(&a, &c));
    assert_eq!(c.workgroup_size(), 32);
    finish(&dev);
}

#[test]
fn timed_recorder_reports_each_dispatch() {
    let Some(dev) = device() else { return };
    if dev.info().limits.timestamp_period_ns.is_none() {
        return;
    }
    let kernel = crate::kernels::SwiGlu::new(&dev).unwrap();
    let buf = Buffer::from_slice(&dev, "b", &vec![1f32; 4096]).unwrap();
    let out = Buffer::from_slice(&dev, "o", &vec![0f32; 4096]).unwrap();
    let mut rec = Recorder::timed(&dev).unwrap();
    for _ in 0..3 {
        kernel.record(&mut rec, &buf, &buf, &out, 4096).unwrap();
    }
    let done = rec.submit().unwrap();
    assert_eq!(done.kernels.len(), 3);
    assert!(
        done.kernels
            .iter()
            .all(|k| k.label == "swiglu" && k.ns > 0.0),
        "{:?}",
        done.kernels
    );
    finish(&dev);
}

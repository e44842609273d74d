//! Tests of the Vulkan layer itself: device choice, buffers, transfers, errors, timing.

use super::*;
use crate::testing::{device, finish};

#[test]
fn validation_layer_is_active_where_installed() {
    let Some(dev) = device() else { return };
    // scripts/setup installs the layer, so in CI every kernel test runs validated.
    if hearth_testkit::in_ci() {
        assert!(
            dev.validating(),
            "CI must run with the Khronos validation layer"
        );
    }
    finish(&dev);
}

#[test]
fn lists_devices_with_capabilities() {
    let Some(dev) = device() else { return };
    let devices = list_devices().unwrap();
    assert!(!devices.is_empty());
    for d in &devices {
        assert!(
            d.subgroup.size >= 1 && d.limits.max_workgroup_invocations >= 128,
            "{d:?}"
        );
        assert!(!d.memory.heaps.is_empty());
    }
    finish(&dev);
}

#[test]
fn bad_device_index_is_a_clear_error() {
    let Some(dev) = device() else { return };
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
    finish(&dev);
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
        .dispatch(&pipeline, &[&buf; 5], &[0u32; 2], [1, 1, 1])
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("push constants are 32 bytes in the shader but 8"),
        "{err}"
    );
    let err = rec
        .dispatch(&pipeline, &[&buf], &0u32, [1, 1, 1])
        .unwrap_err();
    assert!(err.to_string().contains("expects 5 buffers"), "{err}");
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
        // CI's device (lavapipe) has timestamps, so there this fails.
        hearth_testkit::skip(format_args!("{} has no timestamp queries", dev.info().name));
        return;
    }
    let kernel = crate::SwiGlu::new(&dev).unwrap();
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

#[test]
fn barriers_separate_only_commands_that_share_a_written_buffer() {
    let Some(dev) = device() else { return };
    let swiglu = crate::SwiGlu::new(&dev).unwrap();
    let n = 256;
    let gate: Vec<f32> = (0..n).map(|i| i as f32 / 64.0 - 2.0).collect();
    let up = vec![0.5f32; n];
    let a = Buffer::from_slice(&dev, "a", &gate).unwrap();
    let b = Buffer::from_slice(&dev, "b", &up).unwrap();
    let [c, d, e, f] =
        ["c", "d", "e", "f"].map(|name| Buffer::from_slice(&dev, name, &vec![0f32; n]).unwrap());
    let mut rec = Recorder::new(&dev).unwrap();
    // Two products of the same inputs into different outputs: independent.
    swiglu.record(&mut rec, &a, &b, &c, n as u32).unwrap();
    swiglu.record(&mut rec, &a, &b, &d, n as u32).unwrap();
    assert_eq!(rec.barriers(), 0);
    // Reading c, which the first wrote, waits for it.
    swiglu.record(&mut rec, &c, &b, &e, n as u32).unwrap();
    assert_eq!(rec.barriers(), 1);
    // Writing c, which the last one reads, waits for that read.
    swiglu.record(&mut rec, &d, &b, &c, n as u32).unwrap();
    assert_eq!(rec.barriers(), 2);
    // A copy of buffers nobody since the last barrier wrote needs nothing.
    rec.copy(&a, 0, &f, 0, (n * 4) as u64).unwrap();
    assert_eq!(rec.barriers(), 2);
    let done = rec.submit().unwrap();
    let groups: Vec<usize> = done.groups.iter().map(|g| g.1).collect();
    assert_eq!(groups, vec![0, 0, 1, 2, 2]);
    assert_eq!(done.alongside(&["copy"]), (1, 1));

    let silu_times = |g: &[f32], u: &[f32]| -> Vec<f32> {
        g.iter()
            .zip(u)
            .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u)
            .collect()
    };
    let first = silu_times(&gate, &up);
    let close = |got: Vec<f32>, want: &[f32]| {
        got.iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= 1e-5 * (1.0 + w.abs()))
    };
    assert!(close(d.download(n).unwrap(), &first));
    assert!(close(e.download(n).unwrap(), &silu_times(&first, &up)));
    assert!(close(c.download(n).unwrap(), &silu_times(&first, &up)));
    assert_eq!(f.download::<f32>(n).unwrap(), gate);
    finish(&dev);
}

#[test]
fn overlap_counts_time_shared_with_other_commands_once() {
    let k = |label, start_ns, ns| KernelTime {
        label,
        start_ns,
        ns,
    };
    let done = Completed {
        wall: Default::default(),
        groups: Vec::new(),
        kernels: vec![
            k("fetch", 0.0, 10.0),
            k("matvec", 5.0, 15.0),
            // Inside the matvec's span: the same 5 ns are not counted twice.
            k("attn", 6.0, 2.0),
            k("fetch", 30.0, 10.0),
        ],
    };
    assert_eq!(done.overlap_ns(&["fetch"]), 5.0);
    assert_eq!(done.overlap_ns(&["attn"]), 2.0);
    assert_eq!(done.overlap_ns(&["nothing"]), 0.0);
}

#[test]
fn descriptor_sets_are_kept_per_buffers_and_freed_with_them() {
    if device().is_none() {
        return;
    }
    // A device of its own: the shared one's sets change as other tests run.
    let dev = Device::new(DeviceDesc {
        index: std::env::var("HEARTH_DEVICE")
            .ok()
            .and_then(|s| s.parse().ok()),
        validation: true,
    })
    .unwrap();
    let swiglu = crate::SwiGlu::new(&dev).unwrap();
    let n = 64;
    let up = Buffer::from_slice(&dev, "up", &vec![1f32; n]).unwrap();
    let silu = |g: f32| g / (1.0 + (-g).exp());
    let holds = |out: &Buffer, g: f32| {
        let want = silu(g);
        out.download::<f32>(n)
            .unwrap()
            .iter()
            .all(|v| (v - want).abs() <= 1e-6 * (1.0 + want.abs()))
    };
    let run = |gate: &Buffer, out: &Buffer| {
        let mut rec = Recorder::new(&dev).unwrap();
        swiglu.record(&mut rec, gate, &up, out, n as u32).unwrap();
        rec.submit().unwrap();
    };

    let gate = Buffer::from_slice(&dev, "gate", &vec![1f32; n]).unwrap();
    let out = Buffer::from_slice(&dev, "out", &vec![0f32; n]).unwrap();
    run(&gate, &out);
    run(&gate, &out);
    assert_eq!(
        dev.descriptor_sets_kept(),
        1,
        "the same buffers reuse their set"
    );

    // More sets than one pool holds; each binds its own output.
    let outs: Vec<Buffer> = (0..300)
        .map(|i| Buffer::from_slice(&dev, &format!("out{i}"), &vec![0f32; n]).unwrap())
        .collect();
    for o in &outs {
        run(&gate, o);
    }
    assert_eq!(dev.descriptor_sets_kept(), 301);
    assert!(outs.iter().all(|o| holds(o, 1.0)));
    drop(outs);
    assert_eq!(
        dev.descriptor_sets_kept(),
        1,
        "a dropped buffer's sets go with it"
    );

    // Buffers made after others were dropped (the driver may hand out the same handles)
    // bind their own memory, not a kept set's.
    for i in 0..20 {
        let value = i as f32 / 4.0 - 2.0;
        let g = Buffer::from_slice(&dev, "gate again", &vec![value; n]).unwrap();
        let o = Buffer::from_slice(&dev, "out again", &vec![0f32; n]).unwrap();
        run(&g, &o);
        assert!(holds(&o, value), "round {i}");
    }
    drop((gate, out));
    assert_eq!(dev.descriptor_sets_kept(), 0);
    finish(&dev);
}

/// The pipeline cache on disk: a device that keeps its pipelines in a directory writes one
/// file there when it goes (named for the device and driver), a later device takes it back,
/// a file that is not a cache only means compiling again, and keeping pipelines after the
/// device built some is refused.
#[test]
fn pipelines_are_kept_on_disk_between_devices() {
    if device().is_none() {
        return;
    }
    let open = || {
        Device::new(DeviceDesc {
            index: std::env::var("HEARTH_DEVICE")
                .ok()
                .and_then(|s| s.parse().ok()),
            validation: true,
        })
        .unwrap()
    };
    let dir = std::env::temp_dir().join(format!("hearth-pipelines-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let dev = open();
        assert_eq!(dev.keep_pipelines_in(&dir).unwrap(), 0, "nothing kept yet");
        crate::SwiGlu::new(&dev).unwrap();
    }
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(files.len(), 1, "one file per device and driver");
    let kept = std::fs::metadata(files[0].path()).unwrap().len() as usize;
    // The driver's header at least (some drivers keep their pipelines in caches of their own).
    assert!(kept >= 16, "{kept} bytes");
    let dev = open();
    assert_eq!(dev.keep_pipelines_in(&dir).unwrap(), kept);
    crate::SwiGlu::new(&dev).unwrap();
    let err = dev.keep_pipelines_in(&dir).unwrap_err().to_string();
    assert!(err.contains("before the device builds pipelines"), "{err}");
    drop(dev);

    std::fs::write(
        files[0].path(),
        b"not a pipeline cache at all, just some bytes",
    )
    .unwrap();
    let dev = open();
    dev.keep_pipelines_in(&dir).unwrap();
    crate::SwiGlu::new(&dev).unwrap();
    drop(dev);
    let _ = std::fs::remove_dir_all(&dir);
}

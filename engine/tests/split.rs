//! A model split between executors computes what the whole model computes: its layers in
//! parts on the native CPU executor and on Vulkan devices (lavapipe here, opened twice where
//! two devices are needed), over prefill, decode and batched steps of several sequences; the
//! plan puts as many layers on a device as a memory budget allows, and a part that cannot
//! fit is refused before anything loads. Outside CI a machine without a Vulkan device skips
//! the tests that need one; in CI a missing device fails them.

use std::ops::Range;
use std::sync::Arc;

use hearth_cpu::{Activations, CpuOptions, NativeModel};
use hearth_engine::split::load::room;
use hearth_engine::split::plan::{CacheSizes, GpuLayers, Sizer};
use hearth_engine::split::Split;
use hearth_engine::{BackendKind, Engine, EngineOptions, Error};
use hearth_kernels::vk::{Device, DeviceDesc};
use hearth_model::kv::{KvBudget, KvPlacement, KvType};
use hearth_model::{
    Backend, BatchedBackend, CutBlocks, Logits, ModelConfig, Part, SeqStep, Shard, Stage,
    StageOutput,
};
use hearth_models::synthetic::Shape;
use hearth_models::{resolve_gguf, GgufFile, ResolvedModel};
use hearth_quant::Format;
use hearth_testkit::assert_logits_close;
use hearth_vulkan::{VkModel, VkModelOptions};

/// Four layers, so that parts of one, two and three layers meet.
const SHAPE: Shape = Shape {
    n_layer: 4,
    n_ctx_train: 128,
    ..Shape::TINY
};

const N_CTX: usize = 64;
const N_SEQ: usize = 2;
/// Every part's pool: 8 blocks of 16 tokens.
const KV: KvBudget = KvBudget::Tokens(128);

/// Logits of the split against the whole model on the CPU executor with f32 activations: the
/// Vulkan executor's own distance from it (f32 sums in another order).
const TOLERANCE: f32 = 2e-4;

fn file() -> GgufFile {
    SHAPE.build_random("split", Format::Q8, 5).unwrap()
}

fn device() -> Option<Arc<Device>> {
    hearth_testkit::or_skip(Device::new(DeviceDesc::default()), "Vulkan device")
}

fn cpu_part(file: &GgufFile, model: &ResolvedModel, layers: Option<Range<usize>>) -> NativeModel {
    let options = CpuOptions {
        n_ctx: N_CTX,
        n_seq: N_SEQ,
        kv_budget: Some(KV),
        activations: Activations::F32,
        max_chunk: 64,
        ..CpuOptions::default()
    };
    NativeModel::load_part(file, model, options, layers, &mut |_| true).unwrap()
}

fn vk_options() -> VkModelOptions {
    VkModelOptions {
        n_ctx: N_CTX,
        n_seq: N_SEQ,
        kv_budget: Some(KV),
        max_chunk: 64,
        ..VkModelOptions::default()
    }
}

fn vk_part(
    device: &Arc<Device>,
    file: &GgufFile,
    model: &ResolvedModel,
    layers: Option<Range<usize>>,
) -> VkModel {
    VkModel::load_part(device, file, model, vk_options(), layers, &mut |_| true).unwrap()
}

/// A prompt of `len` tokens, different for each `seed`.
fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (seed * 37 + i * 11 + 3) % 256)
        .collect()
}

/// Prefill of two sequences, then one decoding while the other prefills (a mixed step), then
/// both decoding: every step's logits, concatenated.
fn run_steps(m: &mut dyn BatchedBackend) -> Vec<f32> {
    let (a, b, c) = (prompt(1, 20), prompt(2, 5), prompt(3, 17));
    let step = |row, tokens, logits| SeqStep {
        row,
        tokens,
        logits: Some(logits),
        beam: None,
    };
    let mut out = Vec::new();
    let steps: [Vec<SeqStep>; 3] = [
        vec![step(0, &a, Logits::All), step(1, &b, Logits::All)],
        vec![step(0, &[7], Logits::Last), step(1, &c, Logits::All)],
        vec![step(1, &[9], Logits::Last), step(0, &[8], Logits::Last)],
    ];
    for seqs in &steps {
        for logits in m.step_batch(seqs).unwrap() {
            out.extend(logits);
        }
    }
    out
}

fn whole_cpu_logits(file: &GgufFile, model: &ResolvedModel) -> Vec<f32> {
    run_steps(&mut cpu_part(file, model, None))
}

#[test]
fn splits_between_the_cpu_and_a_device_compute_the_whole_model() {
    let Some(dev) = device() else { return };
    let file = file();
    let model = resolve_gguf(&file).unwrap();
    let want = whole_cpu_logits(&file, &model);
    let whole_vk = run_steps(&mut vk_part(&dev, &file, &model, None));
    assert_logits_close(&whole_vk, &want, TOLERANCE, "whole on the device");

    type Parts<'a> = &'a [(&'a str, Range<usize>)];
    let splits: [Parts; 4] = [
        &[("cpu", 0..2), ("vk", 2..4)],
        &[("vk", 0..1), ("cpu", 1..4)],
        &[("cpu", 0..3), ("vk", 3..4)],
        &[("cpu", 0..1), ("cpu", 1..2), ("vk", 2..3), ("cpu", 3..4)],
    ];
    for parts in splits {
        let stages: Vec<Box<dyn Stage>> = parts
            .iter()
            .map(|(on, layers)| -> Box<dyn Stage> {
                match *on {
                    "cpu" => Box::new(cpu_part(&file, &model, Some(layers.clone()))),
                    _ => Box::new(vk_part(&dev, &file, &model, Some(layers.clone()))),
                }
            })
            .collect();
        let mut split = Split::new(stages).unwrap();
        let got = run_steps(&mut split);
        assert_logits_close(&got, &want, TOLERANCE, &format!("{parts:?}"));
    }
}

#[test]
fn layers_across_two_devices_compute_the_whole_model() {
    let (Some(first), Some(second)) = (device(), device()) else {
        return;
    };
    let file = file();
    let model = resolve_gguf(&file).unwrap();
    let want = whole_cpu_logits(&file, &model);
    let stages: Vec<Box<dyn Stage>> = vec![
        Box::new(vk_part(&first, &file, &model, Some(0..1))),
        Box::new(vk_part(&second, &file, &model, Some(1..4))),
    ];
    let mut split = Split::new(stages).unwrap();
    let got = run_steps(&mut split);
    assert_logits_close(&got, &want, TOLERANCE, "two devices");
    let placed = split.placement();
    assert_eq!(placed.len(), 2);
    assert!(placed[0].embedding && !placed[0].head);
    assert!(!placed[1].embedding && placed[1].head);
    assert_eq!((placed[0].layers, placed[1].layers), ([0, 1], [1, 4]));
    assert!(placed[1].kv_bytes == 3 * placed[0].kv_bytes && placed[0].kv_bytes > 0);
    // The cache's size is every part's; its blocks are the first part's.
    let usage = split.kv_usage();
    assert_eq!(usage.bytes, placed[0].kv_bytes + placed[1].kv_bytes);
    assert_eq!(usage.blocks_used, split.kv().pool().used_blocks());
}

/// A row split's share of `layers` on `device`.
fn vk_share(
    device: &Arc<Device>,
    file: &GgufFile,
    model: &ResolvedModel,
    layers: Range<usize>,
    shard: Shard,
) -> VkModel {
    let part = Part::new(layers, SHAPE.n_layer)
        .unwrap()
        .with_shard(Some(shard));
    VkModel::load_stage(device, file, model, vk_options(), part, &mut |_| true).unwrap()
}

#[test]
fn layers_divided_by_rows_compute_the_whole_model() {
    let (Some(first), Some(second)) = (device(), device()) else {
        return;
    };
    let file = file();
    let model = resolve_gguf(&file).unwrap();
    let config = ModelConfig::from_resolved(&file, &model).unwrap();
    let want = whole_cpu_logits(&file, &model);
    let blocks = CutBlocks {
        attn_output: 32,
        down: 32,
    };
    // Two KV heads and 128 units: one head and 64 units each; 3:1 splits only the units.
    for shares in [[1.0, 1.0], [3.0, 1.0]] {
        let shards = Shard::divide(&config, &shares, blocks).unwrap();
        assert_eq!(shards[0].kv_heads, 0..1);
        let devices = [&first, &second];
        // Every layer divided; then Inferflow's hybrid: a layer on the CPU, two divided
        // between the devices, the last whole on one device.
        let whole: Vec<Box<dyn Stage>> = shards
            .iter()
            .zip(devices)
            .map(|(s, d)| -> Box<dyn Stage> {
                Box::new(vk_share(d, &file, &model, 0..4, s.clone()))
            })
            .collect();
        let mut split = Split::new(whole).unwrap();
        let got = run_steps(&mut split);
        assert_logits_close(&got, &want, TOLERANCE, &format!("rows {shares:?}"));
        let placed = split.placement();
        assert!(placed[0].embedding && placed[0].head && !placed[1].embedding && !placed[1].head);
        assert!(placed[0].kv_bytes == placed[1].kv_bytes && placed[0].kv_bytes > 0);

        let mut hybrid: Vec<Box<dyn Stage>> = vec![Box::new(cpu_part(&file, &model, Some(0..1)))];
        for (s, d) in shards.iter().zip(devices) {
            hybrid.push(Box::new(vk_share(d, &file, &model, 1..3, s.clone())));
        }
        hybrid.push(Box::new(vk_part(&first, &file, &model, Some(3..4))));
        let got = run_steps(&mut Split::new(hybrid).unwrap());
        assert_logits_close(&got, &want, TOLERANCE, &format!("hybrid {shares:?}"));
    }
    // Shares out of order, or missing, are not a model.
    let shards = Shard::divide(&config, &[1.0, 1.0], blocks).unwrap();
    let swapped: Vec<Box<dyn Stage>> = vec![
        Box::new(vk_share(&first, &file, &model, 0..4, shards[1].clone())),
        Box::new(vk_share(&second, &file, &model, 0..4, shards[0].clone())),
    ];
    let err = Split::new(swapped).err().unwrap().to_string();
    assert!(err.contains("2 shares must follow one another"), "{err}");
    let alone: Vec<Box<dyn Stage>> = vec![Box::new(vk_share(
        &first,
        &file,
        &model,
        0..4,
        shards[0].clone(),
    ))];
    let err = Split::new(alone).err().unwrap().to_string();
    assert!(err.contains("2 shares must follow one another"), "{err}");
}

/// A part that does not hold the whole model refuses plain steps, a stage refuses hidden
/// state it cannot take, and parts that do not meet are not a model.
#[test]
fn parts_refuse_what_they_cannot_run() {
    let file = file();
    let model = resolve_gguf(&file).unwrap();
    let mut first = cpu_part(&file, &model, Some(0..2));
    let err = first
        .forward(&[1, 2, 3], Logits::Last)
        .unwrap_err()
        .to_string();
    assert!(err.contains("layers 0..2 of 4"), "{err}");
    let mut last = cpu_part(&file, &model, Some(2..4));
    let seqs = [SeqStep {
        row: 0,
        tokens: &[1, 2],
        logits: Some(Logits::Last),
        beam: None,
    }];
    let err = last.step_stage(&seqs, None).unwrap_err().to_string();
    assert!(err.contains("layer 2 needs the hidden state"), "{err}");
    let err = last
        .step_stage(&seqs, Some(&[0.0; 5]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("5 values for 2 tokens"), "{err}");
    let e = SHAPE.n_embd;
    match first.step_stage(&seqs, None).unwrap() {
        StageOutput::Hidden(h) => assert_eq!(h.len(), 2 * e),
        StageOutput::Logits(_) => panic!("layers 0..2 of 4 end in hidden state"),
    }

    let gap: Vec<Box<dyn Stage>> = vec![
        Box::new(cpu_part(&file, &model, Some(0..1))),
        Box::new(cpu_part(&file, &model, Some(2..4))),
    ];
    let err = Split::new(gap).err().unwrap().to_string();
    assert!(err.contains("layers 2..4 after 1"), "{err}");
    let short: Vec<Box<dyn Stage>> = vec![Box::new(cpu_part(&file, &model, Some(0..3)))];
    let err = Split::new(short).err().unwrap().to_string();
    assert!(err.contains("3 of the model's 4 layers"), "{err}");
    let err = NativeModel::load_part(
        &file,
        &model,
        CpuOptions::default(),
        Some(3..5),
        &mut |_| true,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("3..5 is not a run of the model's 4 layers"),
        "{err}"
    );
}

fn engine(gpu_layers: GpuLayers, gpu_memory: Option<u64>) -> Result<Engine, Error> {
    let options = EngineOptions {
        backend: BackendKind::Vulkan,
        activations: Activations::F32,
        n_ctx: Some(N_CTX),
        n_seq: N_SEQ,
        kv_budget: Some(KV),
        max_chunk: 64,
        gpu_layers: Some(gpu_layers),
        gpu_memory,
        ..EngineOptions::default()
    };
    Engine::load_file(file(), &options, &mut |_| true)
}

/// What each count of layers on the device takes there, from the plan's own sizing.
fn bytes_for_gpu_layers(dev: &Device) -> Vec<u64> {
    let file = file();
    let model = resolve_gguf(&file).unwrap();
    let config = ModelConfig::from_resolved(&file, &model).unwrap();
    let sizer = Sizer {
        file: &file,
        model: &model,
        config: &config,
        sizes: CacheSizes {
            n_ctx: N_CTX,
            n_seq: N_SEQ,
            kv_budget: Some(KV),
            kv_type: KvType::default(),
            kv_placement: KvPlacement::Device,
            chunk: 64,
            kv_fills_room: false,
        },
    };
    let blocks = sizer.kv_blocks(&[room(dev, None)]).unwrap();
    assert_eq!(blocks, 8);
    (1..=SHAPE.n_layer)
        .map(|n| {
            sizer
                .bytes(SHAPE.n_layer - n..SHAPE.n_layer, blocks)
                .unwrap()
                .total()
        })
        .collect()
}

#[test]
fn auto_puts_as_many_layers_on_the_device_as_its_memory_allows() {
    let Some(dev) = device() else { return };
    let need = bytes_for_gpu_layers(&dev);
    assert!(need.windows(2).all(|w| w[0] < w[1]), "{need:?}");
    let want = whole_cpu_logits(&file(), &resolve_gguf(&file()).unwrap());
    for fits in 0..=SHAPE.n_layer {
        // Room for `fits` layers and not one more.
        let budget = match fits {
            0 => need[0] - 1,
            n => need[n - 1] + (need.get(n).map_or(1, |&next| (next - need[n - 1]) / 2)),
        };
        let mut e = engine(GpuLayers::Auto, Some(budget)).unwrap();
        let plan = e.info().layer_plan.clone().unwrap();
        assert_eq!(plan.gpu_layers(), fits, "budget {budget} of {need:?}");
        let placed = e.placement();
        let on_cpu = SHAPE.n_layer - fits;
        if fits > 0 && on_cpu > 0 {
            assert_eq!(placed.len(), 2, "{placed:?}");
            assert_eq!(placed[0].executor, "cpu");
            assert_eq!(placed[0].layers, [0, on_cpu]);
            assert!(placed[1].executor.starts_with("vulkan:") && placed[1].head);
        }
        let model = e.session_mut().fresh_backend().as_batched_mut().unwrap();
        let got = run_steps(model);
        assert_logits_close(
            &got,
            &want,
            TOLERANCE,
            &format!("{fits} layers on the device"),
        );
    }
}

/// Layers that do not fit the device are an error naming the device, what it would hold
/// and what it has free, with the count that fits, before any weight loads.
#[test]
fn a_part_too_large_for_its_device_is_refused_before_loading() {
    let Some(dev) = device() else { return };
    let need = bytes_for_gpu_layers(&dev);
    let budget = need[1] + 1;
    let err = engine(GpuLayers::Count(3), Some(budget)).err().unwrap();
    assert!(matches!(err, Error::DeviceMemory { .. }), "{err}");
    let message = err.to_string();
    for part in [
        "vulkan:0",
        "layers 1..4 and the output head",
        "weights",
        "KV cache",
        "2 layers fit",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    let err = engine(GpuLayers::Count(usize::MAX), Some(need[3] - 1))
        .err()
        .unwrap();
    assert!(err.to_string().contains("every layer"), "{err}");
    // Where the CPU alone is asked for, layers cannot go to a device.
    let options = EngineOptions {
        backend: BackendKind::Cpu,
        gpu_layers: Some(GpuLayers::Count(2)),
        ..EngineOptions::default()
    };
    let err = Engine::load_file(file(), &options, &mut |_| true)
        .err()
        .unwrap();
    assert!(err.to_string().contains("--device cpu"), "{err}");
}

/// The sparse KV policies read every layer's cache on one device; a split refuses them.
#[test]
fn a_split_model_refuses_sparse_kv_policies() {
    let Some(_) = device() else { return };
    let mut e = engine(GpuLayers::Count(2), None).unwrap();
    let backend = e.session_mut().fresh_backend();
    let policy = hearth_model::kv::policy::KvPolicyChoice::H2o(
        hearth_model::kv::infinigen::IgParams::paper(true),
    );
    let err = backend.set_kv_policy(policy).unwrap_err().to_string();
    assert!(err.contains("every layer on one executor"), "{err}");
}

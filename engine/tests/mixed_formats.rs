//! A model file whose fused projections mix GGUF's formats, as llama.cpp's mixes write them
//! (q and k in Q5_0 beside v in Q8_0, gate and up apart): every matrix loads in the format
//! the file stores it in, bytes unchanged, each fused projection as runs of one format, and
//! the Vulkan executor computes what the CPU reference computes from the same bytes. Outside
//! CI a machine without a Vulkan device skips the Vulkan part; in CI (`CI=true`) a missing
//! device fails it.

use std::collections::BTreeMap;

use hearth_engine::{BackendKind, Engine, EngineOptions};
use hearth_kernels::vk::{Device, DeviceDesc};
use hearth_model::{LoadProgress, Logits, Mlp, ModelConfig, WeightReader};
use hearth_models::synthetic::Shape;
use hearth_models::{resolve_gguf, GgmlType, GgufFile, GgufWriter};
use hearth_quant::{BlockType, Format};

/// [`Shape::TINY`] with 128 tokens of context.
const TINY: Shape = Shape {
    n_ctx_train: 128,
    ..Shape::TINY
};

/// The format of each matrix. Layer 0: q and k Q5_0, v Q8_0 (two runs), gate and up both
/// Q5_1 (one run, the gated product). Layer 1: q, k and v in three formats, gate and up
/// apart (separate products and SwiGLU).
fn format_of(name: &str) -> Format {
    use Format::*;
    let table = [
        ("token_embd", Q8),
        ("output", Q5_0),
        ("blk.0.attn_q", Q5_0),
        ("blk.0.attn_k", Q5_0),
        ("blk.0.attn_v", Q8),
        ("blk.0.attn_output", Q4_0),
        ("blk.0.ffn_gate", Q5_1),
        ("blk.0.ffn_up", Q5_1),
        ("blk.0.ffn_down", Q4_0),
        ("blk.1.attn_q", Q4_0),
        ("blk.1.attn_k", Q5_1),
        ("blk.1.attn_v", Q5_0),
        ("blk.1.attn_output", Q5_1),
        ("blk.1.ffn_gate", Q4_0),
        ("blk.1.ffn_up", Q8),
        ("blk.1.ffn_down", Q5_0),
    ];
    let stem = name.trim_end_matches(".weight");
    table
        .iter()
        .find(|(n, _)| *n == stem)
        .map_or(F32, |&(_, f)| f)
}

/// A random F32 model re-encoded tensor by tensor in `format_of`'s formats.
fn mixed_file() -> GgufFile {
    let source = TINY.build_random("mixed", Format::F32, 11).unwrap();
    let mut writer = GgufWriter::new();
    for (key, value) in source.metadata().iter() {
        writer.set_metadata(key, value.clone());
    }
    for info in source.tensors() {
        let data = source.tensor_data(info).unwrap();
        let values: Vec<f32> = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let format = if info.shape.len() == 1 {
            Format::F32
        } else {
            format_of(&info.name)
        };
        let mut packed = vec![0u8; format.bytes_for(values.len()).unwrap()];
        format.quantize(&values, &mut packed).unwrap();
        writer
            .add_tensor(&info.name, GgmlType::from(format), &info.shape, packed)
            .unwrap();
    }
    let mut bytes = Vec::new();
    writer.write_to(&mut bytes).unwrap();
    GgufFile::from_bytes("mixed.gguf", bytes).unwrap()
}

#[test]
fn fused_projections_keep_each_parts_format_and_bytes() {
    let file = mixed_file();
    let model = resolve_gguf(&file).unwrap();
    let config = ModelConfig::from_resolved(&file, &model).unwrap();
    let mut progress = |_: LoadProgress| true;
    let mut reader = WeightReader::new(&file, &model, &config, &mut progress);
    let bytes = |name: &str| file.tensor_view(name).unwrap().data.to_vec();
    use Format::*;
    // (layer, fused parts, the runs they make)
    let cases: [(usize, &[&str], &[Format]); 4] = [
        (0, &["attn_q", "attn_k", "attn_v"], &[Q5_0, Q8]),
        (0, &["ffn_gate", "ffn_up"], &[Q5_1]),
        (1, &["attn_q", "attn_k", "attn_v"], &[Q4_0, Q5_1, Q5_0]),
        (1, &["ffn_gate", "ffn_up"], &[Q4_0, Q8]),
    ];
    let layers = [reader.layer(0).unwrap(), reader.layer(1).unwrap()];
    for (l, parts, formats) in cases {
        let w = match (parts[0], &layers[l].mlp) {
            ("attn_q", _) => &layers[l].wqkv,
            (_, Mlp::Dense { gate_up, .. }) => gate_up,
            (_, Mlp::Experts { .. }) => panic!("a dense model"),
        };
        let got: Vec<Format> = w.runs.iter().map(|r| r.format).collect();
        assert_eq!(got, formats, "layer {l} {parts:?}");
        let stored: Vec<u8> = w.runs.iter().flat_map(|r| r.data.clone()).collect();
        let want: Vec<u8> = parts
            .iter()
            .flat_map(|p| bytes(&format!("blk.{l}.{p}.weight")))
            .collect();
        assert!(stored == want, "layer {l} {parts:?}: bytes changed at load");
    }
    let wo = &layers[1].wo.runs;
    assert_eq!((wo.len(), wo[0].format), (1, Q5_1));
    assert_eq!(wo[0].data, bytes("blk.1.attn_output.weight"));
}

#[test]
fn mixed_formats_compute_as_the_cpu_reference_on_vulkan() {
    let device = Device::new(DeviceDesc {
        index: None,
        validation: true,
    });
    if hearth_testkit::or_skip(device, "Vulkan device").is_none() {
        return;
    }
    let load = |backend| {
        let options = EngineOptions {
            backend,
            validate: true,
            n_ctx: Some(64),
            ..EngineOptions::default()
        };
        Engine::load_file(mixed_file(), &options, &mut |_| true).unwrap()
    };
    let mut engine = load(BackendKind::Vulkan);
    let mut reference = load(BackendKind::Reference);

    // Loaded as stored: each format's bytes on the device are the file's bytes of that type.
    let file = mixed_file();
    let mut stored: BTreeMap<String, u64> = BTreeMap::new();
    for t in file.tensors().iter().filter(|t| t.shape.len() > 1) {
        *stored.entry(t.ggml_type.name().to_string()).or_default() += t.n_bytes;
    }
    let loaded: BTreeMap<String, u64> = engine
        .info()
        .weight_formats
        .iter()
        .map(|&(f, b)| (GgmlType::from(f).name().to_string(), b))
        .collect();
    assert_eq!(loaded, stored);

    // A prompt (prefill), then one token at a time (decode): the device's logits are the
    // reference's up to summation order, within 1e-3 of the largest logit.
    let prompt: Vec<u32> = (1..20).collect();
    let run = |e: &mut Engine| {
        let b = e.session_mut().fresh_backend();
        let mut all = b.forward(&prompt, Logits::All).unwrap();
        for t in [40u32, 41, 250] {
            all.extend(b.forward(&[t], Logits::Last).unwrap());
        }
        all
    };
    let (got, want) = (run(&mut engine), run(&mut reference));
    assert_eq!(got.len(), (prompt.len() + 3) * TINY.n_vocab);
    hearth_testkit::assert_logits_close(&got, &want, 1e-3, "mixed formats");
}

/// [`TINY`] widened so every matrix row is whole 256-value blocks, as the i-quants need.
const WIDE: Shape = Shape {
    n_embd: 256,
    n_ff: 512,
    ..TINY
};

/// The GGUF types whose blocks are not the legacy types' or the k-quants': the i-quants, the
/// ternary types and MXFP4, which Hearth loads as they are, in the order the model's matrices
/// take them.
const NEWER_TYPES: [BlockType; 12] = [
    BlockType::IQ1_S,
    BlockType::IQ1_M,
    BlockType::IQ2_XXS,
    BlockType::IQ2_XS,
    BlockType::IQ2_S,
    BlockType::IQ3_XXS,
    BlockType::IQ3_S,
    BlockType::IQ4_NL,
    BlockType::IQ4_XS,
    BlockType::TQ1_0,
    BlockType::TQ2_0,
    BlockType::MXFP4,
];

/// Random blocks of `ty` for `values` values, each block's scale set to about `scale` (the
/// other bytes are uniform, which every one of these types decodes to finite values).
fn random_blocks(ty: BlockType, values: usize, scale: f32, seed: &mut u64) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..ty.bytes_for(values).unwrap())
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            (*seed >> 24) as u8
        })
        .collect();
    let d = hearth_quant::Half::from_f32(scale).to_bits();
    for block in bytes.chunks_exact_mut(ty.block_bytes()) {
        match ty {
            BlockType::TQ1_0 => block[52..54].copy_from_slice(&d.to_le_bytes()),
            BlockType::TQ2_0 => block[64..66].copy_from_slice(&d.to_le_bytes()),
            // A shared power-of-two exponent: 2^-7.
            BlockType::MXFP4 => block[0] = 120,
            // The f16 is the top nibbles of the four scale words (bytes 48..56).
            BlockType::IQ1_M => {
                for i in 0..4 {
                    let top = ((d >> (4 * i)) & 0xF) as u8;
                    block[49 + 2 * i] = (block[49 + 2 * i] & 0x0F) | top << 4;
                }
            }
            _ => block[0..2].copy_from_slice(&d.to_le_bytes()),
        }
    }
    bytes
}

/// A random model whose matrices are random blocks of those types, one type per
/// matrix in turn, and the same model with each matrix dequantized to F32.
fn newer_type_files() -> (GgufFile, GgufFile) {
    let source = WIDE.build_random("newer-types", Format::F32, 12).unwrap();
    let (mut packed, mut plain) = (GgufWriter::new(), GgufWriter::new());
    for (key, value) in source.metadata().iter() {
        packed.set_metadata(key, value.clone());
        plain.set_metadata(key, value.clone());
    }
    let (mut seed, mut next) = (0x9E37_79B9_7F4A_7C15u64, 0);
    for info in source.tensors() {
        let data = source.tensor_data(info).unwrap().to_vec();
        if info.shape.len() == 1 {
            packed
                .add_tensor(&info.name, GgmlType::F32, &info.shape, data.clone())
                .unwrap();
            plain
                .add_tensor(&info.name, GgmlType::F32, &info.shape, data)
                .unwrap();
            continue;
        }
        let ty = NEWER_TYPES[next % NEWER_TYPES.len()];
        next += 1;
        let values = data.len() / 4;
        let blocks = random_blocks(ty, values, 0.004, &mut seed);
        let mut f32s = vec![0.0f32; values];
        hearth_quant::dequantize(ty, &blocks, &mut f32s).unwrap();
        let id = GgmlType::from_id(ty.ggml_id().unwrap()).unwrap();
        packed
            .add_tensor(&info.name, id, &info.shape, blocks)
            .unwrap();
        let bytes: Vec<u8> = f32s.iter().flat_map(|v| v.to_le_bytes()).collect();
        plain
            .add_tensor(&info.name, GgmlType::F32, &info.shape, bytes)
            .unwrap();
    }
    let file = |w: GgufWriter, name: &str| {
        let mut bytes = Vec::new();
        w.write_to(&mut bytes).unwrap();
        GgufFile::from_bytes(name, bytes).unwrap()
    };
    (file(packed, "packed.gguf"), file(plain, "dequantized.gguf"))
}

#[test]
fn newer_types_load_as_they_are_and_compute_as_their_dequantized_values() {
    let (packed, plain) = newer_type_files();
    let load = |file| {
        let options = EngineOptions {
            backend: BackendKind::Reference,
            n_ctx: Some(64),
            ..EngineOptions::default()
        };
        Engine::load_file(file, &options, &mut |_| true).unwrap()
    };
    // Every matrix stays in its file's type.
    let model = resolve_gguf(&packed).unwrap();
    let config = ModelConfig::from_resolved(&packed, &model).unwrap();
    let mut progress = |_: LoadProgress| true;
    let mut reader = WeightReader::new(&packed, &model, &config, &mut progress);
    for info in packed.tensors().iter().filter(|i| i.shape.len() == 2) {
        let (cols, rows) = (info.shape[0] as usize, info.shape[1] as usize);
        let m = reader.matrix(&info.name, rows, cols).unwrap();
        let want = info.ggml_type.hearth_format().unwrap();
        assert_eq!(m.format, want, "{} ({})", info.name, info.ggml_type);
    }
    let (mut engine, mut want) = (load(packed), load(plain));
    let prompt: Vec<u32> = (1..24).collect();
    let run = |e: &mut Engine| {
        e.session_mut()
            .fresh_backend()
            .forward(&prompt, Logits::All)
            .unwrap()
    };
    let (got, want) = (run(&mut engine), run(&mut want));
    let largest = want.iter().fold(0f32, |m, l| m.max(l.abs()));
    let diff = got
        .iter()
        .zip(&want)
        .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
    eprintln!("newer types: logits within {diff} of the dequantized model's (largest {largest})");
    // Both compute with the same weights, so only the order of f32 sums may differ: measured
    // identical (largest logit 14.1).
    hearth_testkit::assert_logits_close(&got, &want, 1e-5, "newer types");
}

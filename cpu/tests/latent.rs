//! The native executor on latent attention (DeepSeek-V3's conformance model,
//! `scripts/conformance/build deepseek3`) against the f32 CPU reference: the latent cache in
//! f32, f16 and q8 over chunked prefill, one-token and few-token steps; two sequences in one
//! step, the second forked from the first's prefix (a shared block copied on write); and the
//! cache's size, the latent and the rotated key alone; and an older file's fused `attn_kv_b`
//! (without the `_mla` widths), split when loaded, running as the split file does. Skipped
//! where the model is missing.

use hearth_cpu::{Activations, CpuOptions, NativeModel};
use hearth_model::kv::{KvType, BLOCK_TOKENS};
use hearth_model::{Backend, BatchedBackend, Logits, SeqStep};
use hearth_models::{resolve_gguf, GgmlType, GgufFile, GgufWriter, MetaValue, ResolvedModel};
use hearth_reference::CpuModel;

fn model() -> Option<(GgufFile, ResolvedModel, Vec<u32>)> {
    let dir = hearth_testkit::conformance_model("deepseek3")?;
    let file = GgufFile::open(dir.join("model.gguf")).unwrap();
    let model = resolve_gguf(&file).unwrap();
    // Tokens spread over the vocabulary.
    let tokens = (0..80u32).map(|i| (i * 7919 + 13) % 128_000).collect();
    Some((file, model, tokens))
}

fn options(kv_type: KvType) -> CpuOptions {
    CpuOptions {
        n_ctx: 128,
        n_seq: 2,
        kv_type,
        max_chunk: 32,
        activations: Activations::F32,
        threads: Some(2),
        ..CpuOptions::default()
    }
}

/// The largest difference between two rows of logits.
fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn reference(file: &GgufFile, model: &ResolvedModel, kv_type: KvType, tokens: &[u32]) -> Vec<f32> {
    let mut reference = CpuModel::load(file, model, 128, &mut |_| true).unwrap();
    reference.set_kv_type(kv_type);
    reference.forward(tokens, Logits::All).unwrap()
}

#[test]
fn the_latent_cache_rounds_as_the_references_does() {
    let Some((file, model, tokens)) = model() else {
        return;
    };
    // Both round the same rows alike; a value whose last f32 bits differ may round to the
    // next f16 or q8 step. Measured: f32 8.9e-7, f16 8.6e-6, q8 7.8e-7 (logits near 1).
    for (kv_type, bound) in [(KvType::F32, 1e-5), (KvType::F16, 1e-4), (KvType::Q8, 1e-4)] {
        let want = reference(&file, &model, kv_type, &tokens);
        let mut native = NativeModel::load(&file, &model, options(kv_type), &mut |_| true).unwrap();
        // Two 32-token chunks, four one-token steps, then the rest in one step.
        let mut got = native.forward(&tokens[..64], Logits::All).unwrap();
        for &t in &tokens[64..68] {
            got.extend(native.forward(&[t], Logits::All).unwrap());
        }
        got.extend(native.forward(&tokens[68..], Logits::All).unwrap());
        let diff = max_abs(&got, &want);
        eprintln!("{kv_type} latent cache: max |diff| {diff:.2e}");
        assert!(diff < bound, "{kv_type}: {diff}");
    }
}

#[test]
fn a_forked_sequence_and_its_source_step_together() {
    let Some((file, model, tokens)) = model() else {
        return;
    };
    let mut native = NativeModel::load(&file, &model, options(KvType::F16), &mut |_| true).unwrap();
    // Row 0 holds 40 positions (two blocks and half of a third); row 1 shares them, and its
    // first write copies the half-filled block.
    let prefix = &tokens[..40];
    native.forward(prefix, Logits::Last).unwrap();
    native.fork(0, 1, 40);
    let (a, b) = (&tokens[40..48], &tokens[50..58]);
    let out = native
        .step_batch(&[
            SeqStep {
                row: 0,
                tokens: a,
                logits: Some(Logits::All),
                beam: None,
            },
            SeqStep {
                row: 1,
                tokens: b,
                logits: Some(Logits::All),
                beam: None,
            },
        ])
        .unwrap();
    assert_eq!(native.kv().block_copies(), 1);
    let n_vocab = native.config().n_vocab;
    for (row, (tail, got)) in [a, b].iter().zip(&out).enumerate() {
        let whole: Vec<u32> = prefix.iter().chain(tail.iter()).copied().collect();
        let want = reference(&file, &model, KvType::F16, &whole);
        let diff = max_abs(got, &want[40 * n_vocab..]);
        assert!(diff < 1e-4, "row {row}: {diff}");
    }
}

#[test]
fn the_cache_holds_the_latent_and_the_rotated_key_alone() {
    let Some((file, model, _)) = model() else {
        return;
    };
    let native = NativeModel::load(&file, &model, options(KvType::F32), &mut |_| true).unwrap();
    let c = native.config();
    let lt = c.latent.unwrap();
    assert_eq!(
        (lt.kv_lora, lt.rope, c.head_dim, c.n_head_kv),
        (64, 32, 96, 1)
    );
    let shape = native.kv().shape();
    assert!(shape.values_in_keys);
    // Per position and layer: 96 f32 values, against 4 heads x (64 + 32) keys and 4 x 32
    // values expanded.
    assert_eq!(shape.token_layer_bytes(), 96 * 4);
    let positions = shape.blocks * BLOCK_TOKENS;
    assert_eq!(native.kv_bytes(), c.n_layer * positions * 96 * 4);
}

/// The conformance file as older converters wrote it: each block's `attn_k_b` and `attn_v_b`
/// merged back into `attn_kv_b` (each head's key rows, then its value rows), the per-head
/// widths as `key_length` and `value_length` and no `_mla` keys.
fn legacy(file: &GgufFile) -> GgufFile {
    let f32s = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata().iter() {
        match key {
            "deepseek2.attention.key_length_mla" | "deepseek2.attention.value_length_mla" => {}
            "deepseek2.attention.key_length" => w.set_metadata(key, MetaValue::U32(64)),
            "deepseek2.attention.value_length" => w.set_metadata(key, MetaValue::U32(32)),
            _ => w.set_metadata(key, value.clone()),
        }
    }
    let (heads, lora, nope, v) = (4, 64, 32, 32);
    for t in file.tensors() {
        let data = file.tensor_data(t).unwrap();
        if t.name.ends_with("attn_v_b.weight") {
            continue;
        }
        let Some(stem) = t.name.strip_suffix("attn_k_b.weight") else {
            w.add_tensor(&t.name, t.ggml_type, &t.shape, data).unwrap();
            continue;
        };
        assert_eq!(t.ggml_type, GgmlType::F32);
        let k_b = f32s(data);
        let v_b = f32s(
            file.tensor_data(file.tensor(&format!("{stem}attn_v_b.weight")).unwrap())
                .unwrap(),
        );
        let mut kv_b = Vec::new();
        for h in 0..heads {
            let k = &k_b[h * lora * nope..][..lora * nope];
            for c in 0..nope {
                kv_b.extend((0..lora).map(|i| k[i * nope + c]));
            }
            kv_b.extend_from_slice(&v_b[h * v * lora..][..v * lora]);
        }
        let bytes: Vec<u8> = kv_b.iter().flat_map(|x| x.to_le_bytes()).collect();
        let shape = [lora as u64, (heads * (nope + v)) as u64];
        w.add_tensor(
            &format!("{stem}attn_kv_b.weight"),
            GgmlType::F32,
            &shape,
            bytes,
        )
        .unwrap();
    }
    GgufFile::from_bytes("legacy.gguf", w.to_bytes().unwrap()).unwrap()
}

#[test]
fn an_older_files_fused_kv_b_runs_as_the_split_one() {
    let Some((file, model, tokens)) = model() else {
        return;
    };
    let old = legacy(&file);
    let old_model = resolve_gguf(&old).unwrap();
    let lt = old_model.hparams.latent.unwrap();
    assert_eq!((lt.nope, lt.rope, lt.v_dim, lt.kv_lora), (32, 32, 32, 64));
    let tokens = &tokens[..24];
    let want = reference(&file, &model, KvType::F32, tokens);
    let got = reference(&old, &old_model, KvType::F32, tokens);
    assert_eq!(got, want);
}

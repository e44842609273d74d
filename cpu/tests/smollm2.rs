//! The native executor on a real model, SmolLM2-135M-Instruct (Q4_1; `scripts/setup` fetches
//! it), against the f32 CPU reference position by position: prefill in chunks that attend over
//! earlier chunks' cache, one-token decode steps and a few-token step. No Vulkan device is
//! needed. Outside CI a machine without the model skips these tests; in CI it fails them.
//!
//! With f32 activations only the order of f32 operations differs from the reference: the
//! Vulkan path's bound holds. With 8-bit activations (the default) every product rounds its
//! input as llama.cpp's CPU backend does, and the bound is llama.cpp's.

use hearth_cpu::{Activations, CpuOptions, NativeModel};
use hearth_model::kv::KvType;
use hearth_model::{Backend, Logits};
use hearth_models::{resolve_gguf, GgufFile, Tokenizer};
use hearth_reference::CpuModel;

fn argmax(row: &[f32]) -> usize {
    (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best })
}

/// log-softmax in f64.
fn log_probs(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    row.iter().map(|&v| v as f64 - max - sum.ln()).collect()
}

/// How the native executor's logits differ from the reference's over 200 tokens of the GPL.
#[derive(Debug)]
struct Distance {
    max_abs: f32,
    max_kl: f64,
    mean_kl: f64,
    argmax_same: usize,
    positions: usize,
}

fn compare(activations: Activations, kv_type: KvType) -> Option<Distance> {
    let path = hearth_testkit::model(hearth_testkit::SMOLLM2)?;
    let file = GgufFile::open(&path).unwrap();
    let model = resolve_gguf(&file).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3").unwrap();
    let tokens: Vec<u32> = tokenizer.encode(&text)[..200].to_vec();

    let mut reference = CpuModel::load(&file, &model, 256, &mut |_| true).unwrap();
    reference.set_kv_type(kv_type);
    let want = reference.forward(&tokens, Logits::All).unwrap();

    let options = CpuOptions {
        n_ctx: 256,
        kv_type,
        max_chunk: 64,
        activations,
        threads: Some(3),
        ..CpuOptions::default()
    };
    let mut native = NativeModel::load(&file, &model, options, &mut |_| true).unwrap();
    // Three 64-token chunks, four one-token steps, then one of four tokens.
    let mut got = native.forward(&tokens[..192], Logits::All).unwrap();
    for &t in &tokens[192..196] {
        got.extend(native.forward(&[t], Logits::All).unwrap());
    }
    got.extend(native.forward(&tokens[196..], Logits::All).unwrap());
    assert_eq!(got.len(), want.len());

    let n_vocab = reference.config().n_vocab;
    let mut d = Distance {
        max_abs: 0.0,
        max_kl: 0.0,
        mean_kl: 0.0,
        argmax_same: 0,
        positions: tokens.len(),
    };
    for pos in 0..tokens.len() {
        let w = &want[pos * n_vocab..][..n_vocab];
        let g = &got[pos * n_vocab..][..n_vocab];
        d.argmax_same += (argmax(w) == argmax(g)) as usize;
        for (a, b) in w.iter().zip(g) {
            d.max_abs = d.max_abs.max((a - b).abs());
        }
        let (lw, lg) = (log_probs(w), log_probs(g));
        let kl: f64 = lw.iter().zip(&lg).map(|(p, q)| p.exp() * (p - q)).sum();
        d.max_kl = d.max_kl.max(kl);
        d.mean_kl += kl / tokens.len() as f64;
    }
    eprintln!("{activations:?} activations, {kv_type} K/V: {d:?}");
    Some(d)
}

#[test]
fn f32_activations_match_the_reference_at_every_position() {
    // As the Vulkan path against the reference: f32 sums in another order (measured: 8.5e-5,
    // KL 8.6e-11).
    let Some(d) = compare(Activations::F32, KvType::F32) else {
        return;
    };
    assert_eq!(d.argmax_same, d.positions, "{d:?}");
    assert!(d.max_abs < 1e-3, "{d:?}");
    assert!(d.max_kl < 1e-8, "{d:?}");
}

#[test]
fn f16_and_q8_caches_round_as_the_references_do() {
    // Both round K and V alike, but a value whose last f32 bits differ can round to the next
    // f16, or the next q8 step (1/127 of its block's largest): measured on f16, 0.026 at most
    // and KL 1.4e-5; on q8, 0.98 and KL 0.023, the top token the same at 198 of 200.
    let bounds = [(KvType::F16, 0.1, 1e-4, 200), (KvType::Q8, 2.0, 0.05, 196)];
    for (kv_type, max_abs, max_kl, argmax_same) in bounds {
        let Some(d) = compare(Activations::F32, kv_type) else {
            return;
        };
        assert!(d.argmax_same >= argmax_same, "{kv_type}: {d:?}");
        assert!(d.max_abs < max_abs, "{kv_type}: {d:?}");
        assert!(d.max_kl < max_kl, "{kv_type}: {d:?}");
    }
}

#[test]
fn eight_bit_activations_stay_within_llama_cpps_rounding() {
    // Measured: logits within 3.0 to 4.3 of the reference over these 200 positions (llama.cpp's
    // own move by up to 1.4 on the short prompts of engine/tests/reference_logits.rs), mean
    // KL 0.006, the same top token at 188 to 192 of 200. The largest difference moves with
    // the order of f32 sums anywhere in the step (attention's, the products'), as an
    // activation near a rounding boundary goes to one 8-bit level or the next; the mean KL
    // does not.
    let Some(d) = compare(Activations::Q8, KvType::F16) else {
        return;
    };
    assert!(d.max_abs < 5.0, "{d:?}");
    assert!(d.mean_kl < 0.01, "{d:?}");
    assert!(d.argmax_same * 10 >= d.positions * 9, "{d:?}");
}

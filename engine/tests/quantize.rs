//! `quantize_model` end to end: a synthetic model built with `GgufWriter` (runs everywhere) and
//! SmolLM2-135M-Instruct (Q4_1 with a Q8_0 embedding; `scripts/setup` fetches it, CI requires
//! it). The outputs must open, hold the expected format for every tensor, keep the metadata,
//! mark Hearth's formats with their version, and dequantize close to the source.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hearth_engine::Error;
use hearth_model::activations::SquareSums;
use hearth_model::quantize::imatrix::ImportanceMatrix;
use hearth_model::quantize::{quantize_model, QuantizeOptions, QuantizeReport, QuantizeStage};
use hearth_models::gguf::{MetaArray, MetaValue};
use hearth_models::{resolve_gguf, GgmlType, GgufFile, GgufWriter, TensorInfo, Tokenizer};
use hearth_quant::{Format, FORMAT_VERSION, VERSION_KEY};

fn model_path() -> Option<PathBuf> {
    hearth_testkit::model(hearth_testkit::SMOLLM2)
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hearth-quantize-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Files in `dir`, by name.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Largest relative RMS error `||q - s|| / ||s||` each format may show on weight-like data
/// (bell-shaped values with a few outliers). The worst values measured on the synthetic model
/// and SmolLM2 were F16 2e-4, Q8 0.0063, Q6 0.023, Q5 0.046, Q4 0.074, Q4B64 0.093,
/// Q3H 0.141, Q3 0.156, Q2 0.305; the bounds leave about 25% headroom.
fn max_relative_rms(f: Format) -> f64 {
    match f {
        Format::F32 => 0.0,
        Format::F16 => 5e-4,
        Format::Q8 => 0.008,
        Format::Q6 => 0.03,
        Format::Q5 => 0.06,
        Format::Q4 => 0.095,
        Format::Q4B64 => 0.12,
        Format::Q3H => 0.18,
        Format::Q3 => 0.2,
        Format::Q2 => 0.4,
        Format::Q5_1 => 0.06,
        Format::Q5_0 => 0.08,
        Format::Q4_0 => 0.15,
        Format::IQ4_NL => 0.12,
        Format::IQ4_XS => 0.12,
        Format::MXFP4 => 0.2,
        // The lattice i-quants on rows of 256 without a matrix (lattice_i_quants_...):
        // measured IQ3_S 0.186, IQ3_XXS 0.246, IQ2_S 0.314, IQ1_M 0.584, with 25% headroom;
        // IQ2_XS, IQ2_XXS and IQ1_S, which need a matrix, bounded between their neighbours.
        Format::IQ3_S => 0.23,
        Format::IQ3_XXS => 0.31,
        Format::IQ2_S => 0.39,
        Format::IQ2_XS => 0.45,
        Format::IQ2_XXS => 0.5,
        Format::IQ1_M => 0.73,
        Format::IQ1_S => 0.8,
        // Ternary levels with the largest magnitude as the scale (ggml's rule, made for models
        // trained ternary): measured 0.805 for both on the lattice test's bell-shaped rows.
        Format::TQ1_0 => 0.9,
        Format::TQ2_0 => 0.9,
        // The k-quants' RMS error over sigma on normal data (quant's round-trip test) is
        // Q6_K 0.018, Q5_K 0.036, Q4_K 0.072, Q3_K 0.15, Q2_K 0.30; rows they do not fit fall
        // back to the formats above, within these bounds too.
        Format::Q6_K => 0.03,
        Format::Q5_K => 0.06,
        Format::Q4_K => 0.12,
        Format::Q3_K => 0.2,
        Format::Q2_K => 0.4,
    }
}

/// A tensor's values as f32, whatever its type.
fn values(file: &GgufFile, info: &TensorInfo) -> Vec<f32> {
    let data = file.tensor_data(info).unwrap();
    let mut out = vec![0.0; info.n_elements() as usize];
    match info.ggml_type.hearth_format() {
        Some(f) => f.dequantize(data, &mut out).unwrap(),
        None => hearth_quant::dequantize_ggml(info.ggml_type.id(), data, &mut out).unwrap(),
    }
    out
}

/// `||q - s|| / ||s||` in f64.
fn relative_rms(source: &[f32], quantized: &[f32]) -> f64 {
    let (mut err, mut norm) = (0f64, 0f64);
    for (&s, &q) in source.iter().zip(quantized) {
        err += (q as f64 - s as f64).powi(2);
        norm += (s as f64).powi(2);
    }
    if norm == 0.0 {
        err.sqrt()
    } else {
        (err / norm).sqrt()
    }
}

/// Checks every tensor of `output` against `input` and `report`: same names, shapes and
/// order, the format the report claims, and values within the format's error bound. Returns
/// the worst relative RMS error per format.
fn dequantized_error(
    input: &GgufFile,
    output: &GgufFile,
    report: &QuantizeReport,
) -> Vec<(Format, f64)> {
    assert_eq!(output.tensors().len(), input.tensors().len());
    assert_eq!(report.tensors.len(), input.tensors().len());
    let mut worst: Vec<(Format, f64)> = Vec::new();
    for ((src, dst), r) in input
        .tensors()
        .iter()
        .zip(output.tensors())
        .zip(&report.tensors)
    {
        assert_eq!((&dst.name, &dst.shape), (&src.name, &src.shape));
        assert_eq!(r.name, src.name);
        assert_eq!(dst.ggml_type, GgmlType::from(r.to), "{}", dst.name);
        assert_eq!(r.from, src.ggml_type, "{}", dst.name);
        assert_eq!((r.bytes_before, r.bytes_after), (src.n_bytes, dst.n_bytes));
        let err = relative_rms(&values(input, src), &values(output, dst));
        assert!(
            err <= max_relative_rms(r.to),
            "{}: {} -> {}: relative RMS error {err:.4} above {}",
            dst.name,
            src.ggml_type,
            r.to,
            max_relative_rms(r.to)
        );
        match worst.iter_mut().find(|(f, _)| *f == r.to) {
            Some(w) => w.1 = w.1.max(err),
            None => worst.push((r.to, err)),
        }
    }
    worst
}

/// Metadata of `output` is that of `input`, plus the version key when Hearth's private
/// formats are present, with `general.file_type` updated or removed.
fn check_metadata(input: &GgufFile, output: &GgufFile, format: Format, mix_file_type: Option<u32>) {
    let has_private = output.tensors().iter().any(|t| t.ggml_type.is_private());
    for (key, value) in input.metadata().iter() {
        if key == "general.file_type" || key == VERSION_KEY {
            continue;
        }
        assert_eq!(output.metadata().get(key), Some(value), "metadata `{key}`");
    }
    assert_eq!(
        output.metadata().get(VERSION_KEY),
        has_private.then_some(&MetaValue::U32(FORMAT_VERSION)),
        "{VERSION_KEY}"
    );
    let file_type = output.get::<u32>("general.file_type").unwrap();
    let expected = match format {
        _ if mix_file_type.is_some() => mix_file_type,
        Format::F32 => Some(0),
        Format::F16 => Some(1),
        Format::Q4_0 => Some(2),
        Format::Q4 => Some(3),
        Format::Q8 => Some(7),
        Format::Q5_0 => Some(8),
        Format::Q5_1 => Some(9),
        Format::IQ4_NL => Some(25),
        Format::IQ4_XS => Some(30),
        _ => None,
    };
    assert_eq!(file_type, expected, "general.file_type for {format}");
    let extra = output
        .metadata()
        .len()
        .saturating_sub(input.metadata().len());
    assert!(extra <= 1, "{extra} new metadata keys");
}

/// Deterministic weight-like values: a sum of uniforms (bell-shaped) with rare outliers, the
/// scale varying by row as real weight rows do.
fn weights(n: usize, row: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|i| {
            let scale = 0.02 * (1.0 + (i / row % 7) as f64);
            let bell: f64 = (0..4).map(|_| uniform() - 0.5).sum();
            let outlier = if uniform() < 0.002 { 8.0 } else { 1.0 };
            (bell * scale * outlier) as f32
        })
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A small Llama-shaped model: F32 matrices with rows of 128, an F16 `ffn_down` with rows
/// of 96 (not whole 64-value blocks), a Q8_0 embedding that is also the head (no
/// `output.weight`), F32 norms, and metadata of several types.
fn synthetic_model(dir: &Path) -> PathBuf {
    let mut w = GgufWriter::new();
    w.set_metadata(
        "general.architecture",
        MetaValue::String("synthetic".into()),
    );
    w.set_metadata("general.name", MetaValue::String("tiny test model".into()));
    w.set_metadata("general.file_type", MetaValue::U32(0));
    w.set_metadata("synthetic.block_count", MetaValue::U32(1));
    w.set_metadata(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(vec!["a".into(), "b".into()])),
    );
    let (e, ff, vocab) = (128usize, 96usize, 64usize);

    let embd = weights(e * vocab, e, 1);
    let mut embd_q8 = vec![0u8; Format::Q8.bytes_for(embd.len()).unwrap()];
    Format::Q8.quantize(&embd, &mut embd_q8).unwrap();
    w.add_tensor(
        "token_embd.weight",
        GgmlType::Q8_0,
        &[e as u64, vocab as u64],
        embd_q8,
    )
    .unwrap();
    let mut seed = 2;
    let mut f32_tensor = |w: &mut GgufWriter, name: &str, shape: &[usize]| {
        let n = shape.iter().product();
        seed += 1;
        let v = if shape.len() == 1 {
            (0..n).map(|i| 1.0 + 0.01 * i as f32).collect()
        } else {
            weights(n, shape[0], seed)
        };
        let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        w.add_tensor(name, GgmlType::F32, &shape, f32_bytes(&v))
            .unwrap();
    };
    f32_tensor(&mut w, "blk.0.attn_norm.weight", &[e]);
    f32_tensor(&mut w, "blk.0.attn_q.weight", &[e, e]);
    f32_tensor(&mut w, "blk.0.attn_q.bias", &[e]);
    f32_tensor(&mut w, "blk.0.attn_output.weight", &[e, e]);
    f32_tensor(&mut w, "blk.0.ffn_up.weight", &[e, ff]);
    let down = weights(ff * e, ff, 99);
    let down_f16: Vec<u8> = {
        let mut b = vec![0u8; Format::F16.bytes_for(down.len()).unwrap()];
        Format::F16.quantize(&down, &mut b).unwrap();
        b
    };
    w.add_tensor(
        "blk.0.ffn_down.weight",
        GgmlType::F16,
        &[ff as u64, e as u64],
        down_f16,
    )
    .unwrap();
    f32_tensor(&mut w, "output_norm.weight", &[e]);

    let path = dir.join("synthetic.gguf");
    w.write_atomic(&path).unwrap();
    path
}

fn quantize(input: &Path, output: &Path, opts: &QuantizeOptions) -> QuantizeReport {
    let mut last = None;
    let report = quantize_model(input, output, opts, &mut |p| {
        assert!(p.done_bytes <= p.total_bytes);
        last = Some((p.stage, p.done_bytes, p.total_bytes));
        true
    })
    .unwrap();
    let (stage, done, total) = last.expect("progress was reported");
    assert_eq!((stage, done), (QuantizeStage::Writing, total));
    report
}

fn formats_by_name(file: &GgufFile) -> HashMap<String, GgmlType> {
    file.tensors()
        .iter()
        .map(|t| (t.name.clone(), t.ggml_type))
        .collect()
}

#[test]
fn synthetic_model_to_every_format() {
    let dir = scratch("every-format");
    let input_path = synthetic_model(&dir);
    let input = GgufFile::open(&input_path).unwrap();
    for format in Format::ALL {
        let out_path = dir.join(format!("out-{format}.gguf"));
        let report = quantize(&input_path, &out_path, &QuantizeOptions::new(format));
        let output = GgufFile::open(&out_path).unwrap();
        let types = formats_by_name(&output);
        let head = QuantizeOptions::new(format).head_format();
        assert_eq!(types["token_embd.weight"], GgmlType::from(head), "{format}");
        // Rows of 128 values: the k-quants' 256-value blocks do not fit them, and the
        // fitting rule picks another format.
        let fitting = GgmlType::from(format.fitting(128));
        assert_eq!(types["blk.0.attn_q.weight"], fitting, "{format}");
        assert_eq!(types["blk.0.ffn_up.weight"], fitting, "{format}");
        for norm in [
            "blk.0.attn_norm.weight",
            "blk.0.attn_q.bias",
            "output_norm.weight",
        ] {
            assert_eq!(types[norm], GgmlType::F32, "{format} {norm}");
        }
        // Rows of 96 fit 32-value blocks but not 64- or 256-value ones.
        let down = report
            .tensors
            .iter()
            .find(|t| t.name == "blk.0.ffn_down.weight")
            .unwrap();
        if format.block_size() > 32 {
            assert!(down.to.block_size() == 32, "{format} -> {}", down.to);
            assert!(
                down.note.as_deref().unwrap().contains("96"),
                "{:?}",
                down.note
            );
        } else {
            assert_eq!((down.to, &down.note), (format, &None));
        }
        check_metadata(&input, &output, format, None);
        let worst = dequantized_error(&input, &output, &report);
        eprintln!("{format}: worst relative RMS error per format {worst:.4?}");
        assert!(report.unmatched_patterns.is_empty());
        assert_eq!(
            report.file_bytes_after,
            std::fs::metadata(&out_path).unwrap().len()
        );
    }
    // Nothing but the outputs: no temporary files left behind.
    assert_eq!(
        listing(&dir).len(),
        1 + Format::ALL.len(),
        "{:?}",
        listing(&dir)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tensor_patterns_and_the_head_format() {
    let dir = scratch("patterns");
    let input_path = synthetic_model(&dir);
    let out_path = dir.join("out.gguf");
    let opts = QuantizeOptions {
        format: Format::Q3H,
        output_format: Some(Format::Q6),
        tensor_formats: vec![
            ("blk.*.attn_*".into(), Format::Q2),
            ("*.attn_output.weight".into(), Format::Q5),
            ("*norm*".into(), Format::Q4),
            ("no.such.*".into(), Format::Q8),
        ],
        mix: None,
        imatrix: None,
    };
    let report = quantize(&input_path, &out_path, &opts);
    let types = formats_by_name(&GgufFile::open(&out_path).unwrap());
    assert_eq!(
        types["token_embd.weight"],
        GgmlType::Hearth(Format::Q6),
        "--keep-output"
    );
    assert_eq!(
        types["blk.0.attn_q.weight"],
        GgmlType::Hearth(Format::Q2),
        "pattern"
    );
    assert_eq!(
        types["blk.0.attn_output.weight"],
        GgmlType::Hearth(Format::Q5),
        "later pattern wins"
    );
    assert_eq!(
        types["blk.0.ffn_up.weight"],
        GgmlType::Hearth(Format::Q3H),
        "--format"
    );
    // Patterns choose matrix formats only: 1-D tensors stay F32.
    assert_eq!(types["blk.0.attn_norm.weight"], GgmlType::F32);
    assert_eq!(types["blk.0.attn_q.bias"], GgmlType::F32);
    assert_eq!(report.unmatched_patterns, ["*norm*", "no.such.*"]);

    // A pattern beats --keep-output for the head.
    let opts = QuantizeOptions {
        format: Format::Q4,
        output_format: Some(Format::Q6),
        tensor_formats: vec![("token_embd.weight".into(), Format::Q2)],
        mix: None,
        imatrix: None,
    };
    quantize(&input_path, &out_path, &opts);
    let output = GgufFile::open(&out_path).unwrap();
    assert_eq!(
        formats_by_name(&output)["token_embd.weight"],
        GgmlType::Hearth(Format::Q2)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hearth_formats_requantize_and_same_format_tensors_are_copied() {
    let dir = scratch("requantize");
    let input_path = synthetic_model(&dir);
    let q3h_path = dir.join("q3h.gguf");
    quantize(&input_path, &q3h_path, &QuantizeOptions::new(Format::Q3H));

    // Q3H in, Q8 out: the private input reads, the output needs no version key.
    let q8_path = dir.join("q8.gguf");
    let report = quantize(&q3h_path, &q8_path, &QuantizeOptions::new(Format::Q8));
    let (q3h, q8) = (
        GgufFile::open(&q3h_path).unwrap(),
        GgufFile::open(&q8_path).unwrap(),
    );
    assert!(q8.tensors().iter().all(|t| !t.ggml_type.is_private()));
    assert_eq!(q8.metadata().get(VERSION_KEY), None);
    dequantized_error(&q3h, &q8, &report);

    // Q3H to Q3H copies every tensor's bytes.
    let again = dir.join("again.gguf");
    quantize(&q3h_path, &again, &QuantizeOptions::new(Format::Q3H));
    let again = GgufFile::open(&again).unwrap();
    for (a, b) in q3h.tensors().iter().zip(again.tensors()) {
        assert_eq!(
            q3h.tensor_data(a).unwrap(),
            again.tensor_data(b).unwrap(),
            "{}",
            a.name
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cancelling_or_failing_leaves_no_file() {
    let dir = scratch("cancel");
    let input_path = synthetic_model(&dir);
    let out_path = dir.join("out.gguf");

    // Cancelled in the middle of quantizing, and at the last moment before writing.
    for stop_at in [QuantizeStage::Quantizing, QuantizeStage::Writing] {
        let mut calls = 0;
        let err = quantize_model(
            &input_path,
            &out_path,
            &QuantizeOptions::new(Format::Q3H),
            &mut |p| {
                calls += 1;
                p.stage != stop_at
            },
        )
        .unwrap_err();
        assert!(matches!(err, Error::Cancelled), "{err}");
        assert!(calls >= 1);
        assert_eq!(listing(&dir), ["synthetic.gguf"]);
    }

    // An existing output survives a cancelled run untouched.
    std::fs::write(&out_path, b"previous").unwrap();
    let err = quantize_model(
        &input_path,
        &out_path,
        &QuantizeOptions::new(Format::Q8),
        &mut |_| false,
    )
    .unwrap_err();
    assert!(matches!(err, Error::Cancelled), "{err}");
    assert_eq!(std::fs::read(&out_path).unwrap(), b"previous");
    std::fs::remove_file(&out_path).unwrap();

    // A directory that does not exist: an error naming the output, and nothing written.
    let missing = dir.join("no/such/dir/out.gguf");
    let err = quantize_model(
        &input_path,
        &missing,
        &QuantizeOptions::new(Format::Q8),
        &mut |_| true,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("no/such/dir/out.gguf"), "{err}");
    assert_eq!(listing(&dir), ["synthetic.gguf"]);

    // An input that is not a GGUF file: an error naming it.
    let bogus = dir.join("bogus.gguf");
    std::fs::write(&bogus, b"not a model").unwrap();
    let err = quantize_model(
        &bogus,
        &out_path,
        &QuantizeOptions::new(Format::Q8),
        &mut |_| true,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("bogus.gguf"), "{err}");
    assert!(!out_path.exists());

    // A tensor type the quantizer cannot read: an error naming the tensor and its type.
    let mut w = GgufWriter::new();
    w.add_tensor("odd.weight", GgmlType::Q8_K, &[256, 2], vec![0u8; 584])
        .unwrap();
    let odd = dir.join("odd.gguf");
    w.write_atomic(&odd).unwrap();
    let err = quantize_model(
        &odd,
        &out_path,
        &QuantizeOptions::new(Format::Q8),
        &mut |_| true,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("odd.weight") && err.contains("Q8_K"), "{err}");
    assert!(!out_path.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SmolLM2 to `format` with `opts`; checks everything and returns the output's path.
fn smollm2(test: &str, opts: &QuantizeOptions) -> Option<(PathBuf, GgufFile, QuantizeReport)> {
    let input_path = model_path()?;
    let dir = scratch(test);
    let out_path = dir.join(format!("SmolLM2-135M-Instruct.{}.gguf", opts.format));
    let report = quantize(&input_path, &out_path, opts);
    let input = GgufFile::open(&input_path).unwrap();
    let output = GgufFile::open(&out_path).unwrap();
    check_metadata(
        &input,
        &output,
        opts.format,
        opts.mix.map(|m| m.file_type()),
    );
    let worst = dequantized_error(&input, &output, &report);
    eprintln!(
        "SmolLM2 -> {}: {:.2} -> {:.2} bits per weight in {:.1} s; worst relative RMS error {worst:.4?}",
        opts.format,
        report.bits_per_weight_before(),
        report.bits_per_weight_after(),
        report.elapsed.as_secs_f64()
    );
    // Still the same model to the loader: spec, tensors and tokenizer resolve.
    let model = resolve_gguf(&output).unwrap();
    assert!(model.tensors.tied_embeddings);
    Tokenizer::from_gguf(&output).unwrap();
    Some((dir, output, report))
}

/// An importance matrix for SmolLM2's 30 `ffn_down` matrices (1536 input columns), column
/// `c` of each weighing `sums(c)`; no other matrix has an entry.
fn ffn_down_imatrix(sums: impl Fn(usize) -> f64) -> ImportanceMatrix {
    let sums: Vec<f64> = (0..1536).map(sums).collect();
    let entries = (0..30)
        .map(|l| {
            let sums = SquareSums {
                sums: sums.clone(),
                tokens: 1,
            };
            (format!("blk.{l}.ffn_down.weight"), sums)
        })
        .collect();
    ImportanceMatrix {
        entries,
        datasets: vec!["synthetic".into()],
        chunk_count: 1,
        chunk_size: 512,
    }
}

#[test]
fn smollm2_to_q3h() {
    let opts = QuantizeOptions {
        format: Format::Q3H,
        output_format: None,
        tensor_formats: vec![("blk.*.ffn_down.weight".into(), Format::Q6)],
        mix: None,
        imatrix: None,
    };
    let Some((dir, output, report)) = smollm2("smollm2-q3h", &opts) else {
        return;
    };
    for t in output.tensors() {
        let expected = if t.shape.len() == 1 {
            GgmlType::F32
        } else if t.name == "token_embd.weight" {
            // The tied head keeps Q8 by default (it is Q8_0 already: copied as it is).
            GgmlType::Q8_0
        } else if t.name.ends_with("ffn_down.weight") {
            GgmlType::Hearth(Format::Q6)
        } else {
            GgmlType::Hearth(Format::Q3H)
        };
        assert_eq!(t.ggml_type, expected, "{}", t.name);
    }
    assert!(report.tensors.iter().all(|t| t.note.is_none()));
    assert_eq!(
        output.get::<u32>(VERSION_KEY).unwrap(),
        Some(FORMAT_VERSION)
    );
    assert!(report.bits_per_weight_after() < report.bits_per_weight_before());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Hearth's own formats weigh their rounding by an importance matrix: with one that favours
/// every seventh input column of `ffn_down`, the Q2 and Q3H `ffn_down` matrices change (and no
/// other tensor does), and each has a lower error weighted by that matrix than without it.
#[test]
fn smollm2_own_formats_follow_an_importance_matrix() {
    use std::sync::Arc;

    let Some(input_path) = model_path() else {
        return;
    };
    let input = GgufFile::open(&input_path).unwrap();
    let importance = |c: usize| if c % 7 == 0 { 100.0f32 } else { 1.0 };
    let imatrix = Arc::new(ffn_down_imatrix(|c| f64::from(importance(c))));
    for format in [Format::Q2, Format::Q3H] {
        let dir = scratch(&format!("smollm2-imatrix-{format}"));
        let (plain_path, guided_path) = (dir.join("plain.gguf"), dir.join("guided.gguf"));
        quantize(&input_path, &plain_path, &QuantizeOptions::new(format));
        let guided_opts = QuantizeOptions {
            imatrix: Some(imatrix.clone()),
            ..QuantizeOptions::new(format)
        };
        quantize(&input_path, &guided_path, &guided_opts);
        let (plain, guided) = (
            GgufFile::open(&plain_path).unwrap(),
            GgufFile::open(&guided_path).unwrap(),
        );
        let weighted_error = |file: &GgufFile, name: &str| -> f64 {
            let (src, dst) = (input.tensor(name).unwrap(), file.tensor(name).unwrap());
            values(&input, src)
                .iter()
                .zip(values(file, dst))
                .enumerate()
                .map(|(i, (&s, q))| f64::from(importance(i % 1536)) * f64::from(q - s).powi(2))
                .sum()
        };
        for t in plain.tensors() {
            let g = guided.tensor(&t.name).unwrap();
            assert_eq!(g.ggml_type, t.ggml_type, "{format}: {}", t.name);
            let same = plain.tensor_data(t).unwrap() == guided.tensor_data(g).unwrap();
            let down = t.name.ends_with("ffn_down.weight");
            assert_eq!(same, !down, "{format}: {}", t.name);
            if down {
                let (e_plain, e_guided) = (
                    weighted_error(&plain, &t.name),
                    weighted_error(&guided, &t.name),
                );
                assert!(
                    e_guided < 0.9 * e_plain,
                    "{format}: {}: weighted error {e_guided:.4e} against {e_plain:.4e}",
                    t.name
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn smollm2_to_q8() {
    let Some((dir, output, report)) = smollm2("smollm2-q8", &QuantizeOptions::new(Format::Q8))
    else {
        return;
    };
    for t in output.tensors() {
        let expected = if t.shape.len() == 1 {
            GgmlType::F32
        } else {
            GgmlType::Q8_0
        };
        assert_eq!(t.ggml_type, expected, "{}", t.name);
    }
    // Plain GGUF types only: no version key, and llama.cpp's file type for Q8_0.
    assert_eq!(output.metadata().get(VERSION_KEY), None);
    assert!(report.bits_per_weight_after() > report.bits_per_weight_before());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn smollm2_to_q4_k_m_follows_llama_cpp_and_its_importance_matrix() {
    use hearth_model::quantize::Mix;
    use std::sync::Arc;

    let opts = QuantizeOptions::mix(Mix::Q4_K_M);
    let Some((dir, output, report)) = smollm2("smollm2-q4_k_m", &opts) else {
        return;
    };
    // llama.cpp's rules on SmolLM2 (30 layers, 576-wide rows that fit no k-quant): the tied
    // head Q8_0, Q4_K's fallback Q5_0 for 576-wide matrices, Q6_K's Q8_0 for attn_v in the
    // layers that get more bits, and ffn_down (1536 wide) Q6_K there and Q4_K elsewhere.
    let more_bits = |l: usize| !(3..26).contains(&l) || (l - 3) % 3 == 2;
    for t in output.tensors() {
        let layer = t
            .name
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|n| n.parse::<usize>().ok());
        let expected = match (t.shape.len(), layer) {
            (1, _) => GgmlType::F32,
            (_, None) => GgmlType::Q8_0,
            (_, Some(l)) if t.name.ends_with("attn_v.weight") && more_bits(l) => GgmlType::Q8_0,
            (_, Some(l)) if t.name.ends_with("ffn_down.weight") && more_bits(l) => GgmlType::Q6_K,
            (_, Some(_)) if t.name.ends_with("ffn_down.weight") => GgmlType::Q4_K,
            (_, Some(_)) => GgmlType::Q5_0,
        };
        assert_eq!(t.ggml_type, expected, "{}", t.name);
    }
    assert_eq!(output.get::<u32>("general.file_type").unwrap(), Some(15));
    assert_eq!(
        output.get::<u32>(VERSION_KEY).unwrap(),
        None,
        "ggml types only"
    );

    // An importance matrix that favours a few columns changes the Q4_K and Q6_K tensors
    // (and only those), and the file records it as llama.cpp does.
    let imatrix = ffn_down_imatrix(|c| if c % 7 == 0 { 100.0 } else { 1.0 });
    let guided_opts = QuantizeOptions {
        imatrix: Some(Arc::new(imatrix)),
        ..QuantizeOptions::mix(Mix::Q4_K_M)
    };
    let guided_path = dir.join("guided.gguf");
    quantize(&model_path().unwrap(), &guided_path, &guided_opts);
    let guided = GgufFile::open(&guided_path).unwrap();
    for t in output.tensors() {
        let g = guided.tensor(&t.name).unwrap();
        assert_eq!(g.ggml_type, t.ggml_type, "{}", t.name);
        let same = output.tensor_data(t).unwrap() == guided.tensor_data(g).unwrap();
        let k_quant = matches!(t.ggml_type, GgmlType::Q4_K | GgmlType::Q6_K);
        assert_eq!(same, !k_quant, "{}", t.name);
    }
    assert_eq!(
        guided.get::<i32>("quantize.imatrix.entries_count").unwrap(),
        Some(30)
    );
    // Rows that fit no k-quant say which type took them.
    assert!(report
        .tensors
        .iter()
        .any(|t| t.note.as_deref().is_some_and(|n| n.contains("Q5_0"))));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The lattice i-quants and the ternary types write 256-value rows; llama.cpp's three that need
/// an importance matrix
/// (IQ2_XXS, IQ2_XS, IQ1_S) are refused without one, naming the tensor, and leave no file.
#[test]
fn lattice_i_quants_quantize_and_refuse_without_a_needed_matrix() {
    let dir = scratch("lattice");
    let mut w = GgufWriter::new();
    w.set_metadata(
        "general.architecture",
        MetaValue::String("synthetic".into()),
    );
    let v = weights(256 * 8, 256, 7);
    w.add_tensor(
        "blk.0.ffn_down.weight",
        GgmlType::F32,
        &[256, 8],
        f32_bytes(&v),
    )
    .unwrap();
    let input_path = dir.join("wide.gguf");
    w.write_atomic(&input_path).unwrap();
    let input = GgufFile::open(&input_path).unwrap();
    let low_bits = |f: &Format| f.is_lattice() || matches!(f, Format::TQ1_0 | Format::TQ2_0);
    for format in Format::ALL.into_iter().filter(low_bits) {
        let out_path = dir.join(format!("out-{format}.gguf"));
        let opts = QuantizeOptions::new(format);
        if format.requires_importance() {
            let err = quantize_model(&input_path, &out_path, &opts, &mut |_| true)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("blk.0.ffn_down.weight") && err.contains("needs an importance matrix"),
                "{format}: {err}"
            );
            assert!(!out_path.exists(), "{format}");
            continue;
        }
        let report = quantize(&input_path, &out_path, &opts);
        let output = GgufFile::open(&out_path).unwrap();
        assert_eq!(
            formats_by_name(&output)["blk.0.ffn_down.weight"],
            GgmlType::from(format)
        );
        let worst = dequantized_error(&input, &output, &report);
        eprintln!("{format}: worst relative RMS error {worst:.4?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// llama.cpp's type for a SmolLM2 matrix in an i-quant mix quantized with an importance matrix
/// (`llama_tensor_get_type`): 30 layers, three query heads per KV head, the head tied to the
/// embedding, 576-wide rows that fit no 256-value block (the fallback: IQ4_NL for the
/// i-quants, Q4_0 for Q2_K, Q5_0 for Q4_K) and the 1536-wide `ffn_down`, which keeps its type.
fn smollm2_i_quant_type(mix: hearth_model::quantize::Mix, name: &str) -> GgmlType {
    use hearth_model::quantize::Mix::*;
    let Some(layer) = name
        .strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse::<usize>().ok())
    else {
        // The tied head: rows that fit no super-block take Q8_0.
        return GgmlType::Q8_0;
    };
    let first_eighth = layer < 30 / 8;
    if name.ends_with("ffn_down.weight") {
        return GgmlType::from(match mix {
            IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS if first_eighth => Format::Q2_K,
            IQ2_S | IQ2_M if first_eighth => Format::IQ3_S,
            IQ3_M if first_eighth => Format::Q4_K,
            _ => mix.base(),
        });
    }
    let attn_v = name.ends_with("attn_v.weight");
    let attn_output = name.ends_with("attn_output.weight");
    GgmlType::from(match mix {
        // Q2_K's fallback.
        IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS if attn_v => Format::Q4_0,
        // Q4_K's.
        IQ3_M if attn_v || attn_output => Format::Q5_0,
        // Every i-quant's.
        _ => Format::IQ4_NL,
    })
}

/// llama.cpp's i-quant mixes on SmolLM2. With an importance matrix: the types its rules and
/// fallbacks give, the file type, values close to the source (for three mixes whose rules
/// differ; `mix.rs` tests the rules of every mix). Without one: the mixes that would write
/// IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS or IQ2_S matrices refuse before any work, naming the mix and
/// the tensor, as llama-quantize does, and IQ3_XXS takes its unguided types.
#[test]
fn smollm2_to_the_i_quant_mixes_follows_llama_cpp() {
    use hearth_model::quantize::Mix;
    use std::sync::Arc;

    let Some(input_path) = model_path() else {
        return;
    };
    let dir = scratch("smollm2-i-quant-mixes");
    let input = GgufFile::open(&input_path).unwrap();
    let imatrix = Arc::new(ffn_down_imatrix(|c| 1.0 + (c % 5) as f64));
    let out_path = dir.join("out.gguf");
    // IQ1_S raises tensors to Q2_K and IQ2_XXS, IQ2_M to IQ3_S, IQ3_M to Q4_K.
    for mix in [Mix::IQ1_S, Mix::IQ2_M, Mix::IQ3_M] {
        let opts = QuantizeOptions {
            imatrix: Some(imatrix.clone()),
            ..QuantizeOptions::mix(mix)
        };
        let report = quantize(&input_path, &out_path, &opts);
        let output = GgufFile::open(&out_path).unwrap();
        for t in output.tensors() {
            let expected = if t.shape.len() == 1 {
                GgmlType::F32
            } else {
                smollm2_i_quant_type(mix, &t.name)
            };
            assert_eq!(t.ggml_type, expected, "{mix}: {}", t.name);
        }
        assert_eq!(
            output.get::<u32>("general.file_type").unwrap(),
            Some(mix.file_type())
        );
        assert_eq!(output.get::<u32>(VERSION_KEY).unwrap(), None, "{mix}");
        let worst = dequantized_error(&input, &output, &report);
        eprintln!("SmolLM2 -> {mix}: worst relative RMS error {worst:.4?}");
        std::fs::remove_file(&out_path).unwrap();
    }

    // Without the matrix, as llama-quantize: the refusal comes before any work; the mixes it
    // lets through are cancelled at the start.
    let i_quants = [
        Mix::IQ1_S,
        Mix::IQ1_M,
        Mix::IQ2_XXS,
        Mix::IQ2_XS,
        Mix::IQ2_S,
        Mix::IQ2_M,
        Mix::IQ3_XXS,
        Mix::IQ3_XS,
        Mix::IQ3_S,
        Mix::IQ3_M,
    ];
    for mix in i_quants {
        let opts = QuantizeOptions::mix(mix);
        let err = quantize_model(&input_path, &out_path, &opts, &mut |_| false).unwrap_err();
        let refuses = !matches!(mix, Mix::IQ3_XXS | Mix::IQ3_XS | Mix::IQ3_S | Mix::IQ3_M);
        if !refuses {
            assert!(matches!(err, Error::Cancelled), "{mix}: {err}");
            continue;
        }
        let e = err.to_string();
        // An ffn_down past the first eighth (whichever the file holds first).
        let layer = e
            .split("blk.")
            .nth(1)
            .and_then(|r| r.split('.').next())
            .and_then(|n| n.parse::<usize>().ok());
        assert!(
            e.contains(&format!("the {mix} mix stores it as"))
                && e.contains("ffn_down.weight")
                && layer.is_some_and(|l| l >= 3)
                && e.contains("needs an importance matrix"),
            "{e}"
        );
        assert!(!out_path.exists(), "{mix}");
    }
    // Unguided, IQ3_XXS gives attn_v IQ3_S (here IQ4_NL) and ffn_down Q4_K in the first
    // eighth, Q3_K after it.
    quantize(&input_path, &out_path, &QuantizeOptions::mix(Mix::IQ3_XXS));
    let types = formats_by_name(&GgufFile::open(&out_path).unwrap());
    assert_eq!(types["blk.0.attn_v.weight"], GgmlType::IQ4_NL);
    assert_eq!(types["blk.0.attn_q.weight"], GgmlType::IQ4_NL);
    assert_eq!(types["blk.2.ffn_down.weight"], GgmlType::Q4_K);
    assert_eq!(types["blk.3.ffn_down.weight"], GgmlType::Q3_K);
    std::fs::remove_dir_all(&dir).unwrap();
}

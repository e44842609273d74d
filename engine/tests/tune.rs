//! Kernel tuning on the device at hand (lavapipe here): a tune times the variants of a
//! model's products and keeps the default unless another measured faster; a kept tuning is
//! reused on the next load without measuring, a changed driver or kernel build is not; the
//! products built with a tuned shape compute what the default shape computes, bit for bit,
//! but for the integer-dot products, which round x to 8 bits (held to the reference in
//! hearth-kernels); a model whose tuning chose those runs them in its step.
//! Outside CI a machine without a Vulkan device skips these; in CI a missing device fails.

use std::sync::Arc;
use std::time::Duration;

use hearth_engine::tune::{prepare, products, TuneSetting};
use hearth_kernels::testing::{random, upload, upload_weights};
use hearth_kernels::tune::{Choices, MatvecVariant, Product, TuneOptions, TunedMatvec, Tuning};
use hearth_kernels::vk::{Buffer, BufferDesc, Device, DeviceDesc, Recorder};
use hearth_kernels::{Matvec, MatvecArgs, WeightFormat};
use hearth_model::{Backend, Logits, ModelConfig};
use hearth_models::resolve_gguf;
use hearth_models::synthetic::Shape;
use hearth_quant::Format;
use hearth_reference::CpuModel;
use hearth_vulkan::{VkModel, VkModelOptions};

fn device() -> Option<Arc<Device>> {
    hearth_testkit::or_skip(Device::new(DeviceDesc::default()), "Vulkan device")
}

fn scratch(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hearth-tune-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The tiny model's decode products: its Q8 layers' four matrices and its head.
fn tiny_products() -> Vec<Product> {
    let file = Shape::TINY.build_random("tune", Format::Q8, 3).unwrap();
    let model = resolve_gguf(&file).unwrap();
    let config = ModelConfig::from_resolved(&file, &model).unwrap();
    products(&file, &model, &config)
}

#[test]
fn a_tune_measures_keeps_and_reuses_its_choices() {
    let Some(dev) = device() else { return };
    let products = tiny_products();
    assert_eq!(products.len(), 1, "{products:?}");
    assert_eq!(products[0].format, WeightFormat::Q8);
    assert_eq!(products[0].shapes.len(), 5);

    let dir = scratch("keeps");
    let mut tuning = Tuning::for_device(dev.info());
    let options = TuneOptions {
        full: false,
        budget: Duration::from_secs(60),
    };
    let mut steps = 0;
    tuning
        .tune(&dev, &products, options, &mut |_| steps += 1)
        .unwrap();
    let entry = &tuning.matvec[0];
    let default = Matvec::default_variant(&dev, WeightFormat::Q8, 1);
    assert_eq!(entry.tried[0].0, default, "the default is measured first");
    assert!(entry.tried.len() > 1 && steps == entry.tried.len());
    assert!(entry.tried.iter().all(|t| t.1 > 0.0));
    // The choice is the default or a variant that measured faster than it.
    let chosen_us = entry.tried.iter().find(|t| t.0 == entry.chosen).unwrap().1;
    assert!(entry.chosen == default || chosen_us < entry.tried[0].1);
    tuning.save(&dir).unwrap();
    assert!(Tuning::load(&dir, dev.info()).unwrap().covers(&products));

    // A kept tuning is used as it stands: here one whose choice no measurement made.
    let planted = MatvecVariant {
        rb: default.rb + 4,
        ..default
    };
    let mut kept = Tuning::for_device(dev.info());
    kept.matvec.push(TunedMatvec {
        chosen: planted,
        ..entry.clone()
    });
    kept.save(&dir).unwrap();
    let setting = TuneSetting {
        dir: dir.clone(),
        tune_missing: true,
        budget: Duration::from_secs(60),
    };
    prepare(&dev, &products, &setting);
    assert_eq!(dev.tuning().matvec(WeightFormat::Q8, 1), Some(planted));
    assert_eq!(
        Matvec::new(&dev, WeightFormat::Q8, 1).unwrap().variant(),
        planted
    );

    // Another driver's tuning, or another kernel build's, is not this device's.
    let mut other = kept.clone();
    other.driver.push_str(" (updated)");
    let moved = other.save(&dir).unwrap();
    std::fs::rename(moved, Tuning::file_for(&dir, dev.info())).unwrap();
    assert!(Tuning::load(&dir, dev.info()).is_none());
    let mut rebuilt = kept.clone();
    rebuilt.matvec[0].kernel = "0000000000000000".into();
    assert!(!rebuilt.covers(&products) && rebuilt.choices().is_empty());
    // Untuned again where the kept file is not this driver's and nothing may be tuned.
    let no_tune = TuneSetting {
        tune_missing: false,
        ..setting
    };
    prepare(&dev, &products, &no_tune);
    assert!(dev.tuning().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tuned_shape_computes_what_the_default_computes() {
    let Some(dev) = device() else { return };
    let (m, k) = (96u32, 256u32);
    let (w, _) = upload_weights(&dev, &random((m * k) as usize, 1, 1.0), Format::Q4);
    let x = upload(&dev, &random(k as usize, 2, 1.0));
    let run = |variant: Option<MatvecVariant>| -> Vec<f32> {
        let mv = Matvec::with_variant(&dev, Format::Q4, 1, variant).unwrap();
        let y = Buffer::new(&dev, BufferDesc::readback("y", m as u64 * 4)).unwrap();
        let mut rec = Recorder::new(&dev).unwrap();
        mv.record(&mut rec, MatvecArgs::plain(&w, &x, &y, m, k, 1))
            .unwrap();
        rec.submit().unwrap();
        y.download(m as usize).unwrap()
    };
    let want = run(None);
    for v in Matvec::variants(&dev, Format::Q4, 1, true) {
        if !v.idot {
            assert_eq!(run(Some(v)), want, "{v:?}");
        }
    }
}

/// The prompt's logits (all but its last token as a prefill, the last as a decode step).
fn prompt_logits(backend: &mut dyn Backend, prompt: &[u32]) -> Vec<f32> {
    let (last, rest) = prompt.split_last().unwrap();
    let mut all = backend.forward(rest, Logits::All).unwrap();
    all.extend(backend.forward(&[*last], Logits::All).unwrap());
    all
}

#[test]
fn a_tuned_integer_dot_product_runs_in_the_step() {
    let device = Device::new(DeviceDesc {
        index: None,
        validation: true,
    });
    let Some(dev) = hearth_testkit::or_skip(device, "Vulkan device") else {
        return;
    };
    if !dev.info().arithmetic.integer_dot_product {
        return;
    }
    // Chosen for decode, decode batches and lavapipe's prompt chunks alike, so that every
    // product of the step rounds its input: x normed for QKV and gate/up, attention's output,
    // the MLP's hidden values, the head.
    let mut choices = Choices::default();
    for tokens in [1, 8, 16] {
        choices.set_matvec("Q8", tokens, Matvec::idot_variant(&dev, Format::Q8));
    }
    dev.use_tuning(choices);
    let file = Shape::TINY.build_random("idot", Format::Q8, 5).unwrap();
    let resolved = resolve_gguf(&file).unwrap();
    let options = VkModelOptions {
        n_ctx: 64,
        profile: true,
        ..VkModelOptions::default()
    };
    let mut vk = VkModel::load(&dev, &file, &resolved, options, &mut |_| true).unwrap();
    let mut cpu = CpuModel::load(&file, &resolved, 64, &mut |_| true).unwrap();
    let prompt: Vec<u32> = (0..13).map(|i| (i * 37 + 5) % 256).collect();
    let got = prompt_logits(&mut vk, &prompt);
    let want = prompt_logits(&mut cpu, &prompt);
    let ran: Vec<&str> = vk.profile().kernels.iter().map(|k| k.0).collect();
    assert!(
        ran.contains(&"matvec_idot_q8") && ran.contains(&"quantize_q8"),
        "{ran:?}"
    );
    assert!(!ran.contains(&"matvec_q8"), "{ran:?}");
    // Each product's input rounded to 8 bits moves the logits: here by up to 1.2% of the
    // largest (measured: 0.024 of 1.96); the f32 products are held to 1e-4 of it
    // (narrow_simd.rs).
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    let worst = got
        .iter()
        .zip(&want)
        .fold(0f32, |a, (g, w)| a.max((g - w).abs()));
    assert!(
        worst <= 0.05 * scale,
        "logits differ by up to {worst} (largest {scale})"
    );
    let messages = dev.take_validation_messages();
    assert!(messages.is_empty(), "{}", messages.join("\n"));
}

//! Matrix-vector products tuned to the device at hand. Each product's kernel takes its shape
//! as specialization constants (rows a lane shares x with on CPU devices; subgroups per
//! workgroup and chunks a lane loads per turn on GPUs), and the best shape differs by device;
//! where the device has integer dot products, the product over x rounded to 8-bit blocks
//! (`idot`) is tried too, timed with the rounding it needs.
//! The tuner times the variants worth trying on the model's own matrices and keeps one only
//! where it measured faster than the default by a margin, so no device gets slower than its
//! defaults. Choices are kept per device, driver and kernel build in the user's cache
//! directory; a changed driver or kernel is tuned again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use crate::variants::{Choices, MatvecVariant};
use crate::vk::{Buffer, BufferDesc, Device, DeviceInfo, Recorder, Result, VkError};
use crate::{q8_act_bytes, Matvec, MatvecArgs, QuantizeArgs, QuantizeQ8, WeightFormat};

/// A variant must beat the default by this fraction to be chosen: timing noise is not speed.
pub const MARGIN: f64 = 0.03;

/// One product the tuner measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TunedMatvec {
    pub format: String,
    pub tokens: u32,
    /// The kernel's build (a hash of its SPIR-V): another build is tuned again.
    pub kernel: String,
    /// The matrices it was timed on, [rows, cols].
    pub shapes: Vec<[u32; 2]>,
    pub chosen: MatvecVariant,
    /// Each variant tried and its time over the shapes, microseconds; the default first.
    pub tried: Vec<(MatvecVariant, f64)>,
}

/// A device's tuning, as kept between runs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Tuning {
    pub device: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub driver: String,
    pub matvec: Vec<TunedMatvec>,
}

/// A product to tune for: a format and the matrices of it the model multiplies by.
#[derive(Clone, Debug)]
pub struct Product {
    pub format: WeightFormat,
    pub tokens: u32,
    /// [rows, cols] each.
    pub shapes: Vec<[u32; 2]>,
}

/// How long and how wide a tune may go.
#[derive(Clone, Copy, Debug)]
pub struct TuneOptions {
    /// Variants beyond the quick set.
    pub full: bool,
    /// Time after which no further variant is started (the default is always measured).
    pub budget: Duration,
}

/// What a tune has done, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct TuneProgress {
    pub done: usize,
    pub total: usize,
}

impl Tuning {
    /// An empty tuning for `info`'s device and driver.
    pub fn for_device(info: &DeviceInfo) -> Self {
        Self {
            device: info.name.clone(),
            vendor_id: info.vendor_id,
            device_id: info.device_id,
            driver: info.driver.clone(),
            matvec: Vec::new(),
        }
    }

    /// Where `info`'s tuning is kept in `dir`.
    pub fn file_for(dir: &Path, info: &DeviceInfo) -> PathBuf {
        file_in(dir, info.vendor_id, info.device_id, &info.driver)
    }

    /// The tuning kept for `info`'s device in `dir`, if there is one for its driver (a file
    /// that cannot be read is no tuning: it is tuned again).
    pub fn load(dir: &Path, info: &DeviceInfo) -> Option<Self> {
        let text = std::fs::read_to_string(Self::file_for(dir, info)).ok()?;
        let t: Tuning = serde_json::from_str(&text).ok()?;
        let same = (t.vendor_id, t.device_id, t.driver.as_str())
            == (info.vendor_id, info.device_id, info.driver.as_str());
        same.then_some(t)
    }

    /// Writes it where [`load`](Self::load) finds it.
    pub fn save(&self, dir: &Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let info_file = file_in(dir, self.vendor_id, self.device_id, &self.driver);
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        // Whole or not at all: another process may read it, or write its own, meanwhile.
        let tmp = info_file.with_extension(format!("json.{}.tmp", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &info_file)?;
        Ok(info_file)
    }

    /// The entry for `format` and `tokens` with the kernel built now, if tuned.
    fn entry(&self, format: WeightFormat, tokens: u32) -> Option<&TunedMatvec> {
        let kernel = kernel_hash(format);
        self.matvec
            .iter()
            .find(|e| e.format == format.name() && e.tokens == tokens && e.kernel == kernel)
    }

    /// Every product in `products` has an entry for today's kernels.
    pub fn covers(&self, products: &[Product]) -> bool {
        products
            .iter()
            .all(|p| self.entry(p.format, p.tokens).is_some())
    }

    /// Drops the entries of `products`, so that they are tuned again.
    pub fn forget(&mut self, products: &[Product]) {
        self.matvec.retain(|e| {
            !products
                .iter()
                .any(|p| e.format == p.format.name() && e.tokens == p.tokens)
        });
    }

    /// The choices to use: entries made with today's kernels.
    pub fn choices(&self) -> Choices {
        let mut c = Choices::default();
        for e in &self.matvec {
            let current = WeightFormat::ALL
                .iter()
                .find(|f| f.name() == e.format)
                .is_some_and(|&f| kernel_hash(f) == e.kernel);
            if current {
                c.set_matvec(&e.format, e.tokens, e.chosen);
            }
        }
        c
    }

    /// Tunes the products it does not cover yet on `device`, within `options`.
    pub fn tune(
        &mut self,
        device: &Arc<Device>,
        products: &[Product],
        options: TuneOptions,
        progress: &mut dyn FnMut(TuneProgress),
    ) -> Result<()> {
        let todo: Vec<&Product> = products
            .iter()
            .filter(|p| self.entry(p.format, p.tokens).is_none())
            .collect();
        let plans: Vec<Vec<MatvecVariant>> = todo
            .iter()
            .map(|p| Matvec::variants(device, p.format, p.tokens, options.full))
            .collect();
        let total = plans.iter().map(Vec::len).sum();
        let start = Instant::now();
        let mut done = 0;
        for (p, variants) in todo.iter().zip(plans) {
            // Every variant's pipeline first, as far as the budget goes (the default always,
            // so that a choice is a measured one), then the timing, alternated.
            let mut built = Vec::new();
            for (i, v) in variants.iter().enumerate() {
                if i > 0 && start.elapsed() > options.budget {
                    break;
                }
                built.push((
                    *v,
                    Matvec::with_variant(device, p.format, p.tokens, Some(*v))?,
                ));
                done += 1;
                progress(TuneProgress { done, total });
            }
            let times = time_products(device, p, &built)?;
            let tried: Vec<(MatvecVariant, f64)> =
                built.iter().map(|(v, _)| *v).zip(times).collect();
            // An entry of another kernel build gives way.
            self.forget(std::slice::from_ref(*p));
            self.matvec.push(TunedMatvec {
                format: p.format.name().to_string(),
                tokens: p.tokens,
                kernel: kernel_hash(p.format),
                shapes: p.shapes.clone(),
                chosen: choose(&tried),
                tried,
            });
        }
        Ok(())
    }
}

/// The variant to use from `tried` (the default first): the fastest, where it beats the
/// default by [`MARGIN`]; else the default.
pub fn choose(tried: &[(MatvecVariant, f64)]) -> MatvecVariant {
    let Some(&(default, default_us)) = tried.first() else {
        unreachable!("the default is always tried")
    };
    let (best, best_us) = tried
        .iter()
        .copied()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((default, default_us));
    match best_us < default_us * (1.0 - MARGIN) {
        true => best,
        false => default,
    }
}

/// Rounds of timing: each round times every variant once, so that a drift in the device's
/// speed (clocks, other work on the machine) falls on all of them alike.
const ROUNDS: usize = 5;

/// Microseconds each of `built` takes over `p`'s shapes: the best of [`ROUNDS`] alternated
/// rounds (the first only warms), each a submission of several dispatches per shape. An
/// integer-dot product is timed with the rounding of x before it, as a step pays it once per
/// input (one product, or the runs of one matrix).
fn time_products(
    device: &Arc<Device>,
    p: &Product,
    built: &[(MatvecVariant, Matvec)],
) -> Result<Vec<f64>> {
    let mut operands = Vec::new();
    for &[m, k] in &p.shapes {
        let Some(row) = p.format.bytes_for(k as usize) else {
            return Err(VkError::Kernel {
                kernel: "tune",
                message: format!("{k} columns are not whole {} blocks", p.format.name()),
            });
        };
        let buffer =
            |name, bytes: u64| Buffer::new(device, BufferDesc::device_local(name, bytes.max(4)));
        let w = buffer("tune w", row as u64 * m as u64)?;
        let x = buffer("tune x", (p.tokens * k * 4) as u64)?;
        let y = buffer("tune y", (p.tokens * m * 4) as u64)?;
        let xq = buffer("tune x q8", q8_act_bytes(p.tokens, k))?;
        operands.push((m, k, w, x, y, xq));
    }
    let quantize = match built.iter().any(|(_, mv)| mv.reads_q8()) {
        true => Some(QuantizeQ8::new(device)?),
        false => None,
    };
    // Zeroed weights: the time of a product does not depend on its values.
    let mut rec = Recorder::new(device)?;
    for (_, _, w, x, _, _) in &operands {
        rec.fill_zero(w)?;
        rec.fill_zero(x)?;
    }
    rec.submit()?;
    const DISPATCHES: u32 = 4;
    let mut best = vec![f64::INFINITY; built.len()];
    for round in 0..ROUNDS {
        for (i, (_, matvec)) in built.iter().enumerate() {
            let mut total = 0.0;
            for (m, k, w, x, y, xq) in &operands {
                let mut rec = Recorder::new(device)?;
                for _ in 0..DISPATCHES {
                    let mut args = MatvecArgs::plain(w, x, y, *m, *k, p.tokens);
                    if let (true, Some(quantize)) = (matvec.reads_q8(), &quantize) {
                        let rounding = QuantizeArgs {
                            x,
                            norm: None,
                            out: xq,
                            k: *k,
                            tokens: p.tokens,
                        };
                        quantize.record(&mut rec, rounding)?;
                        args.x_q8 = Some(xq);
                    }
                    matvec.record(&mut rec, args)?;
                    rec.barrier();
                }
                total += rec.submit()?.wall.as_secs_f64() * 1e6 / DISPATCHES as f64;
            }
            if round > 0 {
                best[i] = best[i].min(total);
            }
        }
    }
    Ok(best)
}

/// One file per device and driver.
fn file_in(dir: &Path, vendor_id: u32, device_id: u32, driver: &str) -> PathBuf {
    dir.join(format!(
        "{vendor_id:04x}-{device_id:04x}-{}.json",
        hex(hash(driver.as_bytes()))
    ))
}

/// The build of the matrix-vector kernels a tune of `format` measures (the product, and the
/// integer-dot product with the rounding of x where the format has one), as a short hex
/// string.
pub fn kernel_hash(format: WeightFormat) -> String {
    let kernels = crate::format_kernels(format);
    let mut spirv = kernels.matvec.spirv.to_vec();
    if let Some(idot) = kernels.matvec_idot {
        spirv.extend_from_slice(idot.spirv);
        spirv.extend_from_slice(hearth_shaders::QUANTIZE_Q8.spirv);
    }
    let bytes: Vec<u8> = spirv.iter().flat_map(|w| w.to_le_bytes()).collect();
    hex(hash(&bytes))
}

/// FNV-1a, 64 bits: a stable name for a build or a driver, not a security measure.
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn hex(h: u64) -> String {
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(rb: u32) -> MatvecVariant {
        MatvecVariant {
            units: 8,
            lane_chunks: 1,
            rb,
            idot: false,
        }
    }

    #[test]
    fn the_integer_dot_product_is_timed_with_its_rounding() {
        let Some(dev) = crate::testing::device() else {
            return;
        };
        if !dev.info().arithmetic.integer_dot_product {
            return;
        }
        let format = WeightFormat::Q4_0;
        let product = Product {
            format,
            tokens: 1,
            shapes: vec![[64, 512], [96, 256]],
        };
        // What a tune builds for a format: the default, then (in a full tune) the
        // integer-dot product.
        let variants = Matvec::variants(&dev, format, 1, true);
        let idot = Matvec::idot_variant(&dev, format);
        assert_eq!(
            variants[..2],
            [Matvec::default_variant(&dev, format, 1), idot]
        );
        let built: Vec<(MatvecVariant, Matvec)> = variants[..2]
            .iter()
            .map(|&v| (v, Matvec::with_variant(&dev, format, 1, Some(v)).unwrap()))
            .collect();
        assert!(!built[0].1.reads_q8() && built[1].1.reads_q8());
        let times = time_products(&dev, &product, &built).unwrap();
        assert!(times.iter().all(|&t| t > 0.0 && t.is_finite()), "{times:?}");
        crate::testing::finish(&dev);
    }

    #[test]
    fn a_variant_is_chosen_only_when_it_measured_faster() {
        // The fastest, well past the margin.
        assert_eq!(
            choose(&[(v(12), 100.0), (v(8), 90.0), (v(16), 80.0)]),
            v(16)
        );
        // Within the margin: the default stays.
        assert_eq!(choose(&[(v(12), 100.0), (v(8), 98.0)]), v(12));
        // Slower variants never win; nor does a default measured alone.
        assert_eq!(choose(&[(v(12), 100.0), (v(8), 150.0)]), v(12));
        assert_eq!(choose(&[(v(12), 100.0)]), v(12));
    }
}

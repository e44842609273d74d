//! How fast the kernels run on a device, next to the memory bandwidth they are bounded by
//! (the device's streaming read, and the host CPU's). Each format's matrix-vector product
//! runs in its default shape (`matvec_<format>`) and, where the device has integer dot
//! products, beside it over x rounded to 8-bit blocks (`matvec_idot_<format>`, the product
//! alone; the rounding it needs once per input is the `quantize_q8` row of the same width).

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use hearth_kernels::vk::{Buffer, Completed, Device, Recorder};
use hearth_kernels::{
    q8_act_bytes, weight_buffer, Matmul, MatmulArgs, Matvec, MatvecArgs, OutputCols, QuantizeArgs,
    QuantizeQ8, ReadBandwidth, WeightFormat,
};
use hearth_model::{Error, Result};

/// Which kernels to run and how often.
#[derive(Clone, Debug, Serialize)]
pub struct KernelBenchParams {
    /// Timed repetitions per kernel (the median is reported).
    pub reps: usize,
    /// Tokens (rows of X) for the matmul shapes.
    pub tokens: u32,
    /// Only kernels whose name contains this.
    pub only: Option<String>,
}

impl Default for KernelBenchParams {
    fn default() -> Self {
        Self {
            reps: 5,
            tokens: 512,
            only: None,
        }
    }
}

/// What [`bench_kernels`] measured.
#[derive(Clone, Debug, Serialize)]
pub struct KernelReport {
    /// The device's name.
    pub device: String,
    pub rows: Vec<KernelRow>,
    /// Shapes left out because one of their buffers exceeds what the device can bind, each
    /// with the reason.
    pub skipped: Vec<String>,
}

/// One kernel at one shape.
#[derive(Clone, Debug, Serialize)]
pub struct KernelRow {
    pub kernel: String,
    pub shape: String,
    pub device: String,
    /// Bytes read from memory per run (weights and inputs).
    pub bytes: u64,
    pub flops: u64,
    pub time_us: f64,
    pub gb_per_s: f64,
    pub gflop_per_s: f64,
}

/// The measured part of a row: its work and its time.
struct Work {
    bytes: u64,
    flops: u64,
    seconds: f64,
}

impl KernelRow {
    fn new(kernel: &str, shape: String, device: &str, work: Work) -> Self {
        let Work {
            bytes,
            flops,
            seconds,
        } = work;
        Self {
            kernel: kernel.into(),
            shape,
            device: device.into(),
            bytes,
            flops,
            time_us: seconds * 1e6,
            gb_per_s: bytes as f64 / seconds / 1e9,
            gflop_per_s: flops as f64 / seconds / 1e9,
        }
    }
}

/// Matvec shapes (m, k): a 7B-class attention projection and MLP down projection, then
/// SmolLM2-135M's fused gate/up, down and output projections (small matrices show the
/// per-dispatch cost).
const MATVEC_SHAPES: &[(u32, u32)] = &[
    (4096, 4096),
    (4096, 11008),
    (3072, 576),
    (576, 1536),
    (49152, 576),
];
/// Matmul weight shapes (m, k).
const MATMUL_SHAPES: &[(u32, u32)] = &[(4096, 4096)];

/// Runs the kernels `params` asks for on `device`: the host's and the device's read
/// bandwidth, the fixed cost of a dispatch, then every format's matvec and matmul.
pub fn bench_kernels(device: &Arc<Device>, params: &KernelBenchParams) -> Result<KernelReport> {
    let name = device.info().name.clone();
    let reps = params.reps.max(1);
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    let limit = device.info().limits.max_storage_buffer_range;

    let wanted = |kernel: &str| params.only.as_deref().is_none_or(|o| kernel.contains(o));
    if wanted("host_read") {
        rows.push(host_read_bandwidth());
    }
    if wanted("read_bandwidth") {
        rows.push(device_read_bandwidth(device, &name, reps)?);
    }
    if wanted("dispatch") {
        rows.push(dispatch_cost(device, &name, reps)?);
    }
    for format in WeightFormat::ALL {
        let idot = Matvec::has_idot(device, format) && wanted(&kernel_name("matvec_idot", format));
        if !wanted(&kernel_name("matvec", format)) && !idot {
            continue;
        }
        let default = Matvec::with_variant(device, format, 1, None)?;
        let idot = match idot {
            true => Some(Matvec::with_variant(
                device,
                format,
                1,
                Some(Matvec::idot_variant(device, format)),
            )?),
            false => None,
        };
        for shape in matvec_shapes(format, limit) {
            let (m, k) = match shape {
                Ok(shape) => shape,
                Err(why) => {
                    skipped.push(why);
                    continue;
                }
            };
            let flops = 2 * m as u64 * k as u64;
            if wanted(&kernel_name("matvec", format)) {
                let work = Work {
                    bytes: matrix_bytes(format, m, k) + k as u64 * 4,
                    flops,
                    seconds: matvec_seconds(device, &default, (m, k), reps)?,
                };
                let kernel = kernel_name("matvec", format);
                rows.push(KernelRow::new(&kernel, format!("{m}x{k}"), &name, work));
            }
            if let Some(kernel) = &idot {
                let work = Work {
                    bytes: matrix_bytes(format, m, k) + q8_act_bytes(1, k),
                    flops,
                    seconds: matvec_seconds(device, kernel, (m, k), reps)?,
                };
                let kernel = kernel_name("matvec_idot", format);
                rows.push(KernelRow::new(&kernel, format!("{m}x{k}"), &name, work));
            }
        }
    }
    if wanted("quantize_q8") && device.info().arithmetic.integer_dot_product {
        let kernel = QuantizeQ8::new(device)?;
        let mut widths: Vec<u32> = MATVEC_SHAPES.iter().map(|&(_, k)| k).collect();
        widths.sort_unstable();
        widths.dedup();
        for k in widths {
            let work = Work {
                bytes: k as u64 * 4 + q8_act_bytes(1, k),
                flops: 0,
                seconds: quantize_seconds(device, &kernel, k, reps)?,
            };
            rows.push(KernelRow::new("quantize_q8", format!("1x{k}"), &name, work));
        }
    }
    for format in WeightFormat::ALL {
        if !wanted(&kernel_name("matmul", format)) {
            continue;
        }
        let kernel = Matmul::new(device, format)?;
        for &(m, k) in MATMUL_SHAPES {
            let n = params.tokens;
            let largest = matrix_bytes(format, m, k).max(n as u64 * k as u64 * 4);
            if let Some(why) = too_large(largest, limit, format!("matmul {n}x{m}x{k}")) {
                skipped.push(why);
                continue;
            }
            let w = weights(device, format, m as usize, k as usize)?;
            let x = Buffer::from_slice(device, "x", &vec![0.5f32; n as usize * k as usize])?;
            let c = Buffer::from_slice(device, "c", &vec![0f32; n as usize * m as usize])?;
            let args = MatmulArgs {
                x: &x,
                c: &c,
                n,
                m,
                k,
                accumulate: false,
                cols: OutputCols::default(),
            };
            let seconds = median_seconds(device, reps, |rec| kernel.record(rec, &w, args))?;
            let work = Work {
                bytes: matrix_bytes(format, m, k) + n as u64 * k as u64 * 4,
                flops: 2 * n as u64 * m as u64 * k as u64,
                seconds,
            };
            let kernel = kernel_name("matmul", format);
            rows.push(KernelRow::new(&kernel, format!("{n}x{m}x{k}"), &name, work));
        }
    }
    Ok(KernelReport {
        device: name,
        rows,
        skipped,
    })
}

/// The matvec shapes `format` runs at, each with the reason where it cannot: rows that are
/// not whole blocks of the format, or a matrix larger than `limit`, the device's largest
/// binding.
fn matvec_shapes(format: WeightFormat, limit: u64) -> Vec<std::result::Result<(u32, u32), String>> {
    let name = kernel_name("matvec", format);
    MATVEC_SHAPES
        .iter()
        .map(|&(m, k)| {
            // SmolLM2's 576-wide rows are not whole 256-value k-quant blocks.
            if format.bytes_for(k as usize).is_none() {
                let block = format.block_size();
                return Err(format!(
                    "{name} {m}x{k}: rows are not whole {block}-value blocks"
                ));
            }
            match too_large(matrix_bytes(format, m, k), limit, format!("matvec {m}x{k}")) {
                Some(why) => Err(why),
                None => Ok((m, k)),
            }
        })
        .collect()
}

/// Why a buffer of `bytes` cannot be bound on a device whose largest binding is `limit`.
fn too_large(bytes: u64, limit: u64, what: String) -> Option<String> {
    (bytes > limit).then(|| {
        format!("{what}: {bytes} bytes exceed the device's maxStorageBufferRange ({limit})")
    })
}

/// `matvec_q4`: a kernel family's variant for `format`.
fn kernel_name(family: &str, format: WeightFormat) -> String {
    format!("{family}_{}", format.name().to_ascii_lowercase())
}

/// Bytes of an [m, k] matrix in `format`.
fn matrix_bytes(format: WeightFormat, m: u32, k: u32) -> u64 {
    m as u64 * format.bytes_for(k as usize).unwrap_or(0) as u64
}

/// An [m, k] weight matrix in `format`: one quantized row of varied values, repeated (values
/// are irrelevant to speed, as long as they are ordinary numbers).
fn weights(device: &Arc<Device>, format: WeightFormat, m: usize, k: usize) -> Result<Buffer> {
    let row: Vec<f32> = (0..k)
        .map(|i| ((i * 2_654_435_761) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let mut packed = vec![0u8; format.bytes_for(k).unwrap_or(0)];
    format
        .quantize(&row, &mut packed)
        .map_err(|e| Error::options("format", e.to_string()))?;
    Ok(weight_buffer(device, "weights", &packed.repeat(m))?)
}

/// Runs `record` once to warm up, then `reps` times in one submission; the median GPU time of
/// one run (or wall time / reps where the device has no timestamps).
fn median_seconds<'a>(
    device: &'a Device,
    reps: usize,
    mut record: impl FnMut(&mut Recorder<'a>) -> hearth_kernels::vk::Result<()>,
) -> Result<f64> {
    let mut warm = Recorder::new(device)?;
    record(&mut warm)?;
    warm.submit()?;
    let mut rec = Recorder::timed(device)?;
    for _ in 0..reps {
        record(&mut rec)?;
    }
    let done: Completed = rec.submit()?;
    if done.kernels.is_empty() {
        return Ok(done.wall.as_secs_f64() / reps as f64);
    }
    let mut times: Vec<f64> = done.kernels.iter().map(|k| k.ns * 1e-9).collect();
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn device_read_bandwidth(device: &Arc<Device>, name: &str, reps: usize) -> Result<KernelRow> {
    let kernel = ReadBandwidth::new(device)?;
    // As large as one binding allows, up to 256 MiB (well past any cache).
    let bytes: u64 = (256u64 << 20).min(device.info().limits.max_storage_buffer_range) & !15;
    let src = Buffer::from_slice(device, "bandwidth source", &vec![1u32; bytes as usize / 4])?;
    let dst = Buffer::from_slice(
        device,
        "bandwidth sums",
        &vec![0u32; kernel.scratch_bytes() as usize / 4],
    )?;
    let seconds = median_seconds(device, reps, |rec| kernel.record(rec, &src, &dst))?;
    let work = Work {
        bytes,
        flops: 0,
        seconds,
    };
    let shape = format!("{} MiB", bytes >> 20);
    Ok(KernelRow::new("read_bandwidth", shape, name, work))
}

/// Median time of one decode product (one token) of an [m, k] matrix with `kernel`; one that
/// reads x rounded to 8 bits has it rounded once beforehand, outside the time.
fn matvec_seconds(
    device: &Arc<Device>,
    kernel: &Matvec,
    (m, k): (u32, u32),
    reps: usize,
) -> Result<f64> {
    let w = weights(device, kernel.format(), m as usize, k as usize)?;
    let x = Buffer::from_slice(device, "x", &x_values(k))?;
    let y = Buffer::from_slice(device, "y", &vec![0f32; m as usize])?;
    let xq = Buffer::from_slice(device, "x q8", &vec![0u8; q8_act_bytes(1, k) as usize])?;
    let x_q8 = match kernel.reads_q8() {
        true => {
            let mut rec = Recorder::new(device)?;
            QuantizeQ8::new(device)?.record(&mut rec, rounding(&x, &xq, k))?;
            rec.submit()?;
            Some(&xq)
        }
        false => None,
    };
    median_seconds(device, reps, |rec| {
        let args = MatvecArgs {
            x_q8,
            ..MatvecArgs::plain(&w, &x, &y, m, k, 1)
        };
        kernel.record(rec, args)
    })
}

/// One token's x of `k` values: varied, so that its blocks round to varied levels.
fn x_values(k: u32) -> Vec<f32> {
    (0..k)
        .map(|i| ((i as usize * 7_919) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// x ([1, k]) rounded into `xq`.
fn rounding<'a>(x: &'a Buffer, xq: &'a Buffer, k: u32) -> QuantizeArgs<'a> {
    QuantizeArgs {
        x,
        norm: None,
        out: xq,
        k,
        tokens: 1,
    }
}

/// Median time of rounding one token's x of `k` values to 8-bit blocks.
fn quantize_seconds(device: &Arc<Device>, kernel: &QuantizeQ8, k: u32, reps: usize) -> Result<f64> {
    let x = Buffer::from_slice(device, "x", &x_values(k))?;
    let xq = Buffer::from_slice(device, "x q8", &vec![0u8; q8_act_bytes(1, k) as usize])?;
    median_seconds(device, reps, |rec| kernel.record(rec, rounding(&x, &xq, k)))
}

/// The fixed cost of one dispatch: a Q4 product of one block per row and eight rows, whose
/// work is negligible. A decode step pays it once per kernel (four products and attention per
/// layer), which on a CPU device, where waking the worker threads dominates it, is a large
/// part of a small model's step.
fn dispatch_cost(device: &Arc<Device>, name: &str, reps: usize) -> Result<KernelRow> {
    let (m, k) = (8u32, 32u32);
    let format = WeightFormat::Q4;
    let kernel = Matvec::with_variant(device, format, 1, None)?;
    let work = Work {
        bytes: matrix_bytes(format, m, k) + k as u64 * 4,
        flops: 2 * m as u64 * k as u64,
        seconds: matvec_seconds(device, &kernel, (m, k), reps.max(20))?,
    };
    Ok(KernelRow::new(
        "dispatch",
        format!("matvec_q4 {m}x{k}"),
        name,
        work,
    ))
}

/// The host CPU summing a 512 MiB buffer with every core: the machine's memory bandwidth as
/// plain code sees it. Best of three.
fn host_read_bandwidth() -> KernelRow {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let data = vec![1u64; (512 << 20) / 8];
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let total: u64 = std::thread::scope(|s| {
            data.chunks(data.len().div_ceil(threads))
                .map(|chunk| s.spawn(move || chunk.iter().fold(0u64, |a, &b| a.wrapping_add(b))))
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap_or(0))
                .sum()
        });
        std::hint::black_box(total);
        best = best.min(start.elapsed().as_secs_f64());
    }
    let work = Work {
        bytes: 512 << 20,
        flops: 0,
        seconds: best,
    };
    KernelRow::new(
        "host_read (cpu)",
        format!("512 MiB, {threads} thr"),
        "host",
        work,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_kernels::testing::device;

    #[test]
    fn formats_whose_blocks_do_not_divide_a_shape_skip_it() {
        let shapes = matvec_shapes(WeightFormat::Q2_K, u64::MAX);
        let ran: Vec<_> = shapes.iter().filter_map(|s| s.clone().ok()).collect();
        assert_eq!(ran, [(4096, 4096), (4096, 11008), (576, 1536)]);
        let skipped: Vec<_> = shapes.iter().filter_map(|s| s.clone().err()).collect();
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(skipped[0].contains("3072x576"), "{skipped:?}");
    }

    #[test]
    fn matrices_larger_than_a_binding_skip_it() {
        let shapes = matvec_shapes(WeightFormat::Q4, 12_000_000);
        let skipped: Vec<_> = shapes.iter().filter_map(|s| s.clone().err()).collect();
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(skipped[0].contains("4096x11008"), "{skipped:?}");
        assert!(skipped[1].contains("49152x576"), "{skipped:?}");
    }

    #[test]
    fn a_device_runs_the_shapes_it_can_bind() {
        let Some(device) = device() else { return };
        let params = KernelBenchParams {
            reps: 1,
            tokens: 16,
            only: Some("dispatch".into()),
        };
        let report = bench_kernels(&device, &params).unwrap();
        assert_eq!(report.rows.len(), 1);
        assert!(report.rows[0].time_us > 0.0);
    }

    #[test]
    fn the_integer_dot_product_runs_beside_the_default() {
        let Some(device) = device() else { return };
        if !device.info().arithmetic.integer_dot_product {
            return;
        }
        let params = KernelBenchParams {
            reps: 1,
            tokens: 16,
            only: Some("matvec_idot_q4_0".into()),
        };
        let report = bench_kernels(&device, &params).unwrap();
        let shapes: Vec<&str> = report.rows.iter().map(|r| r.shape.as_str()).collect();
        assert_eq!(
            shapes,
            [
                "4096x4096",
                "4096x11008",
                "3072x576",
                "576x1536",
                "49152x576"
            ]
        );
        assert!(report
            .rows
            .iter()
            .all(|r| r.kernel == "matvec_idot_q4_0" && r.time_us > 0.0));
    }
}

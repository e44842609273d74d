//! `hearth bench kernels`: how fast the kernels run on the chosen device, next to the memory
//! bandwidth they are bounded by (the device's streaming read, and the host CPU's).

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use hearth_runtime::kernels::{
    weight_buffer, Matmul, Matvec, MatvecArgs, ReadBandwidth, WeightFormat,
};
use hearth_runtime::vk::{Buffer, Completed, Device, Recorder};
use serde::Serialize;

use crate::output::Format;
use crate::DeviceChoice;

#[derive(clap::Args)]
pub struct BenchKernelsArgs {
    /// Timed repetitions per kernel (the median is reported).
    #[arg(short = 'r', long, default_value_t = 5)]
    reps: usize,
    /// Tokens (rows of X) for the matmul shapes.
    #[arg(long, default_value_t = 512)]
    tokens: u32,
    /// Only run kernels whose name contains this.
    #[arg(long)]
    only: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(Serialize)]
struct Row {
    kernel: String,
    shape: String,
    device: String,
    /// Bytes read from memory per run (weights and inputs).
    bytes: u64,
    flops: u64,
    time_us: f64,
    gb_per_s: f64,
    gflop_per_s: f64,
}

impl Row {
    fn new(
        kernel: &str,
        shape: String,
        device: &str,
        bytes: u64,
        flops: u64,
        seconds: f64,
    ) -> Self {
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

pub fn run(args: &BenchKernelsArgs, choice: &DeviceChoice) -> Result<()> {
    let device = choice.open()?;
    let name = device.info().name.clone();
    let reps = args.reps.max(1);
    let mut rows = Vec::new();

    let wanted = |kernel: &str| args.only.as_deref().is_none_or(|o| kernel.contains(o));
    if wanted("host_read") {
        rows.push(host_read_bandwidth());
    }
    if wanted("read_bandwidth") {
        rows.push(device_read_bandwidth(&device, &name, reps)?);
    }
    if wanted("dispatch") {
        rows.push(dispatch_cost(&device, &name, reps)?);
    }
    for format in WeightFormat::ALL {
        if !wanted(&kernel_name("matvec", format)) {
            continue;
        }
        let kernel = Matvec::new(&device, format, 1)?;
        for &(m, k) in MATVEC_SHAPES {
            if !fits(
                &device,
                matrix_bytes(format, m, k),
                &format!("matvec {m}x{k}"),
            ) {
                continue;
            }
            let seconds = matvec_seconds(&device, &kernel, m, k, reps)?;
            let bytes = matrix_bytes(format, m, k) + k as u64 * 4;
            let flops = 2 * m as u64 * k as u64;
            rows.push(Row::new(
                &kernel_name("matvec", format),
                format!("{m}x{k}"),
                &name,
                bytes,
                flops,
                seconds,
            ));
        }
    }
    for format in WeightFormat::ALL {
        if !wanted(&kernel_name("matmul", format)) {
            continue;
        }
        let kernel = Matmul::new(&device, format)?;
        for &(m, k) in MATMUL_SHAPES {
            let n = args.tokens;
            if !fits(
                &device,
                matrix_bytes(format, m, k).max(n as u64 * k as u64 * 4),
                &format!("matmul {n}x{m}x{k}"),
            ) {
                continue;
            }
            let w = weights(&device, format, m as usize, k as usize)?;
            let x = Buffer::from_slice(&device, "x", &vec![0.5f32; n as usize * k as usize])?;
            let c = Buffer::from_slice(&device, "c", &vec![0f32; n as usize * m as usize])?;
            let seconds = median_seconds(&device, reps, |rec| {
                kernel.record(rec, &w, &x, &c, n, m, k, false)
            })?;
            let bytes = matrix_bytes(format, m, k) + n as u64 * k as u64 * 4;
            let flops = 2 * n as u64 * m as u64 * k as u64;
            rows.push(Row::new(
                &kernel_name("matmul", format),
                format!("{n}x{m}x{k}"),
                &name,
                bytes,
                flops,
                seconds,
            ));
        }
    }

    let mut out = String::new();
    match args.format {
        Format::Json => out = serde_json::to_string_pretty(&rows)? + "\n",
        Format::Table => {
            out.push_str(&format!("device: {name}"));
            out.push('\n');
            out.push_str(&format!(
                "{:<22} {:>16} {:>12} {:>10} {:>11}",
                "kernel", "shape", "time (us)", "GB/s", "GFLOP/s"
            ));
            out.push('\n');
            for r in &rows {
                out.push_str(&format!(
                    "{:<22} {:>16} {:>12.1} {:>10.2} {:>11.2}",
                    r.kernel, r.shape, r.time_us, r.gb_per_s, r.gflop_per_s
                ));
                out.push('\n');
            }
        }
    }
    crate::output::emit(&out)
}

/// Whether one buffer of `bytes` can be bound on this device; says so when it cannot.
fn fits(device: &Device, bytes: u64, what: &str) -> bool {
    let limit = device.info().limits.max_storage_buffer_range;
    if bytes > limit {
        eprintln!(
            "skipping {what}: {bytes} bytes exceed the device's maxStorageBufferRange ({limit})"
        );
    }
    bytes <= limit
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
    format.quantize(&row, &mut packed)?;
    Ok(weight_buffer(device, "weights", &packed.repeat(m))?)
}

/// Runs `record` once to warm up, then `reps` times in one submission; the median GPU time of
/// one run (or wall time / reps where the device has no timestamps).
fn median_seconds<'a>(
    device: &'a Device,
    reps: usize,
    mut record: impl FnMut(&mut Recorder<'a>) -> hearth_runtime::vk::Result<()>,
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

fn device_read_bandwidth(device: &Arc<Device>, name: &str, reps: usize) -> Result<Row> {
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
    Ok(Row::new(
        "read_bandwidth",
        format!("{} MiB", bytes >> 20),
        name,
        bytes,
        0,
        seconds,
    ))
}

/// Median time of one decode product (one token) of an [m, k] matrix with `kernel`.
fn matvec_seconds(
    device: &Arc<Device>,
    kernel: &Matvec,
    m: u32,
    k: u32,
    reps: usize,
) -> Result<f64> {
    let w = weights(device, kernel.format(), m as usize, k as usize)?;
    let x = Buffer::from_slice(device, "x", &vec![0.5f32; k as usize])?;
    let y = Buffer::from_slice(device, "y", &vec![0f32; m as usize])?;
    median_seconds(device, reps, |rec| {
        kernel.record(rec, MatvecArgs::plain(&w, &x, &y, m, k, 1))
    })
}

/// The fixed cost of one dispatch: a Q4 product of one block per row and eight rows, whose
/// work is negligible. A decode step pays it once per kernel (four products and attention per
/// layer), which on a CPU device, where waking the worker threads dominates it, is a large
/// part of a small model's step.
fn dispatch_cost(device: &Arc<Device>, name: &str, reps: usize) -> Result<Row> {
    let (m, k) = (8u32, 32u32);
    let format = WeightFormat::Q4;
    let kernel = Matvec::new(device, format, 1)?;
    let seconds = matvec_seconds(device, &kernel, m, k, reps.max(20))?;
    Ok(Row::new(
        "dispatch",
        format!("matvec_q4 {m}x{k}"),
        name,
        matrix_bytes(format, m, k) + k as u64 * 4,
        2 * m as u64 * k as u64,
        seconds,
    ))
}

/// The host CPU summing a 512 MiB buffer with every core: the machine's memory bandwidth as
/// plain code sees it. Best of three.
fn host_read_bandwidth() -> Row {
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
    Row::new(
        "host_read (cpu)",
        format!("512 MiB, {threads} thr"),
        "host",
        512 << 20,
        0,
        best,
    )
}

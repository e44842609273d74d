//! Quantizes a tensor with every format and both rounding rules, printing the time taken (wall
//! clock, and on Linux the thread's CPU time, which a busy machine does not inflate) and the
//! RMS error of the round trip.
//!
//! ```text
//! cargo run --release -p hearth-quant --example quantize_speed                 # 135M normal values
//! cargo run --release -p hearth-quant --example quantize_speed -- 10000000     # a count of them
//! cargo run --release -p hearth-quant --example quantize_speed -- weights.f32  # raw LE f32 file
//! cargo run --release -p hearth-quant --example quantize_speed -- 10000000 q4,q8 # some formats
//! ```

use std::time::Instant;

use hearth_quant::{Format, Rounding};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args().nth(1);
    let mut values = match arg.as_deref().map(|a| (a, a.parse::<usize>())) {
        Some((_, Ok(n))) => normal(n),
        Some((path, Err(_))) => std::fs::read(path)?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        None => normal(135_000_000),
    };
    let formats = match std::env::args().nth(2) {
        Some(list) => list
            .split(',')
            .map(str::parse)
            .collect::<Result<Vec<Format>, _>>()?,
        None => Format::ALL.to_vec(),
    };
    values.truncate(values.len() / 64 * 64);
    let n = values.len();
    println!("{n} values, one thread");
    println!("format  rounding  wall s  CPU s  Mvalues/s (CPU)  RMS error");
    for format in formats {
        for rounding in [Rounding::MinMax, Rounding::Search] {
            let mut bytes = vec![0u8; format.bytes_for(n).ok_or("size")?];
            let (start, cpu_start) = (Instant::now(), cpu_seconds());
            format.quantize_with(&values, &mut bytes, rounding)?;
            let secs = start.elapsed().as_secs_f64();
            let cpu = cpu_seconds()
                .zip(cpu_start)
                .map_or(secs, |(end, start)| end - start);
            let mut back = vec![0.0f32; n];
            format.dequantize(&bytes, &mut back)?;
            let sq: f64 = values
                .iter()
                .zip(&back)
                .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                .sum();
            let rms = (sq / n as f64).sqrt();
            let rate = n as f64 / cpu / 1e6;
            println!("{format:<7} {rounding:<9?} {secs:>6.2} {cpu:>6.2}  {rate:>15.1}  {rms:.4e}");
        }
    }
    Ok(())
}

/// CPU time of this thread so far (Linux: the first field of `/proc/thread-self/schedstat`, in
/// nanoseconds), or `None` where that is not available.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(ns * 1e-9)
}

/// `n` standard normal values (Box-Muller over a 64-bit LCG), scaled like typical weights.
fn normal(n: usize) -> Vec<f32> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            let r = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            (0.02 * r) as f32
        })
        .collect()
}

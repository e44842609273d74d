//! `hearth bench kernels`: how fast the kernels run on the chosen device, next to the memory
//! bandwidth they are bounded by (the runtime's `bench::kernels` measures).

use anyhow::Result;
use hearth_tools::bench::{bench_kernels, KernelBenchParams};

use crate::output::{emit, emit_json, Format};
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

pub fn run(args: &BenchKernelsArgs, choice: &DeviceChoice) -> Result<()> {
    let device = choice.open()?;
    let params = KernelBenchParams {
        reps: args.reps,
        tokens: args.tokens,
        only: args.only.clone(),
    };
    let report = bench_kernels(&device, &params)?;
    for skipped in &report.skipped {
        eprintln!("skipping {skipped}");
    }
    if args.format == Format::Json {
        return emit_json(&report.rows);
    }
    let mut out = format!("device: {}\n", report.device);
    out.push_str(&format!(
        "{:<22} {:>16} {:>12} {:>10} {:>11}\n",
        "kernel", "shape", "time (us)", "GB/s", "GFLOP/s"
    ));
    for r in &report.rows {
        out.push_str(&format!(
            "{:<22} {:>16} {:>12.1} {:>10.2} {:>11.2}\n",
            r.kernel, r.shape, r.time_us, r.gb_per_s, r.gflop_per_s
        ));
    }
    emit(&out)
}

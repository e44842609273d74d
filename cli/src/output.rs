//! What the commands share for printing: table or JSON, writing to stdout through a closed
//! pipe, sizes, progress bars, and the runtime's profile and sparsity statistics in words.

use std::io::Write as _;

use anyhow::Result;
use hearth_engine::Engine;
use hearth_model::kv::infinigen::IgStats;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// Table for people, JSON for machines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
}

/// Writes a command's whole output to stdout; a closed pipe (`hearth inspect m | head`)
/// ends the command quietly instead of panicking the way `println!` does.
pub fn emit(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// [`emit`]s `value` as pretty-printed JSON and a newline.
pub fn emit_json(value: &impl Serialize) -> Result<()> {
    emit(&(serde_json::to_string_pretty(value)? + "\n"))
}

/// Human-readable byte count.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A progress bar for work counted in steps, hidden when stderr is not a terminal.
pub fn step_bar(len: u64, what: &str) -> ProgressBar {
    ProgressBar::new(len).with_style(
        ProgressStyle::with_template(&format!(
            "{what} [{{bar:30}}] {{pos}}/{{len}} ({{elapsed}}, eta {{eta}}) {{msg}}"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    )
}

/// A progress bar for bytes (a download), hidden when stderr is not a terminal.
pub fn bytes_bar(len: u64, what: &str) -> ProgressBar {
    ProgressBar::new(len).with_style(
        ProgressStyle::with_template(&format!(
            "{what} [{{bar:30}}] {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}, eta {{eta}})"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    )
}

/// Prints the per-kernel GPU time of a profiled run to stderr, largest first.
pub fn print_profile(engine: &Engine) {
    let profile = engine.session().backend().profile();
    let mut rows = profile.kernels.clone();
    if rows.is_empty() {
        return;
    }
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = rows.iter().map(|r| r.1).sum();
    let fetch = profile.fetch_ns;
    eprintln!(
        "{:<16} {:>10} {:>7} {:>10} {:>9}",
        "kernel", "ms", "%", "dispatches", "us each"
    );
    for (label, ns, n) in rows {
        eprintln!(
            "{label:<16} {:>10.1} {:>6.1}% {n:>10} {:>9.1}",
            ns / 1e6,
            100.0 * ns / total,
            ns / 1e3 / n as f64
        );
    }
    if fetch > 0.0 {
        eprintln!(
            "InfiniGen fetch: {:.1} ms, {:.1} ms of it alongside other kernels",
            fetch / 1e6,
            profile.fetch_overlap_ns / 1e6
        );
    }
}

/// What a sparse attention (InfiniGen or H2O) read, in words: "InfiniGen fetched 13.3% of the
/// tokens (...)".
pub fn sparsity_line(who: &str, verb: &str, s: IgStats) -> String {
    let evicted = match s.evicted {
        0 => String::new(),
        n => format!("; the pool evicted {n} tokens"),
    };
    format!(
        "{who} {verb} {:.1}% of the tokens (mean {:.1}, min {}, max {} per layer and KV head){evicted}",
        100.0 * s.fetched_fraction(),
        s.mean_fetched(),
        s.min_fetched.unwrap_or(0),
        s.max_fetched
    )
}

/// What a sparse attention read, for JSON reports.
pub fn stats_json(s: IgStats) -> serde_json::Value {
    serde_json::json!({
        "fetched_fraction": s.fetched_fraction(),
        "mean_fetched": s.mean_fetched(),
        "min_fetched": s.min_fetched,
        "max_fetched": s.max_fetched,
        "evicted": s.evicted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_the_largest_whole_unit() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(92 << 20), "92.0 MiB");
        assert_eq!(size(3 << 30), "3.0 GiB");
    }
}

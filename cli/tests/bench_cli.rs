//! `hearth bench` through its command line: several KV placements compared in one run (one
//! engine each, every test's repetitions taken in turn), the other commands refusing a list,
//! and what needs no device (the synthetic presets, a missing model). Outside CI a machine
//! without a Vulkan device skips the bench; in CI a missing device fails it.

use std::process::Command;

use hearth_kernels::vk::{Device, DeviceDesc};

fn hearth(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .expect("the hearth binary runs")
}

#[test]
fn bench_compares_kv_placements_in_one_run() {
    if hearth_testkit::or_skip(Device::new(DeviceDesc::default()), "Vulkan device").is_none() {
        return;
    }
    let out = hearth(&[
        "--device",
        "vulkan",
        "bench",
        "--synthetic",
        "smollm2-135m",
        "-p",
        "0",
        "-n",
        "2",
        "-d",
        "16",
        "--parallel",
        "1,3",
        "-r",
        "1",
        "--kv-offload",
        "none,full",
        "-o",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON array");
    let rows = rows.as_array().expect("an array");
    let seen: Vec<(&str, u64)> = rows
        .iter()
        .map(|r| {
            assert!(r["avg_ts"].as_f64().unwrap() > 0.0, "{r}");
            (
                r["kv_offload"].as_str().unwrap(),
                r["n_parallel"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("none", 1), ("none", 3), ("full", 1), ("full", 3)],
        "{rows:?}"
    );
}

#[test]
fn other_commands_take_one_placement() {
    let out = hearth(&[
        "generate",
        "-m",
        "no-such-model",
        "-p",
        "hi",
        "--kv-offload",
        "none,full",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("kv-offload") && stderr.contains("one placement"),
        "{stderr}"
    );
}

#[test]
fn synthetic_list_prints_the_presets() {
    let out = hearth(&["bench", "--synthetic", "list"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("| preset |") && stdout.contains("| llama-7b |"),
        "{stdout}"
    );
}

#[test]
fn bench_without_a_model_says_what_to_give() {
    let out = hearth(&["bench"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("say what to benchmark") && stderr.contains("bench kernels"),
        "{stderr}"
    );
}

//! `hearth devices`: the CPU executor (`--device cpu`) and every Vulkan device
//! (`--device vulkan:N`), with what each can do, and which one runs models by default.

use anyhow::Result;
use hearth_engine::placement::CpuExecutorInfo;
use hearth_engine::Placement;
use hearth_kernels::vk::{list_devices, DeviceInfo};
use serde::Serialize;

use crate::output::Format;

#[derive(clap::Args)]
pub struct DevicesArgs {
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// What `--format json` prints.
#[derive(Serialize)]
struct Devices {
    /// What runs models without `--device`: `cpu` or `vulkan`.
    default: String,
    cpu: CpuExecutorInfo,
    vulkan: Vec<DeviceInfo>,
}

pub fn run(args: &DevicesArgs, choice: &crate::DeviceChoice) -> Result<()> {
    // A machine without a Vulkan loader or driver still has the CPU executor.
    let (vulkan, missing) = match list_devices() {
        Ok(devices) => (devices, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let devices = Devices {
        default: Placement::default_among(&vulkan).to_string(),
        cpu: CpuExecutorInfo::detect(choice.isa),
        vulkan,
    };
    let mut out = String::new();
    match args.format {
        Format::Json => out = serde_json::to_string_pretty(&devices)? + "\n",
        Format::Table => {
            let cpu = &devices.cpu;
            out.push_str(&format!(
                "[cpu] CPU executor{}\n    kernels       {} (this CPU has: {}), {} threads\n",
                if devices.default == "cpu" {
                    " (default)"
                } else {
                    ""
                },
                cpu.isa,
                cpu.available.join(", "),
                cpu.threads
            ));
            match missing {
                Some(e) => out.push_str(&format!("no Vulkan devices: {e}\n")),
                None if devices.vulkan.is_empty() => out.push_str("no Vulkan devices found\n"),
                None => {}
            }
            let dir = hearth_models::user_tuning_dir();
            for d in &devices.vulkan {
                print_device(&mut out, d);
                out.push_str(&format!("    tuned         {}\n", tuned(dir.as_deref(), d)));
            }
        }
    }
    crate::output::emit(&out)
}

/// Whether `hearth tune` (or a first load) kept a tuning for this device and driver.
fn tuned(dir: Option<&std::path::Path>, d: &DeviceInfo) -> String {
    let kept = dir.and_then(|dir| hearth_kernels::tune::Tuning::load(dir, d));
    match kept {
        Some(t) if !t.choices().is_empty() => {
            let changed = t
                .matvec
                .iter()
                .filter(|e| Some(&e.chosen) != e.tried.first().map(|x| &x.0));
            format!(
                "yes, {} products ({} off their default shape)",
                t.matvec.len(),
                changed.count()
            )
        }
        _ => "no (hearth tune -m MODEL)".into(),
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

fn print_device(out: &mut String, d: &DeviceInfo) {
    let a = &d.arithmetic;
    let l = &d.limits;
    let m = &d.memory;
    out.push_str(&format!(
        "[vulkan:{}] {} ({})",
        d.index,
        d.name,
        d.kind.as_str()
    ));
    out.push('\n');
    out.push_str(&format!(
        "    vulkan {}, driver {}, vendor 0x{:04x} device 0x{:04x}",
        d.api_version, d.driver, d.vendor_id, d.device_id
    ));
    out.push('\n');
    out.push_str(&format!(
        "    subgroup      size {} (range {}-{}), ops: {}",
        d.subgroup.size,
        d.subgroup.min_size,
        d.subgroup.max_size,
        d.subgroup.operations.join(" ")
    ));
    out.push('\n');
    out.push_str(&format!(
        "    arithmetic    fp16 {}, int8 {}, int64 {}, 8-bit storage {}, 16-bit storage {}, int dot {}, coop matrix {}, buffer addresses {}",
        yes(a.shader_float16),
        yes(a.shader_int8),
        yes(a.shader_int64),
        yes(a.storage_buffer_8bit),
        yes(a.storage_buffer_16bit),
        yes(a.integer_dot_product),
        yes(a.cooperative_matrix),
        yes(a.buffer_device_address)
    ));
    out.push('\n');
    out.push_str(&format!(
        "    workgroups    max size {:?}, max invocations {}, max count {:?}, shared {} KiB",
        l.max_workgroup_size,
        l.max_workgroup_invocations,
        l.max_workgroup_count,
        l.max_shared_memory >> 10
    ));
    out.push('\n');
    out.push_str(&format!(
        "    limits        storage range {}, allocation {}, push constants {} B, timestamps {}",
        mib(l.max_storage_buffer_range),
        mib(l.max_memory_allocation_size),
        l.max_push_constants,
        l.timestamp_period_ns
            .map_or("no".into(), |p| format!("{p} ns/tick"))
    ));
    out.push('\n');
    let heaps: Vec<String> = m
        .heaps
        .iter()
        .map(|h| {
            format!(
                "{}{}",
                mib(h.size),
                if h.device_local {
                    " device-local"
                } else {
                    " host"
                }
            )
        })
        .collect();
    out.push_str(&format!(
        "    memory        heaps [{}]; device-local {}, host-visible {}, host-cached {}, rebar {}",
        heaps.join(", "),
        yes(m.device_local),
        yes(m.host_visible),
        yes(m.host_cached),
        yes(m.rebar)
    ));
    out.push('\n');
}

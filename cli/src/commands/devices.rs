//! `hearth devices`: every Vulkan device and what it can do.

use anyhow::Result;
use hearth_kernels::vk::{list_devices, DeviceInfo};

use crate::output::Format;

#[derive(clap::Args)]
pub struct DevicesArgs {
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: &DevicesArgs) -> Result<()> {
    let devices = list_devices()?;
    let mut out = String::new();
    match args.format {
        Format::Json => out = serde_json::to_string_pretty(&devices)? + "\n",
        Format::Table => {
            if devices.is_empty() {
                out.push_str("no Vulkan devices found\n");
            }
            for d in &devices {
                print_device(&mut out, d);
            }
        }
    }
    crate::output::emit(&out)
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
    out.push_str(&format!("[{}] {} ({})", d.index, d.name, d.kind.as_str()));
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

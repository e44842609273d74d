//! `hearth devices`: every Vulkan device and what it can do.

use anyhow::Result;
use hearth_runtime::vk::{list_devices, DeviceInfo};

use crate::Format;

#[derive(clap::Args)]
pub struct DevicesArgs {
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

pub fn run(args: &DevicesArgs) -> Result<()> {
    let devices = list_devices()?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&devices)?),
        Format::Table => {
            if devices.is_empty() {
                println!("no Vulkan devices found");
            }
            for d in &devices {
                print_device(d);
            }
        }
    }
    Ok(())
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

fn print_device(d: &DeviceInfo) {
    let a = &d.arithmetic;
    let l = &d.limits;
    let m = &d.memory;
    println!("[{}] {} ({})", d.index, d.name, d.kind.as_str());
    println!(
        "    vulkan {}, driver {}, vendor 0x{:04x} device 0x{:04x}",
        d.api_version, d.driver, d.vendor_id, d.device_id
    );
    println!(
        "    subgroup      size {} (range {}-{}), ops: {}",
        d.subgroup.size,
        d.subgroup.min_size,
        d.subgroup.max_size,
        d.subgroup.operations.join(" ")
    );
    println!(
        "    arithmetic    fp16 {}, int8 {}, 8-bit storage {}, 16-bit storage {}, int dot {}, coop matrix {}",
        yes(a.shader_float16),
        yes(a.shader_int8),
        yes(a.storage_buffer_8bit),
        yes(a.storage_buffer_16bit),
        yes(a.integer_dot_product),
        yes(a.cooperative_matrix)
    );
    println!(
        "    workgroups    max size {:?}, max invocations {}, max count {:?}, shared {} KiB",
        l.max_workgroup_size,
        l.max_workgroup_invocations,
        l.max_workgroup_count,
        l.max_shared_memory >> 10
    );
    println!(
        "    limits        storage range {}, allocation {}, push constants {} B, timestamps {}",
        mib(l.max_storage_buffer_range),
        mib(l.max_memory_allocation_size),
        l.max_push_constants,
        l.timestamp_period_ns
            .map_or("no".into(), |p| format!("{p} ns/tick"))
    );
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
    println!(
        "    memory        heaps [{}]; device-local {}, host-visible {}, host-cached {}, rebar {}",
        heaps.join(", "),
        yes(m.device_local),
        yes(m.host_visible),
        yes(m.host_cached),
        yes(m.rebar)
    );
    println!(
        "    extensions    push descriptor {}",
        yes(d.push_descriptor)
    );
}

//! `hearth inspect MODEL --placement`: where loading would put the model's layers (with
//! `--gpu-layers`, `--devices`, `--tensor-split`, `--gpu-memory`, the context and sequences
//! asked for) and what each part would hold, from the file and the devices' free memory,
//! without loading anything.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use hearth_engine::split::plan::LayerPlan;
use hearth_engine::{BackendKind, Engine, EngineOptions, Placement};
use hearth_model::kv::KvType;

use crate::model_args::SplitArgs;
use crate::output::{emit, emit_json, size, Format};
use crate::DeviceChoice;

/// What sizes the plan besides the split.
pub struct PlacementAsk<'a> {
    pub split: &'a SplitArgs,
    pub n_ctx: Option<usize>,
    pub n_seq: usize,
    pub kv_type: KvType,
    pub ubatch: usize,
}

pub fn run(path: &Path, device: &DeviceChoice, ask: &PlacementAsk, format: Format) -> Result<()> {
    let mut options = EngineOptions {
        backend: BackendKind::Vulkan,
        n_ctx: ask.n_ctx,
        n_seq: ask.n_seq.max(1),
        kv_type: ask.kv_type,
        max_chunk: ask.ubatch.max(1),
        validate: device.validate,
        gpu_layers: ask.split.gpu_layers,
        devices: ask.split.devices.clone(),
        tensor_split: ask.split.tensor_split.clone(),
        split_mode: ask.split.split_mode,
        gpu_memory: ask.split.gpu_memory,
        ..EngineOptions::default()
    };
    let placement = match (device.placement, ask.split.splits()) {
        (None, true) => Placement::Vulkan(None),
        _ => device.placement(),
    };
    placement.apply(&mut options);
    let plan = Engine::plan(path, &options)?;
    match format {
        Format::Json => emit_json(&plan),
        Format::Table => emit(&table(&plan)),
    }
}

fn table(plan: &LayerPlan) -> String {
    let mut out = String::new();
    let n_layer = plan.parts.iter().map(|p| p.layers.end).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "{} of {n_layer} layers on Vulkan devices; KV pool of {} blocks per part",
        plan.gpu_layers(),
        plan.kv_blocks
    );
    let rows = plan.parts.iter().any(|p| p.shard.is_some());
    let share_header = if rows { "  share" } else { "" };
    let _ = writeln!(
        out,
        "{:<10} {:>8} {:>10} {:>6} {:>11} {:>11} {:>11} {:>11}{share_header}",
        "part", "layers", "embedding", "head", "weights", "KV cache", "scratch", "total"
    );
    for p in &plan.parts {
        let yes = |b: bool| if b { "yes" } else { "" };
        let b = p.bytes;
        // The first of a row split's devices embeds and computes the logits.
        let leads = p.shard.as_ref().is_none_or(|s| s.index == 0);
        let share = match &p.shard {
            Some(s) => format!("  {s}"),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "{:<10} {:>8} {:>10} {:>6} {:>11} {:>11} {:>11} {:>11}{share}",
            p.name,
            format!("{}..{}", p.layers.start, p.layers.end),
            yes(p.layers.start == 0 && leads),
            yes(p.layers.end == n_layer && leads),
            size(b.weights),
            size(b.kv),
            size(b.scratch),
            size(b.total())
        );
    }
    for d in &plan.devices {
        let _ = writeln!(
            out,
            "vulkan:{}: {} ({} free)",
            d.index,
            d.name,
            size(d.free)
        );
    }
    out
}

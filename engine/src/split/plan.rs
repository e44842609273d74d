//! Where a model's layers go, decided before anything loads: how many layers a Vulkan device
//! holds (`--gpu-layers N|auto|all`) and how they divide among several devices
//! (`--devices 0,1 --tensor-split 3,1`), from what each part takes in device memory (its
//! weights as the file stores them, its layers' KV cache, the step's scratch) against what
//! the device has free. A part that cannot fit is an error naming the device, what it would
//! hold and what it has, before any weight is read.
//!
//! The first layers go to the CPU and the last to the devices, as llama.cpp's `-ngl` does:
//! the output head, the largest matrix and the one every token's logits need, sits with the
//! last layer on the device; the token embedding, read one row per token, stays with the
//! first layer on the CPU.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use hearth_model::kv::{blocks_for, blocks_in_budget, KvBudget, KvPlacement, KvShape, KvType};
use hearth_model::{part_file_bytes, CutBlocks, Error, ModelConfig, Part, Result, Shard};
use hearth_models::spec::MlpTensors;
use hearth_models::{GgufFile, ResolvedModel};
use serde::Serialize;

/// How many layers go to the Vulkan devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuLayers {
    /// This many (more than the model has: all of them).
    Count(usize),
    /// As many as the devices' free memory holds.
    Auto,
}

impl FromStr for GpuLayers {
    type Err = String;

    /// `auto`, `all`, or a count.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(GpuLayers::Auto),
            "all" | "max" => Ok(GpuLayers::Count(usize::MAX)),
            n => n
                .parse()
                .map(GpuLayers::Count)
                .map_err(|_| format!("{s:?}: expected a number of layers, auto or all")),
        }
    }
}

impl fmt::Display for GpuLayers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuLayers::Count(usize::MAX) => f.write_str("all"),
            GpuLayers::Count(n) => write!(f, "{n}"),
            GpuLayers::Auto => f.write_str("auto"),
        }
    }
}

/// How the GPU layers divide among several devices (`--split-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SplitMode {
    /// Each device holds a run of whole layers (llama.cpp's `-sm layer`).
    #[default]
    Layer,
    /// Every layer's heads and MLP units divided among the devices of a group (llama.cpp's
    /// `-sm row`), runs of layers among the groups of `group` devices (Inferflow's hybrid
    /// partition); `group` 0: all the devices in one group.
    Row { group: usize },
}

impl SplitMode {
    /// The devices (by place) that share each run of layers.
    fn groups(self, devices: usize) -> Vec<Range<usize>> {
        let size = match self {
            SplitMode::Layer => 1,
            SplitMode::Row { group: 0 } => devices.max(1),
            SplitMode::Row { group } => group,
        };
        (0..devices)
            .step_by(size)
            .map(|start| start..(start + size).min(devices))
            .collect()
    }
}

impl FromStr for SplitMode {
    type Err = String;

    /// `layer`, `row`, or `row:N` (groups of N devices).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "layer" | "none" => Ok(SplitMode::Layer),
            "row" => Ok(SplitMode::Row { group: 0 }),
            other => match other.strip_prefix("row:").map(str::parse) {
                Some(Ok(group)) if group >= 1 => Ok(SplitMode::Row { group }),
                _ => Err(format!(
                    "{s:?}: expected layer, row, or row:N (N devices to a group)"
                )),
            },
        }
    }
}

impl fmt::Display for SplitMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SplitMode::Layer => f.write_str("layer"),
            SplitMode::Row { group: 0 } => f.write_str("row"),
            SplitMode::Row { group } => write!(f, "row:{group}"),
        }
    }
}

/// A Vulkan device as the plan sees it.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceRoom {
    /// Its index in `hearth devices`.
    pub index: usize,
    pub name: String,
    /// Bytes the model may take there.
    pub free: u64,
    /// The largest storage buffer range (one layer's K or V must fit).
    pub max_range: u64,
}

/// What sizes every part, apart from its layers.
#[derive(Clone, Copy, Debug)]
pub struct CacheSizes {
    pub n_ctx: usize,
    pub n_seq: usize,
    pub kv_budget: Option<KvBudget>,
    pub kv_type: KvType,
    pub kv_placement: KvPlacement,
    /// Most tokens one step takes.
    pub chunk: usize,
    /// A whole model on one device: its pool takes what the weights leave, up to every
    /// sequence at full context, as the Vulkan executor sizes it; only one block must fit.
    pub kv_fills_room: bool,
}

/// Which executor holds a part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Executor {
    Cpu,
    /// A Vulkan device by its place in the plan's devices.
    Vulkan(usize),
}

/// One part of the plan: an executor and its layers, with what it takes on a device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedPart {
    #[serde(skip)]
    pub executor: Executor,
    /// "cpu" or "vulkan:N" (N the device's index).
    pub name: String,
    pub layers: Range<usize>,
    /// Its share of the layers' heads and units where they are divided by rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// Memory it takes: the device's, or system memory on the CPU.
    pub bytes: DeviceBytes,
}

impl PlannedPart {
    /// What it holds, as an executor loads it.
    pub fn part(&self, n_layer: usize) -> Result<Part> {
        Ok(Part::new(self.layers.clone(), n_layer)?.with_shard(self.shard.clone()))
    }
}

/// The plan: parts in the order of their layers, the KV pool's blocks every part keeps, and
/// the devices it was made for.
#[derive(Clone, Debug, Serialize)]
pub struct LayerPlan {
    pub parts: Vec<PlannedPart>,
    pub kv_blocks: usize,
    pub devices: Vec<DeviceRoom>,
}

impl LayerPlan {
    /// Layers on Vulkan devices.
    pub fn gpu_layers(&self) -> usize {
        self.parts
            .iter()
            .filter(|p| p.executor != Executor::Cpu)
            .filter(|p| p.shard.as_ref().is_none_or(|s| s.index == 0))
            .map(|p| p.layers.len())
            .sum()
    }

    /// One line per part, for the log and `hearth inspect --placement`.
    pub fn describe(&self) -> String {
        let lines: Vec<String> = self
            .parts
            .iter()
            .map(|p| {
                let room = match p.executor {
                    Executor::Cpu => String::new(),
                    Executor::Vulkan(_) => format!(" ({})", p.bytes),
                };
                let share = match &p.shard {
                    Some(s) => format!(", {s}"),
                    None => String::new(),
                };
                format!(
                    "{}: layers {}..{}{share}{room}",
                    p.name, p.layers.start, p.layers.end
                )
            })
            .collect();
        lines.join("; ")
    }
}

/// Device bytes of one part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceBytes {
    pub weights: u64,
    pub kv: u64,
    pub scratch: u64,
}

impl DeviceBytes {
    pub fn total(&self) -> u64 {
        self.weights + self.kv + self.scratch
    }
}

impl fmt::Display for DeviceBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} MiB: weights {} MiB, KV cache {} MiB, scratch {} MiB",
            mib(self.total()),
            mib(self.weights),
            mib(self.kv),
            mib(self.scratch)
        )
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

/// What parts of a model take, read from its file before loading.
pub struct Sizer<'a> {
    pub file: &'a GgufFile,
    pub model: &'a ResolvedModel,
    pub config: &'a ModelConfig,
    pub sizes: CacheSizes,
}

impl Sizer<'_> {
    /// The blocks every part's pool holds: each sequence at full context, or the budget,
    /// within what one storage buffer of each device takes.
    pub fn kv_blocks(&self, devices: &[DeviceRoom]) -> Result<usize> {
        let s = &self.sizes;
        let shape = KvShape::for_model(self.config, s.n_seq, s.n_ctx, s.kv_type)?;
        let max_range = devices
            .iter()
            .map(|d| d.max_range)
            .min()
            .unwrap_or(u64::MAX);
        let wanted = match s.kv_budget {
            Some(KvBudget::Bytes(b)) => blocks_in_budget(&shape, b, max_range),
            Some(KvBudget::Tokens(t)) => {
                blocks_for(t).min(blocks_in_budget(&shape, u64::MAX, max_range))
            }
            None => {
                (s.n_seq * blocks_for(s.n_ctx)).min(blocks_in_budget(&shape, u64::MAX, max_range))
            }
        };
        shape.with_blocks(wanted).map(|s| s.blocks)
    }

    /// Device bytes of layers `layers` with `blocks` KV blocks.
    pub fn bytes(&self, layers: Range<usize>, blocks: usize) -> Result<DeviceBytes> {
        self.part_bytes(&Part::new(layers, self.config.n_layer)?, blocks)
    }

    /// Device bytes of `part` (whole layers, or a row split's share) with `blocks` KV blocks.
    pub fn part_bytes(&self, part: &Part, blocks: usize) -> Result<DeviceBytes> {
        let shared;
        let c = match &part.shard {
            Some(shard) => {
                shared = shard.config(self.config);
                &shared
            }
            None => self.config,
        };
        let s = &self.sizes;
        let shape = KvShape {
            n_layer: part.len(),
            ..KvShape::for_model(c, s.n_seq, s.n_ctx, s.kv_type)?
        };
        let kv = match s.kv_placement {
            KvPlacement::Device => shape.with_blocks(blocks)?.total_bytes(),
            KvPlacement::Host => 0,
        };
        // The step's activations (the Vulkan executor's scratch), and the RoPE table.
        let out = if part.heads() {
            c.n_vocab.max(c.n_embd)
        } else {
            c.n_embd
        };
        let per_token = 4 * c.n_embd + c.qkv_dim() + c.attn_dim() + 3 * c.n_ff + out;
        let experts = c
            .experts
            .map_or(0, |x| x.used * (3 * x.n_ff + c.n_embd + 2));
        let scratch = (s.chunk * (per_token + experts) * 4 + s.n_ctx * c.head_dim * 4) as u64;
        Ok(DeviceBytes {
            weights: part_file_bytes(self.file, self.model, part),
            kv,
            scratch,
        })
    }

    /// Where layers go: the last `gpu` of them on `devices`, divided by `shares` (each
    /// device's free memory where none are given), the rest on the CPU.
    pub fn plan(
        &self,
        gpu: GpuLayers,
        devices: &[DeviceRoom],
        shares: &[f64],
        mode: SplitMode,
    ) -> Result<LayerPlan> {
        let n_layer = self.config.n_layer;
        let kv_blocks = self.kv_blocks(devices)?;
        let shares = match shares {
            [] => devices.iter().map(|d| d.free as f64).collect(),
            s if s.len() == devices.len()
                && s.iter().all(|&x| x >= 0.0)
                && s.iter().sum::<f64>() > 0.0 =>
            {
                s.to_vec()
            }
            s => {
                return Err(Error::options(
                    "tensor-split",
                    format!(
                        "{} shares for {} devices (one share per device, not all zero)",
                        s.len(),
                        devices.len()
                    ),
                ))
            }
        };
        let count = match gpu {
            GpuLayers::Count(n) => n.min(n_layer),
            GpuLayers::Auto => {
                // The most layers whose division fits every device.
                let mut fits = 0;
                for n in 1..=n_layer {
                    let parts = self.divide(n, devices, &shares, mode, kv_blocks)?;
                    if self.overflow(&parts, devices).is_some() {
                        break;
                    }
                    fits = n;
                }
                fits
            }
        };
        let mut parts = self.divide(count, devices, &shares, mode, kv_blocks)?;
        let mut kv_blocks = kv_blocks;
        if let ([part], true) = (&mut parts[..], self.sizes.kv_fills_room) {
            if let Executor::Vulkan(slot) = part.executor {
                kv_blocks = self.blocks_in_room(part, &devices[slot], kv_blocks)?;
                part.bytes = self.bytes(part.layers.clone(), kv_blocks)?;
            }
        }
        if let Some((part, room)) = self.overflow(&parts, devices) {
            return Err(self.out_of_memory(part, room, gpu, devices, (&shares, mode)));
        }
        Ok(LayerPlan {
            parts,
            kv_blocks,
            devices: devices.to_vec(),
        })
    }

    /// The blocks, at most `most` and at least one, that `part` can keep in `room` beside
    /// its weights and scratch.
    fn blocks_in_room(&self, part: &PlannedPart, room: &DeviceRoom, most: usize) -> Result<usize> {
        let one = self.bytes(part.layers.clone(), 1)?;
        let per_block = self.bytes(part.layers.clone(), 2)?.kv - one.kv;
        let left = room.free.saturating_sub(one.total());
        Ok((1 + left / per_block.max(1)).min(most as u64).max(1) as usize)
    }

    /// `count` last layers divided among `devices` by `shares` after the CPU's: among
    /// groups of devices as `mode` makes them, a group's layers whole on its one device or
    /// divided by rows among several.
    fn divide(
        &self,
        count: usize,
        devices: &[DeviceRoom],
        shares: &[f64],
        mode: SplitMode,
        kv_blocks: usize,
    ) -> Result<Vec<PlannedPart>> {
        let n_layer = self.config.n_layer;
        let first_gpu = n_layer - count;
        let mut parts = Vec::new();
        if first_gpu > 0 {
            parts.push(PlannedPart {
                executor: Executor::Cpu,
                name: "cpu".to_string(),
                layers: 0..first_gpu,
                shard: None,
                bytes: self.bytes(0..first_gpu, kv_blocks)?,
            });
        }
        let total: f64 = shares.iter().sum();
        let groups = mode.groups(devices.len());
        let mut start = first_gpu;
        let mut cumulative = 0.0;
        for (g, members) in groups.iter().enumerate() {
            cumulative += shares[members.clone()].iter().sum::<f64>();
            let end = match g + 1 == groups.len() {
                true => n_layer,
                false => first_gpu + (count as f64 * cumulative / total).round() as usize,
            };
            let end = end.min(n_layer);
            if end <= start {
                continue;
            }
            let layers = start..end;
            start = end;
            let shards = match members.len() {
                1 => vec![None],
                _ => Shard::divide(self.config, &shares[members.clone()], self.cut_blocks())?
                    .into_iter()
                    .map(Some)
                    .collect(),
            };
            for (slot, shard) in members.clone().zip(shards) {
                let part = Part::new(layers.clone(), n_layer)?.with_shard(shard.clone());
                parts.push(PlannedPart {
                    executor: Executor::Vulkan(slot),
                    name: format!("vulkan:{}", devices[slot].index),
                    layers: layers.clone(),
                    shard,
                    bytes: self.part_bytes(&part, kv_blocks)?,
                });
            }
        }
        // Rounding leaves nothing over: the last share ends at the last layer.
        debug_assert_eq!(start, n_layer);
        Ok(parts)
    }

    /// The blocks a row split cuts on: the largest of the output and down projections'
    /// blocks over the layers, as the file stores them.
    fn cut_blocks(&self) -> CutBlocks {
        let block = |name: &str| {
            self.file
                .tensor(name)
                .map_or(1, |t| t.ggml_type.block_size() as usize)
        };
        let mut blocks = CutBlocks {
            attn_output: 1,
            down: 1,
        };
        for l in &self.model.tensors.layers {
            blocks.attn_output = blocks.attn_output.max(block(&l.attn_output.weight));
            if let MlpTensors::Dense { down, .. } = &l.mlp {
                blocks.down = blocks.down.max(block(&down.weight));
            }
        }
        blocks
    }

    /// The first part that does not fit its device.
    fn overflow<'p>(
        &self,
        parts: &'p [PlannedPart],
        devices: &'p [DeviceRoom],
    ) -> Option<(&'p PlannedPart, &'p DeviceRoom)> {
        parts.iter().find_map(|p| match p.executor {
            Executor::Cpu => None,
            Executor::Vulkan(slot) => {
                let room = &devices[slot];
                (p.bytes.total() > room.free).then_some((p, room))
            }
        })
    }

    fn out_of_memory(
        &self,
        part: &PlannedPart,
        room: &DeviceRoom,
        asked: GpuLayers,
        devices: &[DeviceRoom],
        (shares, mode): (&[f64], SplitMode),
    ) -> Error {
        let fits = self
            .plan(GpuLayers::Auto, devices, shares, mode)
            .map(|p| p.gpu_layers())
            .unwrap_or(0);
        let n_layer = self.config.n_layer;
        let head = match part.layers.end == n_layer {
            true => " and the output head",
            false => "",
        };
        let asked = match asked {
            GpuLayers::Count(n) if n >= n_layer => "every layer".to_string(),
            other => format!("{other} layers"),
        };
        Error::DeviceMemory {
            device: format!("vulkan:{} ({})", room.index, room.name),
            free_mib: room.free as f64 / (1u64 << 20) as f64,
            what: format!(
                "layers {}..{}{head} ({asked} of {n_layer} on the GPU)",
                part.layers.start, part.layers.end
            ),
            asked: part.bytes.to_string(),
            advice: format!(
                "{fits} layers fit (--gpu-layers {fits}, or auto); a smaller --ctx-size or \
                 --kv-budget leaves room for more"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_models::resolve_gguf;
    use hearth_models::synthetic::Shape;
    use hearth_quant::Format;

    const SHAPE: Shape = Shape {
        n_layer: 8,
        ..Shape::TINY
    };

    fn room(index: usize, free: u64) -> DeviceRoom {
        DeviceRoom {
            index,
            name: format!("device {index}"),
            free,
            max_range: u64::MAX,
        }
    }

    /// Runs `check` with a sizer over an 8-layer model, every part keeping 8 KV blocks.
    fn with_sizer(check: impl FnOnce(&Sizer)) {
        let file = SHAPE.build_random("plan", Format::Q8, 3).unwrap();
        let model = resolve_gguf(&file).unwrap();
        let config = ModelConfig::from_resolved(&file, &model).unwrap();
        let sizer = Sizer {
            file: &file,
            model: &model,
            config: &config,
            sizes: CacheSizes {
                n_ctx: 128,
                n_seq: 1,
                kv_budget: None,
                kv_type: KvType::default(),
                kv_placement: KvPlacement::Device,
                chunk: 32,
                kv_fills_room: false,
            },
        };
        check(&sizer);
    }

    fn layers(plan: &LayerPlan) -> Vec<(String, Range<usize>)> {
        plan.parts
            .iter()
            .map(|p| (p.name.clone(), p.layers.clone()))
            .collect()
    }

    #[test]
    fn gpu_layers_are_the_last_and_shares_divide_them() {
        with_sizer(|s| {
            let big = [room(0, u64::MAX / 4), room(1, u64::MAX / 4)];
            let plan = s
                .plan(GpuLayers::Count(4), &big[..1], &[], SplitMode::Layer)
                .unwrap();
            let want = [("cpu".to_string(), 0..4), ("vulkan:0".to_string(), 4..8)];
            assert_eq!(layers(&plan), want);
            assert_eq!(plan.kv_blocks, 8);
            let plan = s
                .plan(
                    GpuLayers::Count(usize::MAX),
                    &big,
                    &[3.0, 1.0],
                    SplitMode::Layer,
                )
                .unwrap();
            let want = [
                ("vulkan:0".to_string(), 0..6),
                ("vulkan:1".to_string(), 6..8),
            ];
            assert_eq!(layers(&plan), want);
            // Only the part that ends the model holds the head: the larger scratch.
            assert!(plan.parts[1].bytes.scratch > plan.parts[0].bytes.scratch);
            let plan = s
                .plan(GpuLayers::Count(0), &big[..1], &[], SplitMode::Layer)
                .unwrap();
            assert_eq!(layers(&plan), [("cpu".to_string(), 0..8)]);
            let err = s
                .plan(GpuLayers::Count(2), &big, &[1.0], SplitMode::Layer)
                .unwrap_err();
            assert!(err.to_string().contains("1 shares for 2 devices"), "{err}");
        });
    }

    #[test]
    fn auto_fills_each_device_and_no_more() {
        with_sizer(|s| {
            let one = s.bytes(7..8, 8).unwrap().total();
            let per_layer = s.bytes(6..8, 8).unwrap().total() - one;
            // Room for the head and two more layers on one device.
            let rooms = [room(0, one + 2 * per_layer + per_layer / 2)];
            let plan = s
                .plan(GpuLayers::Auto, &rooms, &[], SplitMode::Layer)
                .unwrap();
            assert_eq!(plan.gpu_layers(), 3);
            let err = s
                .plan(GpuLayers::Count(5), &rooms, &[], SplitMode::Layer)
                .unwrap_err();
            assert!(matches!(err, Error::DeviceMemory { .. }), "{err}");
            assert!(err.to_string().contains("3 layers fit"), "{err}");
            // Nothing fits: every layer on the CPU.
            let plan = s
                .plan(GpuLayers::Auto, &[room(0, 1)], &[], SplitMode::Layer)
                .unwrap();
            assert_eq!(plan.gpu_layers(), 0);
        });
    }

    #[test]
    fn row_splits_divide_every_layer_among_a_group() {
        with_sizer(|s| {
            let big = [
                room(0, u64::MAX / 4),
                room(1, u64::MAX / 4),
                room(2, u64::MAX / 4),
            ];
            let all = GpuLayers::Count(usize::MAX);
            let row = SplitMode::Row { group: 0 };
            let plan = s.plan(all, &big[..2], &[], row).unwrap();
            let want = [
                ("vulkan:0".to_string(), 0..8),
                ("vulkan:1".to_string(), 0..8),
            ];
            assert_eq!(layers(&plan), want);
            assert_eq!(plan.gpu_layers(), 8);
            let shards: Vec<_> = plan
                .parts
                .iter()
                .map(|p| p.shard.clone().unwrap())
                .collect();
            assert_eq!(
                (shards[0].kv_heads.clone(), shards[1].kv_heads.clone()),
                (0..1, 1..2)
            );
            assert_eq!(
                (shards[0].ff.clone(), shards[1].ff.clone()),
                (0..64, 64..128)
            );
            // Each holds half the layers' matrices; the first, the embedding and the head.
            let whole = s.bytes(0..8, 8).unwrap();
            let (a, b) = (plan.parts[0].bytes, plan.parts[1].bytes);
            assert!(
                b.weights < whole.weights / 2 + whole.weights / 20,
                "{b:?} {whole:?}"
            );
            assert!(a.weights > b.weights && a.kv == b.kv && a.kv * 2 == whole.kv);
            // Hybrid: the CPU's layers, then two devices sharing rows, then one whole.
            let hybrid = SplitMode::Row { group: 2 };
            let plan = s
                .plan(GpuLayers::Count(6), &big, &[1.0, 1.0, 1.0], hybrid)
                .unwrap();
            let want = [
                ("cpu".to_string(), 0..2),
                ("vulkan:0".to_string(), 2..6),
                ("vulkan:1".to_string(), 2..6),
                ("vulkan:2".to_string(), 6..8),
            ];
            assert_eq!(layers(&plan), want);
            assert_eq!(plan.gpu_layers(), 6);
            assert!(plan
                .describe()
                .contains("vulkan:1: layers 2..6, KV heads 1..2"));
            // Three devices for two KV heads cannot each hold one.
            let err = s.plan(all, &big, &[], row).unwrap_err().to_string();
            assert!(err.contains("3 devices for 2 KV heads"), "{err}");
        });
    }

    #[test]
    fn split_modes_parse() {
        assert_eq!("row".parse(), Ok(SplitMode::Row { group: 0 }));
        assert_eq!("row:2".parse(), Ok(SplitMode::Row { group: 2 }));
        assert_eq!("LAYER".parse(), Ok(SplitMode::Layer));
        assert!("row:0".parse::<SplitMode>().is_err());
        assert_eq!(SplitMode::Row { group: 2 }.to_string(), "row:2");
    }

    #[test]
    fn counts_parse_as_llama_cpp_users_write_them() {
        assert_eq!("auto".parse(), Ok(GpuLayers::Auto));
        assert_eq!("all".parse(), Ok(GpuLayers::Count(usize::MAX)));
        assert_eq!("33".parse(), Ok(GpuLayers::Count(33)));
        assert!("lots".parse::<GpuLayers>().is_err());
        assert_eq!(GpuLayers::Count(usize::MAX).to_string(), "all");
    }
}

//! Weight-streaming matrix product: y[t] = W x[t] for a few tokens (decode), or for a whole
//! prompt chunk on CPU devices (prefill), in any weight format; and, where the device has
//! integer dot products, the same over x rounded to 8-bit blocks (the `idot` variant,
//! `matvec_idot.comp`), which a tuner chooses only where it measured faster.

use bytemuck::{Pod, Zeroable};

use super::act_q8::{q8_act_bytes, q8_act_ds_at};
use super::{
    check_sizes, format_kernels, has_wide_loads, matrix_bytes, wide_by_address, OutputCols, Pipe,
    WeightFormat,
};
use crate::vk::{Buffer, Device, DeviceKind, Recorder, Result, VkError};
use hearth_model::ops::GatedAct;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct MatvecPush {
    m: u32,
    k: u32,
    flags: u32,
    eps: f32,
    n: u32,
    rows: u32,
    /// Where the rows land in y (`OutputCols`).
    y_first: u32,
    y_width: u32,
    /// With experts: rows of W per expert, and slots per row of x.
    expert_rows: u32,
    x_per: u32,
    /// Device addresses of W, x and the norm gain, for the wide variants (0 elsewhere).
    w_addr: u64,
    x_addr: u64,
    g_addr: u64,
}

/// The push constants of `matvec_idot.comp`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct IdotPush {
    m: u32,
    k: u32,
    flags: u32,
    n: u32,
    rows: u32,
    y_first: u32,
    y_width: u32,
    /// Where the blocks' (d, s) start in the rounded activations, in 8-byte pairs.
    ds_at: u32,
}

const NORM: u32 = 1;
const ACCUMULATE: u32 = 2;
const GATED: u32 = 4;
const GELU: u32 = 8;

/// One matrix-vector product and the work folded into it (see `matvec.comp`).
#[derive(Clone, Copy)]
pub struct MatvecArgs<'a> {
    /// [m, k], or [2m, k] holding gate rows then up rows when `gated`.
    pub w: &'a Buffer,
    /// [batch, k]
    pub x: &'a Buffer,
    /// [batch, m], or [batch, cols.width] with the rows at `cols.first..`
    pub y: &'a Buffer,
    pub m: u32,
    pub k: u32,
    /// Tokens: vectors in x and y.
    pub batch: u32,
    /// RMSNorm of x with this gain ([k]) and epsilon before the product.
    pub norm: Option<(&'a Buffer, f32)>,
    /// y += W x instead of y = W x.
    pub accumulate: bool,
    /// y = act(W_gate x) * (W_up x).
    pub gated: Option<GatedAct>,
    /// Where the rows land in y.
    pub cols: OutputCols,
    /// x (normed where `norm` says) rounded to 8-bit blocks by `QuantizeQ8`, laid out from
    /// the buffer's start as `q8_act_bytes(batch, k)` says: what a product that reads 8-bit
    /// activations (`Matvec::reads_q8`) reads in place of x and the norm. Others ignore it.
    pub x_q8: Option<&'a Buffer>,
}

impl<'a> MatvecArgs<'a> {
    /// y = W x, nothing folded in.
    pub fn plain(w: &'a Buffer, x: &'a Buffer, y: &'a Buffer, m: u32, k: u32, batch: u32) -> Self {
        Self {
            w,
            x,
            y,
            m,
            k,
            batch,
            norm: None,
            accumulate: false,
            gated: None,
            cols: OutputCols::default(),
            x_q8: None,
        }
    }
}

/// The slots of a mixture of experts' product (the `_experts` variant): slot s is one
/// token's use of one expert, reads x row s / `x_per` and the rows of its expert, and writes
/// y row s. `moe_route` groups the slots into tiles of one expert each.
#[derive(Clone, Copy)]
pub struct ExpertSlots<'a> {
    /// [max_tiles] (expert, first index into order, slots, 0).
    pub tiles: &'a Buffer,
    /// [slots] the slots, expert by expert.
    pub order: &'a Buffer,
    pub max_tiles: u32,
    /// Experts stacked in W, each `m` rows (2 `m` when gated).
    pub experts: u32,
    pub x_per: u32,
}

/// How the kernel spreads work over a device.
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// Invocations per workgroup.
    workgroup: u32,
    /// Tokens sharing each unpacked weight block.
    tokens: u32,
    /// Lane per row (CPU devices) rather than subgroup per row (GPUs).
    lane_rows: bool,
    /// Rows a lane works on together, sharing x (lane per row; 1 otherwise).
    rb: u32,
    /// Load weight blocks, x and the gain 8 or 16 bytes at a time (the `_wide` variant; lane
    /// per row, on devices with 64-bit shader integers and buffer device addresses): a CPU
    /// device pays per load and lane.
    wide: bool,
    /// The wide variant reads through the buffers' addresses, else from the bound buffers
    /// (`wide_by_address`).
    by_address: bool,
    /// Lanes (lane per row) or subgroups (subgroup per row) in a workgroup: each owns rows.
    units: u32,
    /// 8-value chunks a lane loads per turn before it uses any (subgroup per row; 1 otherwise).
    lane_chunks: u32,
    /// The integer-dot product over x rounded to 8-bit blocks (`matvec_idot.comp`): subgroup
    /// per row, `rb` rows a subgroup together.
    idot: bool,
    /// Rows per unit are chosen per matrix to give about this many workgroups, within
    /// `min_rows..=max_rows`.
    target_groups: u32,
    min_rows: u32,
    max_rows: u32,
}

impl Shape {
    /// The knobs a tuner may turn.
    fn variant(&self) -> MatvecVariant {
        MatvecVariant {
            units: self.units,
            lane_chunks: self.lane_chunks,
            rb: self.rb,
            idot: self.idot,
        }
    }

    /// Takes `v`'s knobs where they fit this shape, `format` and `device`: the subgroup
    /// shape's units and chunks, the lane shape's rows per lane, or the integer-dot shape
    /// where the device has integer dot products (else the shape stays as it was).
    fn apply(&mut self, v: MatvecVariant, device: &Device, format: WeightFormat) {
        if v.idot {
            if Matvec::has_idot(device, format) {
                *self = Self::idot(device, self.tokens, v);
            }
            return;
        }
        match self.lane_rows {
            true => {
                self.rb = v.rb.clamp(1, 64);
                self.max_rows = self.max_rows.max(self.rb);
            }
            false => {
                let subgroup = device.info().subgroup.size.max(1);
                let most = device.info().limits.max_workgroup_invocations / subgroup;
                self.units = v.units.clamp(1, most.max(1));
                self.workgroup = self.units * subgroup;
                self.lane_chunks = v.lane_chunks.clamp(1, 8);
            }
        }
    }

    /// The integer-dot shape with `v`'s units, chunks and rows together, within the device's
    /// limits.
    fn idot(device: &Device, tokens: u32, v: MatvecVariant) -> Self {
        let subgroup = device.info().subgroup.size.max(1);
        let most = device.info().limits.max_workgroup_invocations / subgroup;
        let units = v.units.clamp(1, most.max(1));
        let rb = v.rb.clamp(1, 8);
        Shape {
            workgroup: units * subgroup,
            tokens,
            lane_rows: false,
            rb,
            wide: false,
            by_address: false,
            units,
            lane_chunks: v.lane_chunks.clamp(1, 8),
            idot: true,
            target_groups: u32::MAX,
            min_rows: rb,
            max_rows: rb,
        }
    }

    /// Rows per unit: a multiple of `rb`.
    fn rows_per_unit(&self, m: u32) -> u32 {
        // Saturating: GPUs set no target (u32::MAX) and take min_rows.
        let groups = self.units.saturating_mul(self.target_groups);
        let rows = (m / groups).clamp(self.min_rows, self.max_rows);
        rows.next_multiple_of(self.rb)
    }
}

/// Rows a lane works on together in the lane-per-row shape. They share each broadcast block of
/// x (the broadcasts and x's loads cost as much as the products otherwise), and a lane keeps
/// rows x tokens sums. Measured on lavapipe with SmolLM2:
/// - decode: 12 rows ran 22 -> 29 tokens/s over 2;
/// - several tokens (rows unrolled): 24 rows, pp512 over 12 with 16 tokens a pass: Q4 168 ->
///   179, Q2 170 -> 177, Q3 157 -> 162, Q3H 133 -> 138 tokens/s; Q5 and Q6 at 8 tokens fell
///   to 17 and 8 tokens/s with 12 rows (spilled) against 93 and 90 with 24. F16, whose
///   unpacked chunks are the widest code, keeps 12 (125 against 118 with 24). SmolLM2's row
///   counts are multiples of 8 x 24; counts that leave a workgroup's rows part-filled ran
///   slower;
/// - Q8's realigned 34-byte blocks do best at 16 (its output head: 8.3 -> 6.6 ms).
fn rows_per_lane(format: WeightFormat, tokens: u32) -> u32 {
    match format {
        WeightFormat::Q8 => 16,
        WeightFormat::F16 | WeightFormat::F32 => 12,
        _ if tokens > 1 => 24,
        _ => 12,
    }
}

/// Chunks a GPU lane takes per turn. Neighbouring lanes take neighbouring chunks, so a
/// subgroup's loads are coalesced, and a turn's chunks are loaded together so that several
/// loads per lane are in flight. On an H100, four chunks against one: Q4 4096x11008 674 ->
/// 712 GB/s, Q4_K 134 -> 488, Q6_K 124 -> 511, 7B Q4 decode 109 -> 117 tokens/s. F16 and F32,
/// whose chunks load whole 16- and 32-word blocks, fell to half with four (F16 1685 -> 720
/// GB/s). A lane taking whole blocks instead (loads strided by the block size across the
/// subgroup) ran Q4 at 526 GB/s and Q4_K at 83.
fn gpu_lane_chunks(format: WeightFormat) -> u32 {
    match format {
        WeightFormat::F16 | WeightFormat::F32 => 1,
        _ => 4,
    }
}

/// Lanes the lane-per-row shape needs: a block's x is spread over eight lanes' vec4s.
const LANE_ROWS_MIN_SUBGROUP: u32 = 8;

pub use crate::variants::MatvecVariant;

pub struct Matvec {
    pipe: Pipe,
    format: WeightFormat,
    shape: Shape,
    /// The `_experts` variant: products over `ExpertSlots`.
    experts: bool,
}

impl Matvec {
    /// A product for up to `tokens` tokens per pass over the weights (more are done in further
    /// passes): 1 for decode, up to 8 for a decode batch; on CPU devices a prompt chunk uses 16.
    /// The device's tuned shape for `format` and `tokens` where a tuner chose one.
    pub fn new(device: &Device, format: WeightFormat, tokens: u32) -> Result<Self> {
        let tuned = device.tuning().matvec(format, tokens);
        Self::with_variant(device, format, tokens, tuned)
    }

    /// A product of the shape `variant` gives (the default shape for `None`).
    pub fn with_variant(
        device: &Device,
        format: WeightFormat,
        tokens: u32,
        variant: Option<MatvecVariant>,
    ) -> Result<Self> {
        let mut shape = Self::shape(device, format, tokens);
        if let Some(v) = variant {
            shape.apply(v, device, format);
        }
        Self::with_shape(device, format, shape, false)
    }

    /// Whether `device` runs `format`'s integer-dot product: it has integer dot products
    /// and the format stores integer levels.
    pub fn has_idot(device: &Device, format: WeightFormat) -> bool {
        device.info().arithmetic.integer_dot_product && format_kernels(format).matvec_idot.is_some()
    }

    /// The integer-dot shape a tuner tries first: GPUs' default subgroups per workgroup and
    /// chunks per turn, one row a subgroup.
    pub fn idot_variant(device: &Device, format: WeightFormat) -> MatvecVariant {
        let subgroup = device.info().subgroup.size.max(1);
        let units = (8 * subgroup).min(device.info().limits.max_workgroup_invocations) / subgroup;
        MatvecVariant {
            units: units.max(1),
            lane_chunks: gpu_lane_chunks(format),
            rb: 1,
            idot: true,
        }
    }

    /// The shape a product of `format` over `tokens` takes untuned.
    pub fn default_variant(device: &Device, format: WeightFormat, tokens: u32) -> MatvecVariant {
        Self::shape(device, format, tokens).variant()
    }

    /// The variants worth measuring for `format` over `tokens` on `device`, the default first;
    /// `full` adds the wider search.
    pub fn variants(
        device: &Device,
        format: WeightFormat,
        tokens: u32,
        full: bool,
    ) -> Vec<MatvecVariant> {
        let base = Self::default_variant(device, format, tokens);
        let mut out = vec![base];
        let mut add = |v: MatvecVariant| {
            if !out.contains(&v) {
                out.push(v);
            }
        };
        // The integer-dot product next to the default: in a full tune wherever the device
        // has it, in a quick one where its driver says it is accelerated (lavapipe emulates
        // it, at 5-20 times the default's time).
        let accelerated = device.info().arithmetic.integer_dot_product_accelerated;
        let idot = (Self::has_idot(device, format) && (full || accelerated))
            .then(|| Self::idot_variant(device, format));
        if let Some(v) = idot {
            add(v);
        }
        match Self::shape(device, format, tokens).lane_rows {
            // Rows a lane shares each broadcast block of x with (see `rows_per_lane`).
            true => {
                let rbs: &[u32] = if full {
                    &[4, 8, 12, 16, 24, 32]
                } else {
                    &[8, 16, 24]
                };
                for &rb in rbs {
                    add(MatvecVariant { rb, ..base });
                }
            }
            // Chunks a lane loads per turn, and subgroups per workgroup.
            false => {
                let max_units = device.info().limits.max_workgroup_invocations
                    / device.info().subgroup.size.max(1);
                let units: &[u32] = if full { &[2, 4, 8, 16] } else { &[base.units] };
                for &u in units.iter().filter(|&&u| u <= max_units) {
                    for chunks in [1, 2, 4, 8] {
                        add(MatvecVariant {
                            units: u,
                            lane_chunks: chunks,
                            ..base
                        });
                    }
                }
            }
        }
        // Rows a subgroup takes together, sharing each load of x, and chunks per turn.
        if let Some(v) = idot {
            let (chunks, rbs): (&[u32], &[u32]) = match full {
                true => (&[1, 2, 4, 8], &[1, 2, 4]),
                false => (&[v.lane_chunks], &[2]),
            };
            for &lane_chunks in chunks {
                for &rb in rbs {
                    add(MatvecVariant {
                        lane_chunks,
                        rb,
                        ..v
                    });
                }
            }
        }
        out
    }

    /// A mixture of experts' product (`record_experts`), `tokens` slots of an expert per pass.
    pub fn experts(device: &Device, format: WeightFormat, tokens: u32) -> Result<Self> {
        Self::with_shape(device, format, Self::shape(device, format, tokens), true)
    }

    fn shape(device: &Device, format: WeightFormat, tokens: u32) -> Shape {
        let info = device.info();
        let subgroup = info.subgroup.size.max(1);
        // CPU devices run a workgroup as a loop over SIMD-wide subgroups: one subgroup per
        // group, rows per lane, so x is shared by all lanes and nothing is reduced. Each
        // workgroup has a fixed cost there (a few microseconds), so rows per lane grow with
        // the matrix, keeping a few dozen groups to spread over the cores. GPUs get several
        // subgroups per group, each streaming its own rows with coalesced loads. The lane
        // shape hands x round among eight lanes, so a CPU device with narrower SIMD (4 lanes
        // without AVX) takes the GPU shape.
        match info.kind {
            DeviceKind::Cpu if subgroup >= LANE_ROWS_MIN_SUBGROUP => Shape {
                workgroup: subgroup,
                tokens,
                lane_rows: true,
                rb: rows_per_lane(format, tokens),
                wide: has_wide_loads(device),
                by_address: wide_by_address(),
                units: subgroup,
                lane_chunks: 1,
                idot: false,
                target_groups: 32,
                min_rows: 1,
                max_rows: 48,
            },
            _ => {
                // One row per subgroup and eight subgroups per group: on an H100 the Q4
                // 4096x11008 product ran 676 GB/s with two rows per subgroup and four
                // subgroups, 764 GB/s so, and 469 GB/s with four rows (more rows leave
                // fewer loads in flight); 7B decode went 105 -> 119 tokens/s.
                let workgroup = (8 * subgroup).min(info.limits.max_workgroup_invocations);
                Shape {
                    workgroup,
                    tokens,
                    lane_rows: false,
                    rb: 1,
                    wide: false,
                    by_address: false,
                    units: workgroup / subgroup,
                    lane_chunks: gpu_lane_chunks(format),
                    idot: false,
                    target_groups: u32::MAX,
                    min_rows: 1,
                    max_rows: 1,
                }
            }
        }
    }

    fn with_shape(
        device: &Device,
        format: WeightFormat,
        shape: Shape,
        experts: bool,
    ) -> Result<Self> {
        let kernels = format_kernels(format);
        if shape.idot {
            let Some(kernel) = kernels.matvec_idot.filter(|_| !experts) else {
                return Err(VkError::Kernel {
                    kernel: kernels.matvec.name,
                    message: format!("no integer-dot product for {format} (or for experts)"),
                });
            };
            let spec = [shape.workgroup, shape.tokens, shape.lane_chunks, shape.rb];
            return Ok(Self {
                pipe: Pipe::specialized(device, kernel, &spec)?,
                format,
                shape,
                experts,
            });
        }
        let spec = [
            shape.workgroup,
            shape.tokens,
            shape.lane_rows as u32,
            shape.rb,
            shape.by_address as u32,
            shape.lane_chunks,
        ];
        let kernel = match (experts, shape.wide && shape.lane_rows) {
            (true, _) => kernels.matvec_experts,
            (false, true) => kernels.matvec_wide,
            (false, false) => kernels.matvec,
        };
        Ok(Self {
            pipe: Pipe::specialized(device, kernel, &spec)?,
            format,
            shape,
            experts,
        })
    }

    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// The shape it runs in.
    pub fn variant(&self) -> MatvecVariant {
        self.shape.variant()
    }

    /// Tokens (or expert slots) per pass over the weights.
    pub fn tokens(&self) -> u32 {
        self.shape.tokens
    }

    /// Whether it reads x rounded to 8-bit blocks (`MatvecArgs::x_q8`) rather than x.
    pub fn reads_q8(&self) -> bool {
        self.shape.idot
    }

    pub fn record<'a>(&self, rec: &mut Recorder<'a>, a: MatvecArgs<'a>) -> Result<()> {
        self.record_with(rec, a, None)
    }

    /// A mixture of experts' product: `a.batch` slots, each with its expert's rows of W
    /// (stacked, `a.m` rows each or 2 `a.m` gated), grouped by `slots`.
    pub fn record_experts<'a>(
        &self,
        rec: &mut Recorder<'a>,
        a: MatvecArgs<'a>,
        slots: ExpertSlots<'a>,
    ) -> Result<()> {
        self.record_with(rec, a, Some(slots))
    }

    fn record_with<'a>(
        &self,
        rec: &mut Recorder<'a>,
        a: MatvecArgs<'a>,
        slots: Option<ExpertSlots<'a>>,
    ) -> Result<()> {
        if self.shape.idot {
            return self.record_idot(rec, a);
        }
        let (m, k, batch) = (a.m as u64, a.k as u64, a.batch as u64);
        let expert_rows = if a.gated.is_some() { 2 * m } else { m };
        let name = self.pipe.name;
        if slots.is_some() != self.experts {
            return Err(VkError::Kernel {
                kernel: name,
                message: "expert slots go with the experts variant, and only with it".into(),
            });
        }
        let (w_rows, x_rows) = match slots {
            Some(s) if s.x_per > 0 => (s.experts as u64 * expert_rows, batch / s.x_per as u64),
            Some(_) => {
                return Err(VkError::Kernel {
                    kernel: name,
                    message: "no slots per row of x".into(),
                })
            }
            None => (expert_rows, batch),
        };
        let width = a.cols.width_for(name, a.m)?;
        let mut needs = vec![
            ("w", a.w, matrix_bytes(name, self.format, w_rows, k)?),
            ("x", a.x, x_rows * k * 4),
            ("y", a.y, batch * width as u64 * 4),
        ];
        if let Some(s) = slots {
            needs.push(("tiles", s.tiles, s.max_tiles as u64 * 16));
            needs.push(("order", s.order, batch * 4));
        }
        if let Some((g, _)) = a.norm {
            needs.push(("norm gain", g, k * 4));
        }
        check_sizes(name, &needs)?;
        if w_rows * k > u32::MAX as u64 || batch * k > u32::MAX as u64 {
            return Err(VkError::Kernel {
                kernel: name,
                message: format!("{w_rows}x{k} weights or {batch}x{k} inputs exceed 2^32 values"),
            });
        }
        if a.m == 0 || a.batch == 0 {
            return Ok(());
        }
        let mut flags = 0;
        if a.norm.is_some() {
            flags |= NORM;
        }
        if a.accumulate {
            flags |= ACCUMULATE;
        }
        match a.gated {
            Some(GatedAct::Silu) => flags |= GATED,
            Some(GatedAct::GeluTanh) => flags |= GATED | GELU,
            Some(GatedAct::SwigluOai) => return Err(no_clamped_swiglu(self.pipe.name)),
            None => {}
        }
        let (gain, eps) = a.norm.unwrap_or((a.x, 0.0));
        let rows = self.shape.rows_per_unit(a.m);
        let push = MatvecPush {
            m: a.m,
            k: a.k,
            flags,
            eps,
            n: a.batch,
            rows,
            y_first: a.cols.first,
            y_width: width,
            expert_rows: expert_rows as u32,
            x_per: slots.map_or(1, |s| s.x_per),
            w_addr: a.w.device_address().unwrap_or(0),
            x_addr: a.x.device_address().unwrap_or(0),
            g_addr: gain.device_address().unwrap_or(0),
        };
        let groups = [
            a.m.div_ceil(self.shape.units * rows),
            match slots {
                Some(s) => s.max_tiles,
                None => a.batch.div_ceil(self.shape.tokens),
            },
            1,
        ];
        match slots {
            Some(s) => rec.dispatch(
                &self.pipe,
                &[a.w, a.x, a.y, gain, s.tiles, s.order],
                &push,
                groups,
            ),
            None => rec.dispatch(&self.pipe, &[a.w, a.x, a.y, gain], &push, groups),
        }
    }

    /// The integer-dot product: reads `a.x_q8` (normed as `a.norm` says when it was rounded)
    /// in place of x.
    fn record_idot<'a>(&self, rec: &mut Recorder<'a>, a: MatvecArgs<'a>) -> Result<()> {
        let name = self.pipe.name;
        let Some(xq) = a.x_q8 else {
            return Err(VkError::Kernel {
                kernel: name,
                message: "reads x rounded to 8-bit blocks (QuantizeQ8): none given".into(),
            });
        };
        let (m, k, batch) = (a.m as u64, a.k as u64, a.batch as u64);
        let w_rows = if a.gated.is_some() { 2 * m } else { m };
        let width = a.cols.width_for(name, a.m)?;
        check_sizes(
            name,
            &[
                ("w", a.w, matrix_bytes(name, self.format, w_rows, k)?),
                ("x_q8", xq, q8_act_bytes(a.batch, a.k)),
                ("y", a.y, batch * width as u64 * 4),
            ],
        )?;
        if w_rows * k > u32::MAX as u64 || batch * k > u32::MAX as u64 {
            return Err(VkError::Kernel {
                kernel: name,
                message: format!("{w_rows}x{k} weights or {batch}x{k} inputs exceed 2^32 values"),
            });
        }
        if a.m == 0 || a.batch == 0 {
            return Ok(());
        }
        let mut flags = 0;
        if a.accumulate {
            flags |= ACCUMULATE;
        }
        match a.gated {
            Some(GatedAct::Silu) => flags |= GATED,
            Some(GatedAct::GeluTanh) => flags |= GATED | GELU,
            Some(GatedAct::SwigluOai) => return Err(no_clamped_swiglu(self.pipe.name)),
            None => {}
        }
        let rows = self.shape.rows_per_unit(a.m);
        let push = IdotPush {
            m: a.m,
            k: a.k,
            flags,
            n: a.batch,
            rows,
            y_first: a.cols.first,
            y_width: width,
            ds_at: q8_act_ds_at(a.batch, a.k),
        };
        let groups = [
            a.m.div_ceil(self.shape.units * rows),
            a.batch.div_ceil(self.shape.tokens),
            1,
        ];
        rec.dispatch(&self.pipe, &[a.w, xq, a.y, xq], &push, groups)
    }
}

/// The clamped SwiGLU (GPT-OSS) has no variant of the gated products: the Vulkan executor
/// runs its gate/up product whole and the activation apart (`SwiGlu::record_experts`).
fn no_clamped_swiglu(kernel: &'static str) -> VkError {
    VkError::Kernel {
        kernel,
        message: "no variant for the clamped SwiGLU".into(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::shader_block;
    use crate::testing::{
        assert_close, device, finish, random, run, upload, upload_weights, zeros,
    };
    use hearth_reference::ops;

    /// Every shape of the kernel, whatever the device: lane per row (with wide loads where
    /// the device has them, through addresses and from the bound buffers, then without) and
    /// subgroup per row, with several rows per unit so row edges are exercised. The subgroup
    /// shape takes GPUs' four chunks a turn in Q4 and Q2_K, one elsewhere: lavapipe compiles
    /// four in 5-15 s a kernel, and the chunk loop is the same code for every format.
    fn shapes(dev: &Device, format: WeightFormat, tokens: u32) -> Vec<Matvec> {
        let subgroup = dev.info().subgroup.size;
        let lane = Shape {
            workgroup: subgroup,
            tokens,
            lane_rows: true,
            rb: 2,
            wide: has_wide_loads(dev),
            by_address: true,
            units: subgroup,
            lane_chunks: 1,
            idot: false,
            target_groups: 2,
            min_rows: 1,
            max_rows: 4,
        };
        let sub = Shape {
            workgroup: 2 * subgroup,
            tokens,
            lane_rows: false,
            rb: 1,
            wide: false,
            by_address: false,
            units: 2,
            lane_chunks: match format {
                WeightFormat::Q4 | WeightFormat::Q2_K => gpu_lane_chunks(format),
                _ => 1,
            },
            idot: false,
            target_groups: 4,
            min_rows: 1,
            max_rows: 2,
        };
        let bound = Shape {
            by_address: false,
            ..lane
        };
        let narrow = Shape {
            wide: false,
            ..lane
        };
        [lane, bound, narrow, sub]
            .iter()
            .map(|&shape| Matvec::with_shape(dev, format, shape, false).unwrap())
            .collect()
    }

    /// Tolerance for f32 sums of k products: the factored block sums (d sum q x + m sum x)
    /// cancel, so the bound scales with the largest weight times sum |x|, not with |y|.
    fn tolerance(w: &[f32], x: &[f32], k: usize) -> f32 {
        let wmax = w.iter().fold(0f32, |a, v| a.max(v.abs()));
        let xsum = x
            .chunks(k)
            .map(|r| r.iter().map(|v| v.abs()).sum::<f32>())
            .fold(0f32, f32::max);
        2e-6 * 3.0 * wmax * xsum * (k as f32).log2().max(1.0) + 1e-6
    }

    #[test]
    fn matvec_matches_reference_in_every_format() {
        let Some(dev) = device() else { return };
        for format in WeightFormat::ALL {
            let block = shader_block(format) as usize;
            // Every format in the lane-per-row shape, with wide loads both ways and without; the
            // subgroup-per-row shape reads weights through the same include, so formats that
            // give it 1, 2 and 4 blocks a lane per turn, and Q8's realigned blocks, cover it.
            // 70 blocks make several turns, the last one part-filled. GGUF's 2-byte-aligned
            // Q4_0 and Q5_0 and its Q5_1 take every shape, and rows of 608 values (19 blocks,
            // SmolLM2's 576 plus one block) too. Q2_K and Q6_K have two (d, m) groups a block,
            // with and without a base.
            let sub_too = matches!(
                format,
                WeightFormat::F16
                    | WeightFormat::Q8
                    | WeightFormat::Q3H
                    | WeightFormat::Q4
                    | WeightFormat::Q2
                    | WeightFormat::Q4_0
                    | WeightFormat::Q5_0
                    | WeightFormat::Q5_1
                    | WeightFormat::Q2_K
                    | WeightFormat::Q6_K
            );
            let odd_rows: &[(usize, usize, usize)] = match sub_too && block == 32 {
                true => &[(11, 19, 3)],
                false => &[],
            };
            // The k-quants' 256-value rows: k = 256, 768, 1280, 2304 and 1792 (1536 + 256)
            // rather than 70 super-blocks, which would make lavapipe's run long.
            let last = if format.is_super_block() { 7 } else { 70 };
            // GGUF's own formats share the token loops with the others: one and eight tokens
            // cover them, and keep this test's run on lavapipe to minutes.
            let ggml_own = format.is_super_block()
                || matches!(
                    format,
                    WeightFormat::Q4_0
                        | WeightFormat::Q5_0
                        | WeightFormat::Q5_1
                        | WeightFormat::IQ4_NL
                        | WeightFormat::MXFP4
                );
            // GGUF's own formats: the wide lane shape (what CPU devices run) and, for those
            // listed above, the subgroup shape; their unpacking is the same in every shape.
            let wanted = if ggml_own {
                [true, false, false, sub_too]
            } else {
                [true, true, true, sub_too]
            };
            // Small decode batches' kernels (2 and 4 tokens a pass) in the formats of the
            // shipped model: the token loops are the same code at any count.
            let small: &[u32] = match format {
                WeightFormat::Q4 | WeightFormat::Q8 => &[2, 4],
                _ => &[],
            };
            let counts: &[u32] = if ggml_own { &[1, 8] } else { &[1, 8, 16] };
            for &tokens in counts.iter().chain(small) {
                let kernels = shapes(&dev, format, tokens).into_iter().zip(wanted);
                for kernel in kernels.filter_map(|(k, want)| want.then_some(k)) {
                    let cases = [(1, 1, 1), (7, 3, 2), (13, 5, 9), (257, 9, 3), (3, last, 2)];
                    for &(m, blocks, batch) in cases.iter().chain(odd_rows) {
                        let k = blocks * block;
                        let (w, wd) = upload_weights(&dev, &random(m * k, 14, 1.0), format);
                        let x = random(batch * k, 15, 1.0);
                        let (xb, yb) = (upload(&dev, &x), zeros(&dev, batch * m));
                        run(&dev, |rec| {
                            let args =
                                MatvecArgs::plain(&w, &xb, &yb, m as u32, k as u32, batch as u32);
                            kernel.record(rec, args).unwrap()
                        });
                        let want = ops::matvec(&wd, &x, m, k);
                        let tol = tolerance(&wd, &x, k);
                        assert_close(
                            &format!("matvec {format} {:?} {m}x{k}x{batch}", kernel.shape),
                            &yb.download(batch * m).unwrap(),
                            &want,
                            |_| tol,
                        );
                    }
                }
            }
        }
        finish(&dev);
    }

    #[test]
    fn rows_that_are_not_whole_blocks_are_an_error() {
        let Some(dev) = device() else { return };
        let kernel = Matvec::new(&dev, WeightFormat::Q4, 1).unwrap();
        let (w, _) = upload_weights(&dev, &random(64, 1, 1.0), WeightFormat::Q4);
        let (x, y) = (zeros(&dev, 48), zeros(&dev, 2));
        let mut rec = crate::vk::Recorder::new(&dev).unwrap();
        let err = kernel
            .record(&mut rec, MatvecArgs::plain(&w, &x, &y, 1, 48, 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("matvec_q4") && err.contains("48"), "{err}");
        drop(rec);
        finish(&dev);
    }

    #[test]
    fn folded_norm_residual_and_swiglu_match_reference() {
        let Some(dev) = device() else { return };
        for format in [WeightFormat::Q4, WeightFormat::Q3H, WeightFormat::Q2_K] {
            let block = shader_block(format) as usize;
            for tokens in [1, 8, 16] {
                for kernel in shapes(&dev, format, tokens) {
                    for &(m, blocks, batch) in &[(5, 1, 1), (37, 9, 3), (19, 2, 10)] {
                        let k = blocks * block;
                        check_folded(&dev, &kernel, m, k, batch);
                    }
                }
            }
        }
        finish(&dev);
    }

    fn check_folded(dev: &Arc<Device>, kernel: &Matvec, m: usize, k: usize, batch: usize) {
        let what = format!("{} {:?} {m}x{k}x{batch}", kernel.format, kernel.shape);
        let (w, wd) = upload_weights(dev, &random(2 * m * k, 21, 1.0), kernel.format);
        let x = random(batch * k, 22, 2.0);
        let gain = random(k, 23, 1.0);
        let residual = random(batch * m, 24, 1.0);
        let (xb, gb) = (upload(dev, &x), upload(dev, &gain));
        let xn: Vec<f32> = x
            .chunks(k)
            .flat_map(|r| ops::rmsnorm(r, &gain, k, 1e-5))
            .collect();
        let tol = tolerance(&wd, &xn, k);

        // y = residual + W rmsnorm(x)
        let yb = upload(dev, &residual);
        run(dev, |rec| {
            let args = MatvecArgs {
                norm: Some((&gb, 1e-5)),
                accumulate: true,
                ..MatvecArgs::plain(&w, &xb, &yb, m as u32, k as u32, batch as u32)
            };
            kernel.record(rec, args).unwrap()
        });
        let plain = ops::matvec(&wd, &xn, m, k);
        let want: Vec<f32> = plain.iter().zip(&residual).map(|(a, b)| a + b).collect();
        let got = yb.download(batch * m).unwrap();
        assert_close(&format!("norm+accumulate {what}"), &got, &want, |_| tol);

        // y = act(W_gate rmsnorm(x)) * (W_up rmsnorm(x))
        for act in [GatedAct::Silu, GatedAct::GeluTanh] {
            let yb = zeros(dev, batch * m);
            run(dev, |rec| {
                let args = MatvecArgs {
                    norm: Some((&gb, 1e-5)),
                    gated: Some(act),
                    ..MatvecArgs::plain(&w, &xb, &yb, m as u32, k as u32, batch as u32)
                };
                kernel.record(rec, args).unwrap()
            });
            let both = ops::matvec(&wd, &xn, 2 * m, k);
            let mut want = Vec::new();
            let mut scale = Vec::new();
            for t in both.chunks(2 * m) {
                want.extend(act.apply(&t[..m], &t[m..]));
                // act(g) * u: the error of g and u scaled by the other factor.
                scale.extend((0..m).map(|i| 1.0 + t[i].abs() + t[m + i].abs()));
            }
            let got = yb.download(batch * m).unwrap();
            assert_close(&format!("gated {act:?} {what}"), &got, &want, |i| {
                tol * scale[i]
            });
        }
    }
}

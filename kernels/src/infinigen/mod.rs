//! InfiniGen's KV selection on the device, for the new tokens of a decode step (one per
//! sequence row, all in each dispatch: [`IgBatch`]). [`IgPartialKeys`] keeps a layer's partial
//! key cache (keys projected on the first r columns of the layer's skew) up to date;
//! [`IgSpeculate`] rotates each token's query, projects it the same way and scores every past
//! position; [`IgSelect`] picks how many positions to fetch (the mean over heads of those
//! within alpha of the head's best, at most the token's budget) and, per KV head, which (the
//! closest to some head's best, in ascending order); [`KvGather`] copies their K/V from the
//! (host) pool into a device scratch; [`AttnSparse`] attends over that scratch plus the
//! token's own position.
//!
//! One file per kernel; this one holds the shapes and tokens they share.

mod gather;
mod partial_keys;
mod select;
mod sparse;
mod speculate;
#[cfg(test)]
mod testing;

pub use gather::{GatherArgs, KvGather};
pub use partial_keys::{IgPartialKeys, PartialKeysArgs};
pub use select::{IgSelect, SelectArgs};
pub use sparse::{AttnSparse, SparseArgs};
pub use speculate::{IgSpeculate, SpeculateArgs};

use bytemuck::{Pod, Zeroable};
use hearth_shaders::Kernel;

use super::check_sizes;
use crate::kv::{KvLayer, BLOCK_TOKENS};
use crate::vk::{Buffer, Result, VkError};

/// Most query heads `IgSelect` handles (`MAX_HEADS` in ig_select.comp: its shared array of
/// per-head maxima).
pub const IG_MAX_HEADS: u32 = 256;

/// Sizes shared by one layer's InfiniGen kernels, and the buffers they imply, for a step of
/// `tokens` tokens:
/// - `skew` [n_head_kv, head_dim, partial] f32: the first `partial` columns of each KV head's
///   orthogonal skew;
/// - `pkeys` [rows, n_ctx, n_head_kv, partial] f32: the partial key cache;
/// - `scores` [tokens, n_head, n_ctx] f32: speculated scores of each token;
/// - `sel_idx` [tokens, n_head_kv, cap] u32 and `sel_count` [tokens, n_head_kv] u32: the
///   selections;
/// - `k_scratch`, `v_scratch` [tokens, n_head_kv, cap, head_dim] f32: the selected K/V;
/// - `seq_pos` [rows, n_ctx] u32: the sequence position each row entry holds (the entry's
///   index until the pool evicts), and `fetches` [rows, n_ctx] u32: how often each was
///   fetched.
#[derive(Clone, Copy, Debug)]
pub struct IgShape {
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    /// Columns r per KV head of `skew` and `pkeys`, a multiple of 4 up to head_dim: the
    /// model's partial dimensions, zero-filled (`Skew::partial_padded`) so that `ig_speculate`
    /// loads each position's partial key four columns at a time.
    pub partial: u32,
    /// Positions per row of `pkeys` and per head of `scores`.
    pub n_ctx: u32,
    /// Slots per KV head of the selection and the scratch: the most positions it can keep.
    pub cap: u32,
    /// How query-key products become scores, as the model's dense attention makes them (its
    /// window aside: InfiniGen runs in global layers only).
    pub scale: f32,
    pub softcap: Option<f32>,
}

impl IgShape {
    pub fn skew_bytes(&self) -> u64 {
        self.n_head_kv as u64 * self.head_dim as u64 * self.partial as u64 * 4
    }

    /// Bytes of one entry (position) of the partial key cache: every KV head's columns.
    pub fn pkey_entry_bytes(&self) -> u64 {
        self.n_head_kv as u64 * self.partial as u64 * 4
    }

    /// Bytes of a partial key cache of `rows` rows.
    pub fn pkeys_bytes(&self, rows: u32) -> u64 {
        rows as u64 * self.n_ctx as u64 * self.pkey_entry_bytes()
    }

    pub fn scores_bytes(&self, tokens: u32) -> u64 {
        tokens as u64 * self.n_head as u64 * self.n_ctx as u64 * 4
    }

    pub fn sel_idx_bytes(&self, tokens: u32) -> u64 {
        tokens as u64 * self.n_head_kv as u64 * self.cap as u64 * 4
    }

    /// Bytes of a [rows, n_ctx] u32 map, as `seq_pos` and `fetches` are.
    pub fn seq_pos_bytes(&self, rows: u32) -> u64 {
        rows as u64 * self.n_ctx as u64 * 4
    }

    pub fn sel_count_bytes(&self, tokens: u32) -> u64 {
        tokens as u64 * self.n_head_kv as u64 * 4
    }

    /// Bytes of `k_scratch` (and of `v_scratch`).
    pub fn scratch_bytes(&self, tokens: u32) -> u64 {
        self.sel_idx_bytes(tokens) * self.head_dim as u64
    }

    pub(super) fn check(&self, kernel: &'static str) -> Result<()> {
        let fail = |message: String| Err(VkError::Kernel { kernel, message });
        if self.n_head_kv == 0 || self.n_head % self.n_head_kv != 0 {
            return fail(format!(
                "{} KV heads do not divide {} query heads",
                self.n_head_kv, self.n_head
            ));
        }
        if self.n_head > IG_MAX_HEADS {
            return fail(format!(
                "{} query heads; at most {IG_MAX_HEADS} are supported",
                self.n_head
            ));
        }
        if self.head_dim == 0 || self.head_dim % 4 != 0 {
            return fail(format!("head_dim {} is not a multiple of 4", self.head_dim));
        }
        if self.partial == 0 || self.partial % 4 != 0 || self.partial > self.head_dim {
            return fail(format!(
                "{} partial dimensions; need a multiple of 4 up to head_dim {}",
                self.partial, self.head_dim
            ));
        }
        Ok(())
    }

    /// Checks that `pos` lies within `row`'s block table and within n_ctx.
    pub(crate) fn check_position(
        &self,
        kernel: &'static str,
        kv: &KvLayer,
        row: u32,
        pos: u32,
    ) -> Result<()> {
        check_sizes(
            kernel,
            &[(
                "tables",
                kv.tables,
                (row as u64 + 1) * kv.max_blocks as u64 * 4,
            )],
        )?;
        let held = (kv.max_blocks as u64 * BLOCK_TOKENS as u64).min(self.n_ctx as u64);
        if pos as u64 >= held {
            return Err(VkError::Kernel {
                kernel,
                message: format!("position {pos} is past the {held} a row holds"),
            });
        }
        Ok(())
    }

    pub(super) fn push(&self) -> IgPush {
        IgPush {
            token: 0,
            tokens: 0,
            q_stride: 0,
            n_head: self.n_head,
            n_head_kv: self.n_head_kv,
            head_dim: self.head_dim,
            r: self.partial,
            n_ctx: self.n_ctx,
            max_blocks: 0,
            cap: self.cap,
            scale: self.scale,
            alpha: 0.0,
            rot_dim: 0,
            mode: 0,
            recent: 0,
            splits: 1,
            softcap: self.softcap.unwrap_or(0.0),
            _pad: 0,
            scores_addr: 0,
            seq_pos_addr: 0,
        }
    }
}

/// The current token of one row: at index `index` of the row, after the `index` entries it
/// may attend to, and at position `pos` of its sequence (the angle RoPE turns its query by, and
/// what the recent window counts back from). The two agree unless the row's pool has evicted
/// tokens (`kv::infinigen::evict`); then `seq_pos` maps the row's entries to positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IgToken {
    pub row: u32,
    pub index: u32,
    pub pos: u32,
}

impl IgToken {
    /// A token of a row that never evicted: its index is its position.
    pub fn new(row: u32, pos: u32) -> Self {
        Self {
            row,
            index: pos,
            pos,
        }
    }
}

/// A token of a batched dispatch as the kernels read it (`IgStep` in ig_step.glsl): the
/// token, and the most positions per KV head it fetches besides the recent ones.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct IgStep {
    pub row: u32,
    pub index: u32,
    pub pos: u32,
    pub budget: u32,
}

impl IgStep {
    pub fn new(at: IgToken, budget: u32) -> Self {
        Self {
            row: at.row,
            index: at.index,
            pos: at.pos,
            budget,
        }
    }
}

/// The tokens of a decode step, one per sequence row: token t of every InfiniGen dispatch
/// is `steps[t]`, which `buffer` holds too ([tokens] `IgStep`), and its slices of the
/// per-token buffers (scores, selection, scratch) are the t-th.
#[derive(Clone, Copy)]
pub struct IgBatch<'a> {
    pub buffer: &'a Buffer,
    pub steps: &'a [IgStep],
}

impl IgBatch<'_> {
    /// Writes the step's tokens into `buffer` as the kernels read them, each with the budget
    /// `budget` gives it, and returns them (the `steps` of a batch over `buffer`).
    pub fn write(
        buffer: &Buffer,
        tokens: &[IgToken],
        budget: impl Fn(IgToken) -> u32,
    ) -> Result<Vec<IgStep>> {
        let steps: Vec<IgStep> = tokens
            .iter()
            .map(|&at| IgStep::new(at, budget(at)))
            .collect();
        buffer.upload(0, &steps)?;
        Ok(steps)
    }

    pub(super) fn tokens(&self) -> u32 {
        self.steps.len() as u32
    }

    /// The longest history among the tokens.
    pub(super) fn longest(&self) -> u32 {
        self.steps.iter().map(|s| s.index).max().unwrap_or(0)
    }

    /// Rows the tokens reach into: the highest row plus one.
    pub(crate) fn rows(&self) -> u32 {
        self.steps.iter().map(|s| s.row + 1).max().unwrap_or(0)
    }

    pub(crate) fn check(&self, kernel: &'static str) -> Result<()> {
        check_sizes(
            kernel,
            &[(
                "steps",
                self.buffer,
                self.steps.len() as u64 * std::mem::size_of::<IgStep>() as u64,
            )],
        )
    }

    /// Checks every token's entry against `kv`'s block tables and n_ctx.
    pub(super) fn check_positions(
        &self,
        kernel: &'static str,
        s: &IgShape,
        kv: &KvLayer,
    ) -> Result<()> {
        self.steps
            .iter()
            .try_for_each(|st| s.check_position(kernel, kv, st.row, st.index))
    }

    /// Checks that every token's history fits in n_ctx.
    pub(super) fn check_indices(&self, kernel: Kernel, s: &IgShape) -> Result<()> {
        match self.steps.iter().find(|st| st.index > s.n_ctx) {
            Some(st) => Err(kernel_error(
                kernel,
                format!("index {} is past n_ctx {}", st.index, s.n_ctx),
            )),
            None => Ok(()),
        }
    }
}

/// Push constants of every InfiniGen kernel (the `Push` block each of them declares).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(super) struct IgPush {
    pub(super) token: u32,
    pub(super) tokens: u32,
    pub(super) q_stride: u32,
    pub(super) n_head: u32,
    pub(super) n_head_kv: u32,
    pub(super) head_dim: u32,
    pub(super) r: u32,
    pub(super) n_ctx: u32,
    pub(super) max_blocks: u32,
    pub(super) cap: u32,
    pub(super) scale: f32,
    pub(super) alpha: f32,
    pub(super) rot_dim: u32,
    pub(super) mode: u32,
    pub(super) recent: u32,
    pub(super) splits: u32,
    pub(super) softcap: f32,
    pub(super) _pad: u32,
    /// ig_select's scores and seq_pos addresses, where it reads through them (0 elsewhere).
    pub(super) scores_addr: u64,
    pub(super) seq_pos_addr: u64,
}

/// Where a kernel reads the tokens' query heads: token t of a dispatch at row `token + t` of
/// a [tokens, stride] f32 buffer whose rows begin with the n_head query heads. This is
/// attn_decode's `qkv` (stride (n_head + 2 n_head_kv) * head_dim); a plain [tokens, n_head *
/// head_dim] buffer is [`QueryAt::vectors`].
#[derive(Clone, Copy)]
pub struct QueryAt<'a> {
    pub buffer: &'a Buffer,
    pub token: u32,
    pub stride: u32,
}

impl<'a> QueryAt<'a> {
    pub fn vectors(buffer: &'a Buffer, s: IgShape) -> Self {
        Self {
            buffer,
            token: 0,
            stride: s.n_head * s.head_dim,
        }
    }

    /// Checks the stride and that the buffer holds `tokens` rows from `token`.
    pub(super) fn check(&self, kernel: &'static str, s: IgShape, tokens: u32) -> Result<()> {
        self.check_width(kernel, s.n_head * s.head_dim, tokens)
    }

    /// Checks that each row holds `width` floats (a multiple of 4 apart) and that the buffer
    /// holds `tokens` rows from `token`.
    pub(crate) fn check_width(&self, kernel: &'static str, width: u32, tokens: u32) -> Result<()> {
        if self.stride < width || self.stride % 4 != 0 {
            return Err(VkError::Kernel {
                kernel,
                message: format!(
                    "query stride {} must be a multiple of 4 and hold {width} floats",
                    self.stride
                ),
            });
        }
        let end = (self.token + tokens.max(1) - 1) as u64 * self.stride as u64 + width as u64;
        check_sizes(kernel, &[("q", self.buffer, end * 4)])
    }
}

pub(super) fn kernel_error(kernel: Kernel, message: String) -> VkError {
    VkError::Kernel {
        kernel: kernel.name,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{shape, steps_buffer, Pool};
    use super::*;
    use crate::testing::{device, finish, upload};
    use crate::vk::Recorder;
    use crate::StepToken;

    #[test]
    fn shapes_are_checked() {
        let Some(dev) = device() else { return };
        let s = shape(6, 2, 64, 32);
        let pool = Pool::new(s, &[20], crate::kv::KvType::F16);
        let buf = upload(&dev, &[0.0; 4096]);
        let small = upload(&dev, &[0.0; 4]);
        let attn = AttnSparse::new(&dev, 64, 3, pool.kv_type()).unwrap();
        let message = |r: Result<()>| r.unwrap_err().to_string();

        let select = IgSelect::new(&dev).unwrap();
        let steps = [IgStep::new(IgToken::new(0, 10), 8)];
        let steps_b = steps_buffer(&dev, &steps);
        let batch = IgBatch {
            buffer: &steps_b,
            steps: &steps,
        };
        let select_err = |map: &Buffer, idx: &Buffer, alpha: f32, budget: u32| {
            let steps = [IgStep { budget, ..steps[0] }];
            let mut rec = Recorder::new(&dev).unwrap();
            let batch = IgBatch {
                steps: &steps,
                ..batch
            };
            let args = SelectArgs {
                scores: &buf,
                seq_pos: map,
                sel_idx: idx,
                sel_count: &buf,
            };
            message(select.record(&mut rec, args, s, batch, alpha, 0))
        };
        let err = select_err(&buf, &buf, 4.0, 33);
        assert!(err.contains("budget 33"), "{err}");
        let err = select_err(&buf, &buf, -1.0, 8);
        assert!(err.contains("alpha"), "{err}");
        let err = select_err(&buf, &small, 4.0, 8);
        assert!(err.contains("sel_idx"), "{err}");
        let err = select_err(&small, &buf, 4.0, 8);
        assert!(err.contains("seq_pos"), "{err}");
        // A step buffer shorter than its tokens.
        let two = [steps[0], steps[0]];
        let short = IgBatch {
            steps: &two,
            ..batch
        };
        let at3 = [IgStep::new(IgToken::new(0, 3), 8)];
        let mut rec = Recorder::new(&dev).unwrap();
        let args = SelectArgs {
            scores: &buf,
            seq_pos: &buf,
            sel_idx: &buf,
            sel_count: &buf,
        };
        let err = message(select.record(&mut rec, args, s, short, 4.0, 0));
        assert!(err.contains("binding `steps`"), "{err}");

        let partial = IgPartialKeys::new(&dev, pool.kv_type()).unwrap();
        let keys: Vec<StepToken> = (0..4).map(|p| StepToken::new(0, p)).collect();
        let keys_b = Buffer::from_slice(&dev, "tokens", &keys).unwrap();
        let partial_err = |shape: IgShape, keys: &[StepToken]| {
            let mut rec = Recorder::new(&dev).unwrap();
            let args = PartialKeysArgs {
                kv: pool.layer(),
                skew: &buf,
                pkeys: &buf,
                steps: &keys_b,
            };
            message(partial.record(&mut rec, args, shape, keys))
        };
        // Wider than a head, and not padded to a multiple of 4.
        for columns in [68, 13] {
            let err = partial_err(
                IgShape {
                    partial: columns,
                    ..s
                },
                &keys,
            );
            assert!(err.contains("partial dimensions"), "{err}");
        }
        let err = partial_err(s, &[StepToken::new(0, 64)]);
        assert!(err.contains("position 64"), "{err}");
        let odd = IgShape { n_head_kv: 4, ..s };
        let err = partial_err(odd, &keys);
        assert!(err.contains("do not divide"), "{err}");
        let five: Vec<StepToken> = (0..5).map(|p| StepToken::new(0, p)).collect();
        let err = partial_err(s, &five);
        assert!(err.contains("binding `steps`"), "{err}");

        let args = SparseArgs {
            q: QueryAt::vectors(&small, s),
            kv: pool.layer(),
            k_scratch: &buf,
            v_scratch: &buf,
            sel_count: &buf,
            o: &buf,
        };
        let err = message(attn.record(
            &mut rec,
            args,
            s,
            IgBatch {
                steps: &at3,
                ..batch
            },
        ));
        assert!(err.contains("binding `q`"), "{err}");
        assert!(rec.is_empty());
        drop(rec);
        finish(&dev);
    }
}

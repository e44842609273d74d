//! InfiniGen's fetch of a layer for a decode step's tokens: speculation of its scores from the
//! query the previous layer's input gives through its W_Q, selection, and the gather of the
//! selected K/V into a scratch, recorded in pieces between the previous layer's kernels.

use super::VkInfinigen;
use crate::executor::policy::{rope_spec, Beside, Interleaved, RecordingLayer};
use hearth_kernels::infinigen::{GatherArgs, IgBatch, QueryAt, SelectArgs, SpeculateArgs};
use hearth_kernels::kv::KvLayer;
use hearth_kernels::vk::{Buffer, Recorder};
use hearth_kernels::{MatvecArgs, RopeSpec, RopeTable};
use hearth_model::Result;

/// The kernels of a layer's fetch, which a GPU overlaps with the previous layer's compute
/// (the selection under either of its names: CPU devices run `ig_select_wide`; the gather
/// under each KV type's).
pub const FETCH_KERNELS: [&str; 6] = [
    hearth_shaders::IG_SPECULATE.name,
    hearth_shaders::IG_SELECT.name,
    hearth_shaders::IG_SELECT_WIDE.name,
    hearth_shaders::KV_GATHER_F32.name,
    hearth_shaders::KV_GATHER_F16.name,
    hearth_shaders::KV_GATHER_Q8.name,
];

impl VkInfinigen {
    /// The next layer's fetch, when this step attends sparsely there: its query from layer
    /// `at.l`'s input, recorded now, then the fetch itself in pieces (`Fetch`).
    pub(super) fn fetch_next<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        at: &RecordingLayer<'a>,
    ) -> Result<Beside<'a>> {
        let next_l = at.l + 1;
        let Some(next) = at.layers.get(next_l) else {
            return Ok(Beside::none());
        };
        if self.step.sparse.is_empty() || !self.sparse_layer(next_l) {
            return Ok(Beside::none());
        }
        let c = at.config;
        let (t, e) = (at.plan.steps.len() as u32, c.n_embd as u32);
        let plain = MatvecArgs::plain(
            &next.wqkv[0].buffer,
            &at.scratch.x,
            &self.q_spec,
            c.attn_dim() as u32,
            e,
            t,
        );
        at.kernels.matvec(
            rec,
            &next.wqkv,
            MatvecArgs {
                // Its W_Q rows come first in the fused projection. The next layer's gain, as
                // its own query will have.
                norm: Some((&next.attn_norm, c.norm_eps)),
                ..plain
            },
        )?;
        Ok(Beside::new(Fetch {
            ig: self,
            l: next_l,
            kv: at.kv.layer(next_l),
            table: at.global_rope_table,
            rope: rope_spec(c, next_l),
            batch: self.batch(),
            done: 0,
        }))
    }

    /// Speculates layer `l`'s scores for the step's tokens from `q_spec`.
    fn record_speculate<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        table: &'a Buffer,
        rope: RopeSpec,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let args = SpeculateArgs {
            q_raw: QueryAt::vectors(&self.q_spec, self.shape),
            rope: RopeTable { table, spec: rope },
            skew: &self.skew[l],
            pkeys: &self.pkeys[l],
            scores: &self.scores,
        };
        Ok(self.speculate.record(rec, args, self.shape, batch)?)
    }

    /// Selects layer `l`'s tokens for the step's tokens from their speculated scores.
    fn record_select<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let args = SelectArgs {
            scores: &self.scores,
            seq_pos: &self.seq_pos,
            sel_idx: &self.sel_idx,
            sel_count: &self.sel_count[l],
        };
        Ok(self.select.record(
            rec,
            args,
            self.shape,
            batch,
            self.params.alpha.min(f32::MAX),
            self.params.recent.min(u32::MAX as usize) as u32,
        )?)
    }

    /// Gathers the selected K/V of layer `l` (`kv`) into the scratch for l.
    fn record_gather<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        l: usize,
        kv: KvLayer<'a>,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let (k_scratch, v_scratch) = self.scratch(l);
        let args = GatherArgs {
            kv,
            sel_idx: &self.sel_idx,
            sel_count: &self.sel_count[l],
            fetches: &self.fetches,
            k_scratch,
            v_scratch,
        };
        Ok(self.gather.record(rec, args, self.shape, batch)?)
    }
}

/// One layer's fetch (speculation, then selection, then gather) for a decode step's tokens.
struct Fetch<'a> {
    ig: &'a VkInfinigen,
    l: usize,
    kv: KvLayer<'a>,
    table: &'a Buffer,
    rope: RopeSpec,
    batch: IgBatch<'a>,
    /// Pieces recorded.
    done: usize,
}

impl<'a> Interleaved<'a> for Fetch<'a> {
    fn step(&mut self, rec: &mut Recorder<'a>) -> Result<()> {
        let ig = self.ig;
        if self.done >= 3 {
            return Ok(());
        }
        let serial = ig.params.serial_fetch;
        if serial {
            rec.barrier();
        }
        match self.done {
            0 => ig.record_speculate(rec, self.l, self.table, self.rope, self.batch)?,
            1 => ig.record_select(rec, self.l, self.batch)?,
            _ => ig.record_gather(rec, self.l, self.kv, self.batch)?,
        }
        if serial {
            rec.barrier();
        }
        self.done += 1;
        Ok(())
    }

    fn finish(&mut self, rec: &mut Recorder<'a>) -> Result<()> {
        while self.done < 3 {
            self.step(rec)?;
        }
        Ok(())
    }
}

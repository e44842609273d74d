//! Dense attention: every token attends to every cached position of its row. It is also what
//! the sparse policies run where they do not apply (prefill, the first layers).

use std::any::Any;

use super::{KvPolicy, RecordingLayer};
use hearth_kernels::kv::policy::KvPolicyStats;
use hearth_kernels::vk::Recorder;
use hearth_kernels::{AttnIo, RopeTable};
use hearth_model::Result;

pub(in crate::executor) struct Dense;

impl KvPolicy for Dense {
    fn stats(&self) -> Option<KvPolicyStats> {
        None
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn attention<'a>(&'a self, rec: &mut Recorder<'a>, at: &RecordingLayer<'a>) -> Result<()> {
        record_dense_attention(rec, at)
    }
}

/// Layer `at.l`'s dense attention: one decode-attention dispatch for the step's short runs
/// (storing their K/V itself where `at.fused`), then a prefill-attention dispatch per longer
/// run.
pub(in crate::executor) fn record_dense_attention<'a>(
    rec: &mut Recorder<'a>,
    at: &RecordingLayer<'a>,
) -> Result<()> {
    let (k, s, plan) = (at.kernels, at.scratch, at.plan);
    let io = AttnIo {
        qkv: &s.qkv,
        kv: at.kv_layer(),
        steps: &s.steps,
        o: &s.att,
        sinks: at.weights().attn_sinks.as_ref(),
    };
    let decode = at.attn_shape(0, plan.decode_tokens);
    if at.fused {
        let rope = RopeTable {
            table: at.rope_table,
            spec: at.rope(),
        };
        k.attn_decode
            .record_fused(rec, io, decode, rope, plan.longest)?;
    } else if plan.decode_tokens > 0 {
        k.attn_decode.record(rec, io, decode, plan.longest)?;
    }
    for &(t0, tokens) in &plan.prefill {
        k.attn_prefill.record(rec, io, at.attn_shape(t0, tokens))?;
    }
    Ok(())
}

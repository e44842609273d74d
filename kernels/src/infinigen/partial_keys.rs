//! `ig_partial_keys`: the partial key cache, each key projected on the first columns of its
//! KV head's skew.

use hearth_shaders::kv_kernels;

use super::{IgPush, IgShape};
use crate::attention::StepToken;
use crate::kv::{KvLayer, KvType};
use crate::vk::{Buffer, Device, Recorder, Result};
use crate::Pipe;

/// The buffers of one partial key update (shapes in [`IgShape`]): the layer's pool, the skew
/// columns, the partial key cache it writes, and the tokens' `steps` ([tokens] `StepToken`).
#[derive(Clone, Copy)]
pub struct PartialKeysArgs<'a> {
    pub kv: KvLayer<'a>,
    pub skew: &'a Buffer,
    pub pkeys: &'a Buffer,
    pub steps: &'a Buffer,
}

/// Fills the partial key cache from keys already in the pool. The partial keys are f32
/// whatever the pool's type (r columns a token, a fifth of a key's): they are computed from
/// the keys as the pool holds them, so speculation scores what attention will read.
pub struct IgPartialKeys {
    pipe: Pipe,
    kv_type: KvType,
}

impl IgPartialKeys {
    /// For a pool of `kv_type`.
    pub fn new(device: &Device, kv_type: KvType) -> Result<Self> {
        let pipe = Pipe::new(device, kv_kernels(kv_type).ig_partial_keys)?;
        Ok(Self { pipe, kv_type })
    }

    /// pkeys[row][pos][g][..] = K(row, pos, g) · skew[g] for every token (row, pos) of
    /// `tokens`, which `steps` holds ([tokens] `StepToken`: a step's new tokens once rope_kv
    /// stored their keys, or a row's history).
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        args: PartialKeysArgs<'a>,
        s: IgShape,
        tokens: &[StepToken],
    ) -> Result<()> {
        let PartialKeysArgs {
            kv,
            skew,
            pkeys,
            steps,
        } = args;
        let name = self.pipe.name;
        s.check(name)?;
        kv.check_type(name, self.kv_type)?;
        if tokens.is_empty() {
            return Ok(());
        }
        for t in tokens {
            s.check_position(name, &kv, t.row, t.pos)?;
        }
        let rows = tokens.iter().map(|t| t.row + 1).max().unwrap_or(0);
        let token_bytes = std::mem::size_of::<StepToken>() as u64;
        let push = IgPush {
            tokens: tokens.len() as u32,
            max_blocks: kv.max_blocks,
            ..s.push()
        };
        let work = tokens.len() as u64 * (s.n_head_kv * s.partial) as u64;
        // The kernel reads no V, so it has no binding for it.
        let bindings = [
            ("k", kv.k, 0),
            ("tables", kv.tables, 0),
            ("skew", skew, s.skew_bytes()),
            ("pkeys", pkeys, s.pkeys_bytes(rows)),
            ("steps", steps, tokens.len() as u64 * token_bytes),
        ];
        self.pipe.dispatch_items(rec, bindings, &push, work)
    }
}

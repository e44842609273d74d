//! `kv_gather`: copies the selected positions' K/V from the (host) pool into a device
//! scratch, counting each fetch for pool eviction.

use hearth_shaders::kv_kernels;

use super::{IgBatch, IgPush, IgShape};
use crate::kv::{KvLayer, KvType};
use crate::vk::{Buffer, Device, DeviceKind, Recorder, Result};
use crate::{check_sizes, shaped_kind, workgroup_size, Pipe};

/// The buffers of one gather (shapes in [`IgShape`]): the layer's pool, the selections it
/// reads, the fetch counters it adds to, and the scratch it fills.
#[derive(Clone, Copy)]
pub struct GatherArgs<'a> {
    pub kv: KvLayer<'a>,
    pub sel_idx: &'a Buffer,
    pub sel_count: &'a Buffer,
    pub fetches: &'a Buffer,
    pub k_scratch: &'a Buffer,
    pub v_scratch: &'a Buffer,
}

/// Copies the selected positions' K/V from the pool into the device scratch, as f32 whatever
/// the pool's type: the scratch holds a fraction of the context, and the sparse attention
/// then reads it as dense attention reads an f32 cache.
pub struct KvGather {
    pipe: Pipe,
    kv_type: KvType,
    /// Most workgroups per KV head and token; they stride over the selection, whose size the
    /// host does not know.
    max_groups: u32,
    /// Each invocation copies whole positions (`PER_POSITION`), not single vec4s.
    per_position: bool,
}

impl KvGather {
    /// For a pool of `kv_type`.
    pub fn new(device: &Device, kv_type: KvType) -> Result<Self> {
        // A CPU device runs a few groups at a time and pays for every idle one, and for each
        // lane's lookup of a position in the block table.
        let (max_groups, per_position) = match shaped_kind(device.info()) {
            DeviceKind::Cpu => (16, true),
            _ => (1024, false),
        };
        let spec = [workgroup_size(device.info()), per_position as u32];
        Ok(Self {
            pipe: Pipe::specialized(device, kv_kernels(kv_type).kv_gather, &spec)?,
            kv_type,
            max_groups,
            per_position,
        })
    }

    /// k_scratch[t][g][j] = K(row, sel_idx[t][g][j], g) and likewise V, for j <
    /// sel_count[t][g], token t of `batch` being in `row`; each fetch adds one to the entry's
    /// counter in `fetches` ([rows, n_ctx] u32), which pool eviction reads.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        args: GatherArgs<'a>,
        s: IgShape,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let GatherArgs {
            kv,
            sel_idx,
            sel_count,
            fetches,
            k_scratch,
            v_scratch,
        } = args;
        let name = self.pipe.name;
        s.check(name)?;
        kv.check_type(name, self.kv_type)?;
        batch.check(name)?;
        let (tokens, rows) = (batch.tokens(), batch.rows());
        let bindings = [
            ("k", kv.k, 0),
            ("v", kv.v, 0),
            ("tables", kv.tables, rows as u64 * kv.max_blocks as u64 * 4),
            ("sel_idx", sel_idx, s.sel_idx_bytes(tokens)),
            ("sel_count", sel_count, s.sel_count_bytes(tokens)),
            ("k_scratch", k_scratch, s.scratch_bytes(tokens)),
            ("v_scratch", v_scratch, s.scratch_bytes(tokens)),
            ("fetches", fetches, s.seq_pos_bytes(rows)),
            ("steps", batch.buffer, 0),
        ];
        if s.cap == 0 || tokens == 0 {
            return check_sizes(name, &bindings);
        }
        let push = IgPush {
            tokens,
            max_blocks: kv.max_blocks,
            ..s.push()
        };
        // No token keeps more than its history or the cap.
        let most = s.cap.min(batch.longest()).max(1);
        let wg = self.pipe.workgroup_size() as u64;
        let items = match self.per_position {
            true => most as u64,
            false => most as u64 * (s.head_dim / 4) as u64,
        };
        let groups = items.div_ceil(wg).min(self.max_groups as u64) as u32;
        self.pipe
            .dispatch(rec, bindings, &push, [groups, s.n_head_kv, tokens])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infinigen::testing::{shape, steps_buffer, u32_buffer, Pool};
    use crate::infinigen::{IgStep, IgToken};
    use crate::shaped::shaped_as;
    use crate::testing::{device, finish, run, upload};

    #[test]
    fn gather_copies_selected_positions_exactly() {
        // Exactly the values each KV type reads back, as f32.
        let Some(dev) = device() else { return };
        let s = shape(6, 2, 210, 80);
        for kv_type in crate::kv::KvType::ALL {
            gather_copies_for(&dev, s, &Pool::new(s, &[90, 200], kv_type));
        }
        finish(&dev);
    }

    fn gather_copies_for(dev: &std::sync::Arc<crate::vk::Device>, s: IgShape, pool: &Pool) {
        let dev = dev.clone();
        let (hd, cap, n_ctx) = (64usize, 80usize, 210usize);
        // Token 0 is row 1's. KV head 0: every third position; head 1: a few, in no order,
        // one twice. Token 1 is row 0's, with a shorter history.
        let rows = [1usize, 0];
        let lists: [[Vec<u32>; 2]; 2] = [
            [(0..200).step_by(3).collect(), vec![199, 0, 57, 57, 130]],
            [(5..90).step_by(7).collect(), vec![89, 0, 0]],
        ];
        let mut idx = vec![0u32; 2 * 2 * cap];
        let mut counts = Vec::new();
        for (t, token) in lists.iter().enumerate() {
            for (g, list) in token.iter().enumerate() {
                idx[(t * 2 + g) * cap..][..list.len()].copy_from_slice(list);
                counts.push(list.len() as u32);
            }
        }
        let idx_b = u32_buffer(&dev, &idx);
        let count_b = u32_buffer(&dev, &counts);
        let steps = [
            IgStep::new(IgToken::new(1, 199), 0),
            IgStep::new(IgToken::new(0, 89), 0),
        ];
        let steps_b = steps_buffer(&dev, &steps);
        let batch = IgBatch {
            buffer: &steps_b,
            steps: &steps,
        };
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let gather = shaped_as(kind, || KvGather::new(&dev, pool.kv_type())).unwrap();
            let n = (s.scratch_bytes(2) / 4) as usize;
            let k_b = upload(&dev, &vec![f32::MAX; n]);
            let v_b = upload(&dev, &vec![f32::MAX; n]);
            let fetches_b = u32_buffer(&dev, &vec![1; 2 * n_ctx]);
            run(&dev, |rec| {
                gather
                    .record(
                        rec,
                        GatherArgs {
                            kv: pool.layer(),
                            sel_idx: &idx_b,
                            sel_count: &count_b,
                            fetches: &fetches_b,
                            k_scratch: &k_b,
                            v_scratch: &v_b,
                        },
                        s,
                        batch,
                    )
                    .unwrap();
            });
            // Every fetch counts once in its row's counters, on top of what they held.
            let fetches: Vec<u32> = fetches_b.download(2 * n_ctx).unwrap();
            let mut want = vec![1u32; 2 * n_ctx];
            let (mut want_k, mut want_v) = (vec![f32::MAX; n], vec![f32::MAX; n]);
            for (t, token) in lists.iter().enumerate() {
                let row = rows[t];
                for (g, list) in token.iter().enumerate() {
                    for (j, &p) in list.iter().enumerate() {
                        want[row * n_ctx + p as usize] += 1;
                        let at = ((t * 2 + g) * cap + j) * hd;
                        want_k[at..at + hd].copy_from_slice(pool.k(row, p as usize, g));
                        want_v[at..at + hd].copy_from_slice(pool.v(row, p as usize, g));
                    }
                }
            }
            let kind = (kind, pool.kv_type());
            assert_eq!(fetches, want, "fetch counters ({kind:?} shape)");
            let (k, v): (Vec<f32>, Vec<f32>) = (k_b.download(n).unwrap(), v_b.download(n).unwrap());
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert!(bits(&k) == bits(&want_k), "gathered K ({kind:?} shape)");
            assert!(bits(&v) == bits(&want_v), "gathered V ({kind:?} shape)");
        }
    }
}

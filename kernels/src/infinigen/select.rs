//! `ig_select`: per token and KV head, which positions to fetch: as many as the heads' mean
//! count within alpha of their best, at most the budget, closest to some head's best first.

use hearth_shaders::{IG_SELECT, IG_SELECT_WIDE};

use super::{kernel_error, IgBatch, IgPush, IgShape};
use crate::vk::{Buffer, Device, DeviceKind, Recorder, Result};
use crate::{has_wide_loads, head_workgroup_size, shaped_kind, wide_by_address, Pipe};

/// Most positions whose selection keys `IgSelect` keeps in shared memory (`KEY_CACHE`).
const MAX_KEY_CACHE: u32 = 16384;

/// The buffers of one selection (shapes in [`IgShape`]): the speculated scores and the
/// positions of the rows' entries it reads, and the selections it writes.
#[derive(Clone, Copy)]
pub struct SelectArgs<'a> {
    pub scores: &'a Buffer,
    pub seq_pos: &'a Buffer,
    pub sel_idx: &'a Buffer,
    pub sel_count: &'a Buffer,
}

/// Per token and KV head, the positions to fetch (InfiniGen's count and choice).
pub struct IgSelect {
    pipe: Pipe,
    /// One workgroup per token takes every KV head (`EVERY_KV_HEAD`).
    every_kv_head: bool,
    /// With `every_kv_head`: how many workgroups the device runs at once (its host's cores).
    /// A step of fewer tokens splits each token's KV heads over that many.
    cores: u32,
}

impl IgSelect {
    pub fn new(device: &Device) -> Result<Self> {
        let kind = shaped_kind(device.info());
        // On a CPU device one workgroup per token, one subgroup, so its scans need no barriers;
        // on a GPU one per KV head and token, the largest group, since a handful of workgroups
        // stream every score several times and their loops' latency is the kernel's time.
        let info = device.info();
        let wg = match kind {
            DeviceKind::Cpu => head_workgroup_size(info, kind),
            _ => info.limits.max_workgroup_invocations.clamp(1, 1024),
        };
        // The shared memory the kernel's other arrays leave (per-head maxima, histogram,
        // scan and reduction slots: under 3 KiB plus 8 bytes per invocation) holds the keys.
        // On lavapipe, eight sequences at 2048 tokens, keeping them took 3.9 -> 2.3 ms per
        // dispatch, and one workgroup per token for every KV head (CPU devices) 2.3 -> 1.5 ms
        // (one sequence: 0.42 -> 0.38 ms).
        let free = info.limits.max_shared_memory.saturating_sub(3072 + 8 * wg);
        let keys = (free / 4).clamp(1, MAX_KEY_CACHE);
        Self::with(device, wg, keys, kind == DeviceKind::Cpu)
    }

    /// The kernel with `wg` invocations, `keys` positions' keys kept in shared memory (tests
    /// make it small, so that histories run past it), and one workgroup per token for every KV
    /// head or one per KV head and token.
    ///
    /// With one workgroup per token (CPU devices), the `_wide` variant where the device has
    /// it, reading the scores and seq_pos through their addresses where the host allows
    /// (lavapipe, one sequence at 2048 tokens: 457 -> 407 µs per dispatch). Its passes over
    /// every score take four positions per invocation, in one 16-byte load where n_ctx is a
    /// multiple of 4 (346-358 -> 250-272 µs; eight sequences 1769 -> 1373 µs).
    fn with(device: &Device, wg: u32, keys: u32, every_kv_head: bool) -> Result<Self> {
        let wide = every_kv_head && has_wide_loads(device);
        let by_address = wide && wide_by_address();
        let kernel = if wide { IG_SELECT_WIDE } else { IG_SELECT };
        let spec = [wg, keys, every_kv_head as u32, by_address as u32];
        Ok(Self {
            pipe: Pipe::specialized(device, kernel, &spec)?,
            every_kv_head,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        })
    }

    /// Writes sel_idx[t][g][0 .. sel_count[t][g]] for every token t of `batch` and KV head g.
    /// Each head h counts the history entries i < index scoring at least
    /// max_i' scores[t][h][i'] minus alpha; k is the mean count over heads rounded up, at most
    /// the token's budget (<= cap). KV head g keeps the k positions with the largest
    /// m[i] = max over g's heads h of (scores[t][h][i] - max_i' scores[t][h][i']) and, at equal
    /// m, the lower positions, after the newest positions (`recent` of them, at most
    /// cap - budget), which come first and add to k; in ascending order. Scores must be
    /// finite. The newest are those whose position, `seq_pos[row][i]` ([rows, n_ctx] u32), is
    /// within that many of the token's.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        args: SelectArgs<'a>,
        s: IgShape,
        batch: IgBatch<'a>,
        alpha: f32,
        recent: u32,
    ) -> Result<()> {
        let SelectArgs {
            scores,
            seq_pos,
            sel_idx,
            sel_count,
        } = args;
        let name = IG_SELECT.name;
        s.check(name)?;
        if alpha.is_nan() || alpha < 0.0 {
            return Err(kernel_error(
                IG_SELECT,
                format!("alpha {alpha} is not >= 0"),
            ));
        }
        if let Some(st) = batch.steps.iter().find(|st| st.budget > s.cap) {
            return Err(kernel_error(
                IG_SELECT,
                format!("budget {} must be at most cap {}", st.budget, s.cap),
            ));
        }
        batch.check(name)?;
        batch.check_indices(IG_SELECT, &s)?;
        let tokens = batch.tokens();
        let bindings = [
            ("scores", scores, s.scores_bytes(tokens)),
            ("seq_pos", seq_pos, s.seq_pos_bytes(batch.rows())),
            ("sel_idx", sel_idx, s.sel_idx_bytes(tokens)),
            ("sel_count", sel_count, s.sel_count_bytes(tokens)),
            ("steps", batch.buffer, 0),
        ];
        if tokens == 0 {
            return Ok(());
        }
        // alpha is >= 0 here; +0 keeps the shader's bit comparisons exact.
        let push = IgPush {
            tokens,
            alpha: alpha.abs(),
            recent,
            scores_addr: scores.device_address().unwrap_or(0),
            seq_pos_addr: seq_pos.device_address().unwrap_or(0),
            ..s.push()
        };
        // With one workgroup per token, a step of fewer tokens than cores gives each token
        // several, which split its KV heads; each takes the maxima and counts itself
        // (lavapipe, one sequence at 2048 tokens: 406 -> 342 µs per dispatch).
        let groups = if self.every_kv_head {
            self.cores.div_ceil(tokens).clamp(1, s.n_head_kv)
        } else {
            s.n_head_kv
        };
        self.pipe
            .dispatch(rec, bindings, &push, [groups, tokens, 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infinigen::testing::{shape, steps_buffer, u32_buffer};
    use crate::infinigen::IgStep;
    use crate::shaped::shaped_as;
    use crate::testing::{device, finish, random, run, upload};

    /// `select` as a host with `cores` cores runs it, splitting tokens as a larger or smaller
    /// host would.
    fn on_cores(select: IgSelect, cores: u32) -> IgSelect {
        IgSelect { cores, ..select }
    }

    /// ig_select's rule, from the CPU reference of InfiniGen (`kv::infinigen::select`), on
    /// the first `case.index` scores of each head; entry t holds position seq_pos[t], and the
    /// current token is at position `case.now`.
    fn reference_select(case: &SelectCase, s: IgShape, alpha: f32, recent: usize) -> Vec<Vec<u32>> {
        let (scores, pos, budget) = (case.scores, case.index as usize, case.budget as usize);
        let (seq_pos, now) = (case.seq_pos, case.now);
        use crate::kv::infinigen::select;
        let (n_head, n_kv) = (s.n_head as usize, s.n_head_kv as usize);
        let compact: Vec<f32> = (0..n_head)
            .flat_map(|h| scores[h * s.n_ctx as usize..][..pos].iter().copied())
            .collect();
        let k = select::fetch_count(&compact, pos, n_head, alpha, budget, recent);
        let is_recent = |t: usize| seq_pos[t] as usize + recent >= now as usize;
        (0..n_kv)
            .map(|g| select::select_among(&compact, pos, n_head, n_kv, g, k, is_recent))
            .collect()
    }

    /// Runs ig_select on `scores` and checks every KV head's selection exactly.
    fn check_select(
        select: &IgSelect,
        scores: &[f32],
        s: IgShape,
        pos: u32,
        alpha: f32,
        budget: u32,
        what: &str,
    ) -> Vec<Vec<u32>> {
        let identity: Vec<u32> = (0..s.n_ctx).collect();
        let case = SelectCase::fresh(scores, pos, budget, &identity);
        check_select_at(select, s, case, alpha, 0, what)
    }

    /// A token for [`check_select_batch`]: its scores ([n_head, n_ctx]), its index (history
    /// length) and budget, the positions its row's entries hold, and its own position.
    struct SelectCase<'a> {
        scores: &'a [f32],
        index: u32,
        budget: u32,
        seq_pos: &'a [u32],
        now: u32,
    }

    impl<'a> SelectCase<'a> {
        /// A token at `index` of a row that never evicted: `identity` maps its entries to
        /// themselves, and its position is its index.
        fn fresh(scores: &'a [f32], index: u32, budget: u32, identity: &'a [u32]) -> Self {
            Self {
                scores,
                index,
                budget,
                seq_pos: identity,
                now: index,
            }
        }
    }

    /// Runs ig_select on the tokens of `cases` in one dispatch, token t in row t + 1 (row 0
    /// holds garbage, which no token may read), and checks every token's selection for every
    /// KV head exactly; returns them, per token and KV head.
    fn check_select_batch(
        select: &IgSelect,
        s: IgShape,
        cases: &[SelectCase],
        alpha: f32,
        recent: u32,
        what: &str,
    ) -> Vec<Vec<Vec<u32>>> {
        let dev = device().unwrap();
        let (n_ctx, tokens) = (s.n_ctx as usize, cases.len() as u32);
        let scores: Vec<f32> = cases
            .iter()
            .flat_map(|c| c.scores.iter().copied())
            .collect();
        let scores_b = upload(&dev, &scores);
        let mut map = vec![u32::MAX / 2; (cases.len() + 1) * n_ctx];
        for (t, c) in cases.iter().enumerate() {
            map[(t + 1) * n_ctx..][..c.seq_pos.len()].copy_from_slice(c.seq_pos);
        }
        let map_b = u32_buffer(&dev, &map);
        let list = (s.n_head_kv * s.cap) as usize;
        let idx_b = u32_buffer(&dev, &vec![u32::MAX; cases.len() * list]);
        let count_b = u32_buffer(&dev, &vec![12345; cases.len() * s.n_head_kv as usize]);
        let steps: Vec<IgStep> = cases
            .iter()
            .enumerate()
            .map(|(t, c)| IgStep {
                row: t as u32 + 1,
                index: c.index,
                pos: c.now,
                budget: c.budget,
            })
            .collect();
        let steps_b = steps_buffer(&dev, &steps);
        let batch = IgBatch {
            buffer: &steps_b,
            steps: &steps,
        };
        let args = SelectArgs {
            scores: &scores_b,
            seq_pos: &map_b,
            sel_idx: &idx_b,
            sel_count: &count_b,
        };
        run(&dev, |rec| {
            select.record(rec, args, s, batch, alpha, recent).unwrap();
        });
        let counts: Vec<u32> = count_b
            .download(tokens as usize * s.n_head_kv as usize)
            .unwrap();
        let idx: Vec<u32> = idx_b.download(cases.len() * list).unwrap();
        let mut kept = Vec::new();
        for (t, c) in cases.iter().enumerate() {
            let want = reference_select(c, s, alpha, recent as usize);
            for (g, want) in want.iter().enumerate() {
                let n = counts[t * s.n_head_kv as usize + g] as usize;
                assert_eq!(n, want.len(), "{what}: count of token {t}, KV head {g}");
                let got = &idx[t * list + g * s.cap as usize..][..n];
                assert_eq!(
                    got,
                    &want[..],
                    "{what}: positions of token {t}, KV head {g}"
                );
            }
            kept.push(want);
        }
        kept
    }

    /// [`check_select_batch`] for one token, with the `recent` newest positions always kept.
    fn check_select_at(
        select: &IgSelect,
        s: IgShape,
        case: SelectCase,
        alpha: f32,
        recent: u32,
        what: &str,
    ) -> Vec<Vec<u32>> {
        check_select_batch(select, s, &[case], alpha, recent, what).remove(0)
    }

    #[test]
    fn select_matches_reference() {
        let Some(dev) = device() else { return };
        // Both shapes, and two whose key cache (64 positions) most histories here outgrow.
        let shaped = |kind| shaped_as(kind, || IgSelect::new(&dev)).unwrap();
        let selects = [
            ("CPU shape", on_cores(shaped(DeviceKind::Cpu), 1)),
            ("GPU shape", shaped(DeviceKind::Discrete)),
            (
                "64 keys cached",
                IgSelect::with(&dev, 32, 64, true).unwrap(),
            ),
            (
                "64 keys, one KV head",
                IgSelect::with(&dev, 32, 64, false).unwrap(),
            ),
            (
                "CPU shape, a token's KV heads over 2 cores",
                on_cores(shaped(DeviceKind::Cpu), 2),
            ),
            (
                "64 keys, a token's KV heads over 3 cores",
                on_cores(IgSelect::with(&dev, 32, 64, true).unwrap(), 3),
            ),
        ];
        for (kind, select) in &selects {
            // Rows of scores a whole number of 16-byte words long (300), and not (298).
            for (n_head, n_kv, n_ctx) in [(6, 2, 300), (6, 3, 298)] {
                let s = shape(n_head, n_kv, n_ctx, 320);
                let what = |case: &str| format!("{case} ({n_head}/{n_kv} heads, {kind})");
                let scores = random((n_head * s.n_ctx) as usize, 11, 6.0);
                let uncapped = check_select(select, &scores, s, 277, 4.0, 320, &what("alpha 4"));
                assert!(uncapped.iter().all(|k| k.len() > 50 && k.len() < 277));
                let capped = check_select(select, &scores, s, 277, 4.0, 50, &what("budget 50"));
                assert!(capped.iter().all(|k| k.len() == 50));
                let identity: Vec<u32> = (0..s.n_ctx).collect();
                let fresh = |index, budget| SelectCase::fresh(&scores, index, budget, &identity);
                let recent = check_select_at(select, s, fresh(277, 50), 4.0, 20, &what("recent"));
                assert!(recent
                    .iter()
                    .all(|k| k.len() == 70 && k.ends_with(&(257..277).collect::<Vec<u32>>())));
                // An evicting row: 277 entries holding positions scattered over 0 .. 1000 in
                // no order; the newest 20 (985 .. 1000) wherever they sit.
                let mut seq_pos: Vec<u32> = (0..257).map(|t| t * 3).collect();
                seq_pos.extend(985..1005);
                seq_pos.swap(3, 270);
                seq_pos.swap(100, 260);
                let what_ev = what("evicted");
                let evicted = SelectCase {
                    scores: &scores,
                    index: 277,
                    budget: 50,
                    seq_pos: &seq_pos,
                    now: 1005,
                };
                let ev = check_select_at(select, s, evicted, 4.0, 20, &what_ev);
                assert!(ev.iter().all(|k| k.len() == 70
                    && [3u32, 100].iter().all(|t| k.contains(t))
                    && !k.contains(&270)));
                let few = check_select_at(select, s, fresh(10, 50), 0.0, 20, &what("short"));
                assert!(few.iter().all(|k| k.iter().copied().eq(0..10)));
                let all = check_select(select, &scores, s, 290, 1e30, 300, &what("huge alpha"));
                assert!(all.iter().all(|k| k.iter().copied().eq(0..290)));
                check_select(
                    select,
                    &scores,
                    s,
                    290,
                    f32::INFINITY,
                    320,
                    &what("infinite alpha"),
                );
                let best = check_select(select, &scores, s, 290, 0.0, 320, &what("alpha 0"));
                assert!(best
                    .iter()
                    .all(|k| !k.is_empty() && k.len() <= n_head as usize));
                let none = check_select(select, &scores, s, 0, 4.0, 320, &what("pos 0"));
                assert!(none.iter().all(|k| k.is_empty()));
                let one = check_select(select, &scores, s, 1, 4.0, 320, &what("pos 1"));
                assert!(one.iter().all(|k| k == &[0]));
                check_select(select, &scores, s, 277, 4.0, 0, &what("budget 0"));

                // Scores on a grid of 1/4 tie in many places, also at the cut, where the lower
                // positions must win.
                let grid: Vec<f32> = scores.iter().map(|x| (x * 4.0).round() / 4.0).collect();
                for budget in [1, 37, 100] {
                    let kept = check_select(select, &grid, s, n_ctx, 5.0, budget, &what("ties"));
                    assert!(kept.iter().all(|k| k.len() == budget as usize));
                }
            }
        }
        finish(&dev);
    }

    /// Tens of thousands of positions: many tiles of the final scan and a radix select whose
    /// histograms see every position.
    #[test]
    fn select_scales_to_long_histories() {
        let Some(dev) = device() else { return };
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let select = shaped_as(kind, || IgSelect::new(&dev)).unwrap();
            let s = shape(8, 2, 20_000, 1024);
            let scores = random((s.n_head * s.n_ctx) as usize, 13, 8.0);
            let what = format!("20000 positions ({kind:?} shape)");
            let kept = check_select(&select, &scores, s, 19_999, 5.0, 1000, &what);
            assert!(kept.iter().all(|k| k.len() == 1000));
        }
        finish(&dev);
    }

    /// One dispatch selects for several tokens of different rows, histories, budgets and
    /// positions, each as it would alone.
    #[test]
    fn select_batches_the_tokens_of_a_step() {
        let Some(dev) = device() else { return };
        let s = shape(6, 2, 300, 320);
        let scores: Vec<Vec<f32>> = (0..3)
            .map(|i| random((s.n_head * s.n_ctx) as usize, 40 + i, 6.0))
            .collect();
        let identity: Vec<u32> = (0..s.n_ctx).collect();
        let mut evicted: Vec<u32> = (0..257).map(|t| t * 3).collect();
        evicted.extend(985..1005);
        evicted.swap(3, 270);
        let cases = [
            SelectCase {
                scores: &scores[0],
                index: 277,
                budget: 50,
                seq_pos: &identity,
                now: 277,
            },
            SelectCase {
                scores: &scores[1],
                index: 12,
                budget: 300,
                seq_pos: &identity,
                now: 12,
            },
            SelectCase {
                scores: &scores[2],
                index: 277,
                budget: 7,
                seq_pos: &evicted,
                now: 1005,
            },
        ];
        for kind in [DeviceKind::Cpu, DeviceKind::Discrete] {
            let select = shaped_as(kind, || IgSelect::new(&dev)).unwrap();
            let kept = check_select_batch(&select, s, &cases, 4.0, 20, &format!("{kind:?}"));
            assert!(kept[0].iter().all(|k| k.len() == 70));
            assert!(kept[1].iter().all(|k| k.iter().copied().eq(0..12)));
            assert!(kept[2].iter().all(|k| k.len() == 27));
        }
        finish(&dev);
    }
}

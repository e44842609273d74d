//! A mixture of experts on the device: the router's choice per token (`moe_route`), which
//! also groups the chosen slots by expert for the experts' products (`Matvec::experts`), and
//! the weighted sum of each token's experts' outputs (`moe_combine`).

use bytemuck::{Pod, Zeroable};
use hearth_models::spec::{Experts, Gating, GroupScore};
use hearth_shaders::{MOE_COMBINE, MOE_ROUTE};

use super::{check_sizes, ExpertBiases, Pipe};
use crate::vk::{Buffer, Device, Recorder, Result, VkError};

/// Most experts a token uses and most experts a block has: moe_route.comp's arrays.
const MAX_USED: usize = 32;
const MAX_EXPERTS: usize = 512;
/// Most groups of experts: moe_route.comp keeps one bit a group.
const MAX_GROUPS: usize = 32;

/// Tiles the experts' products are sized for: `slots` slots cut into tiles of at most
/// `tile` per expert take at most this many (each expert used adds one part-filled tile).
pub fn max_tiles(slots: u32, experts: u32, tile: u32) -> u32 {
    slots.div_ceil(tile.max(1)) + experts.min(slots)
}

/// Whether moe_route.comp can route `x`.
pub fn check_experts(x: &Experts) -> std::result::Result<(), String> {
    if x.used == 0 || x.used > MAX_USED.min(x.count) {
        return Err(format!(
            "{} of {} experts per token (the kernels take 1 to {MAX_USED})",
            x.used, x.count
        ));
    }
    if x.count > MAX_EXPERTS {
        return Err(format!(
            "{} experts (the kernels take up to {MAX_EXPERTS})",
            x.count
        ));
    }
    if x.groups > MAX_GROUPS {
        return Err(format!(
            "{} groups of experts (the kernels take up to {MAX_GROUPS})",
            x.groups
        ));
    }
    if x.groups_used < x.groups && x.group_score() == GroupScore::Best {
        return Err(
            "experts chosen within groups scored by their best expert (softmax gating, \
             DeepSeek-V2; the route kernel scores a group by its two best)"
                .into(),
        );
    }
    Ok(())
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RoutePush {
    tokens: u32,
    n_expert: u32,
    used: u32,
    sigmoid: u32,
    normalize: u32,
    tile: u32,
    max_tiles: u32,
    stride: u32,
    shared_expert: u32,
    has_bias: u32,
    groups: u32,
    groups_used: u32,
    scale: f32,
}

/// Slots per token: the routed experts', and the shared expert's where the model has one.
pub fn slots_per_token(x: &Experts) -> u32 {
    (x.used + x.shared.is_some() as usize) as u32
}

/// Where the router's choices go, each [tokens * slots_per_token] but `order` ([tokens *
/// used]) and `tiles`.
#[derive(Clone, Copy)]
pub struct RouteOut<'a> {
    /// The weight of each slot (token t's j-th expert is slot t * stride + j, and the shared
    /// expert's slot t * stride + used).
    pub weights: &'a Buffer,
    /// The expert of each slot.
    pub experts: &'a Buffer,
    /// The slots, expert by expert.
    pub order: &'a Buffer,
    /// [max_tiles] (expert, first index into `order`, slots, 0).
    pub tiles: &'a Buffer,
}

pub struct MoeRoute(Pipe);

impl MoeRoute {
    pub fn new(device: &Device) -> Result<Self> {
        Pipe::new(device, MOE_ROUTE).map(Self)
    }

    /// Routes `tokens` tokens from their router logits ([tokens, x.count], one more column for
    /// a gated shared expert) and the selection bias ([x.count]) where the model has one,
    /// cutting each expert's slots into tiles of at most `tile`; returns the tiles' bound,
    /// `max_tiles`.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        (logits, select_bias): (&'a Buffer, Option<&'a Buffer>),
        out: RouteOut<'a>,
        (tokens, x, tile): (u32, &Experts, u32),
    ) -> Result<u32> {
        let name = self.0.name;
        check_experts(x).map_err(|message| VkError::Kernel {
            kernel: name,
            message,
        })?;
        let (n_expert, used, stride) = (x.count as u32, x.used as u32, slots_per_token(x));
        let shared = match x.shared {
            None => 0,
            Some(sh) if sh.gated => 1,
            Some(_) => 2,
        };
        let routed = tokens * used;
        let max_tiles = max_tiles(routed, n_expert, tile);
        let slot_bytes = (tokens * stride) as u64 * 4;
        let width = x.router_rows() as u64;
        let bindings = [
            ("logits", logits, tokens as u64 * width * 4),
            ("weights", out.weights, slot_bytes),
            ("experts", out.experts, slot_bytes),
            ("order", out.order, routed as u64 * 4),
            ("tiles", out.tiles, max_tiles as u64 * 16),
            select_bias.map_or(("select_bias", logits, 0), |b| {
                ("select_bias", b, n_expert as u64 * 4)
            }),
        ];
        if tokens == 0 {
            return check_sizes(name, &bindings).map(|()| 0);
        }
        let push = RoutePush {
            tokens,
            n_expert,
            used,
            sigmoid: (x.gating == Gating::Sigmoid) as u32,
            normalize: x.normalize as u32,
            tile: tile.max(1),
            max_tiles,
            stride,
            shared_expert: shared,
            has_bias: select_bias.is_some() as u32,
            groups: x.groups.max(1) as u32,
            groups_used: x.groups_used.max(1) as u32,
            scale: x.scale,
        };
        self.0.dispatch(rec, bindings, &push, [1, 1, 1])?;
        Ok(max_tiles)
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CombinePush {
    tokens: u32,
    n: u32,
    used: u32,
    accumulate: u32,
    biased: u32,
}

pub struct MoeCombine(Pipe);

impl MoeCombine {
    pub fn new(device: &Device) -> Result<Self> {
        Pipe::new(device, MOE_COMBINE).map(Self)
    }

    /// out [tokens, n] (+)= each token's `used` rows of `y` ([tokens * used, n]) summed with
    /// their `weights`; where `down_bias` is given, each row's expert's bias ([n_expert * n],
    /// the expert of each row in `ExpertBiases::experts`) is added to it first.
    pub fn record<'a>(
        &self,
        rec: &mut Recorder<'a>,
        (y, weights): (&'a Buffer, &'a Buffer),
        out: &'a Buffer,
        (tokens, n, used): (u32, u32, u32),
        accumulate: bool,
        down_bias: Option<ExpertBiases<'a>>,
    ) -> Result<()> {
        let rows = tokens as u64 * n as u64;
        let slots = tokens as u64 * used as u64;
        // Without biases their bindings are unread; y fills them.
        let (bias, experts) = match down_bias {
            Some(b) => (
                ("bias", b.bias, n as u64 * 4),
                ("experts", b.experts, slots * 4),
            ),
            None => (("bias", y, 0), ("experts", y, 0)),
        };
        let bindings = [
            ("y", y, rows * used as u64 * 4),
            ("weights", weights, slots * 4),
            ("out", out, rows * 4),
            bias,
            experts,
        ];
        if rows == 0 {
            return check_sizes(self.0.name, &bindings);
        }
        let push = CombinePush {
            tokens,
            n,
            used,
            accumulate: accumulate as u32,
            biased: down_bias.is_some() as u32,
        };
        self.0.dispatch_items(rec, bindings, &push, rows)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testing::{
        assert_close, device, finish, random, run, upload, upload_weights, zeros,
    };
    use crate::{ExpertSlots, Matvec, MatvecArgs, WeightFormat};
    use hearth_model::ops::route;
    use hearth_reference::ops::{self, GatedAct};

    fn experts(count: usize, used: usize, gating: Gating, normalize: bool) -> Experts {
        Experts {
            count,
            used,
            n_ff: 0,
            gating,
            normalize,
            shared: None,
            scale: 1.0,
            groups: 1,
            groups_used: 1,
            leading_dense: 0,
        }
    }

    fn u32_buffer(dev: &Arc<Device>, n: usize) -> Buffer {
        Buffer::from_slice(dev, "test slots", &vec![0u32; n.max(1)]).unwrap()
    }

    struct Routed {
        weights: Vec<f32>,
        experts: Vec<u32>,
        order: Vec<u32>,
        tiles: Vec<[u32; 4]>,
    }

    fn route_on_device(dev: &Arc<Device>, logits: &[f32], x: &Experts, tile: u32) -> Routed {
        route_on_device_with(dev, logits, None, x, tile)
    }

    fn route_on_device_with(
        dev: &Arc<Device>,
        logits: &[f32],
        select_bias: Option<&[f32]>,
        x: &Experts,
        tile: u32,
    ) -> Routed {
        let tokens = (logits.len() / x.count) as u32;
        let slots = tokens as usize * x.used;
        let bound = max_tiles(slots as u32, x.count as u32, tile) as usize;
        let (weights, ids, order) = (
            zeros(dev, slots),
            u32_buffer(dev, slots),
            u32_buffer(dev, slots),
        );
        let tiles = u32_buffer(dev, 4 * bound);
        let lb = upload(dev, logits);
        let bb = select_bias.map(|b| upload(dev, b));
        let kernel = MoeRoute::new(dev).unwrap();
        run(dev, |rec| {
            let out = RouteOut {
                weights: &weights,
                experts: &ids,
                order: &order,
                tiles: &tiles,
            };
            let inputs = (&lb, bb.as_ref());
            kernel.record(rec, inputs, out, (tokens, x, tile)).unwrap();
        });
        let flat: Vec<u32> = tiles.download(4 * bound).unwrap();
        Routed {
            weights: weights.download(slots).unwrap(),
            experts: ids.download(slots).unwrap(),
            order: order.download(slots).unwrap(),
            tiles: flat.chunks(4).map(|t| [t[0], t[1], t[2], t[3]]).collect(),
        }
    }

    /// The device's choices are the reference's, and its tiles cover every slot once, each
    /// with its own expert's slots only.
    #[test]
    fn routing_matches_reference_and_tiles_cover_every_slot() {
        let Some(dev) = device() else { return };
        let cases = [
            (8, 2, Gating::Softmax, true, 7, 1),
            (8, 2, Gating::Softmax, false, 33, 8),
            (4, 4, Gating::Sigmoid, true, 5, 3),
            (128, 8, Gating::Softmax, true, 9, 8),
            (64, 6, Gating::Sigmoid, false, 40, 16),
        ];
        for (seed, &(count, used, gating, normalize, tokens, tile)) in cases.iter().enumerate() {
            let x = experts(count, used, gating, normalize);
            let mut logits = random(tokens * count, 30 + seed as u64, 3.0);
            // Ties: a token whose logits are all equal, and one with two equal leaders.
            logits[..count].fill(0.5);
            if tokens > 1 {
                logits[count + 1] = 4.0;
                logits[count + count - 1] = 4.0;
            }
            let got = route_on_device(&dev, &logits, &x, tile);
            let what = format!("{count} experts, {used} used, {gating:?}, tile {tile}");
            let mut want_w = Vec::new();
            for (t, row) in logits.chunks(count).enumerate() {
                let picked = route(row, &x, None);
                let ids: Vec<u32> = picked.iter().map(|&(e, _)| e as u32).collect();
                assert_eq!(
                    got.experts[t * used..][..used],
                    ids[..],
                    "{what}: token {t}"
                );
                want_w.extend(picked.iter().map(|&(_, w)| w));
            }
            assert_close(&what, &got.weights, &want_w, |_| 1e-6);
            let mut seen = vec![false; tokens * used];
            for tile_at in got.tiles.iter().filter(|t| t[2] > 0) {
                let [e, first, n, _] = *tile_at;
                assert!(n <= tile, "{what}: a tile of {n}");
                for &s in &got.order[first as usize..][..n as usize] {
                    assert_eq!(
                        got.experts[s as usize], e,
                        "{what}: slot {s} in a tile of {e}"
                    );
                    assert!(!seen[s as usize], "{what}: slot {s} twice");
                    seen[s as usize] = true;
                }
            }
            assert!(seen.iter().all(|&s| s), "{what}: a slot in no tile");
        }
        finish(&dev);
    }

    /// Softmax gating with groups (DeepSeek-V2) is refused with the reason: the kernel scores
    /// a group by its two best.
    #[test]
    fn groups_scored_by_their_best_expert_are_refused_by_name() {
        let x = Experts {
            groups: 4,
            groups_used: 2,
            ..experts(8, 2, Gating::Softmax, false)
        };
        let err = check_experts(&x).unwrap_err();
        assert!(err.contains("scored by their best expert"), "{err}");
        // Every group taking part leaves nothing to score.
        assert!(check_experts(&Experts {
            groups_used: 4,
            ..x
        })
        .is_ok());
    }

    /// GLM-4.5's routing on the device as on the reference: sigmoid scores plus a selection
    /// bias choose within the best groups, and the chosen scores without it, renormalized
    /// (or not), are scaled.
    #[test]
    fn grouped_biased_scaled_routing_matches_reference() {
        let Some(dev) = device() else { return };
        // (experts, used, groups, groups used, normalize, tokens)
        let cases = [
            (8, 2, 2, 1, true, 9),
            (16, 4, 4, 2, false, 17),
            (64, 6, 8, 3, true, 5),
            (8, 2, 1, 1, true, 6),
        ];
        for (seed, &(count, used, groups, groups_used, normalize, tokens)) in
            cases.iter().enumerate()
        {
            let x = Experts {
                groups,
                groups_used,
                scale: 2.5,
                ..experts(count, used, Gating::Sigmoid, normalize)
            };
            let logits = random(tokens * count, 60 + seed as u64, 2.0);
            let bias = random(count, 70 + seed as u64, 0.3);
            let got = route_on_device_with(&dev, &logits, Some(&bias), &x, 4);
            let what = format!("{count} experts, {used} used, {groups_used} of {groups} groups");
            let mut want_w = Vec::new();
            for (t, row) in logits.chunks(count).enumerate() {
                let picked = route(row, &x, Some(&bias));
                let ids: Vec<u32> = picked.iter().map(|&(e, _)| e as u32).collect();
                assert_eq!(
                    got.experts[t * used..][..used],
                    ids[..],
                    "{what}: token {t}"
                );
                want_w.extend(picked.iter().map(|&(_, w)| w));
            }
            assert_close(&what, &got.weights, &want_w, |_| 1e-5);
        }
        finish(&dev);
    }

    /// The gated experts' product, the down product and the combination against the
    /// reference: each token's chosen experts' MLPs summed with their weights.
    #[test]
    fn experts_products_and_combination_match_reference() {
        let Some(dev) = device() else { return };
        let (count, used) = (6usize, 2usize);
        let x = experts(count, used, Gating::Softmax, true);
        // One slot a pass (decode) and eight (prompts); each pipeline costs lavapipe seconds to
        // build, and the formats' unpacking is the plain product's.
        let cases = [
            (WeightFormat::Q4, 1, 1),
            (WeightFormat::Q4, 11, 8),
            (WeightFormat::Q8, 3, 8),
            (WeightFormat::Q4_K, 3, 1),
        ];
        for (format, tokens, per_pass) in cases {
            // Both products' rows are whole blocks: k, and m for the down product.
            let m = format.block_size().max(32);
            let k = 2 * m;
            {
                let what = format!("{format} {tokens} tokens, {per_pass} a pass");
                let (gate_up, gu) =
                    upload_weights(&dev, &random(count * 2 * m * k, 41, 1.0), format);
                let (down, dw) = upload_weights(&dev, &random(count * k * m, 42, 1.0), format);
                let xs = random(tokens * k, 43, 1.0);
                let logits = random(tokens * count, 44, 2.0);
                let routed = route_on_device(&dev, &logits, &x, per_pass);
                let slots = tokens * used;
                let (xb, lb) = (upload(&dev, &xs), upload(&dev, &logits));
                let (hidden, y) = (zeros(&dev, slots * m), zeros(&dev, slots * k));
                let (weights, ids, order) = (
                    zeros(&dev, slots),
                    u32_buffer(&dev, slots),
                    u32_buffer(&dev, slots),
                );
                let bound = max_tiles(slots as u32, count as u32, per_pass);
                let tiles = u32_buffer(&dev, 4 * bound as usize);
                let residual = random(tokens * k, 45, 1.0);
                let out = upload(&dev, &residual);
                let up_kernel = Matvec::experts(&dev, format, per_pass).unwrap();
                let route_kernel = MoeRoute::new(&dev).unwrap();
                let combine = MoeCombine::new(&dev).unwrap();
                run(&dev, |rec| {
                    let routes = RouteOut {
                        weights: &weights,
                        experts: &ids,
                        order: &order,
                        tiles: &tiles,
                    };
                    let max_tiles = route_kernel
                        .record(
                            rec,
                            (&lb, None),
                            routes,
                            (tokens as u32, &x, up_kernel.tokens()),
                        )
                        .unwrap();
                    let s = ExpertSlots {
                        tiles: &tiles,
                        order: &order,
                        max_tiles,
                        experts: count as u32,
                        x_per: used as u32,
                    };
                    let args = MatvecArgs {
                        gated: Some(GatedAct::Silu),
                        ..MatvecArgs::plain(
                            &gate_up,
                            &xb,
                            &hidden,
                            m as u32,
                            k as u32,
                            slots as u32,
                        )
                    };
                    up_kernel.record_experts(rec, args, s).unwrap();
                    let args =
                        MatvecArgs::plain(&down, &hidden, &y, k as u32, m as u32, slots as u32);
                    let s = ExpertSlots { x_per: 1, ..s };
                    up_kernel.record_experts(rec, args, s).unwrap();
                    combine
                        .record(
                            rec,
                            (&y, &weights),
                            &out,
                            (tokens as u32, k as u32, used as u32),
                            true,
                            None,
                        )
                        .unwrap();
                });
                let mut want = residual.clone();
                let mut hidden_want = Vec::new();
                for t in 0..tokens {
                    let xt = &xs[t * k..][..k];
                    for (e, w) in route(&logits[t * count..][..count], &x, None) {
                        let both = ops::matvec(&gu[e * 2 * m * k..][..2 * m * k], xt, 2 * m, k);
                        let h = GatedAct::Silu.apply(&both[..m], &both[m..]);
                        let d = ops::matvec(&dw[e * k * m..][..k * m], &h, k, m);
                        for (o, v) in want[t * k..][..k].iter_mut().zip(d) {
                            *o += w * v;
                        }
                        hidden_want.extend(h);
                    }
                }
                assert_eq!(routed.weights.len(), slots);
                let hidden_got = hidden.download(slots * m).unwrap();
                let scale = hidden_want.iter().fold(1f32, |a, v| a.max(v.abs()));
                assert_close(&format!("hidden {what}"), &hidden_got, &hidden_want, |_| {
                    2e-5 * scale
                });
                let got = out.download(tokens * k).unwrap();
                let scale = want.iter().fold(1f32, |a, v| a.max(v.abs()));
                assert_close(&format!("out {what}"), &got, &want, |_| 1e-4 * scale);
            }
        }
        finish(&dev);
    }

    /// GPT-OSS's experts against the reference: the router's logits with their bias, each
    /// chosen expert's gate/up product (ungated, into [slots, 2 m]), the clamped SwiGLU over
    /// it with the slot's expert's gate and up biases, the down product, and the combination
    /// adding each expert's down bias, in f32 (the conformance models' experts) and MXFP4
    /// (gpt-oss's), one slot a pass and eight.
    #[test]
    fn biased_experts_with_the_clamped_swiglu_match_reference() {
        let Some(dev) = device() else { return };
        let (count, used) = (4usize, 2usize);
        let x = experts(count, used, Gating::Softmax, true);
        let cases = [
            (WeightFormat::F32, 1, 1),
            (WeightFormat::F32, 9, 8),
            (WeightFormat::MXFP4, 1, 1),
            (WeightFormat::MXFP4, 9, 8),
        ];
        for (format, tokens, per_pass) in cases {
            let m = format.block_size().max(32);
            let k = 2 * m;
            let what = format!("{format} {tokens} tokens, {per_pass} a pass");
            let (gate_up, gu) = upload_weights(&dev, &random(count * 2 * m * k, 61, 1.0), format);
            let (down, dw) = upload_weights(&dev, &random(count * k * m, 62, 1.0), format);
            // Gate/up values past the clamp at 7, both ways.
            let xs = random(tokens * k, 63, 1.5);
            let logits = random(tokens * count, 64, 2.0);
            let router_bias = random(count, 65, 1.0);
            let gu_bias = random(count * 2 * m, 66, 3.0);
            let down_bias = random(count * k, 67, 1.0);
            let slots = tokens * used;
            let bufs = |v: &[f32]| upload(&dev, v);
            let (xb, lb) = (bufs(&xs), bufs(&logits));
            let (rb, gub, db) = (bufs(&router_bias), bufs(&gu_bias), bufs(&down_bias));
            let both = zeros(&dev, slots * 2 * m);
            let (hidden, y) = (zeros(&dev, slots * m), zeros(&dev, slots * k));
            let (weights, ids, order) = (
                zeros(&dev, slots),
                u32_buffer(&dev, slots),
                u32_buffer(&dev, slots),
            );
            let bound = max_tiles(slots as u32, count as u32, per_pass);
            let tiles = u32_buffer(&dev, 4 * bound as usize);
            let out = zeros(&dev, tokens * k);
            let kernel = Matvec::experts(&dev, format, per_pass).unwrap();
            let route_kernel = MoeRoute::new(&dev).unwrap();
            let combine = MoeCombine::new(&dev).unwrap();
            let swiglu = crate::SwiGlu::new(&dev).unwrap();
            let bias_act = crate::BiasAct::new(&dev).unwrap();
            run(&dev, |rec| {
                bias_act
                    .record(rec, &lb, &rb, (tokens as u32, count as u32), None)
                    .unwrap();
                let routes = RouteOut {
                    weights: &weights,
                    experts: &ids,
                    order: &order,
                    tiles: &tiles,
                };
                let max_tiles = route_kernel
                    .record(
                        rec,
                        (&lb, None),
                        routes,
                        (tokens as u32, &x, kernel.tokens()),
                    )
                    .unwrap();
                let s = ExpertSlots {
                    tiles: &tiles,
                    order: &order,
                    max_tiles,
                    experts: count as u32,
                    x_per: used as u32,
                };
                let (m, k, n) = (m as u32, k as u32, slots as u32);
                let args = MatvecArgs::plain(&gate_up, &xb, &both, 2 * m, k, n);
                kernel.record_experts(rec, args, s).unwrap();
                let biases = ExpertBiases {
                    bias: &gub,
                    experts: &ids,
                };
                swiglu
                    .record_experts(
                        rec,
                        &both,
                        &hidden,
                        (n, m),
                        GatedAct::SwigluOai,
                        Some(biases),
                    )
                    .unwrap();
                let args = MatvecArgs::plain(&down, &hidden, &y, k, m, n);
                let s = ExpertSlots { x_per: 1, ..s };
                kernel.record_experts(rec, args, s).unwrap();
                let biases = ExpertBiases {
                    bias: &db,
                    experts: &ids,
                };
                let shape = (tokens as u32, k, used as u32);
                combine
                    .record(rec, (&y, &weights), &out, shape, false, Some(biases))
                    .unwrap();
            });
            let mut want = vec![0f32; tokens * k];
            let mut clamped = false;
            for t in 0..tokens {
                let xt = &xs[t * k..][..k];
                let mut l = logits[t * count..][..count].to_vec();
                ops::add_bias(&mut l, &router_bias);
                for (e, w) in route(&l, &x, None) {
                    let mut both = ops::matvec(&gu[e * 2 * m * k..][..2 * m * k], xt, 2 * m, k);
                    ops::add_bias(&mut both, &gu_bias[e * 2 * m..][..2 * m]);
                    clamped |= both.iter().any(|v| v.abs() > 7.0);
                    let h = GatedAct::SwigluOai.apply(&both[..m], &both[m..]);
                    let mut d = ops::matvec(&dw[e * k * m..][..k * m], &h, k, m);
                    ops::add_bias(&mut d, &down_bias[e * k..][..k]);
                    for (o, v) in want[t * k..][..k].iter_mut().zip(d) {
                        *o += w * v;
                    }
                }
            }
            assert!(clamped, "{what}: no gate or up value past the clamp");
            let got = out.download(tokens * k).unwrap();
            let scale = want.iter().fold(1f32, |a, v| a.max(v.abs()));
            assert_close(&format!("biased experts {what}"), &got, &want, |_| {
                2e-5 * scale
            });
        }
        finish(&dev);
    }

    /// The grouped product of prefill (`matmul`'s experts variant, tiles of up to 64 slots)
    /// against the reference: each slot's row of its expert's gate/up product, then of its
    /// down product, with some experts taking more than one tile.
    #[test]
    fn grouped_expert_products_match_reference() {
        let Some(dev) = device() else { return };
        let tile = crate::matmul::TILE;
        // (format, experts, used, tokens): 3 experts of 2 over 100 tokens take about 67 slots
        // each, past one tile.
        let cases = [
            (WeightFormat::Q4, 6, 2, 70),
            (WeightFormat::Q4, 3, 2, 100),
            (WeightFormat::Q4_K, 4, 2, 40),
        ];
        for (format, count, used, tokens) in cases {
            let x = experts(count, used, Gating::Softmax, true);
            let m = format.block_size().max(32);
            let k = 2 * m;
            let what = format!("{format} {count} experts, {used} used, {tokens} tokens");
            let (gate_up, gu) = upload_weights(&dev, &random(count * 2 * m * k, 51, 1.0), format);
            let (down, dw) = upload_weights(&dev, &random(count * k * m, 52, 1.0), format);
            let xs = random(tokens * k, 53, 1.0);
            let hs = random(tokens * used * m, 54, 1.0);
            let logits = random(tokens * count, 55, 2.0);
            let routed = route_on_device(&dev, &logits, &x, tile);
            let slots = tokens * used;
            if slots / count > tile as usize {
                assert!(
                    routed.tiles.iter().any(|t| t[2] == tile),
                    "{what}: a full tile"
                );
            }
            let order = Buffer::from_slice(&dev, "order", &routed.order).unwrap();
            let flat: Vec<u32> = routed.tiles.iter().flatten().copied().collect();
            let tiles = Buffer::from_slice(&dev, "tiles", &flat).unwrap();
            let (xb, hb) = (upload(&dev, &xs), upload(&dev, &hs));
            let (c_up, c_down) = (zeros(&dev, slots * 2 * m), zeros(&dev, slots * k));
            let kernel = crate::Matmul::experts(&dev, format).unwrap();
            let at = ExpertSlots {
                tiles: &tiles,
                order: &order,
                max_tiles: routed.tiles.len() as u32,
                experts: count as u32,
                x_per: used as u32,
            };
            let args = |x, c, n: usize, m: usize, k: usize| crate::MatmulArgs {
                x,
                c,
                n: n as u32,
                m: m as u32,
                k: k as u32,
                accumulate: false,
                cols: crate::OutputCols::default(),
            };
            run(&dev, |rec| {
                kernel
                    .record_experts(rec, &gate_up, args(&xb, &c_up, slots, 2 * m, k), at)
                    .unwrap();
                let at = ExpertSlots { x_per: 1, ..at };
                kernel
                    .record_experts(rec, &down, args(&hb, &c_down, slots, k, m), at)
                    .unwrap();
            });
            let (mut up_want, mut down_want) = (Vec::new(), Vec::new());
            for slot in 0..slots {
                let e = routed.experts[slot] as usize;
                let xt = &xs[slot / used * k..][..k];
                up_want.extend(ops::matvec(&gu[e * 2 * m * k..][..2 * m * k], xt, 2 * m, k));
                let h = &hs[slot * m..][..m];
                down_want.extend(ops::matvec(&dw[e * k * m..][..k * m], h, k, m));
            }
            for (name, got, want, n) in [
                ("gate/up", &c_up, &up_want, k),
                ("down", &c_down, &down_want, m),
            ] {
                let scale = want.iter().fold(1f32, |a, v| a.max(v.abs()));
                let got = got.download(want.len()).unwrap();
                assert_close(&format!("{name} {what}"), &got, want, |_| {
                    4e-7 * scale * (n as f32).log2()
                });
            }
        }
        finish(&dev);
    }
}

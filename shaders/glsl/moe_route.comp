#version 450
// A mixture of experts' routing for a step's tokens. Each token's router logits go through
// the gating (softmax over the experts, or each one's sigmoid); plus the selection bias where
// the model has one (has_bias), these scores choose the `used` best experts (equal scores:
// the lower index first, as torch.topk orders them), from the `groups_used` best of `groups`
// equal groups where the experts are grouped (a group scored by the sum of its two best);
// their weights, without the bias, are renormalized to sum to one where the model does so,
// then multiplied by `scale`. Slot s = t * stride + j is
// token t's j-th expert: experts[s] and weights[s]. With a shared expert (stride = used + 1)
// slot t * stride + used is its output's weight: the sigmoid of the logit after the experts'
// (shared_expert = 1), or 1 (shared_expert = 2).
//
// Then the slots are grouped by expert for the experts' products (matvec.comp, EXPERTS):
// `order` lists them expert by expert (in slot order within each), and each expert's run is
// cut into tiles of at most `tile` slots, (expert, first index into order, slots, 0). The
// tiles past the last have no slots; the host sizes the products for `max_tiles`.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(binding = 0) readonly buffer L { float logits[]; };     // [tokens, n_expert (+ 1)]
layout(binding = 1) writeonly buffer W { float weights[]; };   // [tokens * stride]
layout(binding = 2) coherent buffer E { uint experts[]; };     // [tokens * stride]
layout(binding = 3) writeonly buffer O { uint order[]; };      // [tokens * used]
layout(binding = 4) writeonly buffer T { uvec4 tiles[]; };     // [max_tiles]
layout(binding = 5) readonly buffer B { float select_bias[]; }; // [n_expert], with has_bias
layout(push_constant) uniform Push {
    uint tokens;
    uint n_expert;
    uint used;
    uint sigmoid;     // 1: each expert's sigmoid, 0: softmax over the experts
    uint normalize;   // 1: the picked weights are divided by their sum
    uint tile;        // most slots in a tile
    uint max_tiles;
    uint stride;      // slots per token
    uint shared_expert;   // 0: no shared expert; 1: gated by the logit after the experts'; 2: ungated
    uint has_bias;    // 1: select_bias joins the scores that choose
    uint groups;      // equal groups of experts (1: none)
    uint groups_used; // the best groups that take part
    float scale;      // on the chosen weights
} p;

// The host keeps within these (kernels/moe.rs).
const uint MAX_USED = 32;
const uint MAX_EXPERTS = 512;
const uint MAX_GROUPS = 32;
shared uint counts[MAX_EXPERTS];
shared uint starts[MAX_EXPERTS];

// Expert e's gate weight for the token whose logits start at `base`; softmax takes the
// logits' largest value and the sum of their exponentials.
float gate_weight(uint base, uint e, float top, float sum) {
    float l = logits[base + e];
    return p.sigmoid != 0u ? 1.0 / (1.0 + exp(-l)) : exp(l - top) / sum;
}

// The score that chooses expert e: its gate weight, plus its selection bias where the model
// has one.
float select_score(uint base, uint e, float top, float sum) {
    float w = gate_weight(base, e, top, sum);
    return p.has_bias != 0u ? w + select_bias[e] : w;
}

void route(uint t) {
    uint base = t * (p.n_expert + (p.shared_expert == 1u ? 1u : 0u));
    float top = -1.0 / 0.0;
    float sum = 0.0;
    if (p.sigmoid == 0u) {
        for (uint e = 0; e < p.n_expert; ++e) {
            top = max(top, logits[base + e]);
        }
        for (uint e = 0; e < p.n_expert; ++e) {
            sum += exp(logits[base + e] - top);
        }
    }
    // The groups that take part, a bit each: the `groups_used` best by the sum of their two
    // best scores (equal sums: the lower group first).
    uint allowed = 0xffffffffu;
    if (p.groups > 1u && p.groups_used < p.groups) {
        uint per = p.n_expert / p.groups;
        float group_score[MAX_GROUPS];
        for (uint g = 0; g < p.groups; ++g) {
            float a = -1.0 / 0.0;
            float b = -1.0 / 0.0;
            for (uint e = g * per; e < (g + 1u) * per; ++e) {
                float v = select_score(base, e, top, sum);
                if (v > a) {
                    b = a;
                    a = v;
                } else if (v > b) {
                    b = v;
                }
            }
            group_score[g] = a + b;
        }
        allowed = 0u;
        for (uint j = 0; j < p.groups_used; ++j) {
            float best = -1.0 / 0.0;
            uint best_g = 0u;
            bool found = false;
            for (uint g = 0; g < p.groups; ++g) {
                if ((allowed & (1u << g)) == 0u && (!found || group_score[g] > best)) {
                    best = group_score[g];
                    best_g = g;
                    found = true;
                }
            }
            allowed |= 1u << best_g;
        }
    }
    uint per_group = p.groups > 1u ? p.n_expert / p.groups : p.n_expert;
    float picked[MAX_USED];
    uint ids[MAX_USED];
    float total = 0.0;
    // Each pick is the best-scored expert after the previous pick in the order (score
    // descending, index ascending), of the groups that take part.
    float prev = 0.0;
    uint prev_e = 0u;
    for (uint j = 0; j < p.used; ++j) {
        float best = -1.0 / 0.0;
        uint best_e = 0u;
        bool found = false;
        for (uint e = 0; e < p.n_expert; ++e) {
            if ((allowed & (1u << (e / per_group))) == 0u) {
                continue;
            }
            float s = select_score(base, e, top, sum);
            bool after = j == 0u || s < prev || (s == prev && e > prev_e);
            if (after && (!found || s > best)) {
                best = s;
                best_e = e;
                found = true;
            }
        }
        picked[j] = gate_weight(base, best_e, top, sum);
        ids[j] = best_e;
        total += picked[j];
        prev = best;
        prev_e = best_e;
    }
    for (uint j = 0; j < p.used; ++j) {
        float w = p.normalize != 0u && total > 0.0 ? picked[j] / total : picked[j];
        weights[t * p.stride + j] = w * p.scale;
        experts[t * p.stride + j] = ids[j];
    }
    if (p.shared_expert != 0u) {
        float g = p.shared_expert == 1u ? 1.0 / (1.0 + exp(-logits[base + p.n_expert])) : 1.0;
        weights[t * p.stride + p.used] = g;
    }
}

// Whether slot s is a routed expert's (not the shared expert's).
bool routed(uint s) {
    return s % p.stride < p.used;
}

void main() {
    uint lid = gl_LocalInvocationID.x;
    for (uint e = lid; e < p.n_expert; e += WG) {
        counts[e] = 0u;
    }
    barrier();
    for (uint t = lid; t < p.tokens; t += WG) {
        route(t);
    }
    memoryBarrierBuffer();
    barrier();
    uint slots = p.tokens * p.stride;
    for (uint s = lid; s < slots; s += WG) {
        if (routed(s)) {
            atomicAdd(counts[experts[s]], 1u);
        }
    }
    barrier();
    if (lid != 0u) {
        return;
    }
    uint first = 0u;
    uint n_tiles = 0u;
    for (uint e = 0; e < p.n_expert; ++e) {
        starts[e] = first;
        for (uint i = 0; i < counts[e]; i += p.tile) {
            tiles[n_tiles++] = uvec4(e, first + i, min(p.tile, counts[e] - i), 0u);
        }
        first += counts[e];
    }
    for (; n_tiles < p.max_tiles; ++n_tiles) {
        tiles[n_tiles] = uvec4(0u);
    }
    for (uint s = 0; s < slots; ++s) {
        if (routed(s)) {
            uint e = experts[s];
            order[starts[e]] = s;
            starts[e] += 1u;
        }
    }
}

#version 450
// RoPE and KV-cache append in one pass over the fused projection output.
// qkv holds, per token, the query heads, then the key heads, then the value heads. Query
// heads are rotated in place by the token's position, one invocation per (token, head, pair
// of dimensions). Pairs below rot_dim / 2 rotate (NeoX: dims (i, i + rot_dim/2); GPT-J: dims
// (2i, 2i + 1)); the rest pass through, so rot_dim = 0 means no rotary embedding at all.
// Keys (rotated alike) and values are stored in the paged cache at the token's own (row,
// index) (see attn_push.glsl), one invocation per (token, key or value head), which stores
// KV_GROUP values at a time (a q8 block needs all of its values for its scale). The key
// goes back into qkv as the cache holds it, which h2o_update.comp reads.
#include "common.glsl"
#define KV_BINDING 2
#include "kv_cache.glsl"
#define STEPS_BINDING 6
#include "attn_push.glsl"

layout(binding = 0) buffer QKV { float qkv[]; };              // [tokens, (nh + 2 nkv) * hd]
layout(binding = 1) readonly buffer Table { vec2 cs[]; };     // [max_pos, rot_dim/2] (cos, sin)

// Dimension c of the head at qkv[base ..] turned by position `pos`, read before any of the
// head is written.
float rotated(uint base, uint c, uint pos) {
    uint half_rot = p.rot_dim / 2;
    if (c >= p.rot_dim) {
        return qkv[base + c];
    }
    bool second = p.mode == 0 ? c >= half_rot : (c & 1u) == 1u;
    uint i = p.mode == 0 ? (second ? c - half_rot : c) : c / 2;
    uint a = p.mode == 0 ? i : 2 * i;
    uint b = p.mode == 0 ? i + half_rot : 2 * i + 1;
    vec2 r = cs[pos * half_rot + i];
    float x0 = qkv[base + a];
    float x1 = qkv[base + b];
    return second ? x0 * r.y + x1 * r.x : x0 * r.x - x1 * r.y;
}

void main() {
    uint idx = linear_index();
    uint pairs = p.head_dim / 2;
    uint q_items = p.n_head * pairs;
    uint per_token = q_items + 2 * p.n_head_kv;
    if (idx >= p.tokens * per_token) {
        return;
    }
    uint token = p.t0 + idx / per_token;
    uint item = idx % per_token;
    uvec4 st = steps[token];
    uint half_rot = p.rot_dim / 2;

    if (item < q_items) {
        uint i = item % pairs;
        if (i >= half_rot) {
            return;
        }
        uint a = p.mode == 0 ? i : 2 * i;
        uint b = p.mode == 0 ? i + half_rot : 2 * i + 1;
        uint base = token * p.q_stride + (item / pairs) * p.head_dim;
        float x0 = qkv[base + a];
        float x1 = qkv[base + b];
        vec2 r = cs[st.w * half_rot + i];
        qkv[base + a] = x0 * r.x - x1 * r.y;
        qkv[base + b] = x0 * r.y + x1 * r.x;
        return;
    }

    uint kv = item - q_items;    // key heads, then value heads
    bool is_v = kv >= p.n_head_kv;
    uint kvh = is_v ? kv - p.n_head_kv : kv;
    uint base = token * p.q_stride + (p.n_head + kv) * p.head_dim;
    uint c4 = kv_index4(kv_slot(st.x, st.y, p.max_blocks), kvh, p.n_head_kv, p.head_dim);
    for (uint g = 0; g < p.head_dim; g += KV_GROUP) {
        float v[KV_GROUP];
        for (uint e = 0; e < KV_GROUP; ++e) {
            v[e] = is_v ? qkv[base + g + e] : rotated(base, g + e, st.w);
        }
        if (is_v) {
            kv_store_v(c4 + g / 4, v);
        } else {
            kv_store_k(c4 + g / 4, v);
        }
    }
    if (!is_v) {
        for (uint d = 0; d < p.head_dim / 4; ++d) {
            vec4 k = K_LOAD(c4 + d);
            qkv[base + 4 * d] = k.x;
            qkv[base + 4 * d + 1] = k.y;
            qkv[base + 4 * d + 2] = k.z;
            qkv[base + 4 * d + 3] = k.w;
        }
    }
}

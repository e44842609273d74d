#version 450
// RoPE and KV-cache append in one pass over the fused projection output.
// qkv holds, per token, the query heads, then the key heads, then the value heads. Query and
// key heads are rotated in place by the token's position; keys and values are stored in the
// paged cache at the token's own (row, index) (see attn_push.glsl). One invocation per (token, head, pair of
// dimensions). Pairs below rot_dim / 2 rotate (NeoX: dims (i, i + rot_dim/2); GPT-J: dims
// (2i, 2i + 1)); the rest pass through, so rot_dim = 0 means no rotary embedding at all.
#include "common.glsl"
#define KV_BINDING 2
#include "kv_cache.glsl"
#define STEPS_BINDING 6
#include "attn_push.glsl"

layout(binding = 0) buffer QKV { float qkv[]; };              // [tokens, (nh + 2 nkv) * hd]
layout(binding = 1) readonly buffer Table { vec2 cs[]; };     // [max_pos, rot_dim/2] (cos, sin)

void main() {
    uint idx = linear_index();
    uint pairs = p.head_dim / 2;
    uint heads = p.n_head + 2 * p.n_head_kv;
    if (idx >= p.tokens * heads * pairs) {
        return;
    }
    uint i = idx % pairs;
    uint head = (idx / pairs) % heads;
    uint token = p.t0 + idx / (pairs * heads);
    uvec4 st = steps[token];
    uint pos = st.y;
    uint half_rot = p.rot_dim / 2;

    uint a;
    uint b;
    if (i < half_rot) {
        a = p.mode == 0 ? i : 2 * i;
        b = p.mode == 0 ? i + half_rot : 2 * i + 1;
    } else {
        a = p.rot_dim + 2 * (i - half_rot);
        b = a + 1;
    }
    uint base = token * p.q_stride + head * p.head_dim;
    float x0 = qkv[base + a];
    float x1 = qkv[base + b];
    bool is_v = head >= p.n_head + p.n_head_kv;
    if (i < half_rot && !is_v) {
        vec2 r = cs[st.w * half_rot + i];
        float y0 = x0 * r.x - x1 * r.y;
        x1 = x0 * r.y + x1 * r.x;
        x0 = y0;
        qkv[base + a] = x0;
        qkv[base + b] = x1;
    }
    if (head >= p.n_head) {
        uint kvh = is_v ? head - p.n_head - p.n_head_kv : head - p.n_head;
        uint c = 4 * kv_index4(kv_slot(st.x, pos, p.max_blocks), kvh, p.n_head_kv, p.head_dim);
        uint ca = c + a;
        uint cb = c + b;
        if (is_v) {
            v_cache[ca >> 2][ca & 3u] = x0;
            v_cache[cb >> 2][cb & 3u] = x1;
        } else {
            k_cache[ca >> 2][ca & 3u] = x0;
            k_cache[cb >> 2][cb & 3u] = x1;
        }
    }
}

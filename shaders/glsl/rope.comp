#version 450
// Rotary position embedding, in place. One invocation per rotated pair.
// The cos/sin table is computed on the host in f64 (so long positions stay exact and rope
// scaling schemes need no shader changes); the kernel only rotates.
//   mode 0 (NeoX): pairs (i, i + rot_dim/2)     mode 1 (GPT-J): pairs (2i, 2i + 1)
// Dimensions at and beyond rot_dim are left untouched (partial rotary).
#include "common.glsl"

layout(binding = 0) buffer X { float x[]; };                  // [tokens, heads, head_dim]
layout(binding = 1) readonly buffer Pos { uint pos[]; };      // [tokens]
layout(binding = 2) readonly buffer Table { vec2 cs[]; };     // [max_pos, rot_dim/2] (cos, sin)
layout(push_constant) uniform Push {
    uint heads;
    uint head_dim;
    uint rot_dim;
    uint mode;
    uint pairs;     // tokens * heads * rot_dim / 2
} p;

void main() {
    uint idx = linear_index();
    if (idx >= p.pairs) {
        return;
    }
    uint half_rot = p.rot_dim / 2;
    uint i = idx % half_rot;
    uint head = idx / half_rot;          // token * heads + head
    uint token = head / p.heads;
    uint base = head * p.head_dim;
    uint a = p.mode == 0 ? base + i : base + 2 * i;
    uint b = p.mode == 0 ? a + half_rot : a + 1;
    vec2 r = cs[pos[token] * half_rot + i];
    float x0 = x[a];
    float x1 = x[b];
    x[a] = x0 * r.x - x1 * r.y;
    x[b] = x0 * r.y + x1 * r.x;
}

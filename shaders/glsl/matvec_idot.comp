#version 450
// Weight-streaming product over activations rounded to 8-bit blocks (quantize_q8.comp), with
// integer dot products (idot.glsl), for decode on GPUs:
//   y[t, r] = sum_k W[r, k] x'[t, k]  ~  sum over 8-value chunks of
//             d_w d_x (sum_i q_w,i q_x,i)  +  m_w d_x (sum_i q_x,i)
// with each value of W = q_w d_w + m_w (the (d, m) of its group, m = 0 without a base) and
// x' ~ q_x d_x per 32-value block of x. The weights' levels come as packed signed bytes
// (block_ilevels8, quant/ilevels.glsl) and dot4x8 sums four products into an int32;
// the floats are applied once per chunk. A chunk's share of the base term is a quarter of its
// block's s = d_x sum q_x where the group spans whole blocks of x, and is summed from its own
// levels where a group has 16 values (Q2_K).
//
// The shape is matvec.comp's subgroup per row: the lanes of a subgroup stride along the row
// eight values at a time (coalesced loads), LANE_CHUNKS chunks a turn, all loaded before any
// is used, and reduce with subgroupAdd. Each subgroup computes RB rows together, sharing each
// load of x among them; a workgroup holds WG / subgroup size subgroups.
//
// Flags as matvec.comp's (ACCUMULATE, GATED, GELU); NORM is applied where x is rounded.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "idot.glsl"
#include "gelu.glsl"
layout(push_constant) uniform Push {
    uint m;
    uint k;
    uint flags;
    uint n;
    uint rows;      // rows per subgroup, a multiple of RB
    uint y_first;   // row r of W lands at y[t, y_first + r] of rows y_width long
    uint y_width;
    uint ds_at;     // where the blocks' (d, s) start in the activations' buffer, in vec2s
} p;
#define W_BINDING 0
#include "format.glsl"                                        // W [m or 2m, k]
#include "quant/ilevels.glsl"

layout(constant_id = 1) const uint TOKENS = 1;
layout(constant_id = 2) const uint LANE_CHUNKS = 1;
layout(constant_id = 3) const uint RB = 1;
// The activations' buffer, bound twice: the levels, 8 to a uvec2, then each block's (d, s).
layout(binding = 1) readonly buffer XQ { uvec2 xq[]; };       // [n, k / 8]
layout(binding = 2) buffer Y { float y[]; };                  // [n, y_width]
layout(binding = 3) readonly buffer XDS { vec2 xds[]; };      // [n, k / 32] from ds_at

const uint ACCUMULATE = 2u;
const uint GATED = 4u;
const uint GELU = 8u;
const uint CHUNKS = QK / 8;            // 8-value chunks per weight block
const uint GROUP_CHUNKS = GROUP / 8;   // and per (d, m) group
// A group spans whole 32-value blocks of x, so its chunks share the blocks' sums.
const bool BLOCK_SUMS = GROUP % 32 == 0;
const uint ONES = 0x01010101u;

uint tok[TOKENS];              // row of x, the last repeated past the workgroup's tokens
float dots[RB * TOKENS];       // the rows' dot products with each token's x'
uint row0;                     // the first of the rows being computed

// Row r of those being computed, clamped to the matrix.
uint row_at(uint r) {
    return min(row0 + r, p.m - 1);
}

// dots[] for the RB rows from row0, + row_offset (the up half of a gated matrix is rows
// m..2m). Lane l takes the rows' chunks l, l + S, l + 2S, ... (S lanes), LANE_CHUNKS a turn.
void rows_dots(uint row_offset) {
    uint chunks = p.k / 8;
    uint blocks = p.k / QK;
    uint lane = gl_SubgroupInvocationID;
    uint lanes = gl_SubgroupSize;
    [[unroll]] for (uint i = 0; i < RB * TOKENS; ++i) {
        dots[i] = 0.0;
    }
    for (uint c0 = 0; c0 < chunks; c0 += LANE_CHUNKS * lanes) {
        uint lo[LANE_CHUNKS * RB];
        uint hi[LANE_CHUNKS * RB];
        vec2 dm[LANE_CHUNKS * RB];
        [[unroll]] for (uint u = 0; u < LANE_CHUNKS; ++u) {
            // Lanes past the row's end unpack its last chunk again and add nothing.
            uint c = min(c0 + u * lanes + lane, chunks - 1);
            uint j = c % CHUNKS;
            [[unroll]] for (uint r = 0; r < RB; ++r) {
                Block blk;
                block_load((row_at(r) + row_offset) * blocks + c / CHUNKS, blk);
                block_ilevels8(blk, j, lo[u * RB + r], hi[u * RB + r]);
                dm[u * RB + r] = group_dm(blk, j / GROUP_CHUNKS);
            }
        }
        // The tokens are a loop, not unrolled, as in matvec.comp.
        [[dont_unroll]] for (uint t = 0; t < TOKENS; ++t) {
            float sum[RB];
            [[unroll]] for (uint r = 0; r < RB; ++r) {
                sum[r] = 0.0;
            }
            [[unroll]] for (uint u = 0; u < LANE_CHUNKS; ++u) {
                uint c = c0 + u * lanes + lane;
                if (c >= chunks) {
                    continue;
                }
                uint xi = tok[t] * chunks + c;
                uvec2 a = xq[xi];
                vec2 ds = xds[p.ds_at + xi / 4];
                // d_x sum q_x over the chunk, for the bases.
                float xsum = 0.0;
                if (HAS_BASE) {
                    xsum = BLOCK_SUMS
                        ? 0.25 * ds.y
                        : ds.x * float(dot4x8(a.x, ONES) + dot4x8(a.y, ONES));
                }
                [[unroll]] for (uint r = 0; r < RB; ++r) {
                    uint i = u * RB + r;
                    int q = dot4x8(lo[i], a.x) + dot4x8(hi[i], a.y);
                    sum[r] += dm[i].x * (ds.x * float(q));
                    if (HAS_BASE) {
                        sum[r] += dm[i].y * xsum;
                    }
                }
            }
            [[unroll]] for (uint r = 0; r < RB; ++r) {
                dots[r * TOKENS + t] += sum[r];
            }
        }
    }
    [[unroll]] for (uint i = 0; i < RB * TOKENS; ++i) {
        dots[i] = subgroupAdd(dots[i]);
    }
}

void main() {
    uint t0 = gl_WorkGroupID.y * TOKENS;
    uint live = min(TOKENS, p.n - t0);   // tokens this workgroup computes
    [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
        tok[t] = min(t0 + t, p.n - 1);
    }
    bool gated = (p.flags & GATED) != 0u;
    uint first = (gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID) * p.rows;
    for (uint r0 = 0; r0 < p.rows; r0 += RB) {
        // Rows past m are computed on a clamped row (the subgroup stays together through
        // subgroupAdd) and not written.
        row0 = first + r0;
        rows_dots(0);
        float gate[RB * TOKENS];
        if (gated) {
            [[unroll]] for (uint i = 0; i < RB * TOKENS; ++i) {
                gate[i] = dots[i];
            }
            rows_dots(p.m);
        }
        if (!subgroupElect()) {
            continue;
        }
        [[unroll]] for (uint r = 0; r < RB; ++r) {
            if (row0 + r >= p.m) {
                continue;
            }
            for (uint t = 0; t < live; ++t) {
                float v = dots[r * TOKENS + t];
                if (gated) {
                    float a = gate[r * TOKENS + t];
                    v = ((p.flags & GELU) != 0u ? gelu_tanh(a) : a / (1.0 + exp(-a))) * v;
                }
                uint o = (t0 + t) * p.y_width + p.y_first + row0 + r;
                y[o] = (p.flags & ACCUMULATE) != 0u ? y[o] + v : v;
            }
        }
    }
}

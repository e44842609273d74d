#version 450
// Weight-streaming product for decode and, on CPU devices, prefill:
//   y[t, r] = sum_k W[r, k] * x'[t, k]   for rows r < m and tokens t < n.
// Memory-bound: each weight block is read once per TOKENS tokens, its levels unpacked in
// registers (format.glsl) and the block's scale and base applied once per block:
//   sum_i (q_i d + m) x_i = d * sum_i q_i x_i + m * sum_i x_i.
//
// Two shapes, chosen by the host from the device (specialization constant LANE_ROWS):
//   lane per row (CPU devices): a workgroup is one SIMD-wide subgroup of 8 and each lane owns
//     `rows` rows, so no reduction is needed; x, the same for every lane, is loaded 32 values at
//     a time as one vec4 per lane and shared by subgroupBroadcast (a gather per value
//     otherwise). Each lane loads its weight block once and unpacks it from registers, and
//     TOKENS tokens share each unpacked block.
//   subgroup per row (GPUs): the lanes of a subgroup stride along the row eight values at a
//     time (coalesced loads) and reduce with subgroupAdd; each subgroup owns `rows` rows.
// `rows` is chosen per product by the host: a CPU device pays a fixed cost per workgroup, so
// large matrices get many rows per workgroup, small ones enough workgroups for every core.
//
// Flags fold the work around a projection into it:
//   NORM        x' = rmsnorm(x) * g, recomputed per workgroup from x (x is a few KiB and stays
//               in cache; the weights dominate the traffic).
//   ACCUMULATE  y += W x': the residual add of the layer that produces y.
//   GATED       W holds [gate; up] (2m rows) and y[r] = silu(gate_r . x') * (up_r . x').
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require
#include "common.glsl"
#define W_BINDING 0
#include "format.glsl"                                        // W [m or 2m, k]

layout(constant_id = 1) const uint TOKENS = 1;
layout(constant_id = 2) const bool LANE_ROWS = true;
layout(binding = 1) readonly buffer X { vec4 x[]; };          // [n, k]
layout(binding = 2) buffer Y { float y[]; };                  // [n, m]
layout(binding = 3) readonly buffer G { vec4 g[]; };          // [k] norm gain (NORM only)
layout(push_constant) uniform Push {
    uint m;
    uint k;
    uint flags;
    float eps;
    uint n;
    uint rows;      // rows per lane (lane per row) or per subgroup
} p;

const uint NORM = 1u;
const uint ACCUMULATE = 2u;
const uint GATED = 4u;

float scale[TOKENS];   // 1/rms of each token's x (NORM), else 1
float dots[TOKENS];    // the current row's dot product with each token's x'
uint tok[TOKENS];      // token index, clamped to n - 1 (results past n are not written)

// x'[t, i .. i + 4], i a multiple of 4.
vec4 xn4(uint t, uint i) {
    vec4 v = x[(tok[t] * p.k + i) >> 2];
    if ((p.flags & NORM) != 0u) {
        v *= scale[t] * g[i >> 2];
    }
    return v;
}

// Lane per row: this lane's full dot products of `row` with the tile's tokens.
// x is the same for every lane, so rather than each lane loading all of it (a gather per
// value on a CPU device), the eight lanes load 32 values of x as one vec4 each and hand them
// round with subgroupBroadcast, a register shuffle.
void row_dots_lane(uint row) {
    uint blocks = p.k / QK;
    uint lane = gl_SubgroupInvocationID & 7u;
    for (uint t = 0; t < TOKENS; ++t) {
        dots[t] = 0.0;
    }
    for (uint c = 0; c < blocks; ++c) {
        uint b = row * blocks + c;
        Block blk;
        block_load(b, blk);
        vec2 dm = block_dm(blk);
        float sq[TOKENS];
        float sx[TOKENS];
        for (uint t = 0; t < TOKENS; ++t) {
            sq[t] = 0.0;
            sx[t] = 0.0;
        }
        for (uint s = 0; s < QK / 32; ++s) {
            uint i = c * QK + 32 * s;
            vec4 xv[TOKENS];
            for (uint t = 0; t < TOKENS; ++t) {
                xv[t] = xn4(t, i + 4 * lane);
            }
            vec4 qlo;
            vec4 qhi;
            // Chunk JJ of the 32 values: x values 8 JJ .. 8 JJ + 8 sit in lanes 2 JJ, 2 JJ + 1.
#define CHUNK(JJ)                                                        \
            block_levels8(blk, 4 * s + JJ, qlo, qhi);                    \
            for (uint t = 0; t < TOKENS; ++t) {                          \
                vec4 xlo = subgroupBroadcast(xv[t], 2 * JJ);             \
                vec4 xhi = subgroupBroadcast(xv[t], 2 * JJ + 1);         \
                sq[t] += dot(qlo, xlo) + dot(qhi, xhi);                  \
                if (HAS_BASE) {                                          \
                    sx[t] += dot(xlo + xhi, vec4(1.0));                  \
                }                                                        \
            }
            CHUNK(0)
            CHUNK(1)
            CHUNK(2)
            CHUNK(3)
#undef CHUNK
        }
        for (uint t = 0; t < TOKENS; ++t) {
            dots[t] += HAS_BASE ? dm.x * sq[t] + dm.y * sx[t] : dm.x * sq[t];
        }
    }
}

// Subgroup per row: this lane's share of `row`, then the subgroup's sum.
void row_dots_subgroup(uint row) {
    uint chunks = p.k / 8;
    const uint per_block = QK / 8;
    for (uint t = 0; t < TOKENS; ++t) {
        dots[t] = 0.0;
    }
    for (uint c = gl_SubgroupInvocationID; c < chunks; c += gl_SubgroupSize) {
        vec4 lo;
        vec4 hi;
        dequant8(row * (chunks / per_block) + c / per_block, c % per_block, lo, hi);
        for (uint t = 0; t < TOKENS; ++t) {
            dots[t] += dot(lo, xn4(t, 8 * c)) + dot(hi, xn4(t, 8 * c + 4));
        }
    }
    for (uint t = 0; t < TOKENS; ++t) {
        dots[t] = subgroupAdd(dots[t]);
    }
}

void row_dots(uint row) {
    if (LANE_ROWS) {
        row_dots_lane(row);
    } else {
        row_dots_subgroup(row);
    }
}

// 1/rms of token t's x: the subgroup shares the loads (lane-contiguous vec4s) and the sum.
float inv_rms(uint t) {
    float ss = 0.0;
    uint base = tok[t] * p.k;
    for (uint i = 4 * gl_SubgroupInvocationID; i < p.k; i += 4 * gl_SubgroupSize) {
        vec4 v = x[(base + i) >> 2];
        ss += dot(v, v);
    }
    ss = subgroupAdd(ss);
    return inversesqrt(ss / float(p.k) + p.eps);
}

void main() {
    uint t0 = gl_WorkGroupID.y * TOKENS;
    for (uint t = 0; t < TOKENS; ++t) {
        tok[t] = min(t0 + t, p.n - 1);
    }
    for (uint t = 0; t < TOKENS; ++t) {
        scale[t] = (p.flags & NORM) != 0u ? inv_rms(t) : 1.0;
    }
    bool gated = (p.flags & GATED) != 0u;
    // The rows this invocation works on: p.rows per lane or per subgroup.
    uint first;
    uint stride;
    if (LANE_ROWS) {
        first = gl_WorkGroupID.x * WG * p.rows + gl_LocalInvocationID.x;
        stride = WG;
    } else {
        first = (gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID) * p.rows;
        stride = 1u;
    }
    for (uint r = 0; r < p.rows; ++r) {
        uint row = first + r * stride;
        // Whole subgroups stay together through subgroupAdd; rows past m are computed on a
        // clamped row and not written.
        bool live = row < p.m;
        row = min(row, p.m - 1);
        row_dots(row);
        float gate[TOKENS];
        if (gated) {
            for (uint t = 0; t < TOKENS; ++t) {
                gate[t] = dots[t];
            }
            row_dots(row + p.m);
        }
        if (!live || (!LANE_ROWS && !subgroupElect())) {
            continue;
        }
        for (uint t = 0; t < TOKENS; ++t) {
            if (t0 + t >= p.n) {
                break;
            }
            float v = dots[t];
            if (gated) {
                v = gate[t] / (1.0 + exp(-gate[t])) * v;
            }
            uint o = (t0 + t) * p.m + row;
            y[o] = (p.flags & ACCUMULATE) != 0u ? y[o] + v : v;
        }
    }
}

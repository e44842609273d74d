#version 450
// Weight-streaming product for decode and, on CPU devices, prefill:
//   y[t, r] = sum_k W[r, k] * x'[t, k]   for rows r < m and tokens t < n.
// Memory-bound: each weight block is read once per TOKENS tokens, its levels unpacked in
// registers (format.glsl) and the block's scale and base applied once per block (once per
// group of GROUP values for the formats with several pairs per block):
//   sum_i (q_i d + m) x_i = d * sum_i q_i x_i + m * sum_i x_i.
//
// Two shapes, chosen by the host from the device (specialization constant LANE_ROWS):
//   lane per row (CPU devices): a workgroup is one SIMD-wide subgroup of 8 and each lane owns
//     `rows` rows, so no reduction is needed; x, the same for every lane, is loaded 32 values at
//     a time as one vec4 per lane and shared by subgroupBroadcast (a gather per value
//     otherwise). Each lane loads its weight block once and unpacks it from registers, and
//     TOKENS tokens share each unpacked block.
//   subgroup per row (GPUs): the lanes of a subgroup stride along the row eight values at a
//     time (coalesced loads), LANE_CHUNKS chunks in flight per lane, and reduce with
//     subgroupAdd; each subgroup owns `rows` rows.
// `rows` is chosen per product by the host: a CPU device pays a fixed cost per workgroup, so
// large matrices get many rows per workgroup, small ones enough workgroups for every core.
//
// Flags fold the work around a projection into it:
//   NORM        x' = rmsnorm(x) * g, recomputed per workgroup from x (x is a few KiB and stays
//               in cache; the weights dominate the traffic).
//   ACCUMULATE  y += W x': the residual add of the layer that produces y.
//   GATED       W holds [gate; up] (2m rows) and y[r] = silu(gate_r . x') * (up_r . x');
//   GELU        with GATED, GELU's tanh form in place of SiLU (Gemma).
//
// Compiled with EXPERTS, the product of a mixture of experts: W stacks the experts'
// matrices, expert_rows rows each, and a workgroup row computes one tile of slots (a slot is
// one token's use of one expert; tiles from moe_route.comp): slot s reads x row s / x_per and
// writes y row s, with the rows of the tile's expert.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "gelu.glsl"
layout(push_constant) uniform Push {
    uint m;
    uint k;
    uint flags;
    float eps;
    uint n;
    uint rows;      // rows per lane (lane per row) or per subgroup
    uint y_first;   // row r of W lands at y[t, y_first + r] of rows y_width long
    uint y_width;
    uint expert_rows;   // EXPERTS: rows of W per expert
    uint x_per;         // EXPERTS: slots per row of x
    // Addresses of W, x and g: read through them by the wide variants (see address.glsl).
    uvec2 w_addr;
    uvec2 x_addr;
    uvec2 g_addr;
} p;
#define W_BINDING 0
#define W_ADDR p.w_addr
#define BY_ADDRESS_ID 4
#include "format.glsl"                                        // W [m or 2m, k]

layout(constant_id = 1) const uint TOKENS = 1;
layout(constant_id = 2) const bool LANE_ROWS = true;
layout(constant_id = 3) const uint RB = 1;     // rows a lane works on together (lane per row)
// 8-value chunks a lane takes per turn (subgroup per row), all loaded before any is used.
layout(constant_id = 5) const uint LANE_CHUNKS = 1;
layout(binding = 1) readonly buffer X { vec4 x[]; };          // [n, k]
layout(binding = 2) buffer Y { float y[]; };                  // [n, y_width]
layout(binding = 3) readonly buffer G { vec4 g[]; };          // [k] norm gain (NORM only)
#ifdef EXPERTS
// (expert, first index into order, slots, 0) per tile; tiles past the last have no slots.
layout(binding = 4) readonly buffer Tiles { uvec4 tiles[]; };
layout(binding = 5) readonly buffer Order { uint order[]; };  // the slots, expert by expert
#endif
#ifdef WIDE_LOADS
// x and g as 16-byte words (see VEC4_AT).
layout(binding = 1) readonly buffer X128 { u64vec2 x128[]; };
layout(binding = 3) readonly buffer G128 { u64vec2 g128[]; };
#endif

const uint NORM = 1u;
const uint ACCUMULATE = 2u;
const uint GATED = 4u;
const uint GELU = 8u;
const uint CHUNKS = QK / 8;    // 8-value chunks per block
const uint GROUP_CHUNKS = GROUP / 8;   // and per (d, m) group

float scale[TOKENS];           // 1/rms of each token's x (NORM), else 1
uint tok[TOKENS];              // row of x, the last repeated past the workgroup's tokens
uint out_row[TOKENS];          // and of y
uint row0;                     // the first row being computed
uint row_stride;               // and the step to the next

// Row r of those being computed, clamped to the matrix. Computed rather than kept in an array:
// a CPU device reads and writes an array with a varying index one lane at a time.
uint row_at(uint r) {
    return min(row0 + r * row_stride, p.m - 1);
}
float dots[RB * TOKENS];       // their dot products with each token's x'
// A block's x' for every token, broadcast (lane per row): chunk j of token t in
// xlo/xhi[t * CHUNKS + j], and the sum of group g's values in sx[g][t].
vec4 xlo[TOKENS * CHUNKS];
vec4 xhi[TOKENS * CHUNKS];
float sx[GROUPS][TOKENS];
// With several tokens, the loops over rows, tokens and a block's chunks are unrolled, so that
// dots[], xlo[] and xhi[] are indexed by constants and stay in registers: a CPU device reads
// and writes an array at a varying index one lane at a time (16 tokens ran at a sixth of the
// speed with the chunk loop left to the compiler). Decode (one token) keeps the loops: the
// unrolled code of twelve rows outgrows the instruction cache there for no gain.
const bool UNROLL_ROWS = TOKENS > 1;

// Values i .. i + 4 of x or g (i a multiple of 4). A CPU device loads lane by lane and pays
// per load, whatever its width, so the wide variants load them as one 16-byte word (two
// 8-byte loads through the addresses ran pp512 2% slower on lavapipe).
#ifdef WIDE_LOADS
#define VEC4_AT(buf, i) uintBitsToFloat(WORDS128_AT(p.buf##_addr, buf##128, (i) >> 2))
#else
#define VEC4_AT(buf, i) buf[(i) >> 2]
#endif

// A block's part of a dot product, from the sums of its levels times x' (sq) and of x' (sx):
// d sq + m sx.
float block_sum(vec2 dm, float sq, float sx) {
    return HAS_BASE ? dm.x * sq + dm.y * sx : dm.x * sq;
}

// Adds chunk j of a block's levels times each token's x' chunk to sq[].
void chunk_dots(Block blk, uint j, inout float sq[TOKENS]) {
    vec4 qlo;
    vec4 qhi;
    block_levels8(blk, j, qlo, qhi);
    [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
        sq[t] += dot(qlo, xlo[t * CHUNKS + j]) + dot(qhi, xhi[t * CHUNKS + j]);
    }
}

// Adds group g of a block (loaded in blk) of row r times the group's x' to dots[].
void row_group(uint r, Block blk, uint g) {
    vec2 dm = group_dm(blk, g);
    float sq[TOKENS];
    [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
        sq[t] = 0.0;
    }
    if (UNROLL_ROWS) {
        [[unroll]] for (uint j = 0; j < GROUP_CHUNKS; ++j) {
            chunk_dots(blk, g * GROUP_CHUNKS + j, sq);
        }
    } else {
        for (uint j = 0; j < GROUP_CHUNKS; ++j) {
            chunk_dots(blk, g * GROUP_CHUNKS + j, sq);
        }
    }
    [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
        dots[r * TOKENS + t] += block_sum(dm, sq[t], sx[g][t]);
    }
}

// Adds block c of row r (of those this lane computes) times the block's x' to dots[]. The
// first group stands apart so that a block of one group has no loop over groups.
void row_block(uint r, uint c, uint blocks, uint row_offset) {
    Block blk;
    block_load((row_at(r) + row_offset) * blocks + c, blk);
    row_group(r, blk, 0);
    [[unroll]] for (uint g = 1; g < GROUPS; ++g) {
        row_group(r, blk, g);
    }
}

// The sum of token t's x' over group g of the block in xlo/xhi, into sx[g][t].
void group_sum(uint t, uint g) {
    sx[g][t] = 0.0;
    if (HAS_BASE) {
        for (uint j = g * GROUP_CHUNKS; j < (g + 1) * GROUP_CHUNKS; ++j) {
            sx[g][t] += dot(xlo[t * CHUNKS + j] + xhi[t * CHUNKS + j], vec4(1.0));
        }
    }
}

// Lane per row: this lane's full dot products of its rows with the tile's tokens.
// x is the same for every lane, so rather than each lane loading all of it (a gather per
// value on a CPU device), the eight lanes load a block's x as one vec4 each per 32 values and
// hand it round with subgroupBroadcast, a register shuffle. It is then shared by RB rows, each
// of whose blocks is loaded once and unpacked from registers.
void rows_dots_lane(uint row_offset) {
    uint blocks = p.k / QK;
    uint lane = gl_SubgroupInvocationID & 7u;
    for (uint i = 0; i < RB * TOKENS; ++i) {
        dots[i] = 0.0;
    }
    for (uint c = 0; c < blocks; ++c) {
        for (uint s = 0; s < QK / 32; ++s) {
            uint i = c * QK + 32 * s + 4 * lane;
            // The norm gain is the same for every token: loaded once, as each load costs a
            // CPU device one scalar load per lane.
            vec4 gv = (p.flags & NORM) != 0u ? VEC4_AT(g, i) : vec4(1.0);
            [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
                vec4 xv = VEC4_AT(x, tok[t] * p.k + i);
                if ((p.flags & NORM) != 0u) {
                    xv *= scale[t] * gv;
                }
                // Chunk JJ of these 32 values: x values 8 JJ .. 8 JJ + 8 sit in lanes 2 JJ, 2 JJ + 1.
#define CHUNK(JJ)                                                          \
                xlo[t * CHUNKS + 4 * s + JJ] = subgroupBroadcast(xv, 2 * JJ);     \
                xhi[t * CHUNKS + 4 * s + JJ] = subgroupBroadcast(xv, 2 * JJ + 1);
                CHUNK(0)
                CHUNK(1)
                CHUNK(2)
                CHUNK(3)
#undef CHUNK
            }
        }
        [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
            group_sum(t, 0);
            [[unroll]] for (uint g = 1; g < GROUPS; ++g) {
                group_sum(t, g);
            }
        }
        if (UNROLL_ROWS) {
            [[unroll]] for (uint r = 0; r < RB; ++r) {
                row_block(r, c, blocks, row_offset);
            }
        } else {
            for (uint r = 0; r < RB; ++r) {
                row_block(r, c, blocks, row_offset);
            }
        }
    }
}

// x'[t, i .. i + 4], i a multiple of 4.
vec4 xn4(uint t, uint i) {
    vec4 v = x[(tok[t] * p.k + i) >> 2];
    if ((p.flags & NORM) != 0u) {
        v *= scale[t] * g[i >> 2];
    }
    return v;
}

// Subgroup per row: the lanes share row_at(0) (RB is 1). Lane l takes the row's chunks l,
// l + S, l + 2S, ... (S lanes), LANE_CHUNKS of them a turn; then the subgroup sums.
void rows_dots_subgroup(uint row_offset) {
    uint chunks = p.k / 8;
    uint row = row_at(0) + row_offset;
    uint lane = gl_SubgroupInvocationID;
    uint lanes = gl_SubgroupSize;
    for (uint t = 0; t < TOKENS; ++t) {
        dots[t] = 0.0;
    }
    for (uint c0 = 0; c0 < chunks; c0 += LANE_CHUNKS * lanes) {
        vec4 lo[LANE_CHUNKS];
        vec4 hi[LANE_CHUNKS];
        [[unroll]] for (uint u = 0; u < LANE_CHUNKS; ++u) {
            // Lanes past the row's end unpack its last chunk again and add nothing.
            uint c = min(c0 + u * lanes + lane, chunks - 1);
            dequant8(row * (chunks / CHUNKS) + c / CHUNKS, c % CHUNKS, lo[u], hi[u]);
        }
        // The tokens are a loop, not unrolled: unrolled with the chunks, several tokens
        // outgrew what lavapipe compiles in reason.
        [[dont_unroll]] for (uint t = 0; t < TOKENS; ++t) {
            float sum = 0.0;
            [[unroll]] for (uint u = 0; u < LANE_CHUNKS; ++u) {
                uint c = c0 + u * lanes + lane;
                if (c < chunks) {
                    sum += dot(lo[u], xn4(t, 8 * c)) + dot(hi[u], xn4(t, 8 * c + 4));
                }
            }
            dots[t] += sum;
        }
    }
    for (uint t = 0; t < TOKENS; ++t) {
        dots[t] = subgroupAdd(dots[t]);
    }
}

// dots[] for the rows + row_offset (the up half of a gated matrix is rows m..2m).
void rows_dots(uint row_offset) {
    if (LANE_ROWS) {
        rows_dots_lane(row_offset);
    } else {
        rows_dots_subgroup(row_offset);
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
    uint live;                 // tokens this workgroup computes (results past them are not written)
    uint w_first = 0u;         // the first row of W it reads
#ifdef EXPERTS
    uvec4 tile = tiles[gl_WorkGroupID.y];
    live = min(tile.z, TOKENS);
    if (live == 0u) {
        return;                // the same for the whole workgroup
    }
    w_first = tile.x * p.expert_rows;
    [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
        out_row[t] = order[tile.y + min(t, live - 1u)];
        tok[t] = out_row[t] / p.x_per;
    }
#else
    uint t0 = gl_WorkGroupID.y * TOKENS;
    live = min(TOKENS, p.n - t0);
    [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
        out_row[t] = t0 + t;
        tok[t] = min(t0 + t, p.n - 1);
    }
#endif
    [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
        scale[t] = (p.flags & NORM) != 0u ? inv_rms(t) : 1.0;
    }
    bool gated = (p.flags & GATED) != 0u;
    // The rows this invocation works on: p.rows (a multiple of RB) per lane or per subgroup.
    uint first;
    uint stride;
    if (LANE_ROWS) {
        first = gl_WorkGroupID.x * WG * p.rows + gl_LocalInvocationID.x;
        stride = WG;
    } else {
        first = (gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID) * p.rows;
        stride = 1u;
    }
    for (uint r0 = 0; r0 < p.rows; r0 += RB) {
        // Rows past m are computed on a clamped row (whole subgroups stay together through
        // the subgroup operations) and not written.
        row0 = first + r0 * stride;
        row_stride = stride;
        rows_dots(w_first);
        float gate[RB * TOKENS];
        if (gated) {
            for (uint i = 0; i < RB * TOKENS; ++i) {
                gate[i] = dots[i];
            }
            rows_dots(w_first + p.m);
        }
        if (!LANE_ROWS && !subgroupElect()) {
            continue;
        }
        for (uint r = 0; r < RB; ++r) {
            if (first + (r0 + r) * stride >= p.m) {
                continue;
            }
            [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
                if (t >= live) {
                    break;
                }
                float v = dots[r * TOKENS + t];
                if (gated) {
                    float a = gate[r * TOKENS + t];
                    v = ((p.flags & GELU) != 0u ? gelu_tanh(a) : a / (1.0 + exp(-a))) * v;
                }
                uint o = out_row[t] * p.y_width + p.y_first + row_at(r);
                y[o] = (p.flags & ACCUMULATE) != 0u ? y[o] + v : v;
            }
        }
    }
}

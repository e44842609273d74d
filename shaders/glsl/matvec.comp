#version 450
// Matrix-vector product for decode: y[b, r] = sum_k W[r, k] * x'[b, k].
// Memory-bound: each weight is read once. A workgroup computes ROWS rows of one vector b
// (gl_WorkGroupID.y); its invocations stride along k four weights at a time, then reduce.
//
// Flags fold the work around a projection into it, saving a dispatch and a pass over memory:
//   NORM        x' = rmsnorm(x) * g: the block's RMSNorm, recomputed per workgroup from x
//               (x is a few KiB and stays in cache; the weights dominate the traffic).
//   ACCUMULATE  y += W x': the residual add of the layer that produces y.
//   GATED       W holds [gate; up] (2m rows) and y[r] = silu(gate_r . x') * (up_r . x'):
//               the SwiGLU MLP's first half in one pass.
#include "common.glsl"
#include "reduce.glsl"
#define W_BINDING 0
#include "format.glsl"                                        // W [m or 2m, k]

layout(constant_id = 1) const uint ROWS = 2;
layout(binding = 1) readonly buffer X { vec4 x[]; };          // [batch, k] (k/4 vec4s)
layout(binding = 2) buffer Y { float y[]; };                  // [batch, m]
layout(binding = 3) readonly buffer G { vec4 g[]; };          // [k] norm gain (NORM only)
layout(push_constant) uniform Push { uint m; uint k; uint flags; float eps; } p;

const uint NORM = 1u;
const uint ACCUMULATE = 2u;
const uint GATED = 4u;

// x'[i], normalised when NORM is set (`scale` is 1/rms then).
// x and g are read as vec4s (16-byte loads); `xb` and `i` count floats.
float xn(uint xb, uint i, float scale) {
    float v = x[(xb + i) >> 2][(xb + i) & 3];
    return (p.flags & NORM) != 0u ? v * scale * g[i >> 2][i & 3] : v;
}

// x'[i .. i + 4] for i a multiple of 4 (and xb too, as when k is).
vec4 xn4(uint xb, uint i, float scale) {
    vec4 v = x[(xb + i) >> 2];
    if ((p.flags & NORM) != 0u) {
        v *= scale * g[i >> 2];
    }
    return v;
}

// This invocation's share of row `row`'s dot product with x'. When rows are whole loads,
// consecutive invocations read consecutive W_VEC-weight loads (the fast streaming pattern);
// otherwise weights are read one at a time.
float row_partial(uint row, uint xb, float scale) {
    float acc = 0.0;
    if (p.k % W_VEC == 0) {
        uint loads = p.k / W_VEC;
        uint first = row * loads;
        for (uint c = gl_LocalInvocationID.x; c < loads; c += WG) {
            vec4 lo;
            vec4 hi;
            weight_load(first + c, lo, hi);
            uint i = c * W_VEC;
            acc += dot(lo, xn4(xb, i, scale)) + dot(hi, xn4(xb, i + 4, scale));
        }
    } else {
        uint wb = row * p.k;
        for (uint i = gl_LocalInvocationID.x; i < p.k; i += WG) {
            acc += weight_at(wb + i) * xn(xb, i, scale);
        }
    }
    return acc;
}

void main() {
    uint row0 = gl_WorkGroupID.x * ROWS;
    uint xb = gl_WorkGroupID.y * p.k;
    float scale = 1.0;
    if ((p.flags & NORM) != 0u) {
        float ss = 0.0;
        for (uint k = gl_LocalInvocationID.x; k < p.k; k += WG) {
            float v = x[(xb + k) >> 2][(xb + k) & 3];
            ss += v * v;
        }
        scale = inversesqrt(workgroup_sum(ss) / float(p.k) + p.eps);
    }
    bool gated = (p.flags & GATED) != 0u;
    for (uint r = 0; r < ROWS; ++r) {
        uint row = row0 + r;
        // Rows past m still take part in the reductions (barriers), contributing zero.
        bool live = row < p.m;
        float sum = workgroup_sum(live ? row_partial(row, xb, scale) : 0.0);
        if (gated) {
            float up = workgroup_sum(live ? row_partial(row + p.m, xb, scale) : 0.0);
            sum = sum / (1.0 + exp(-sum)) * up;
        }
        if (live && gl_LocalInvocationID.x == 0) {
            uint o = gl_WorkGroupID.y * p.m + row;
            y[o] = (p.flags & ACCUMULATE) != 0u ? y[o] + sum : sum;
        }
    }
}

#version 450
// Matrix-vector product for decode: y[b, r] = sum_k W[r, k] * x[b, k].
// Memory-bound: each weight is read once. A workgroup computes ROWS rows of one vector b
// (gl_WorkGroupID.y); its invocations stride along k four weights at a time, then reduce.
#include "common.glsl"
#include "reduce.glsl"
#define W_BINDING 0
#include "format.glsl"                                        // W [m, k]

layout(constant_id = 1) const uint ROWS = 2;
layout(binding = 1) readonly buffer X { float x[]; };         // [batch, k]
layout(binding = 2) writeonly buffer Y { float y[]; };        // [batch, m]
layout(push_constant) uniform Push { uint m; uint k; } p;

void main() {
    uint row0 = gl_WorkGroupID.x * ROWS;
    uint xb = gl_WorkGroupID.y * p.k;
    uint k4 = p.k & ~3u;
    for (uint r = 0; r < ROWS; ++r) {
        uint row = row0 + r;
        // Rows past m still take part in the reductions (barriers), contributing zero.
        float acc = 0.0;
        if (row < p.m) {
            uint wb = row * p.k;
            for (uint k = gl_LocalInvocationID.x * 4; k < k4; k += WG * 4) {
                vec4 xv = vec4(x[xb + k], x[xb + k + 1], x[xb + k + 2], x[xb + k + 3]);
                acc += dot(weight4_at(wb + k), xv);
            }
            for (uint k = k4 + gl_LocalInvocationID.x; k < p.k; k += WG) {
                acc += weight_at(wb + k) * x[xb + k];
            }
        }
        float sum = workgroup_sum(acc);
        if (row < p.m && gl_LocalInvocationID.x == 0) {
            y[gl_WorkGroupID.y * p.m + row] = sum;
        }
    }
}

#version 450
// Activations rounded to 8-bit blocks once per input, for the products with integer dot
// products (matvec_idot.comp): x' = x, or with NORM x' = rmsnorm(x) * g as matvec.comp
// computes it, in blocks of 32 values, each with
//   d = max |x'| / 127,  q_i = round(x'_i / d) (ties to even) in -127..=127,  s = d * sum q_i
// so that x' ~ q d, and s is what a weight's base m multiplies (sum_i m x'_i ~ m s). As the
// native CPU executor rounds its activations (cpu/src/act.rs).
//
// The output buffer holds the levels, four to a word, [n, k / 4] words, and from vec2
// ds_at on each block's (d, s), [n, k / 32]; it is bound twice, as Q and as DS. One workgroup
// per token; an invocation rounds whole blocks (the vector is a few KiB, next to the megabytes
// of weights every product of it reads).
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "reduce.glsl"
layout(push_constant) uniform Push {
    uint k;
    uint flags;
    float eps;
    uint ds_at;     // where DS starts, in vec2s
} p;
layout(binding = 0) readonly buffer X { vec4 x[]; };      // [n, k]
layout(binding = 1) writeonly buffer Q { uvec4 q[]; };    // [n, k / 16]: 16 levels a uvec4
layout(binding = 2) writeonly buffer DS { vec2 ds[]; };   // [n, k / 32] (d, s), from ds_at
layout(binding = 3) readonly buffer G { vec4 g[]; };      // [k] norm gain (NORM only)

const uint NORM = 1u;

uint pack4(ivec4 v) {
    uvec4 b = uvec4(v) & 0xFFu;
    return b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
}

void main() {
    uint t = gl_WorkGroupID.x;
    uint base = t * (p.k / 4);
    bool norm = (p.flags & NORM) != 0u;
    float scale = 1.0;
    if (norm) {
        float ss = 0.0;
        for (uint i = gl_LocalInvocationID.x; i < p.k / 4; i += WG) {
            vec4 v = x[base + i];
            ss += dot(v, v);
        }
        scale = inversesqrt(workgroup_sum(ss) / float(p.k) + p.eps);
    }
    uint blocks = p.k / 32;
    for (uint b = gl_LocalInvocationID.x; b < blocks; b += WG) {
        vec4 v[8];
        float amax = 0.0;
        [[unroll]] for (uint i = 0; i < 8; ++i) {
            v[i] = x[base + 8 * b + i];
            if (norm) {
                v[i] *= scale * g[8 * b + i];
            }
            vec4 a = abs(v[i]);
            amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
        }
        float d = amax / 127.0;
        float inv = amax > 0.0 ? 127.0 / amax : 0.0;
        uint words[8];
        int sum = 0;
        [[unroll]] for (uint i = 0; i < 8; ++i) {
            ivec4 l = clamp(ivec4(roundEven(v[i] * inv)), -127, 127);
            sum += l.x + l.y + l.z + l.w;
            words[i] = pack4(l);
        }
        uint at = t * blocks + b;
        q[2 * at] = uvec4(words[0], words[1], words[2], words[3]);
        q[2 * at + 1] = uvec4(words[4], words[5], words[6], words[7]);
        ds[p.ds_at + at] = vec2(d, d * float(sum));
    }
}

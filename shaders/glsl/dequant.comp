#version 450
// Dequantizes a whole tensor to f32, eight values per invocation. Checks each format's GLSL
// include against quant/'s Rust reference bit for bit; also usable to expand weights.
#include "common.glsl"
#define W_BINDING 0
#include "format.glsl"

layout(binding = 1) writeonly buffer O { vec4 outv[]; };   // [chunks * 8]
layout(push_constant) uniform Push { uint chunks; } p;

void main() {
    uint c = linear_index();
    if (c >= p.chunks) {
        return;
    }
    const uint per_block = QK / 8;
    vec4 lo;
    vec4 hi;
    dequant8(c / per_block, c % per_block, lo, hi);
    outv[2 * c] = lo;
    outv[2 * c + 1] = hi;
}

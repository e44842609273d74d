#version 450
// Streaming read of a large buffer, for measuring the device's read bandwidth: each invocation
// sums vec4s at a stride of the whole dispatch and writes one value so nothing is optimised away.
#include "common.glsl"

layout(binding = 0) readonly buffer Src { vec4 src[]; };
layout(binding = 1) writeonly buffer Dst { float dst[]; };
layout(push_constant) uniform Push { uint n4; uint threads; } p;

void main() {
    uint id = linear_index();
    vec4 acc = vec4(0.0);
    for (uint i = id; i < p.n4; i += p.threads) {
        acc += src[i];
    }
    if (id < p.threads) {
        dst[id] = acc.x + acc.y + acc.z + acc.w;
    }
}

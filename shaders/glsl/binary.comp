#version 450
// Elementwise out = a (op) b, with b repeated every b_len elements (a bias or a per-channel
// scale broadcast over rows). op 0: add, op 1: multiply.
#include "common.glsl"

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer O { float outv[]; };
layout(push_constant) uniform Push { uint n; uint b_len; uint op; } p;

void main() {
    uint i = linear_index();
    if (i >= p.n) {
        return;
    }
    float bv = b[i % p.b_len];
    outv[i] = p.op == 0 ? a[i] + bv : a[i] * bv;
}

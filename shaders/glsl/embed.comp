#version 450
// Embedding lookup: out[t, :] = table[ids[t], :]. One invocation per output element.
// The host validates ids against the vocabulary; the clamp only keeps reads in bounds.
#include "common.glsl"
#define W_BINDING 0
#include "format.glsl"                                       // table [vocab, dim]

layout(binding = 1) readonly buffer Ids { uint ids[]; };     // [tokens]
layout(binding = 2) writeonly buffer O { float outv[]; };    // [tokens, dim]
layout(push_constant) uniform Push { uint dim; uint vocab; uint n; } p;

void main() {
    uint i = linear_index();
    if (i >= p.n) {
        return;
    }
    uint token = i / p.dim;
    uint col = i % p.dim;
    uint id = min(ids[token], p.vocab - 1);
    outv[i] = weight_at(id * p.dim + col);
}

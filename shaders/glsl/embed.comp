#version 450
// Embedding lookup: out[t, :] = table[ids[t], :] * scale, eight values per invocation,
// dequantized from the table's format (scale is 1 but for Gemma's sqrt(n_embd)). The host validates ids against the vocabulary and requires dim to
// be whole blocks; the clamp only keeps reads in bounds.
#include "common.glsl"
#define W_BINDING 0
#include "format.glsl"                                       // table [vocab, dim]

layout(binding = 1) readonly buffer Ids { uint ids[]; };     // [tokens]
layout(binding = 2) writeonly buffer O { vec4 outv[]; };     // [tokens, dim]
layout(push_constant) uniform Push { uint dim; uint vocab; uint chunks; float scale; } p;

void main() {
    uint c = linear_index();
    if (c >= p.chunks) {
        return;
    }
    uint row_chunks = p.dim / 8;
    uint token = c / row_chunks;
    uint col = c % row_chunks;
    uint id = min(ids[token], p.vocab - 1);
    const uint per_block = QK / 8;
    uint chunk = id * row_chunks + col;
    vec4 lo;
    vec4 hi;
    dequant8(chunk / per_block, chunk % per_block, lo, hi);
    outv[2 * c] = lo * p.scale;
    outv[2 * c + 1] = hi * p.scale;
}

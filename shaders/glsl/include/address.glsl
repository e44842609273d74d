// Loads through buffer device addresses, for the CPU-device paths whose loads differ per lane.
// lavapipe turns such a load from a bound buffer into a loop over the lanes that fetches the
// buffer's base and size and checks the bounds lane by lane; through an address it is one
// gather (SmolLM2 pp512 on lavapipe: 167-172 -> 187-190 tokens/s with the matrix-vector
// product's weights, x and norm gain loaded so). Each index is clamped to the bound buffer's
// length, given by the caller, so a load stays inside the buffer as a checked load would.
// Addresses come as uvec2 (low word first) in push constants.
#extension GL_ARB_gpu_shader_int64 : require
#extension GL_EXT_buffer_reference : require

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Words64 {
    uint64_t v[];
};

// 8-byte word i (of `count`) of the buffer at `base`, as two 32-bit words.
uvec2 load_words64(uvec2 base, uint i, uint count) {
    return unpackUint2x32(Words64(packUint2x32(base)).v[min(i, count - 1u)]);
}

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Words128 {
    u64vec2 v[];
};

// 16-byte word i (of `count`) of the buffer at `base`, as four 32-bit words.
uvec4 load_words128(uvec2 base, uint i, uint count) {
    u64vec2 w = Words128(packUint2x32(base)).v[min(i, count - 1u)];
    return uvec4(unpackUint2x32(w.x), unpackUint2x32(w.y));
}

// Loads through buffer device addresses, for the CPU-device paths whose loads differ per lane
// (the `_wide` variants). lavapipe turns such a load from a bound buffer into a loop over the
// lanes that fetches the buffer's base and size and checks the bounds lane by lane; through
// an address it is one gather, which LLVM splits into plain scalar loads on a host without
// AVX-512 (SmolLM2 pp512 on lavapipe, AMD EPYC with AVX2: 167-172 -> 187-190 tokens/s with the
// matrix-vector product's weights, x and norm gain loaded so). With AVX-512 it emits gather
// instructions, which ran 2-3x slower on such a host: there the host sets BY_ADDRESS false
// and the same loads come from the bound buffers (`kernels::wide_by_address`).
//
// The including kernel defines BY_ADDRESS_ID, the specialization constant's id. Each load
// names the address (uvec2, low word first, from push constants) and a view of the same
// bound buffer as 4-byte (uint[]), 8-byte (uint64_t[]) or 16-byte (u64vec2[]) words, whose
// length clamps the index, so a load through the address stays inside the buffer as a checked load would.
#extension GL_ARB_gpu_shader_int64 : require
#extension GL_EXT_buffer_reference : require

#ifndef BY_ADDRESS_ID
#error "address.glsl: the including kernel defines BY_ADDRESS_ID"
#endif
layout(constant_id = BY_ADDRESS_ID) const bool BY_ADDRESS = true;

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Words32 {
    uint v[];
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Words64 {
    uint64_t v[];
};
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Words128 {
    u64vec2 v[];
};

uvec4 words4(u64vec2 w) {
    return uvec4(unpackUint2x32(w.x), unpackUint2x32(w.y));
}

// 4-byte word i; 8-byte word i as two 32-bit words, and 16-byte word i as four.
#define WORDS32_AT(addr, view, i)                                                  \
    (BY_ADDRESS                                                                    \
        ? Words32(packUint2x32(addr)).v[min((i), uint(view.length()) - 1u)]        \
        : view[i])
#define WORDS64_AT(addr, view, i)                                                  \
    unpackUint2x32(BY_ADDRESS                                                      \
        ? Words64(packUint2x32(addr)).v[min((i), uint(view.length()) - 1u)]        \
        : view[i])
#define WORDS128_AT(addr, view, i)                                                 \
    words4(BY_ADDRESS                                                              \
        ? Words128(packUint2x32(addr)).v[min((i), uint(view.length()) - 1u)]       \
        : view[i])

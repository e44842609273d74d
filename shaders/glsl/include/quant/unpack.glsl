// Unpacking helpers shared by the quantized formats (include/quant/<fmt>.glsl).
#ifndef QUANT_UNPACK
#define QUANT_UNPACK

// The four bytes of a little-endian word, each shifted right by `shift` and masked.
uvec4 bytes_field(uint word, uint shift, uint mask) {
    return (uvec4(word, word >> 8, word >> 16, word >> 24) >> shift) & mask;
}

// The four bytes of `v`, each less than 128, less `off` (at most 128) each, as signed bytes:
// each byte is lifted by 128 first so no borrow crosses into the next, then dropped back by
// flipping its top bit.
uint bytes_minus(uint v, uint off) {
    return ((v | 0x80808080u) - off * 0x01010101u) ^ 0x80808080u;
}

// Bits 0..3 of `bits` moved to bit 4 of bytes 0..3: bit i shifted by 7i + 4. The four shifted
// copies land on distinct bits, so the product carries nowhere.
uint nibble_high_bits(uint bits) {
    return ((bits & 0xFu) * 0x02040810u) & 0x10101010u;
}

// q * d + m exactly as the Rust reference computes it: a rounded multiply, then an add.
// `precise` forbids fusing the two into one fma, which would round once instead of twice.
void dequant_dm(vec2 dm, vec4 qlo, vec4 qhi, out vec4 lo, out vec4 hi) {
    precise vec4 a = qlo * dm.x;
    precise vec4 b = qhi * dm.x;
    precise vec4 ra = a + dm.y;
    precise vec4 rb = b + dm.y;
    lo = ra;
    hi = rb;
}

// q * d for the symmetric formats (no base).
void dequant_d(float d, vec4 qlo, vec4 qhi, out vec4 lo, out vec4 hi) {
    lo = qlo * d;
    hi = qhi * d;
}
#endif

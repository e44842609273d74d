// Unpacking helpers shared by the quantized formats (include/quant/<fmt>.glsl).
#ifndef QUANT_UNPACK
#define QUANT_UNPACK

// The four bytes of a little-endian word, each shifted right by `shift` and masked.
uvec4 bytes_field(uint word, uint shift, uint mask) {
    return (uvec4(word, word >> 8, word >> 16, word >> 24) >> shift) & mask;
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

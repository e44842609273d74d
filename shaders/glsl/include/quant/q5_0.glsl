// Q5_0: blocks of 32 values in 22 bytes: d as f16, a 32-bit mask whose bit i is bit 4 of
// value i, then 16 bytes of the low four bits as Q4_0's nibbles; value = (q - 16) * d (GGUF
// Q5_0). Levels come back signed, q - 16, so dequant8's q * d rounds exactly as ggml's. Blocks
// are only 2-byte aligned: a block is loaded as the 6 words that cover it, and word 6 of
// `Block` records the byte its fields start at in the first (0 or 2).
// Interface: see f32.glsl. Mirrors quant/src/formats/q5_0.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 7
#define LAYOUT_BYTES 22
#include "quant/layout.glsl"

vec2 block_dm(Block blk) {
    return vec2(unpackHalf2x16(block_bytes4(blk, 0)).x, 0.0);
}

// Chunk j: nibbles from bytes 6 + 8(j % 2) .. +8 (low for j < 2, high after), fifth bits from
// byte j of the mask.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 6 + 8 * (j & 1);
    uint shift = 4 * (j >> 1);
    uint high = block_bytes4(blk, 2) >> (8 * j);
    uvec4 high_lo = (uvec4(high, high >> 1, high >> 2, high >> 3) & 1u) << 4;
    uvec4 high_hi = (uvec4(high >> 4, high >> 5, high >> 6, high >> 7) & 1u) << 4;
    lo = vec4(bytes_field(block_bytes4(blk, at), shift, 0xFu) | high_lo) - 16.0;
    hi = vec4(bytes_field(block_bytes4(blk, at + 4), shift, 0xFu) | high_hi) - 16.0;
}

// The same levels as signed bytes (ilevels.glsl).
#define HAS_ILEVELS
void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    uint at = 6 + 8 * (j & 1);
    uint shift = 4 * (j >> 1);
    uint high = block_bytes4(blk, 2) >> (8 * j);
    uint qlo = ((block_bytes4(blk, at) >> shift) & 0x0F0F0F0Fu) | nibble_high_bits(high);
    uint qhi = ((block_bytes4(blk, at + 4) >> shift) & 0x0F0F0F0Fu) | nibble_high_bits(high >> 4);
    lo = bytes_minus(qlo, 16u);
    hi = bytes_minus(qhi, 16u);
}

#include "quant/block.glsl"

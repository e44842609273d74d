// Q4_0: blocks of 32 values in 18 bytes: d as f16, then 16 bytes of nibbles; value i < 16 is
// the low nibble of byte i, value i + 16 the high nibble, and value = (q - 8) * d (GGUF Q4_0).
// Levels come back signed, q - 8, so dequant8's q * d rounds exactly as ggml's. Blocks are
// only 2-byte aligned: a block is loaded as the 5 words that cover it, and word 5 of `Block`
// records the byte its fields start at in the first (0 or 2).
// Interface: see f32.glsl. Mirrors quant/src/formats/q4_0.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 6
#define LAYOUT_BYTES 18
#include "quant/layout.glsl"

vec2 block_dm(Block blk) {
    return vec2(unpackHalf2x16(block_bytes4(blk, 0)).x, 0.0);
}

// Chunk j: bytes 2 + 8(j % 2) .. +8, low nibbles for j < 2, high nibbles after.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 2 + 8 * (j & 1);
    uint shift = 4 * (j >> 1);
    lo = vec4(bytes_field(block_bytes4(blk, at), shift, 0xFu)) - 8.0;
    hi = vec4(bytes_field(block_bytes4(blk, at + 4), shift, 0xFu)) - 8.0;
}

// The same levels as signed bytes (ilevels.glsl).
#define HAS_ILEVELS
void block_ilevels8(Block blk, uint j, out uint lo, out uint hi) {
    uint at = 2 + 8 * (j & 1);
    uint shift = 4 * (j >> 1);
    lo = bytes_minus((block_bytes4(blk, at) >> shift) & 0x0F0F0F0Fu, 8u);
    hi = bytes_minus((block_bytes4(blk, at + 4) >> shift) & 0x0F0F0F0Fu, 8u);
}

#include "quant/block.glsl"

// IQ4_NL: blocks of 32 values in 18 bytes: d as f16, then 16 bytes of 4-bit indices packed as
// Q4_0's (value i < 16 the low nibble of byte i, value i + 16 the high); value = d * LEVELS[q]
// with ggml's non-linear table of 16 levels (GGUF IQ4_NL). Levels come back as the table's
// integers, so dequant8's q * d rounds exactly as ggml's d * level. Blocks are only 2-byte
// aligned: loaded as Q4_0's are.
// Interface: see f32.glsl. Mirrors quant/src/formats/iq4_nl.rs.
const uint QK = 32;
const bool HAS_BASE = false;
#define BLOCK_WORDS 6
#define LAYOUT_BYTES 18
#include "quant/layout.glsl"
#include "quant/iq4_levels.glsl"

vec2 block_dm(Block blk) {
    return vec2(unpackHalf2x16(block_bytes4(blk, 0)).x, 0.0);
}

// Chunk j: bytes 2 + 8(j % 2) .. +8, low nibbles for j < 2, high nibbles after.
void block_levels8(Block blk, uint j, out vec4 lo, out vec4 hi) {
    uint at = 2 + 8 * (j & 1);
    uint shift = 4 * (j >> 1);
    lo = iq4_levels4(bytes_field(block_bytes4(blk, at), shift, 0xFu));
    hi = iq4_levels4(bytes_field(block_bytes4(blk, at + 4), shift, 0xFu));
}

#include "quant/block.glsl"

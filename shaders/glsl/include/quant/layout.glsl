// What the formats' includes share: the weights `w` at W_BINDING, `Block`, and block_load
// and block_dm (interface: see f32.glsl) for the layouts several formats use. A format
// defines BLOCK_WORDS and then includes this file, having defined at most one layout:
//   LAYOUT_WORDS      block b is words BLOCK_WORDS b .. + BLOCK_WORDS of `w` (uint[])
//   LAYOUT_UVEC4S     block b is the BLOCK_WORDS / 4 16-byte words from BLOCK_WORDS / 4 b on
//                     (`w` uvec4[], or vec4[] read as bits with FLOAT_WEIGHTS)
//   LAYOUT_BYTES n    blocks of n bytes, only 2-byte aligned (`w` uint[]): block_load reads
//                     the BLOCK_WORDS - 1 words that cover block b into words 0.. of `Block`
//                     and the byte its fields start at in the first (0 or 2) into the last;
//                     block_word and block_bytes4 read the block's own bytes. With
//                     LAYOUT_ODD_BYTES too, blocks are only byte-aligned (0..3 in the last)
//   none              `w` is uint[] and the format defines block_load (the k-quants)
// and at most one source of (d, m):
//   PLAIN_VALUES      values stored as themselves: (1, 0)
//   DM_HALVES         d and m as f16 in word 0
//   none              the format defines block_dm (or group_dm, see block.glsl)
#ifndef QUANT_LAYOUT
#define QUANT_LAYOUT

// Plain values have no levels to unpack (block.glsl brings unpack.glsl in for dequant8).
#ifndef PLAIN_VALUES
#include "quant/unpack.glsl"
#endif

#if defined(LAYOUT_UVEC4S) && defined(FLOAT_WEIGHTS)
layout(binding = W_BINDING) readonly buffer Weights { vec4 w[]; };
#define W_UVEC4(i) floatBitsToUint(w[i])
#elif defined(LAYOUT_UVEC4S)
layout(binding = W_BINDING) readonly buffer Weights { uvec4 w[]; };
#define W_UVEC4(i) w[i]
#else
layout(binding = W_BINDING) readonly buffer Weights { uint w[]; };
#endif

#define Block uint[BLOCK_WORDS]

#ifdef WIDE_LOADS
#include "quant/wide.glsl"
#endif

#if defined(LAYOUT_WORDS)
void block_load(uint b, out Block blk) {
#ifdef WIDE_LOADS
    WIDE_WORDS(BLOCK_WORDS * b, BLOCK_WORDS, blk)
#else
    for (uint i = 0; i < BLOCK_WORDS; ++i) {
        blk[i] = w[BLOCK_WORDS * b + i];
    }
#endif
}
#elif defined(LAYOUT_UVEC4S)
#define BLOCK_UVEC4S (BLOCK_WORDS / 4)

// A block of one or two 16-byte words is read without a loop: the optimizer keeps even a
// loop of one pass.
void block_load(uint b, out Block blk) {
#ifdef WIDE_LOADS
    WIDE_UVEC4S(BLOCK_UVEC4S * b, BLOCK_UVEC4S, blk)
#elif BLOCK_UVEC4S == 1
    uvec4 v = W_UVEC4(b);
    blk[0] = v.x;
    blk[1] = v.y;
    blk[2] = v.z;
    blk[3] = v.w;
#elif BLOCK_UVEC4S == 2
    uvec4 head = W_UVEC4(2 * b);
    uvec4 tail = W_UVEC4(2 * b + 1);
    blk[0] = head.x;
    blk[1] = head.y;
    blk[2] = head.z;
    blk[3] = head.w;
    blk[4] = tail.x;
    blk[5] = tail.y;
    blk[6] = tail.z;
    blk[7] = tail.w;
#else
    for (uint i = 0; i < BLOCK_UVEC4S; ++i) {
        uvec4 v = W_UVEC4(BLOCK_UVEC4S * b + i);
        blk[4 * i] = v.x;
        blk[4 * i + 1] = v.y;
        blk[4 * i + 2] = v.z;
        blk[4 * i + 3] = v.w;
    }
#endif
}
#elif defined(LAYOUT_BYTES)
void block_load(uint b, out Block blk) {
    uint byte = LAYOUT_BYTES * b;
#ifdef WIDE_LOADS
    WIDE_WORDS(byte >> 2, (BLOCK_WORDS - 1), blk)
#else
    uint at = byte >> 2;
    for (uint i = 0; i < BLOCK_WORDS - 1; ++i) {
        blk[i] = w[at + i];
    }
#endif
#ifdef LAYOUT_ODD_BYTES
    blk[BLOCK_WORDS - 1] = byte & 3u;
#else
    blk[BLOCK_WORDS - 1] = byte & 2u;
#endif
}

// The four bytes from byte `at` of the loaded words on.
uint layout_bytes4_at(Block blk, uint at) {
    uint i = at >> 2;
#ifdef LAYOUT_ODD_BYTES
    uint shift = 8u * (at & 3u);
    return shift == 0u ? blk[i] : (blk[i] >> shift) | (blk[i + 1] << (32u - shift));
#else
    return (at & 2u) == 0u ? blk[i] : (blk[i] >> 16) | (blk[i + 1] << 16);
#endif
}

// Word i of the block's own bytes (byte 4i onwards).
uint block_word(Block blk, uint i) {
    return layout_bytes4_at(blk, 4u * i + blk[BLOCK_WORDS - 1]);
}

// The four bytes of the block from its byte `byte` on (even, unless LAYOUT_ODD_BYTES).
uint block_bytes4(Block blk, uint byte) {
    return layout_bytes4_at(blk, byte + blk[BLOCK_WORDS - 1]);
}
#endif

#if defined(PLAIN_VALUES)
vec2 block_dm(Block blk) {
    return vec2(1.0, 0.0);
}
#elif defined(DM_HALVES)
vec2 block_dm(Block blk) {
    return unpackHalf2x16(blk[0]);
}
#endif
#endif

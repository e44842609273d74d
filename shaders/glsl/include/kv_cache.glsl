// The attention kernels' view of one layer of the paged KV cache. Kernels read and write K/V
// only through these functions.
//
// The pool holds blocks of KV_BLOCK positions; a block is [KV_BLOCK, kv_head, head_dim]
// values in K (binding KV_BINDING) and V (KV_BINDING + 1), read as vec4s. Each sequence slot ("row")
// has a block table: position pos of row r lives in block tables[r * max_blocks + pos /
// KV_BLOCK] at slot pos % KV_BLOCK. Beam search reads history through an indirection (the
// indirect KV cache): a sequence with a beam table finds position pos in row beams[beam +
// pos], the row whose lane held its ancestor when pos was written, so reordering beams
// copies no K/V. The including kernel defines KV_BINDING, and KV_READ_ONLY when it only reads
// the cache (the recorder then lets it run beside other readers of the same layer), and
// KV_KEYS_ONLY when it reads no values (binding KV_BINDING + 1 is then left out).
//
// The element type is the variant's (build.rs defines one of KV_F32, KV_F16, KV_Q8;
// hearth_shaders::KvType): value i of the layer is vec4 i / 4 and the kernels index vec4s,
// whatever the type stores:
//   f32: one vec4 per 4 values;
//   f16: a uvec2 of packed halves per 4 values, rounded to nearest even by kv_f16_round
//        (packHalf2x16's rounding is the implementation's; of a half it is exact);
//   q8:  blocks of 32 consecutive values (never straddling a row, as head_dim % 32 == 0) of
//        9 words: 8 words of signed bytes, value j in byte j % 4 of word j / 4, then the f32
//        scale d; value = byte * d, with d = max|x| / 127 and byte = roundEven(x / d).
// K_LOAD(i) / V_LOAD(i) give vec4 i. Writers store KV_GROUP values at once (one vec4, or a
// q8 block) with kv_store_k / kv_store_v, and kv_round gives the values a store keeps, so a
// kernel using what it just stored sees what later readers load.
#ifdef KV_READ_ONLY
#define KV_ACCESS readonly
#else
#define KV_ACCESS
#endif

#if defined(KV_F32)
#define KV_WORD vec4
const uint KV_GROUP = 4;
#elif defined(KV_F16)
#define KV_WORD uvec2
const uint KV_GROUP = 4;
#elif defined(KV_Q8)
#define KV_WORD uint
const uint KV_GROUP = 32;
#else
#error "kv_cache.glsl: the variant defines KV_F32, KV_F16 or KV_Q8"
#endif

layout(binding = KV_BINDING) KV_ACCESS buffer KCache { KV_WORD k_cache[]; };
#ifndef KV_KEYS_ONLY
layout(binding = KV_BINDING + 1) KV_ACCESS buffer VCache { KV_WORD v_cache[]; };
#endif
layout(binding = KV_BINDING + 2) readonly buffer Tables { uint tables[]; };

vec4 kv_f16(uvec2 w) {
    return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
}

// Word of vec4 i's bytes, and of its block's scale, in a q8 layer.
uint kv_q8_word(uint i) {
    return (i >> 3) * 9 + (i & 7u);
}
uint kv_q8_scale(uint i) {
    return (i >> 3) * 9 + 8;
}
vec4 kv_q8(uint w, uint scale) {
    ivec4 q = ivec4(int(w) << 24, int(w) << 16, int(w) << 8, int(w)) >> 24;
    return vec4(q) * uintBitsToFloat(scale);
}

// vec4 i of K or V. The `_wide` variants (WIDE_LOADS, for CPU devices) read a vec4's words in
// one load through the layer's addresses, k_addr and v_addr in the including kernel's push
// constants, where the host allows (include/address.glsl; the kernel defines BY_ADDRESS_ID).
#ifdef WIDE_LOADS
#include "address.glsl"
#if defined(KV_F32)
layout(binding = KV_BINDING) readonly buffer KWide { u64vec2 k_wide[]; };
layout(binding = KV_BINDING + 1) readonly buffer VWide { u64vec2 v_wide[]; };
#define K_LOAD(i) uintBitsToFloat(WORDS128_AT(p.k_addr, k_wide, (i)))
#define V_LOAD(i) uintBitsToFloat(WORDS128_AT(p.v_addr, v_wide, (i)))
#elif defined(KV_F16)
layout(binding = KV_BINDING) readonly buffer KWide { uint64_t k_wide[]; };
layout(binding = KV_BINDING + 1) readonly buffer VWide { uint64_t v_wide[]; };
#define K_LOAD(i) kv_f16(WORDS64_AT(p.k_addr, k_wide, (i)))
#define V_LOAD(i) kv_f16(WORDS64_AT(p.v_addr, v_wide, (i)))
#else
layout(binding = KV_BINDING) readonly buffer KWide { uint k_wide[]; };
layout(binding = KV_BINDING + 1) readonly buffer VWide { uint v_wide[]; };
#define K_LOAD(i) kv_q8(WORDS32_AT(p.k_addr, k_wide, kv_q8_word(i)), \
                        WORDS32_AT(p.k_addr, k_wide, kv_q8_scale(i)))
#define V_LOAD(i) kv_q8(WORDS32_AT(p.v_addr, v_wide, kv_q8_word(i)), \
                        WORDS32_AT(p.v_addr, v_wide, kv_q8_scale(i)))
#endif
#else
#if defined(KV_F32)
#define K_LOAD(i) k_cache[i]
#define V_LOAD(i) v_cache[i]
#elif defined(KV_F16)
#define K_LOAD(i) kv_f16(k_cache[i])
#define V_LOAD(i) kv_f16(v_cache[i])
#else
#define K_LOAD(i) kv_q8(k_cache[kv_q8_word(i)], k_cache[kv_q8_scale(i)])
#define V_LOAD(i) kv_q8(v_cache[kv_q8_word(i)], v_cache[kv_q8_scale(i)])
#endif
#endif

#ifdef KV_F16
// x rounded to the nearest half, ties to even, in integer steps: a compiler may fold
// unpackHalf2x16(packHalf2x16(x)) to x. Halves below 2^-14 are subnormal, steps of 2^-24;
// past 65504 the nearest is infinity.
float kv_f16_round(float x) {
    if (abs(x) < 6.103515625e-05) {
        return roundEven(x * 16777216.0) * 5.9604644775390625e-08;
    }
    uint u = floatBitsToUint(x);
    float r = uintBitsToFloat((u + 0xFFFu + ((u >> 13) & 1u)) & 0xFFFFE000u);
    return abs(r) > 65504.0 ? sign(x) * uintBitsToFloat(0x7F800000u) : r;
}
#endif

#ifdef KV_Q8
// A q8 block's scale: max|x| / 127.
float kv_q8_step(float v[KV_GROUP]) {
    float amax = 0.0;
    for (uint j = 0; j < KV_GROUP; ++j) {
        amax = max(amax, abs(v[j]));
    }
    return amax / 127.0;
}
int kv_q8_byte(float x, float d) {
    return d == 0.0 ? 0 : clamp(int(roundEven(x / d)), -127, 127);
}
#endif

// The values KV_GROUP values v read back as once stored.
void kv_round(inout float v[KV_GROUP]) {
#if defined(KV_F16)
    for (uint j = 0; j < KV_GROUP; ++j) {
        v[j] = kv_f16_round(v[j]);
    }
#elif defined(KV_Q8)
    float d = kv_q8_step(v);
    for (uint j = 0; j < KV_GROUP; ++j) {
        v[j] = float(kv_q8_byte(v[j], d)) * d;
    }
#endif
}

#ifndef KV_READ_ONLY
// Stores KV_GROUP values v from vec4 i4 of the layer (i4 a multiple of KV_GROUP / 4).
#if defined(KV_F32)
#define KV_STORE(cache, i4, v)                                                      \
    for (uint e = 0; e < KV_GROUP / 4; ++e) {                            \
        cache[(i4) + e] = vec4(v[4 * e], v[4 * e + 1], v[4 * e + 2], v[4 * e + 3]); \
    }
#elif defined(KV_F16)
#define KV_STORE(cache, i4, v)                                                      \
    for (uint e = 0; e < KV_GROUP / 4; ++e) {                            \
        vec4 h = vec4(kv_f16_round(v[4 * e]), kv_f16_round(v[4 * e + 1]),           \
                      kv_f16_round(v[4 * e + 2]), kv_f16_round(v[4 * e + 3]));      \
        cache[(i4) + e] = uvec2(packHalf2x16(h.xy), packHalf2x16(h.zw));            \
    }
#else
#define KV_STORE(cache, i4, v)                                                      \
    {                                                                               \
        float d = kv_q8_step(v);                                                    \
        uint w0 = ((i4) >> 3) * 9;                                                  \
        for (uint e = 0; e < 8; ++e) {                                   \
            uint w = 0;                                                             \
            for (uint b = 0; b < 4; ++b) {                               \
                w |= (uint(kv_q8_byte(v[4 * e + b], d)) & 0xFFu) << (8 * b);        \
            }                                                                       \
            cache[w0 + e] = w;                                                      \
        }                                                                           \
        cache[w0 + 8] = floatBitsToUint(d);                                         \
    }
#endif
void kv_store_k(uint i4, float v[KV_GROUP]) {
    KV_STORE(k_cache, i4, v)
}
#ifndef KV_KEYS_ONLY
void kv_store_v(uint i4, float v[KV_GROUP]) {
    KV_STORE(v_cache, i4, v)
}
#endif
#endif

const uint KV_BLOCK = 16;
const uint NO_BEAM = 0xFFFFFFFFu;

#ifdef KV_BEAMS
// Kernels that read history (not rope_kv, which writes a row's own position) define KV_BEAMS.
layout(binding = KV_BINDING + 3) readonly buffer Beams { uint beams[]; };

// The row holding position pos for a sequence in `row` with beam table offset `beam`.
uint kv_row(uint row, uint beam, uint pos) {
    return beam == NO_BEAM ? row : beams[beam + pos];
}
#endif

// The pool slot (block * KV_BLOCK + offset) of position pos of `row`.
uint kv_slot(uint row, uint pos, uint max_blocks) {
    return tables[row * max_blocks + pos / KV_BLOCK] * KV_BLOCK + pos % KV_BLOCK;
}

// Index of the first vec4 of (slot, kv_head) in the layer; head_dim % KV_GROUP == 0.
uint kv_index4(uint slot, uint kv_head, uint n_head_kv, uint head_dim) {
    return ((slot * n_head_kv + kv_head) * head_dim) >> 2;
}

// The attention kernels' view of one layer of the paged KV cache. Kernels read and write K/V
// only through these functions.
//
// The pool holds blocks of KV_BLOCK positions; a block is [KV_BLOCK, kv_head, head_dim] f32
// in K (binding KV_BINDING) and V (KV_BINDING + 1), read as vec4s. Each sequence slot ("row")
// has a block table: position pos of row r lives in block tables[r * max_blocks + pos /
// KV_BLOCK] at slot pos % KV_BLOCK. Beam search reads history through an indirection (the
// indirect KV cache): a sequence with a beam table finds position pos in row beams[beam +
// pos], the row whose lane held its ancestor when pos was written, so reordering beams
// copies no K/V. The including kernel defines KV_BINDING, and KV_READ_ONLY when it only reads
// the cache (the recorder then lets it run beside other readers of the same layer), and
// KV_KEYS_ONLY when it reads no values (binding KV_BINDING + 1 is then left out).
#ifdef KV_READ_ONLY
#define KV_ACCESS readonly
#else
#define KV_ACCESS
#endif
layout(binding = KV_BINDING) KV_ACCESS buffer KCache { vec4 k_cache[]; };
#ifndef KV_KEYS_ONLY
layout(binding = KV_BINDING + 1) KV_ACCESS buffer VCache { vec4 v_cache[]; };
#endif
layout(binding = KV_BINDING + 2) readonly buffer Tables { uint tables[]; };

// vec4 i of K or V. The `_wide` variants (WIDE_LOADS, for CPU devices) read 16 bytes a load
// through the layer's addresses, k_addr and v_addr in the including kernel's push constants,
// where the host allows (include/address.glsl; the kernel defines BY_ADDRESS_ID).
#ifdef WIDE_LOADS
#include "address.glsl"
layout(binding = KV_BINDING) readonly buffer K128 { u64vec2 k128[]; };
#define K_LOAD(i) uintBitsToFloat(WORDS128_AT(p.k_addr, k128, (i)))
#ifndef KV_KEYS_ONLY
layout(binding = KV_BINDING + 1) readonly buffer V128 { u64vec2 v128[]; };
#define V_LOAD(i) uintBitsToFloat(WORDS128_AT(p.v_addr, v128, (i)))
#endif
#else
#define K_LOAD(i) k_cache[i]
#define V_LOAD(i) v_cache[i]
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

// Index of the first vec4 of (slot, kv_head) in k_cache / v_cache; head_dim % 4 == 0.
uint kv_index4(uint slot, uint kv_head, uint n_head_kv, uint head_dim) {
    return ((slot * n_head_kv + kv_head) * head_dim) >> 2;
}

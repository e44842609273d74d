// The attention kernels' view of one layer's KV cache. Kernels read and write K/V only through
// these functions, so a different cache layout (paged blocks) replaces this file alone.
// Layout: K and V each [position, kv_head, head_dim], f32. The including kernel defines
// KV_BINDING (K there, V at KV_BINDING + 1).
layout(binding = KV_BINDING) buffer KCache { float k_cache[]; };
layout(binding = KV_BINDING + 1) buffer VCache { float v_cache[]; };

uint kv_index(uint pos, uint kv_head, uint n_head_kv, uint head_dim) {
    return (pos * n_head_kv + kv_head) * head_dim;
}

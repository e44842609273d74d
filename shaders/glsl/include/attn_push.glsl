// Push constants and per-token positions shared by rope_kv and the attention kernels.
// A step's tokens may belong to several sequences: token t sits at index steps[t].y of
// row steps[t].x (after the steps[t].y it attends to), its sequence's beam table (or NO_BEAM)
// starts at steps[t].z, and RoPE turns it by its position in the sequence, steps[t].w: the
// index itself unless the row's pool evicted tokens (model/src/kv/infinigen/evict.rs).
// A local layer's window counts entries back from a token's own.
layout(binding = STEPS_BINDING) readonly buffer Steps { uvec4 steps[]; };
layout(push_constant) uniform Push {
    uint tokens;        // tokens in this dispatch, starting at token t0 of the step
    uint t0;
    uint n_head;
    uint n_head_kv;
    uint head_dim;
    uint q_stride;      // floats per token in qkv: (n_head + 2 n_head_kv) * head_dim
    uint max_blocks;    // entries per row of the block tables
    float scale;        // the factor on query-key scores, 1 / sqrt(head_dim) for most models
    uint rot_dim;       // rope_kv: dimensions rotated (0: none)
    uint mode;          // rope_kv: 0 NeoX, 1 GPT-J
    uint splits;        // attn_decode: runs per (query head, token), see attn_split.glsl
    uint window;        // a local layer's window: entries [pos + 1 - window, pos] (0: all)
    float softcap;      // scores become softcap * tanh(score / softcap) (0: as they are)
    uint sinks;         // 1: the attention kernels' sink binding holds a logit per query head
                        // that joins each softmax's denominator (GPT-OSS); 0: none
    uvec2 k_addr;       // this layer's K and V through their addresses (WIDE_LOADS variants)
    uvec2 v_addr;
} p;

// The first entry a token at entry `pos` attends to.
uint window_start(uint pos) {
    return p.window > 0 && pos + 1 > p.window ? pos + 1 - p.window : 0;
}

#include "cap_score.glsl"

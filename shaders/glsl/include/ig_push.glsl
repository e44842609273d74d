// Push constants shared by the InfiniGen kernels (`IgPush` in runtime/src/kernels/infinigen.rs);
// each kernel reads the fields it needs.
layout(push_constant) uniform Push {
    uint row;           // sequence slot in the paged pool
    uint pos;           // the current token's index in its row; its history is 0 .. pos
    uint p0;            // ig_partial_keys: positions p0 .. p1
    uint p1;
    uint token;         // queries: token `token` of a [tokens, q_stride] buffer, heads first
    uint q_stride;
    uint n_head;
    uint n_head_kv;
    uint head_dim;
    uint r;             // partial dimensions per KV head
    uint n_ctx;         // positions per row of pkeys and per head of scores
    uint max_blocks;    // entries per row of the block tables
    uint cap;           // slots per KV head of sel_idx and the K/V scratch
    uint budget;        // ig_select: most positions kept per KV head (<= cap)
    float scale;        // 1 / sqrt(head_dim)
    float alpha;        // ig_select: keep tokens within alpha of a head's best score
    uint rot_dim;       // ig_speculate: dimensions rotated (0: none)
    uint mode;          // ig_speculate: 0 NeoX, 1 GPT-J
    uint recent;        // ig_select: the newest positions, always kept on top of the rest
    uint seq_pos;       // the current token's position in its sequence: `pos` unless the
                        // row's pool evicted tokens (RoPE's angle; what `recent` counts from)
    uint splits;        // attn_sparse: workgroups per head (include/attn_split.glsl)
} p;

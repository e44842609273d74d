// Push constants shared by the InfiniGen kernels (`IgPush` in
// kernels/src/infinigen/mod.rs); each kernel reads the fields it needs. What differs per
// token (its row, index, position and budget) comes from the step buffer (ig_step.glsl), so one
// dispatch serves every sequence of a decode step.
layout(push_constant) uniform Push {
    uint token;         // queries and outputs: token t of the dispatch is row token + t of a
                        // [tokens, q_stride] buffer, heads first
    uint tokens;        // tokens in the dispatch (ig_partial_keys: entries of its step buffer)
    uint q_stride;
    uint n_head;
    uint n_head_kv;
    uint head_dim;
    uint r;             // partial dimensions per KV head
    uint n_ctx;         // positions per row of pkeys and per head of scores
    uint max_blocks;    // entries per row of the block tables
    uint cap;           // slots per KV head of sel_idx and the K/V scratch
    float scale;        // the factor on query-key scores, 1 / sqrt(head_dim) for most models
    float alpha;        // ig_select: keep tokens within alpha of a head's best score
    uint rot_dim;       // ig_speculate: dimensions rotated (0: none)
    uint mode;          // ig_speculate: 0 NeoX, 1 GPT-J
    uint recent;        // ig_select: the newest positions, always kept on top of the rest
                        // (at most cap - budget of them)
    uint splits;        // attn_sparse: workgroups per head (include/attn_split.glsl)
    float softcap;      // ig_speculate, attn_sparse: scores become softcap * tanh(score /
                        // softcap), as dense attention caps them (0: as they are)
    uint _pad;
    uvec2 scores_addr;  // ig_select_wide: the scores and seq_pos through their addresses
    uvec2 seq_pos_addr;
} p;

#include "cap_score.glsl"

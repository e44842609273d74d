// Split decode attention (flash-decoding): with p.splits > 1, a token's positions are cut into
// runs of at least SPLIT_MIN, one workgroup each (gl_WorkGroupID.z), so that a GPU has work for
// every core when few tokens attend over a long context. Each run leaves its softmax partial,
// the (max, sum) pair and the unnormalised weighted V, and attn_merge.comp combines them.
// Partial (token t of the dispatch, query head h, run z) is head_dim / 4 + 1 vec4s at
// ((t * n_head + h) * splits + z) * (head_dim / 4 + 1): head_dim / 4 of weighted V, then
// vec4(max, sum, 0, 0). Every run writes its partial, an empty one (-1e30, 0), so the merge
// needs no positions.
const uint SPLIT_MIN = 256;

// Positions per run for a token attending to n_kv positions.
uint split_len(uint n_kv, uint splits) {
    return max(SPLIT_MIN, (n_kv + splits - 1) / splits);
}

// The tokens of a batched InfiniGen dispatch (`IgStep` in kernels/src/infinigen/mod.rs),
// one per sequence of a decode step: token t is the current token of cache row `row`, at
// entry `index` after the `index` entries it may attend to, and at position `pos` of its
// sequence (RoPE's angle, and what the recent window counts back from; it runs ahead of
// `index` once the row's pool has evicted tokens). It fetches at most `budget` positions per
// KV head besides the recent ones. The including kernel defines IG_STEPS_BINDING.
struct IgStep {
    uint row;
    uint index;
    uint pos;
    uint budget;
};
layout(binding = IG_STEPS_BINDING) readonly buffer Steps { IgStep steps[]; };

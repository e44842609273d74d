// Plain f32 weights: one float per weight.
// The including kernel defines W_BINDING.
layout(binding = W_BINDING) readonly buffer Weights { float w_data[]; };

float weight_at(uint i) {
    return w_data[i];
}

// Four consecutive weights starting at i (i need not be aligned).
vec4 weight4_at(uint i) {
    return vec4(w_data[i], w_data[i + 1], w_data[i + 2], w_data[i + 3]);
}

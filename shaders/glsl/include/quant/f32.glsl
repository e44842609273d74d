// Plain f32 weights. Read as vec4 so consecutive invocations read consecutive 16 bytes.
// The including kernel defines W_BINDING.
layout(binding = W_BINDING) readonly buffer Weights { vec4 w_vec[]; };

// Weights per `weight_load`.
const uint W_VEC = 8;

float weight_at(uint i) {
    return w_vec[i >> 2][i & 3];
}

// Weights [W_VEC * load, W_VEC * (load + 1)).
void weight_load(uint load, out vec4 lo, out vec4 hi) {
    lo = w_vec[2 * load];
    hi = w_vec[2 * load + 1];
}

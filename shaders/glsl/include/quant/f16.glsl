// IEEE half weights, eight per 16-byte load (little-endian: element 2j in the low half of
// word j). Read as uvec4 so no 16-bit storage feature is needed and consecutive invocations
// read consecutive 16 bytes, which every device (lavapipe included) turns into wide loads.
// The including kernel defines W_BINDING.
layout(binding = W_BINDING) readonly buffer Weights { uvec4 w_vec[]; };

// Weights per `weight_load`.
const uint W_VEC = 8;

float weight_at(uint i) {
    return unpackHalf2x16(w_vec[i >> 3][(i >> 1) & 3])[i & 1];
}

// Weights [W_VEC * load, W_VEC * (load + 1)).
void weight_load(uint load, out vec4 lo, out vec4 hi) {
    uvec4 v = w_vec[load];
    lo = vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y));
    hi = vec4(unpackHalf2x16(v.z), unpackHalf2x16(v.w));
}

// Workgroup-wide reductions: subgroup operations inside each subgroup, then one shared-memory
// slot per subgroup. Summing the slots in a fixed order keeps results deterministic.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

shared float reduce_slots[WG];

float workgroup_sum(float v) {
    v = subgroupAdd(v);
    // A single-subgroup workgroup needs no shared memory and no barrier (barriers are costly
    // on CPU devices, which run a workgroup's subgroups as coroutines).
    if (gl_NumSubgroups == 1) {
        return v;
    }
    if (subgroupElect()) {
        reduce_slots[gl_SubgroupID] = v;
    }
    barrier();
    float total = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; ++i) {
        total += reduce_slots[i];
    }
    barrier();
    return total;
}

float workgroup_max(float v) {
    v = subgroupMax(v);
    if (gl_NumSubgroups == 1) {
        return v;
    }
    if (subgroupElect()) {
        reduce_slots[gl_SubgroupID] = v;
    }
    barrier();
    float best = reduce_slots[0];
    for (uint i = 1; i < gl_NumSubgroups; ++i) {
        best = max(best, reduce_slots[i]);
    }
    barrier();
    return best;
}

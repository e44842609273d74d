// Shared by every kernel: the workgroup size as specialization constant 0, and the linear
// index of an invocation in a dispatch that the host may have split over x and y (x is capped
// at 65535 groups on many devices).
layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

uint linear_index() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    return group * WG + gl_LocalInvocationID.x;
}

// F(L) for each lane L < 16, for subgroupBroadcast, which takes a constant lane: the
// CPU-device paths that hand loads round a subgroup of at most 16 lanes (BROADCAST_LANES in
// kernels/src/mod.rs).
#define EACH_LANE(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) \
    F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)

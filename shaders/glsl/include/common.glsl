// Shared by every kernel: the workgroup size as specialization constant 0, and the linear
// index of an invocation in a dispatch that the host may have split over x and y (x is capped
// at 65535 groups on many devices).
layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

uint linear_index() {
    uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    return group * WG + gl_LocalInvocationID.x;
}

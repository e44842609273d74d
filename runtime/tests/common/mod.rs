//! Shared by the integration tests.

/// Running in CI (`CI=true`), where a missing Vulkan device or model file fails a test
/// instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

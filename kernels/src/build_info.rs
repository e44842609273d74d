//! What `hearth --version` reports of the device layer.

/// The Vulkan version Hearth asks for and what compiled its kernels, one per line, for
/// version reports.
pub fn build_info() -> String {
    let api = crate::vk::API_VERSION;
    format!(
        "Vulkan API {}.{}\nkernels: {}",
        ash::vk::api_version_major(api),
        ash::vk::api_version_minor(api),
        hearth_shaders::COMPILER
    )
}

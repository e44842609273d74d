//! The runtime's Vulkan errors. Each says what to do about it where there is something to do.

use ash::vk;

#[derive(Debug, thiserror::Error)]
pub enum VkError {
    #[error(
        "no Vulkan loader found ({0}). Install one: on Debian/Ubuntu \
         `apt-get install libvulkan1 mesa-vulkan-drivers` (Mesa's lavapipe gives every machine a \
         CPU Vulkan device); elsewhere, your GPU vendor's driver"
    )]
    NoLoader(String),
    #[error(
        "no Vulkan 1.2 device with compute found. Install a GPU driver, or Mesa's lavapipe \
         (`apt-get install mesa-vulkan-drivers`) to run on the CPU"
    )]
    NoDevice,
    #[error(
        "device {index} does not exist: {count} Vulkan device(s) found (see `hearth devices`)"
    )]
    BadDeviceIndex { index: usize, count: usize },
    #[error("device {device} cannot run Hearth: {missing}")]
    Unsupported { device: String, missing: String },
    #[error(
        "out of device memory: could not allocate {size} bytes for `{what}` in {location} memory \
         (heaps: {heaps})"
    )]
    OutOfMemory {
        size: u64,
        what: String,
        location: &'static str,
        heaps: String,
    },
    #[error("buffer `{what}` of {size} bytes exceeds the device's {limit_name} ({limit} bytes)")]
    TooLarge {
        what: String,
        size: u64,
        limit_name: &'static str,
        limit: u64,
    },
    #[error("kernel {kernel}: {message}")]
    Kernel {
        kernel: &'static str,
        message: String,
    },
    #[error("memory allocation for `{what}` failed: {message}")]
    Allocation { what: String, message: String },
    #[error("Vulkan call {call} failed: {result}")]
    Call {
        call: &'static str,
        result: vk::Result,
    },
}

pub type Result<T, E = VkError> = std::result::Result<T, E>;

/// Attaches the name of the failing Vulkan call to its result code.
pub(crate) trait CallContext<T> {
    fn call(self, name: &'static str) -> Result<T>;
}

impl<T> CallContext<T> for std::result::Result<T, vk::Result> {
    fn call(self, name: &'static str) -> Result<T> {
        self.map_err(|result| VkError::Call { call: name, result })
    }
}

/// A device error as the model crate's error, which every executor returns: the message stays
/// this error's own.
impl From<VkError> for hearth_model::Error {
    fn from(e: VkError) -> Self {
        Self::Device(Box::new(e))
    }
}

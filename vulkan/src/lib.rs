//! The Vulkan executor: a model's weights in device buffers and its step recorded into one
//! submission from the kernels of `hearth-kernels` ([`VkModel`], `executor`, with its KV
//! policies), behind the model crate's `Backend` and `BatchedBackend`; and an encoder's
//! ([`VkEncoder`]) behind the model crate's `Encoder`.

mod executor;

pub use executor::{VkEncoder, VkModel, VkModelOptions};

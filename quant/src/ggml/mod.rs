//! GGUF types Hearth reads but does not keep: BF16, converted at load into one of Hearth's
//! [`formats`](crate::formats) (F16). Its dequantization follows ggml's reference
//! `ggml_bf16_to_fp32`, bit for bit.

pub mod bf16;

//! Metadata values as JSON.
use hearth_models::gguf::MetaValue;
use serde_json::{json, Value};

/// Metadata as JSON; arrays longer than a screenful are summarised by type and length.
pub(super) fn meta_json(v: &MetaValue) -> Value {
    match v {
        MetaValue::Array(a) if a.len() > 16 => {
            json!({ "array": a.elem_type().name(), "len": a.len() })
        }
        MetaValue::Array(a) => (0..a.len())
            .filter_map(|i| a.get(i))
            .map(|v| meta_json(&v))
            .collect(),
        MetaValue::String(s) => json!(s),
        MetaValue::Bool(b) => json!(b),
        MetaValue::F32(f) => json!(f),
        MetaValue::F64(f) => json!(f),
        other => match (other.as_u64(), other.as_i64()) {
            (Some(u), _) => json!(u),
            (None, Some(i)) => json!(i),
            _ => Value::Null,
        },
    }
}

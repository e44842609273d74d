//! A request that cannot be served as asked, and reading a request's fields so that an error
//! names the one at fault.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// A request that cannot be served as asked: a 400 naming the field.
#[derive(Debug)]
pub struct Invalid {
    /// The field at fault, as a path into the request (`messages[1].role`); empty where the
    /// body as a whole is at fault.
    pub param: String,
    pub message: String,
}

pub(super) fn invalid(param: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        param: param.into(),
        message: message.into(),
    }
}

/// `T` read from `value`; an error names the field at fault by its path.
pub(super) fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, Invalid> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let param = if path == "." { String::new() } else { path };
        let message = match param.as_str() {
            "" => format!("invalid request body: {}", e.inner()),
            p => format!("{p}: {}", e.inner()),
        };
        invalid(param, message)
    })
}

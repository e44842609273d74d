//! `/v1/embeddings`' request and response as OpenAI's API shapes them: `input` in every form
//! a completion's prompt takes (strings or token ids, one or many), `encoding_format` `float`
//! or `base64` (each vector's f32 values, little-endian, base64-encoded), `dimensions` to cut
//! vectors short (Matryoshka-style: the first values, scaled back to unit length), and
//! Ollama's `truncate` (on by default: a text longer than the model reads is cut to it).

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::invalid::{from_value, invalid, Invalid};
use super::prompt::Prompt;
use super::whole;

/// Most inputs one request may embed (OpenAI's bound).
pub const MAX_INPUTS: usize = 2048;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Float,
    Base64,
}

#[derive(Debug)]
pub struct EmbeddingRequest {
    pub model: Option<String>,
    pub input: Prompt,
    pub encoding: Encoding,
    /// Values per vector, where the request cuts them short.
    pub dimensions: Option<usize>,
    /// Cut an input longer than the model reads (else refuse it).
    pub truncate: bool,
}

impl EmbeddingRequest {
    pub fn from_json(body: &Value) -> Result<Self, Invalid> {
        #[derive(Deserialize)]
        struct Fields {
            model: Option<String>,
            input: Option<Value>,
            encoding_format: Option<String>,
            #[serde(default, deserialize_with = "whole::optional")]
            dimensions: Option<usize>,
            truncate: Option<bool>,
        }
        let f: Fields = from_value(body)?;
        let input = f
            .input
            .ok_or_else(|| invalid("input", "input is missing"))?;
        let encoding = match f.encoding_format.as_deref() {
            None | Some("float") => Encoding::Float,
            Some("base64") => Encoding::Base64,
            Some(other) => {
                return Err(invalid(
                    "encoding_format",
                    format!("encoding_format `{other}`: it is `float` or `base64`"),
                ))
            }
        };
        if f.dimensions == Some(0) {
            return Err(invalid("dimensions", "dimensions must be at least 1"));
        }
        Ok(Self {
            model: f.model,
            input: Prompt::parse_field(&input, "input", MAX_INPUTS)?,
            encoding,
            dimensions: f.dimensions,
            truncate: f.truncate.unwrap_or(true),
        })
    }
}

/// One vector, as the request asked for it.
#[derive(Serialize, ToSchema, Debug)]
#[serde(untagged)]
pub enum EmbeddingValue {
    Float(Vec<f32>),
    /// The f32 values, little-endian, base64-encoded.
    Base64(String),
}

impl EmbeddingValue {
    pub fn new(v: Vec<f32>, encoding: Encoding) -> Self {
        match encoding {
            Encoding::Float => Self::Float(v),
            Encoding::Base64 => {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Self::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        }
    }
}

#[derive(Serialize, ToSchema, Debug)]
pub struct Embedding {
    pub object: &'static str,
    pub index: usize,
    pub embedding: EmbeddingValue,
}

#[derive(Serialize, ToSchema, Debug)]
pub struct EmbeddingUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Serialize, ToSchema, Debug)]
pub struct EmbeddingList {
    pub object: &'static str,
    pub data: Vec<Embedding>,
    pub model: String,
    pub usage: EmbeddingUsage,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn requests_parse_and_bad_fields_are_named() {
        let r = EmbeddingRequest::from_json(&json!({"input": ["a", "b"], "model": "m"})).unwrap();
        assert_eq!(r.input.0.len(), 2);
        assert_eq!(r.encoding, Encoding::Float);
        assert!(r.truncate);
        let r = EmbeddingRequest::from_json(
            &json!({"input": [1, 2], "encoding_format": "base64", "dimensions": 64.0}),
        )
        .unwrap();
        assert_eq!((r.encoding, r.dimensions), (Encoding::Base64, Some(64)));
        for (body, param) in [
            (json!({}), "input"),
            (json!({"input": []}), "input"),
            (
                json!({"input": "a", "encoding_format": "int8"}),
                "encoding_format",
            ),
            (json!({"input": "a", "dimensions": 0}), "dimensions"),
            (json!({"input": "a", "dimensions": -3}), "dimensions"),
            (json!({"input": [[1], [-1]]}), "input[1][0]"),
        ] {
            let e = EmbeddingRequest::from_json(&body).unwrap_err();
            assert_eq!(e.param, param, "{body}");
        }
        let many: Vec<Value> = (0..=MAX_INPUTS).map(|_| json!("x")).collect();
        let e = EmbeddingRequest::from_json(&json!({ "input": many })).unwrap_err();
        assert_eq!(e.param, "input");
    }

    #[test]
    fn base64_holds_the_little_endian_floats() {
        let EmbeddingValue::Base64(s) = EmbeddingValue::new(vec![1.0, -2.0], Encoding::Base64)
        else {
            panic!("not base64");
        };
        let bytes = base64::engine::general_purpose::STANDARD.decode(s).unwrap();
        assert_eq!(bytes, [1f32.to_le_bytes(), (-2f32).to_le_bytes()].concat());
    }
}

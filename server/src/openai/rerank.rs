//! `/v1/rerank`'s request and response, in the shape llama.cpp's server and the common rerank
//! APIs (Jina's, Cohere's) use: a `query`, `documents` (strings, or objects with a `text`),
//! `top_n` and `return_documents`; results sorted by `relevance_score`, highest first, each
//! with its document's `index`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::invalid::{from_value, invalid, Invalid};
use super::whole;

/// Most documents one request may rank.
pub const MAX_DOCUMENTS: usize = 1024;

#[derive(Debug)]
pub struct RerankRequest {
    pub model: Option<String>,
    pub query: String,
    pub documents: Vec<String>,
    pub top_n: Option<usize>,
    pub return_documents: bool,
}

impl RerankRequest {
    pub fn from_json(body: &Value) -> Result<Self, Invalid> {
        #[derive(Deserialize)]
        struct Fields {
            model: Option<String>,
            query: Option<String>,
            documents: Option<Vec<Value>>,
            #[serde(default, deserialize_with = "whole::optional")]
            top_n: Option<usize>,
            return_documents: Option<bool>,
        }
        let f: Fields = from_value(body)?;
        let query = f
            .query
            .ok_or_else(|| invalid("query", "query is missing"))?;
        let documents = f
            .documents
            .ok_or_else(|| invalid("documents", "documents is missing"))?;
        if documents.is_empty() || documents.len() > MAX_DOCUMENTS {
            return Err(invalid(
                "documents",
                format!("{} documents; give 1 to {MAX_DOCUMENTS}", documents.len()),
            ));
        }
        let documents = documents
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Value::String(s) => Ok(s.clone()),
                Value::Object(o) => match o.get("text") {
                    Some(Value::String(s)) => Ok(s.clone()),
                    _ => Err(invalid(
                        format!("documents[{i}].text"),
                        format!("documents[{i}] is an object without a string `text`"),
                    )),
                },
                _ => Err(invalid(
                    format!("documents[{i}]"),
                    format!("documents[{i}] must be a string or an object with a `text`"),
                )),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            model: f.model,
            query,
            documents,
            top_n: f.top_n,
            return_documents: f.return_documents.unwrap_or(false),
        })
    }
}

#[derive(Serialize, ToSchema, Debug)]
pub struct RerankDocument {
    pub text: String,
}

#[derive(Serialize, ToSchema, Debug)]
pub struct RerankResult {
    /// The document's place in the request's `documents`.
    pub index: usize,
    /// The cross-encoder's logit: higher is more relevant.
    pub relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<RerankDocument>,
}

#[derive(Serialize, ToSchema, Debug)]
pub struct RerankUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Serialize, ToSchema, Debug)]
pub struct RerankList {
    pub object: &'static str,
    pub model: String,
    /// Highest score first, at most `top_n`.
    pub results: Vec<RerankResult>,
    pub usage: RerankUsage,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn requests_parse_and_bad_fields_are_named() {
        let r = RerankRequest::from_json(&json!({
            "query": "q", "documents": ["a", {"text": "b"}], "top_n": 1, "return_documents": true
        }))
        .unwrap();
        assert_eq!(r.documents, ["a", "b"]);
        assert_eq!((r.top_n, r.return_documents), (Some(1), true));
        for (body, param) in [
            (json!({"documents": ["a"]}), "query"),
            (json!({"query": "q"}), "documents"),
            (json!({"query": "q", "documents": []}), "documents"),
            (json!({"query": "q", "documents": ["a", 3]}), "documents[1]"),
            (
                json!({"query": "q", "documents": [{"t": 1}]}),
                "documents[0].text",
            ),
            (
                json!({"query": "q", "documents": ["a"], "top_n": -1}),
                "top_n",
            ),
        ] {
            let e = RerankRequest::from_json(&body).unwrap_err();
            assert_eq!(e.param, param, "{body}");
        }
    }
}

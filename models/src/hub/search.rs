//! Finding models on the hub: `GET {endpoint}/api/models?search=TEXT&filter=gguf
//! &sort=downloads&direction=-1&limit=N`, the hub's model list (the one its search box and
//! `huggingface_hub`'s `list_models` read): a JSON array of models, most downloaded first,
//! each `{"id": "ORG/REPO", "downloads", "likes", "tags", "pipeline_tag", "library_name",
//! "createdAt", "private", ...}`. `filter=gguf` keeps the repositories tagged `gguf`, those
//! holding GGUF files.

use serde::Deserialize;

use super::client::{encode_query_value, Client};
use super::HubOptions;
use crate::error::{Error, Result};

/// Most bytes of a search's answer.
const BODY_LIMIT: u64 = 16 << 20;

/// Most results one search asks for (the hub's own limit is 1000).
pub const MAX_RESULTS: usize = 1000;

/// A model the hub's search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchHit {
    /// `ORG/REPO`.
    pub id: String,
    /// Downloads over the last 30 days, as the hub counts them.
    pub downloads: u64,
    pub likes: u64,
    /// The hub's tags: `gguf`, the architecture, `license:...`, `base_model:...`.
    pub tags: Vec<String>,
    /// What the model does (`text-generation`), where the hub says.
    pub pipeline_tag: Option<String>,
    /// When the repository was made, as the hub writes it (`2024-11-01T10:12:00.000Z`).
    pub created_at: Option<String>,
    /// A gated repository asks its users to accept terms (and to send a token) first.
    pub gated: bool,
}

impl SearchHit {
    /// The model's name without its owner.
    pub fn name(&self) -> &str {
        self.id.split_once('/').map_or(&self.id, |(_, n)| n)
    }

    /// Its owner.
    pub fn author(&self) -> &str {
        self.id.split_once('/').map_or("", |(a, _)| a)
    }
}

/// One model of the hub's list; fields it leaves out (older mirrors do) take defaults.
#[derive(Deserialize)]
struct Model {
    id: Option<String>,
    #[serde(rename = "modelId")]
    model_id: Option<String>,
    #[serde(default)]
    downloads: u64,
    #[serde(default)]
    likes: u64,
    #[serde(default)]
    tags: Vec<String>,
    pipeline_tag: Option<String>,
    #[serde(rename = "createdAt")]
    created_at: Option<String>,
    /// `false`, or how access is granted (`"auto"`, `"manual"`).
    #[serde(default)]
    gated: serde_json::Value,
}

/// The models of the hub whose names match `text` and that hold GGUF files, most downloaded
/// first, at most `limit` of them (1 to [`MAX_RESULTS`]). An empty `text` lists the most
/// downloaded of all.
pub fn search(options: &HubOptions, text: &str, limit: usize) -> Result<Vec<SearchHit>> {
    let client = Client::new(options);
    let url = search_url(&client, text, limit);
    let mut response = client.get(&url, 0)?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(BODY_LIMIT)
        .read_to_string()
        .map_err(|e| Error::http(&url, format!("the search's answer: {e}")))?;
    if status != 200 {
        return Err(Error::http(
            &url,
            format!("the search answered status {status}{}", hub_message(&body)),
        ));
    }
    parse(&body).map_err(|reason| Error::http(&url, reason))
}

fn search_url(client: &Client, text: &str, limit: usize) -> String {
    let limit = limit.clamp(1, MAX_RESULTS);
    client.url(&format!(
        "api/models?search={}&filter=gguf&sort=downloads&direction=-1&limit={limit}",
        encode_query_value(text.trim())
    ))
}

/// `: MESSAGE` where an error's body is the hub's `{"error": MESSAGE}`.
fn hub_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error")?.as_str().map(str::to_string))
        .map(|m| format!(": {m}"))
        .unwrap_or_default()
}

fn parse(body: &str) -> std::result::Result<Vec<SearchHit>, String> {
    let models: Vec<Model> =
        serde_json::from_str(body).map_err(|e| format!("not a list of models: {e}"))?;
    models
        .into_iter()
        .map(|m| {
            let id =
                m.id.or(m.model_id)
                    .filter(|id| id.contains('/'))
                    .ok_or("a model without an `id` of the form ORG/REPO")?;
            Ok(SearchHit {
                id,
                downloads: m.downloads,
                likes: m.likes,
                tags: m.tags,
                pipeline_tag: m.pipeline_tag,
                created_at: m.created_at,
                gated: !matches!(
                    m.gated,
                    serde_json::Value::Null | serde_json::Value::Bool(false)
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hubs_model_list_parses() {
        // As huggingface.co answers `api/models?search=smollm2&filter=gguf&limit=2`.
        let body = r#"[
          {"_id":"672b","id":"bartowski/SmolLM2-135M-Instruct-GGUF","likes":7,
           "trendingScore":0,"private":false,"downloads":5123,
           "tags":["gguf","text-generation","en","base_model:HuggingFaceTB/SmolLM2-135M-Instruct"],
           "pipeline_tag":"text-generation","library_name":"gguf",
           "createdAt":"2024-11-01T10:12:00.000Z","modelId":"bartowski/SmolLM2-135M-Instruct-GGUF"},
          {"id":"meta/Gated-GGUF","gated":"manual"}
        ]"#;
        let hits = parse(body).unwrap();
        assert_eq!(hits.len(), 2);
        let first = &hits[0];
        assert_eq!(first.id, "bartowski/SmolLM2-135M-Instruct-GGUF");
        assert_eq!(
            (first.name(), first.author()),
            ("SmolLM2-135M-Instruct-GGUF", "bartowski")
        );
        assert_eq!(
            (first.downloads, first.likes, first.gated),
            (5123, 7, false)
        );
        assert_eq!(first.tags[0], "gguf");
        assert_eq!(first.pipeline_tag.as_deref(), Some("text-generation"));
        assert_eq!(
            first.created_at.as_deref(),
            Some("2024-11-01T10:12:00.000Z")
        );
        assert_eq!((hits[1].downloads, hits[1].gated), (0, true));
        assert_eq!(parse("[]").unwrap(), []);
    }

    #[test]
    fn a_malformed_list_is_refused() {
        assert!(parse(r#"{"error":"x"}"#).is_err());
        assert!(parse(r#"[{"downloads":1}]"#).is_err());
        assert_eq!(hub_message(r#"{"error":"Invalid sort"}"#), ": Invalid sort");
        assert_eq!(hub_message("<html>"), "");
    }

    #[test]
    fn the_query_names_the_hubs_parameters() {
        let client = Client::new(&HubOptions {
            endpoint: "https://hub.example".into(),
            ..HubOptions::default()
        });
        assert_eq!(
            search_url(&client, " qwen 3 ", 0),
            "https://hub.example/api/models?search=qwen%203&filter=gguf&sort=downloads\
             &direction=-1&limit=1"
        );
    }
}

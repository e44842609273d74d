//! The hub's HTTP client: one agent for a pull, redirects followed, the token sent to the
//! hub's own host only, and file paths made into URLs.

use std::time::Duration;

use ureq::http::Response;
use ureq::Body;

use super::HubOptions;
use crate::error::{Error, Result};

/// How long one read of a body may wait before the connection counts as dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) struct Client {
    agent: ureq::Agent,
    /// The hub's address, without a trailing `/`.
    endpoint: String,
    token: Option<String>,
}

impl Client {
    pub fn new(options: &HubOptions) -> Client {
        let agent = ureq::Agent::config_builder()
            // A status is an answer to read (a 404 names a missing repository), not an error.
            .http_status_as_error(false)
            .user_agent(concat!("hearth/", env!("CARGO_PKG_VERSION")))
            // The hub sends LFS files on to a CDN's signed URL, which must not see the token.
            .redirect_auth_headers(ureq::config::RedirectAuthHeaders::SameHost)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .timeout_per_read(Some(READ_TIMEOUT))
            .build()
            .new_agent();
        Client {
            agent,
            endpoint: options.endpoint.trim_end_matches('/').to_string(),
            token: options.token.clone().filter(|t| !t.is_empty()),
        }
    }

    /// `{endpoint}/{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.endpoint)
    }

    /// Whether `url` is on the hub (where the token may go).
    pub fn is_hub_url(&self, url: &str) -> bool {
        url.strip_prefix(&self.endpoint)
            .is_some_and(|rest| rest.starts_with('/'))
    }

    pub fn token_sent(&self) -> bool {
        self.token.is_some()
    }

    /// `GET url`, from byte `from` on where it is not 0 (`Range: bytes=FROM-`). An error is a
    /// request that got no answer; any status is an answer.
    pub fn get(&self, url: &str, from: u64) -> Result<Response<Body>> {
        let mut request = self.agent.get(url);
        if let Some(token) = self.token.as_ref().filter(|_| self.is_hub_url(url)) {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        if from > 0 {
            request = request.header("Range", format!("bytes={from}-"));
        }
        request.call().map_err(|e| Error::http(url, e.to_string()))
    }

    /// Where a file of `repo` downloads from: `{endpoint}/{repo}/resolve/main/{path}`.
    pub fn resolve_url(&self, repo: &str, path: &str) -> String {
        self.url(&format!(
            "{repo}/resolve/{}/{}",
            super::REVISION,
            encode_path(path)
        ))
    }
}

/// `path` with every byte outside URL-safe characters percent-encoded, `/` kept.
fn encode_path(path: &str) -> String {
    encode(path, b"/")
}

/// `value` as one part of a query string: every byte outside URL-safe characters
/// percent-encoded (`&`, `=`, `/` and spaces too).
pub(super) fn encode_query_value(value: &str) -> String {
    encode(value, b"")
}

/// `s` with every byte but letters, digits, `-_.~` and `keep` percent-encoded.
fn encode(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') || keep.contains(&b)
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_percent_encoded_but_their_slashes() {
        assert_eq!(encode_path("a/b c+d.gguf"), "a/b%20c%2Bd.gguf");
        assert_eq!(encode_path("é"), "%C3%A9");
        assert_eq!(encode_query_value("qwen 3/8b&x=1"), "qwen%203%2F8b%26x%3D1");
    }

    #[test]
    fn the_token_goes_to_the_hub_only() {
        let client = Client::new(&HubOptions {
            endpoint: "https://hub.example/".into(),
            ..HubOptions::default()
        });
        assert!(client.is_hub_url("https://hub.example/api/models/a/b"));
        assert!(!client.is_hub_url("https://hub.example.evil/x"));
        assert!(!client.is_hub_url("https://cdn.example/x"));
        assert_eq!(
            client.resolve_url("o/r", "x y.gguf"),
            "https://hub.example/o/r/resolve/main/x%20y.gguf"
        );
    }
}

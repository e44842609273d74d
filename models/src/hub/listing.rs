//! A repository's files as the hub lists them: `GET {endpoint}/api/models/{repo}/tree/main
//! ?recursive=true`, a JSON array of entries (`{"type": "file", "path", "size", "oid",
//! "lfs": {"oid", "size"}}`, directories too), in pages that a `Link: <...>; rel="next"`
//! header chains.

use serde::Deserialize;

use super::client::Client;
use crate::error::{Error, Result};

/// Most bytes of one page of a listing.
const PAGE_LIMIT: u64 = 64 << 20;

/// Most pages of one listing (the hub sends a thousand entries a page).
const MAX_PAGES: usize = 100;

/// A file of a repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoFile {
    /// Its path in the repository, `/`-separated.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    pub checksum: Checksum,
}

/// What a file's bytes must hash to, lowercase hex.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checksum {
    /// An LFS file's SHA-256 (the weights, GGUF files).
    Sha256(String),
    /// Any other file's git blob id: SHA-1 of `blob {size}\0` and the bytes.
    GitSha1(String),
}

impl Checksum {
    /// The digest, lowercase hex.
    pub fn hex(&self) -> &str {
        match self {
            Checksum::Sha256(hex) | Checksum::GitSha1(hex) => hex,
        }
    }
}

impl std::fmt::Display for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Checksum::Sha256(hex) => write!(f, "sha256 {hex}"),
            Checksum::GitSha1(hex) => write!(f, "git sha1 {hex}"),
        }
    }
}

/// One entry of the hub's tree listing.
#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    oid: Option<String>,
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    oid: String,
    size: u64,
}

/// Every file of `repo` on the main branch. A repository the hub does not know (or will
/// not show without a token) is [`Error::HubRepoNotFound`].
pub(super) fn list(client: &Client, repo: &str) -> Result<Vec<RepoFile>> {
    let mut url = client.url(&format!(
        "api/models/{repo}/tree/{}?recursive=true",
        super::REVISION
    ));
    let mut files = Vec::new();
    for _ in 0..MAX_PAGES {
        let mut response = client.get(&url, 0)?;
        let status = response.status().as_u16();
        match status {
            200 => {}
            401 | 403 | 404 => {
                return Err(Error::HubRepoNotFound {
                    repo: repo.to_string(),
                    url,
                    status,
                    token_sent: client.token_sent(),
                })
            }
            _ => {
                return Err(Error::http(
                    &url,
                    format!("listing answered status {status}"),
                ))
            }
        }
        let next = response
            .headers()
            .get("link")
            .and_then(|v| v.to_str().ok())
            .and_then(next_link);
        let body = response
            .body_mut()
            .with_config()
            .limit(PAGE_LIMIT)
            .read_to_string()
            .map_err(|e| Error::http(&url, e.to_string()))?;
        files.extend(parse(&body).map_err(|reason| Error::hub(repo, format!("{url}: {reason}")))?);
        match next {
            None => return Ok(files),
            Some(next) if client.is_hub_url(&next) => url = next,
            Some(next) => {
                return Err(Error::hub(
                    repo,
                    format!("{url}: the listing's next page is off the hub: {next}"),
                ))
            }
        }
    }
    Err(Error::hub(
        repo,
        format!("the listing runs past {MAX_PAGES} pages"),
    ))
}

/// The files of one page of a listing (directories left out).
fn parse(body: &str) -> std::result::Result<Vec<RepoFile>, String> {
    let entries: Vec<Entry> =
        serde_json::from_str(body).map_err(|e| format!("not a tree listing: {e}"))?;
    let mut files = Vec::new();
    for entry in entries.into_iter().filter(|e| e.kind == "file") {
        let checksum = match (&entry.lfs, &entry.oid) {
            (Some(lfs), _) => {
                if lfs.size != entry.size {
                    return Err(format!(
                        "{}: size {} but its LFS object's is {}",
                        entry.path, entry.size, lfs.size
                    ));
                }
                Checksum::Sha256(hex_id(&entry.path, &lfs.oid, 64)?)
            }
            (None, Some(oid)) => Checksum::GitSha1(hex_id(&entry.path, oid, 40)?),
            (None, None) => return Err(format!("{}: no checksum (oid)", entry.path)),
        };
        files.push(RepoFile {
            path: entry.path,
            size: entry.size,
            checksum,
        });
    }
    Ok(files)
}

/// `id` as lowercase hex of `len` digits.
fn hex_id(path: &str, id: &str, len: usize) -> std::result::Result<String, String> {
    if id.len() == len && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(id.to_ascii_lowercase())
    } else {
        Err(format!("{path}: `{id}` is not {len} hex digits"))
    }
}

/// The `rel="next"` target of a `Link` header.
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|link| {
        let (target, params) = link.split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        params
            .split(';')
            .any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"))
            .then(|| target.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "3d6b6e1aa1d3f4fe34c0b5e4a2d8a3a60d1ffb3b3a1d6c2b8c3b5b1e6e8c9d0a";

    #[test]
    fn files_take_the_lfs_sha256_or_the_git_id() {
        let body = format!(
            r#"[{{"type":"file","oid":"a9e4a5b1d6c3e2f1a0b9c8d7e6f5a4b3c2d1e0f9","size":2,"path":"config.json"}},
                {{"type":"directory","oid":"b9e4a5b1d6c3e2f1a0b9c8d7e6f5a4b3c2d1e0f9","size":0,"path":"sub"}},
                {{"type":"file","oid":"c9e4a5b1d6c3e2f1a0b9c8d7e6f5a4b3c2d1e0f9","size":10,"path":"sub/m.gguf",
                  "lfs":{{"oid":"{}","size":10,"pointerSize":134}},"xetHash":"ff"}}]"#,
            SHA.to_uppercase()
        );
        let files = parse(&body).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(
            files[0].checksum,
            Checksum::GitSha1("a9e4a5b1d6c3e2f1a0b9c8d7e6f5a4b3c2d1e0f9".into())
        );
        assert_eq!(files[1].path, "sub/m.gguf");
        assert_eq!(files[1].size, 10);
        assert_eq!(files[1].checksum, Checksum::Sha256(SHA.into()));
    }

    #[test]
    fn a_malformed_listing_is_refused() {
        assert!(parse("{}").is_err());
        assert!(parse(r#"[{"type":"file","size":1,"path":"x"}]"#).is_err());
        assert!(parse(r#"[{"type":"file","oid":"xyz","size":1,"path":"x"}]"#).is_err());
    }

    #[test]
    fn the_next_page_is_the_link_marked_next() {
        assert_eq!(
            next_link(r#"<https://h/api/models/a/b/tree/main?cursor=x>; rel="next""#).as_deref(),
            Some("https://h/api/models/a/b/tree/main?cursor=x")
        );
        assert_eq!(next_link(r#"<https://h/p>; rel="prev""#), None);
    }
}

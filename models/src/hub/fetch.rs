//! One file from the hub into its place: downloaded into a hidden `.NAME.part` beside it,
//! continued with a `Range` request where a part is there already or the connection drops,
//! hashed as it arrives, and renamed to its name only once its checksum is the hub's.
//!
//! A part whose bytes hash wrong is removed rather than kept: some of its bytes are wrong
//! and nothing says which, so resuming it would fail the same way every time. A cancelled
//! download stops between two reads and keeps its part, as a dropped connection does.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use sha1::Sha1;
use sha2::{Digest, Sha256};

use super::client::Client;
use super::listing::{Checksum, RepoFile};
use super::PullEvent;
use crate::error::{Error, Result};

/// Bytes read from the network or the disk at a time.
const CHUNK: usize = 1 << 20;

/// Downloads `file` of `repo` to `dest` (see the module's doc); `retries` dropped
/// connections are resumed before the pull gives up, and `cancel`, once set, stops it
/// between two reads ([`Error::PullCancelled`], the part kept). Returns the bytes fetched.
pub(super) fn fetch(
    client: &Client,
    repo: &str,
    file: &RepoFile,
    dest: &Path,
    retries: u32,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(PullEvent),
) -> Result<u64> {
    let part = part_path(dest);
    if cancel.load(Ordering::Relaxed) {
        return Err(Error::PullCancelled {
            file: format!("{repo}/{}", file.path),
            kept: std::fs::metadata(&part).map_or(0, |m| m.len()),
            part,
            size: file.size,
        });
    }
    let mut out = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&part)
        .map_err(|e| Error::io(&part, e))?;
    let mut have = out.metadata().map_err(|e| Error::io(&part, e))?.len();
    if have > file.size {
        out.set_len(0).map_err(|e| Error::io(&part, e))?;
        have = 0;
    }
    // The bytes a part holds already count toward the checksum: hash them again.
    let mut hasher = Hasher::new(&file.checksum, file.size);
    hash(&mut out, have, &mut hasher).map_err(|e| Error::io(&part, e))?;
    let mut download = Download {
        client,
        url: client.resolve_url(repo, &file.path),
        part,
        out,
        size: file.size,
        have,
        hasher,
        fetched: 0,
        cancel,
        name: format!("{repo}/{}", file.path),
    };
    progress(PullEvent::Start {
        file: &file.path,
        size: file.size,
        done: have,
    });
    let mut dropped = 0;
    while download.have < download.size {
        download.check_cancel().map_err(|_| download.cancelled())?;
        match download.receive(progress) {
            Ok(()) => {}
            Err(Attempt::Failed(e)) => return Err(e),
            Err(Attempt::Cancelled) => return Err(download.cancelled()),
            Err(Attempt::Dropped(_)) if dropped < retries => dropped += 1,
            Err(Attempt::Dropped(reason)) => {
                return Err(Error::http(
                    &download.url,
                    format!(
                        "{reason} after {} of {} bytes; {} keeps them, and pulling again \
                         resumes there",
                        download.have,
                        download.size,
                        download.part.display()
                    ),
                ))
            }
        }
    }
    let fetched = download.fetched;
    download.finish(repo, file, dest)?;
    progress(PullEvent::Finish);
    Ok(fetched)
}

/// Whether the file at `path` is `file`: its size and checksum.
pub(super) fn matches(path: &Path, file: &RepoFile) -> Result<bool> {
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    if len != file.size {
        return Ok(false);
    }
    let mut hasher = Hasher::new(&file.checksum, file.size);
    hash(&mut f, len, &mut hasher).map_err(|e| Error::io(path, e))?;
    Ok(hasher.finish() == file.checksum.hex())
}

/// `dir/.NAME.part` for `dir/NAME`: hidden, so that no listing of models shows it.
fn part_path(dest: &Path) -> PathBuf {
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    dest.with_file_name(format!(".{name}.part"))
}

/// Why one request did not bring the rest of a file.
enum Attempt {
    /// The connection dropped or the server failed for now: worth resuming.
    Dropped(String),
    /// An answer that another try would not change.
    Failed(Error),
    /// The pull was cancelled.
    Cancelled,
}

/// A file on its way into its `.part`.
struct Download<'a> {
    client: &'a Client,
    url: String,
    part: PathBuf,
    out: File,
    /// Bytes the file has, as listed.
    size: u64,
    /// Bytes in the part, all hashed.
    have: u64,
    hasher: Hasher,
    /// Bytes fetched by this pull.
    fetched: u64,
    /// Set: stop between two reads.
    cancel: &'a AtomicBool,
    /// `ORG/REPO/PATH`, for the error a cancel is.
    name: String,
}

impl Download<'_> {
    /// One request for the bytes from `have` on, written to the part as they arrive.
    fn receive(&mut self, progress: &mut dyn FnMut(PullEvent)) -> Result<(), Attempt> {
        let mut response = self
            .client
            .get(&self.url, self.have)
            .map_err(|e| Attempt::Dropped(e.to_string()))?;
        let status = response.status().as_u16();
        match status {
            206 => {
                let range = response
                    .headers()
                    .get("content-range")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                if range_start(range) != Some(self.have) {
                    return Err(self.failed(format!(
                        "asked for bytes from {}, answered `Content-Range: {range}`",
                        self.have
                    )));
                }
            }
            200 if self.have > 0 => {
                // The server ignored the range: the whole file comes again.
                self.restart().map_err(Attempt::Failed)?;
                progress(PullEvent::Progress { done: 0 });
            }
            200 => {}
            401 | 403 => {
                return Err(self.failed(format!(
                    "status {status}: access refused (a gated or private repository: accept \
                     its terms on the hub and give a token, HF_TOKEN)"
                )))
            }
            404 => {
                return Err(self.failed("status 404: the hub lists the file but does not serve it"))
            }
            416 => {
                // The part is no prefix of what the server has: it cannot be resumed.
                let _ = std::fs::remove_file(&self.part);
                return Err(self.failed(format!(
                    "status 416: the server has no bytes from {} on; the part was removed",
                    self.have
                )));
            }
            429 | 500..=599 => return Err(Attempt::Dropped(format!("status {status}"))),
            _ => return Err(self.failed(format!("status {status}"))),
        }
        let mut body = response.body_mut().as_reader();
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Attempt::Dropped(e.to_string())),
            };
            if self.have + n as u64 > self.size {
                let _ = std::fs::remove_file(&self.part);
                return Err(self.failed(format!(
                    "the server sends more than the {} bytes the hub lists; the part was removed",
                    self.size
                )));
            }
            self.out
                .write_all(&buf[..n])
                .map_err(|e| Attempt::Failed(Error::io(&self.part, e)))?;
            self.hasher.update(&buf[..n]);
            self.have += n as u64;
            self.fetched += n as u64;
            progress(PullEvent::Progress { done: self.have });
            if self.have < self.size {
                self.check_cancel()?;
            }
        }
        if self.have < self.size {
            return Err(Attempt::Dropped("the connection closed early".into()));
        }
        Ok(())
    }

    /// [`Attempt::Cancelled`] once the pull is cancelled.
    fn check_cancel(&self) -> Result<(), Attempt> {
        match self.cancel.load(Ordering::Relaxed) {
            true => Err(Attempt::Cancelled),
            false => Ok(()),
        }
    }

    /// The error a cancelled download ends with: what its part keeps.
    fn cancelled(&self) -> Error {
        Error::PullCancelled {
            file: self.name.clone(),
            part: self.part.clone(),
            kept: self.have,
            size: self.size,
        }
    }

    fn failed(&self, reason: impl Into<String>) -> Attempt {
        Attempt::Failed(Error::http(&self.url, reason))
    }

    /// Empties the part, for a server that sends the whole file again.
    fn restart(&mut self) -> Result<()> {
        self.out
            .set_len(0)
            .and_then(|()| self.out.seek(SeekFrom::Start(0)).map(drop))
            .map_err(|e| Error::io(&self.part, e))?;
        self.have = 0;
        self.hasher = self.hasher.fresh();
        Ok(())
    }

    /// Checks the complete part against the hub's checksum and renames it to `dest`, or
    /// removes it.
    fn finish(self, repo: &str, file: &RepoFile, dest: &Path) -> Result<()> {
        self.out.sync_all().map_err(|e| Error::io(&self.part, e))?;
        drop(self.out);
        let actual = self.hasher.finish();
        if actual != file.checksum.hex() {
            std::fs::remove_file(&self.part).map_err(|e| Error::io(&self.part, e))?;
            return Err(Error::Checksum {
                file: format!("{repo}/{}", file.path),
                url: self.url,
                expected: file.checksum.to_string(),
                actual: match file.checksum {
                    Checksum::Sha256(_) => format!("sha256 {actual}"),
                    Checksum::GitSha1(_) => format!("git sha1 {actual}"),
                },
            });
        }
        std::fs::rename(&self.part, dest).map_err(|e| Error::io(dest, e))
    }
}

/// The first byte of a `Content-Range: bytes START-END/TOTAL` header.
fn range_start(header: &str) -> Option<u64> {
    let range = header.trim().strip_prefix("bytes ")?;
    range.split_once('-')?.0.trim().parse().ok()
}

/// `len` bytes of `f` from its start into `hasher`, leaving `f` at byte `len`.
fn hash(f: &mut File, len: u64, hasher: &mut Hasher) -> std::io::Result<()> {
    f.seek(SeekFrom::Start(0))?;
    let mut left = len;
    let mut buf = vec![0u8; CHUNK];
    while left > 0 {
        let want = left.min(CHUNK as u64) as usize;
        f.read_exact(&mut buf[..want])?;
        hasher.update(&buf[..want]);
        left -= want as u64;
    }
    Ok(())
}

/// The hash a [`Checksum`] is of.
#[derive(Clone)]
enum Hasher {
    Sha256(Sha256),
    /// Git's blob id: the header `blob {size}\0` then the bytes.
    GitSha1 {
        hasher: Sha1,
        size: u64,
    },
}

impl Hasher {
    fn new(checksum: &Checksum, size: u64) -> Hasher {
        match checksum {
            Checksum::Sha256(_) => Hasher::Sha256(Sha256::new()),
            Checksum::GitSha1(_) => {
                let mut hasher = Sha1::new();
                hasher.update(format!("blob {size}\0").as_bytes());
                Hasher::GitSha1 { hasher, size }
            }
        }
    }

    /// The same kind of hash over no bytes yet.
    fn fresh(&self) -> Hasher {
        match self {
            Hasher::Sha256(_) => Hasher::Sha256(Sha256::new()),
            Hasher::GitSha1 { size, .. } => Hasher::new(&Checksum::GitSha1(String::new()), *size),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::GitSha1 { hasher, .. } => hasher.update(bytes),
        }
    }

    /// The digest in lowercase hex.
    fn finish(self) -> String {
        let digest: Vec<u8> = match self {
            Hasher::Sha256(h) => h.finalize().to_vec(),
            Hasher::GitSha1 { hasher, .. } => hasher.finalize().to_vec(),
        };
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(checksum: &Checksum, bytes: &[u8]) -> String {
        let mut h = Hasher::new(checksum, bytes.len() as u64);
        h.update(bytes);
        h.finish()
    }

    #[test]
    fn hashes_are_sha256_and_gits_blob_id() {
        assert_eq!(
            digest(&Checksum::Sha256(String::new()), b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            digest(&Checksum::GitSha1(String::new()), b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }

    #[test]
    fn content_range_gives_its_first_byte() {
        assert_eq!(range_start("bytes 100-199/200"), Some(100));
        assert_eq!(range_start("bytes */200"), None);
    }

    #[test]
    fn parts_are_hidden_beside_their_file() {
        assert_eq!(
            part_path(Path::new("/m/M-Q4_K_M.gguf")),
            Path::new("/m/.M-Q4_K_M.gguf.part")
        );
    }
}

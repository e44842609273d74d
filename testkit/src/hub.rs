//! A local server shaped like the Hugging Face hub, for the tests of pulling and searching:
//! the model search (`api/models?search=...`), a repository's tree listing (in two pages,
//! chained by a `Link` header), `resolve/main/...` redirected to where LFS files are (another
//! host where the loopback offers one), ranges, and the faults a real network has: a file
//! listed with a wrong checksum, connections dropped halfway through a body, a server that
//! ignores ranges, a body held midway until the test lets it go on, a search that fails.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use sha1::Sha1;
use sha2::{Digest, Sha256};

/// A file the hub serves.
#[derive(Clone, Debug, Default)]
pub struct File {
    pub bytes: Vec<u8>,
    /// Stored in LFS (listed with a SHA-256, sent through a redirect).
    pub lfs: bool,
    /// Listed with the checksum of other bytes.
    pub wrong_checksum: bool,
}

/// One request the server saw.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The request's target: path and query.
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

/// What the search shows of a repository besides its name.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    downloads: u64,
    likes: u64,
}

#[derive(Default)]
struct State {
    /// `ORG/REPO` -> its files by path, in listing order.
    repos: Vec<(String, Vec<(String, File)>)>,
    stats: HashMap<String, Stats>,
    /// Bodies to cut halfway, by file path: how many more times.
    drops: HashMap<String, usize>,
    /// Files whose ranges the server ignores (sending them whole, status 200).
    no_ranges: Vec<String>,
    /// Files whose bodies stop after a byte of the file until released: where, and the gate.
    holds: HashMap<String, (usize, Arc<Gate>)>,
    /// The status every search answers, where not 200.
    search_status: Option<u16>,
    seen: Vec<Seen>,
    /// `http://HOST:PORT` of the LFS files.
    cdn: String,
}

/// A hub on 127.0.0.1, and where it sends LFS files on to (127.0.0.2 where the loopback
/// takes it, as Linux's does: another host), until the test process ends. Each connection
/// has a thread and one request.
pub struct Hub {
    /// `http://127.0.0.1:PORT`: what `HF_ENDPOINT` names.
    pub endpoint: String,
    /// `http://HOST:PORT` of the LFS files.
    pub cdn: String,
    state: Arc<Mutex<State>>,
}

impl Hub {
    pub fn start() -> Hub {
        let state = Arc::new(Mutex::new(State::default()));
        let listen = |listener: TcpListener| {
            let addr = format!("http://{}", listener.local_addr().unwrap());
            let shared = state.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { continue };
                    let shared = shared.clone();
                    std::thread::spawn(move || {
                        let _ = serve(stream, &shared);
                    });
                }
            });
            addr
        };
        let endpoint = listen(TcpListener::bind("127.0.0.1:0").unwrap());
        let cdn = TcpListener::bind("127.0.0.2:0")
            .or_else(|_| TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let cdn = listen(cdn);
        state.lock().unwrap().cdn = cdn.clone();
        Hub {
            endpoint,
            cdn,
            state,
        }
    }

    /// Adds a file to `repo` (made where new), after those it has.
    pub fn add(&self, repo: &str, path: &str, bytes: Vec<u8>, lfs: bool) {
        let file = File {
            bytes,
            lfs,
            wrong_checksum: false,
        };
        let mut state = self.state.lock().unwrap();
        let files = match state.repos.iter().position(|(r, _)| r == repo) {
            Some(i) => &mut state.repos[i].1,
            None => {
                state.repos.push((repo.to_string(), Vec::new()));
                &mut state.repos.last_mut().unwrap().1
            }
        };
        files.push((path.to_string(), file));
    }

    /// Changes a file of `repo`.
    pub fn file_mut(&self, repo: &str, path: &str, f: impl FnOnce(&mut File)) {
        let mut state = self.state.lock().unwrap();
        let files = &mut state.repos.iter_mut().find(|(r, _)| r == repo).unwrap().1;
        f(&mut files.iter_mut().find(|(p, _)| p == path).unwrap().1);
    }

    /// What the search shows of `repo`: its downloads and likes (0 unless set).
    pub fn set_stats(&self, repo: &str, downloads: u64, likes: u64) {
        let stats = Stats { downloads, likes };
        self.state
            .lock()
            .unwrap()
            .stats
            .insert(repo.to_string(), stats);
    }

    /// Cuts the next `times` bodies of the file at `path` halfway, closing the connection.
    pub fn drop_next(&self, path: &str, times: usize) {
        self.state
            .lock()
            .unwrap()
            .drops
            .insert(path.to_string(), times);
    }

    /// Sends the file at `path` whole (status 200) whatever range is asked.
    pub fn ignore_ranges(&self, path: &str) {
        self.state.lock().unwrap().no_ranges.push(path.to_string());
    }

    /// Holds the bodies of the file at `path` once the first `at` bytes of the file are
    /// sent, until [`Hub::release`]: a test sees a download midway, whatever the machine's
    /// speed.
    pub fn hold(&self, path: &str, at: usize) {
        let gate = Arc::new(Gate::default());
        self.state
            .lock()
            .unwrap()
            .holds
            .insert(path.to_string(), (at, gate));
    }

    /// Lets the bodies held at `path` go on: each sends one byte more, then waits until its
    /// client closes the connection (at most [`RELEASE_WAIT`]) before sending the rest. So a
    /// client that stops at its next read (a cancelled download) stops before the end, and
    /// one that reads on gets the whole file. Later requests are not held.
    pub fn release(&self, path: &str) {
        if let Some((_, gate)) = self.state.lock().unwrap().holds.remove(path) {
            gate.open();
        }
    }

    /// Every search answers `status` with the hub's `{"error": ...}` body (`None`: searches
    /// work).
    pub fn fail_searches(&self, status: Option<u16>) {
        self.state.lock().unwrap().search_status = status;
    }

    /// The requests seen since the last call.
    pub fn seen(&self) -> Vec<Seen> {
        std::mem::take(&mut self.state.lock().unwrap().seen)
    }
}

/// What to send: a status, headers, a body, and how.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Announce the whole body, send half, close.
    cut: bool,
    /// Stop after this many bytes of the body until the gate opens.
    hold: Option<(usize, Arc<Gate>)>,
}

/// How long a released body waits for its client to close before sending the rest.
pub const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// Where a held body waits for [`Hub::release`].
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }
}

impl Answer {
    fn new(status: u16, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: body.into(),
            cut: false,
            hold: None,
        }
    }

    fn header(mut self, name: &str, value: String) -> Answer {
        self.headers.push((name.to_string(), value));
        self
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let target = line.split(' ').nth(1).unwrap_or("/").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    // The answer is made under the lock and sent without it: a slow body holds up no other
    // request.
    let answer = {
        let mut state = state.lock().unwrap();
        state.seen.push(Seen {
            path: target.clone(),
            range: headers.get("range").cloned(),
            authorization: headers.get("authorization").cloned(),
        });
        answer(&mut state, &target, &headers)
    };
    send(stream, answer)
}

fn answer(state: &mut State, target: &str, headers: &HashMap<String, String>) -> Answer {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path == "/api/models" {
        return search(state, query);
    }
    if let Some(rest) = path.strip_prefix("/api/models/") {
        return tree(state, rest, query, headers);
    }
    // `/{org}/{repo}/resolve/main/{path}`, or `/cdn/{org}/{repo}/{path}` where LFS files go.
    let (cdn, rest) = match path.strip_prefix("/cdn/") {
        Some(rest) => (true, rest),
        None => (false, path.trim_start_matches('/')),
    };
    let mut parts = rest.splitn(3, '/');
    let repo = format!(
        "{}/{}",
        parts.next().unwrap_or(""),
        parts.next().unwrap_or("")
    );
    let file_path = parts.next().unwrap_or("");
    let file_path = if cdn {
        file_path.to_string()
    } else {
        match file_path.strip_prefix("resolve/main/") {
            Some(p) => p.to_string(),
            None => return Answer::new(404, "not found"),
        }
    };
    let Some(file) = repo_files(state, &repo)
        .and_then(|files| files.iter().find(|(p, _)| *p == file_path))
        .map(|(_, f)| f.clone())
    else {
        return Answer::new(404, "Entry not found");
    };
    if file.lfs && !cdn {
        let location = format!("{}/cdn/{repo}/{file_path}", state.cdn);
        return Answer::new(302, "").header("Location", location);
    }
    let total = file.bytes.len();
    let from = headers
        .get("range")
        .filter(|_| !state.no_ranges.contains(&file_path))
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse::<usize>().ok());
    let start = from.unwrap_or(0);
    let mut answer = match from {
        Some(from) if from >= total => return Answer::new(416, ""),
        Some(from) => Answer::new(206, &file.bytes[from..]).header(
            "Content-Range",
            format!("bytes {from}-{}/{total}", total - 1),
        ),
        None => Answer::new(200, file.bytes),
    };
    answer.cut = match state.drops.get_mut(&file_path) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    };
    answer.hold = state
        .holds
        .get(&file_path)
        .filter(|(at, _)| *at >= start)
        .map(|(at, gate)| (at - start, gate.clone()));
    answer
}

/// `api/models?search=TEXT&filter=gguf&sort=downloads&direction=-1&limit=N`: the
/// repositories whose names hold TEXT (in any case), with GGUF files where the filter asks,
/// most downloaded first where the sort asks.
fn search(state: &State, query: &str) -> Answer {
    if let Some(status) = state.search_status {
        return Answer::new(
            status,
            r#"{"error":"Internal Error - We're working hard to fix this as soon as possible!"}"#,
        );
    }
    let params: HashMap<String, String> = query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), decode(v)))
        .collect();
    let text = params
        .get("search")
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_default();
    let gguf = params.get("filter").is_some_and(|f| f == "gguf");
    let limit = params
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(usize::MAX);
    let mut hits: Vec<(&String, Stats)> = state
        .repos
        .iter()
        .filter(|(repo, _)| repo.to_ascii_lowercase().contains(&text))
        .filter(|(_, files)| !gguf || files.iter().any(|(p, _)| p.ends_with(".gguf")))
        .map(|(repo, _)| (repo, state.stats.get(repo).copied().unwrap_or_default()))
        .collect();
    if params.get("sort").is_some_and(|s| s == "downloads") {
        // Stable: of equal downloads, the repository added first first.
        hits.sort_by_key(|(_, s)| std::cmp::Reverse(s.downloads));
    }
    let models: Vec<serde_json::Value> = hits
        .into_iter()
        .take(limit)
        .map(|(repo, stats)| {
            serde_json::json!({
                "_id": "0".repeat(24), "id": repo, "likes": stats.likes, "trendingScore": 0,
                "private": false, "downloads": stats.downloads,
                "tags": ["gguf", "llama", "text-generation"],
                "pipeline_tag": "text-generation", "library_name": "gguf",
                "createdAt": "2024-11-01T10:12:00.000Z", "modelId": repo,
            })
        })
        .collect();
    Answer::new(200, serde_json::to_string(&models).unwrap())
}

/// `api/models/{repo}/tree/main?recursive=true`, in two pages.
fn tree(state: &State, rest: &str, query: &str, headers: &HashMap<String, String>) -> Answer {
    let repo = rest.strip_suffix("/tree/main").unwrap_or("");
    let Some(files) = repo_files(state, repo) else {
        // The hub answers 401 to a repository it does not show an anonymous caller, and
        // 404 otherwise; both mean "not found" here.
        let status = if repo.starts_with("private") {
            401
        } else {
            404
        };
        return Answer::new(status, r#"{"error":"Repository not found"}"#);
    };
    // Two pages: the second one's files after a cursor, as the hub's Link header chains.
    let half = files.len() / 2;
    if query.contains("cursor=2") {
        return Answer::new(200, listing(&files[half..]));
    }
    let next = format!(
        "<http://{}/api/models/{repo}/tree/main?recursive=true&cursor=2>; rel=\"next\"",
        headers.get("host").cloned().unwrap_or_default()
    );
    Answer::new(200, listing(&files[..half])).header("Link", next)
}

/// `%XX` and `+` decoded.
fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let digit = |i: usize| bytes.get(i).and_then(|&b| (b as char).to_digit(16));
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], digit(i + 1), digit(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
            (b'+', _, _) => out.push(b' '),
            (b, _, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A repository's files: names match in any case, as on the hub.
fn repo_files<'a>(state: &'a State, repo: &str) -> Option<&'a Vec<(String, File)>> {
    state
        .repos
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(repo))
        .map(|(_, files)| files)
}

fn send(mut out: TcpStream, answer: Answer) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        answer.status,
        answer.body.len()
    );
    for (k, v) in &answer.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    let body = match answer.cut {
        true => &answer.body[..answer.body.len() / 2],
        false => &answer.body[..],
    };
    match answer.hold {
        Some((at, gate)) if at < body.len() => {
            out.write_all(&body[..at])?;
            out.flush()?;
            gate.wait();
            out.write_all(&body[at..at + 1])?;
            out.flush()?;
            wait_for_close(&out);
            out.write_all(&body[at + 1..])?;
        }
        _ => out.write_all(body)?,
    }
    out.flush()?;
    if answer.cut {
        out.shutdown(std::net::Shutdown::Both)?;
    }
    Ok(())
}

/// Returns once the client has closed `stream` (or sent anything more), or after
/// [`RELEASE_WAIT`].
fn wait_for_close(stream: &TcpStream) {
    let _ = stream.set_read_timeout(Some(RELEASE_WAIT));
    let _ = (&*stream).read(&mut [0u8; 1]);
}

/// A page of the hub's tree listing, as `api/models/{repo}/tree/main?recursive=true` sends
/// it: git's blob id for every file, the LFS object's SHA-256 for LFS files.
fn listing(files: &[(String, File)]) -> String {
    let entries: Vec<serde_json::Value> = files
        .iter()
        .map(|(path, f)| {
            let bytes: &[u8] = if f.wrong_checksum {
                b"other bytes"
            } else {
                &f.bytes
            };
            let mut entry = serde_json::json!({
                "type": "file", "oid": git_blob_id(bytes), "size": f.bytes.len(), "path": path,
            });
            if f.lfs {
                entry["lfs"] = serde_json::json!({
                    "oid": sha256(bytes), "size": f.bytes.len(), "pointerSize": 134,
                });
            }
            entry
        })
        .chain(std::iter::once(serde_json::json!({
            "type": "directory", "oid": "0".repeat(40), "size": 0, "path": "docs",
        })))
        .collect();
    serde_json::to_string(&entries).unwrap()
}

/// Git's blob id of `bytes`: what the hub lists for a file outside LFS.
pub fn git_blob_id(bytes: &[u8]) -> String {
    hex(&Sha1::new()
        .chain_update(format!("blob {}\0", bytes.len()))
        .chain_update(bytes)
        .finalize())
}

/// The hidden names in a model directory but the hub's own records (`.hub`): the partial
/// and temporary files a download leaves behind, sorted.
pub fn hidden_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n != ".hub")
        .collect();
    names.sort();
    names
}

/// The SHA-256 of `bytes`, lowercase hex: what the hub lists for an LFS file.
pub fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_decode() {
        assert_eq!(decode("qwen%203%2F8b+x"), "qwen 3/8b x");
        assert_eq!(decode("100%"), "100%");
    }
}

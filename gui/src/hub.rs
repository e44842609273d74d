//! The Hugging Face hub for the library: searches, a repository's quantizations and
//! downloads, off the UI thread. Searches and listings run on one thread, which answers
//! only the newest search of those queued (typing a new query queues no backlog); a download
//! runs on a thread of its own, so a search never waits for one, and neither blocks the
//! model's thread (`worker`).
//!
//! A download is cancelled through a flag it checks between two reads
//! (`hub::pull_file`): it stops within a read's time, keeping its `.part`, and the next
//! download of the same file resumes there. Its progress is a counter the download thread
//! sets after every read and the window reads at every frame, rather than an event a read:
//! the window shows the bytes on disk however fast or slow they come, and a fast download
//! floods no channel.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hearth_models::hub::{self, HubOptions, PullEvent, QuantFile, SearchHit};
use hearth_models::Error;

/// Results a search asks for.
pub const SEARCH_LIMIT: usize = 50;

#[derive(Debug)]
pub enum Event {
    /// The hub's answer to the search for `query`.
    Results {
        query: String,
        hits: Result<Vec<SearchHit>, String>,
    },
    /// The GGUF files of `repo`.
    Quants {
        repo: String,
        quants: Result<Vec<QuantFile>, String>,
    },
    /// A file of download `id` starts: `size` bytes, `done` of them there already (a part
    /// kept by a cancelled or failed download). From then on [`Hub::progress`] counts them.
    Started { id: u64, size: u64, done: u64 },
    /// Download `id` is complete, and matches the hub's checksum.
    Downloaded { id: u64, path: PathBuf },
    /// Download `id` stopped: cancelled, or failed (the message says why).
    Stopped {
        id: u64,
        cancelled: bool,
        message: String,
    },
}

enum Ask {
    Search(String),
    Quants(String),
}

/// The hub's threads, and the channel their events come back on.
pub struct Hub {
    options: HubOptions,
    models_dir: PathBuf,
    asks: Sender<Ask>,
    tx: Sender<Event>,
    events: Receiver<Event>,
    notify: Arc<dyn Fn() + Send + Sync>,
    download: Option<Running>,
    next_id: u64,
}

/// The download running, or the last one (its thread then ended or ending).
struct Running {
    id: u64,
    cancel: Arc<AtomicBool>,
    /// Bytes of the file on disk.
    done: Arc<AtomicU64>,
    thread: JoinHandle<()>,
}

impl Hub {
    /// Starts the thread for searches; downloads go to `models_dir`. `notify` runs after
    /// every event (to wake the UI).
    pub fn spawn(
        options: HubOptions,
        models_dir: PathBuf,
        notify: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        let notify: Arc<dyn Fn() + Send + Sync> = Arc::new(notify);
        let (asks, rx) = channel::<Ask>();
        let (tx, events) = channel();
        {
            let (options, tx, notify) = (options.clone(), tx.clone(), notify.clone());
            std::thread::Builder::new()
                .name("hearth-hub".into())
                .spawn(move || {
                    while let Ok(ask) = rx.recv() {
                        let mut asks = vec![ask];
                        asks.extend(rx.try_iter());
                        for ask in newest_search_only(asks) {
                            if tx.send(answer(&options, ask)).is_err() {
                                return;
                            }
                            notify();
                        }
                    }
                })
                .expect("spawning the hub's thread");
        }
        Self {
            options,
            models_dir,
            asks,
            tx,
            events,
            notify,
            download: None,
            next_id: 1,
        }
    }

    /// Searches the hub for GGUF models matching `query`.
    pub fn search(&self, query: String) {
        self.ask(Ask::Search(query));
    }

    /// Lists the GGUF files of `repo`.
    pub fn quants(&self, repo: String) {
        self.ask(Ask::Quants(repo));
    }

    fn ask(&self, ask: Ask) {
        // The thread only ends when this sender is dropped.
        let _ = self.asks.send(ask);
    }

    /// Starts downloading the GGUF file at `path` of `repo` into the models directory: the
    /// download's number. A download still running is cancelled first.
    pub fn download(&mut self, repo: String, path: String) -> u64 {
        self.finish_download();
        let id = self.next_id;
        self.next_id += 1;
        let cancel = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let job = Job {
            id,
            options: self.options.clone(),
            models_dir: self.models_dir.clone(),
            repo,
            path,
            cancel: cancel.clone(),
            done: done.clone(),
            tx: self.tx.clone(),
            notify: self.notify.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("hearth-download".into())
            .spawn(move || job.run())
            .expect("spawning the download's thread");
        self.download = Some(Running {
            id,
            cancel,
            done,
            thread,
        });
        id
    }

    /// Asks download `id` to stop; it reports [`Event::Stopped`] once it has.
    pub fn cancel(&self, id: u64) {
        if let Some(running) = self.download.as_ref().filter(|r| r.id == id) {
            running.cancel.store(true, Ordering::Relaxed);
        }
    }

    /// The bytes of download `id`'s file on disk, once it has [`Event::Started`].
    pub fn progress(&self, id: u64) -> Option<u64> {
        let running = self.download.as_ref().filter(|r| r.id == id)?;
        Some(running.done.load(Ordering::Relaxed))
    }

    /// Cancels the download running, if any, and waits for its thread: two downloads never
    /// write the same part.
    fn finish_download(&mut self) {
        if let Some(running) = self.download.take() {
            running.cancel.store(true, Ordering::Relaxed);
            let _ = running.thread.join();
        }
    }

    pub fn try_recv(&self) -> Option<Event> {
        self.events.try_recv().ok()
    }
}

impl Drop for Hub {
    /// Cancels a download (its part stays for the next one). The threads are not waited
    /// for: they hold nothing but a connection, and end at their next read.
    fn drop(&mut self) {
        if let Some(running) = &self.download {
            running.cancel.store(true, Ordering::Relaxed);
        }
    }
}

/// `asks` in order, with every search but the last left out.
fn newest_search_only(asks: Vec<Ask>) -> Vec<Ask> {
    let last = asks.iter().rposition(|a| matches!(a, Ask::Search(_)));
    asks.into_iter()
        .enumerate()
        .filter(|(i, a)| !matches!(a, Ask::Search(_)) || Some(*i) == last)
        .map(|(_, a)| a)
        .collect()
}

fn answer(options: &HubOptions, ask: Ask) -> Event {
    match ask {
        Ask::Search(query) => Event::Results {
            hits: hub::search(options, &query, SEARCH_LIMIT).map_err(|e| e.to_string()),
            query,
        },
        Ask::Quants(repo) => Event::Quants {
            quants: hub::quants(options, &repo).map_err(|e| e.to_string()),
            repo,
        },
    }
}

/// One download, on its thread.
struct Job {
    id: u64,
    options: HubOptions,
    models_dir: PathBuf,
    repo: String,
    path: String,
    cancel: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    tx: Sender<Event>,
    notify: Arc<dyn Fn() + Send + Sync>,
}

impl Job {
    fn emit(&self, event: Event) {
        let _ = self.tx.send(event);
        (self.notify)();
    }

    fn run(self) {
        let id = self.id;
        let mut progress = |event: PullEvent| match event {
            PullEvent::Start { size, done, .. } => {
                self.done.store(done, Ordering::Relaxed);
                self.emit(Event::Started { id, size, done });
            }
            PullEvent::Progress { done } => self.done.store(done, Ordering::Relaxed),
            PullEvent::Finish => {}
        };
        let pulled = hub::pull_file(
            &self.options,
            &self.repo,
            &self.path,
            &self.models_dir,
            &self.cancel,
            &mut progress,
        );
        let event = match pulled {
            Ok(pulled) => Event::Downloaded {
                id,
                path: pulled.path,
            },
            Err(Error::PullCancelled { kept, .. }) => Event::Stopped {
                id,
                cancelled: true,
                message: cancelled_message(&self.path, kept),
            },
            Err(e) => Event::Stopped {
                id,
                cancelled: false,
                message: format!("Could not download {}: {e}", self.path),
            },
        };
        self.emit(event);
    }
}

fn cancelled_message(file: &str, kept: u64) -> String {
    match kept {
        0 => format!("Download of {file} cancelled."),
        _ => format!(
            "Download of {file} cancelled; the {} received are kept, and downloading it again \
             resumes there.",
            crate::library::size_label(kept)
        ),
    }
}

/// How fast a download goes: bytes a second, averaged over the last few seconds.
#[derive(Clone, Debug, Default)]
pub struct Rate {
    /// (when, bytes done) of the recent reports, oldest first.
    samples: Vec<(Instant, u64)>,
}

/// The span the rate averages over.
const RATE_WINDOW: Duration = Duration::from_secs(3);

impl Rate {
    /// Notes `done` bytes at `now`; a count that went back (a restart) starts afresh.
    pub fn note(&mut self, now: Instant, done: u64) {
        if self.samples.last().is_some_and(|&(_, d)| d > done) {
            self.samples.clear();
        }
        self.samples.push((now, done));
        // Keep one sample older than the window, so that the window is spanned.
        while self.samples.len() > 2 && now.duration_since(self.samples[1].0) >= RATE_WINDOW {
            self.samples.remove(0);
        }
    }

    /// Bytes a second, once two reports are apart in time.
    pub fn bytes_per_second(&self) -> Option<f64> {
        let (&(t0, d0), &(t1, d1)) = (self.samples.first()?, self.samples.last()?);
        let secs = t1.duration_since(t0).as_secs_f64();
        (secs > 0.0).then(|| (d1 - d0) as f64 / secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_search_is_answered() {
        let asks = vec![
            Ask::Search("q".into()),
            Ask::Quants("a/b".into()),
            Ask::Search("qw".into()),
            Ask::Search("qwen".into()),
        ];
        let kept: Vec<String> = newest_search_only(asks)
            .into_iter()
            .map(|a| match a {
                Ask::Search(q) => format!("search {q}"),
                Ask::Quants(r) => format!("quants {r}"),
            })
            .collect();
        assert_eq!(kept, ["quants a/b", "search qwen"]);
    }

    #[test]
    fn the_rate_averages_the_last_seconds() {
        let t = Instant::now();
        let mut rate = Rate::default();
        rate.note(t, 0);
        assert_eq!(rate.bytes_per_second(), None);
        rate.note(t + Duration::from_secs(1), 1000);
        assert_eq!(rate.bytes_per_second(), Some(1000.0));
        // Faster later: the first seconds drop out of the window.
        for s in 2..=10 {
            rate.note(t + Duration::from_secs(s), 1000 + (s - 1) * 4000);
        }
        assert_eq!(rate.bytes_per_second(), Some(4000.0));
        // A restart from 0 starts afresh.
        rate.note(t + Duration::from_secs(11), 10);
        assert_eq!(rate.bytes_per_second(), None);
    }

    #[test]
    fn a_cancel_says_what_is_kept() {
        assert_eq!(
            cancelled_message("M-Q4_K_M.gguf", 0),
            "Download of M-Q4_K_M.gguf cancelled."
        );
        assert!(cancelled_message("M.gguf", 3 << 20).contains("the 3.0 MiB received are kept"));
    }
}

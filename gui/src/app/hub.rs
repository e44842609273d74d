//! The library's part that finds models on the Hugging Face hub: the search, a repository's
//! quantizations, and a download with its progress, cancel and outcome.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hearth_models::hub::{QuantFile, SearchHit};

use super::App;
use crate::hub::{Event, Hub, Rate};

/// What the library shows of the hub.
#[derive(Debug, Default)]
pub struct HubView {
    /// The search box's text.
    pub query: String,
    /// The query of the results shown or awaited.
    pub searched: Option<String>,
    /// The answer to `searched`; `None` while it is awaited.
    pub results: Option<Result<Vec<SearchHit>, String>>,
    /// The repository chosen among the results.
    pub selected: Option<String>,
    /// Its GGUF files; `None` while they are awaited.
    pub quants: Option<Result<Vec<QuantFile>, String>>,
    pub download: Option<Download>,
    /// The last download that completed, for its "Load" button.
    pub downloaded: Option<PathBuf>,
}

impl HubView {
    /// Whether a search is awaited.
    pub fn searching(&self) -> bool {
        self.searched.is_some() && self.results.is_none()
    }
}

/// A download running.
#[derive(Debug)]
pub struct Download {
    pub id: u64,
    pub repo: String,
    /// The file's path in the repository.
    pub file: String,
    /// Bytes on disk, of `size` (0 until the download has started).
    pub done: u64,
    pub size: u64,
    pub rate: Rate,
    /// Cancel was pressed; the download stops at its next read.
    pub cancelling: bool,
}

impl Download {
    pub fn fraction(&self) -> f32 {
        self.done as f32 / self.size.max(1) as f32
    }
}

/// How often the window redraws a download's progress bar.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

impl App {
    /// The hub's threads, started when first asked; they wake the UI where a frame has run
    /// (an action before any frame, a test driving the state, gets threads that wake
    /// nothing).
    fn hub(&mut self) -> &mut Hub {
        let (options, dir) = (self.config.hub.clone(), self.config.models_dir.clone());
        let ctx = self.ctx.clone();
        self.hub_threads.get_or_insert_with(|| {
            Hub::spawn(options, dir, move || {
                if let Some(ctx) = &ctx {
                    ctx.request_repaint();
                }
            })
        })
    }

    /// Searches the hub for the search box's text.
    pub fn search_hub(&mut self) {
        let query = self.hub.query.trim().to_string();
        self.hub.searched = Some(query.clone());
        self.hub.results = None;
        self.hub().search(query);
    }

    /// Shows the quantizations of `repo`, one of the results.
    pub fn select_repo(&mut self, repo: String) {
        if self.hub.selected.as_ref() == Some(&repo) {
            return;
        }
        self.hub.selected = Some(repo.clone());
        self.hub.quants = None;
        self.hub().quants(repo);
    }

    /// Downloads the file at `file` of the selected repository into the models directory.
    pub fn download(&mut self, file: String) {
        let Some(repo) = self.hub.selected.clone() else {
            return;
        };
        if self.hub.download.is_some() {
            self.notices
                .push("A download is running: cancel it or wait for it first.".into());
            return;
        }
        let id = self.hub().download(repo.clone(), file.clone());
        self.hub.downloaded = None;
        self.hub.download = Some(Download {
            id,
            repo,
            file,
            done: 0,
            size: 0,
            rate: Rate::default(),
            cancelling: false,
        });
    }

    pub fn cancel_download(&mut self) {
        if let Some(id) = self.hub.download.as_mut().map(|d| {
            d.cancelling = true;
            d.id
        }) {
            self.hub().cancel(id);
        }
    }

    /// Handles the hub threads' events and reads the download's progress; called at the
    /// start of every frame.
    pub(super) fn poll_hub(&mut self, ctx: &egui::Context) {
        while let Some(event) = self.hub_threads.as_ref().and_then(Hub::try_recv) {
            self.handle_hub(event);
        }
        let Some(d) = self.hub.download.as_mut() else {
            return;
        };
        // Until it has started, its size is unknown and the bar says "Starting…".
        if d.size > 0 {
            if let Some(done) = self.hub_threads.as_ref().and_then(|h| h.progress(d.id)) {
                d.done = done;
                d.rate.note(Instant::now(), done);
            }
        }
        // The download thread wakes the window only for events: the bar moves on its own.
        ctx.request_repaint_after(PROGRESS_EVERY);
    }

    /// Applies one of the hub threads' events.
    pub fn handle_hub(&mut self, event: Event) {
        let hub = &mut self.hub;
        let running = |id: u64| move |d: &&mut Download| d.id == id;
        match event {
            Event::Results { query, hits } => {
                // An answer to an older query is left out.
                if hub.searched.as_ref() == Some(&query) {
                    hub.results = Some(hits);
                }
            }
            Event::Quants { repo, quants } => {
                if hub.selected.as_ref() == Some(&repo) {
                    hub.quants = Some(quants);
                }
            }
            Event::Started { id, size, done } => {
                if let Some(d) = hub.download.as_mut().filter(running(id)) {
                    (d.size, d.done) = (size, done);
                    d.rate = Rate::default();
                    d.rate.note(Instant::now(), done);
                }
            }
            Event::Downloaded { id, path } => {
                if hub.download.as_mut().filter(running(id)).is_some() {
                    hub.download = None;
                    hub.downloaded = Some(path);
                    self.refresh_library();
                }
            }
            Event::Stopped {
                id,
                cancelled: _,
                message,
            } => {
                if hub.download.as_mut().filter(running(id)).is_some() {
                    hub.download = None;
                    self.notices.push(message);
                }
            }
        }
    }
}

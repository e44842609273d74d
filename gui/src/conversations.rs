//! Saved conversations: one JSON file per conversation in the user's data directory.
//!
//! Files are written to a temporary name and renamed, so a crash mid-save leaves the previous
//! version intact. A file that does not parse is reported and left untouched on disk.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    /// The role name chat templates expect.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
        }
    }
}

/// How an answer was produced, shown under it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswerStats {
    pub tokens: usize,
    pub tokens_per_second: f64,
    /// Time to first token, in milliseconds.
    pub ttft_ms: f64,
    /// `eos`, `length`, `stop`, `cancelled`.
    pub finish: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<AnswerStats>,
}

impl Message {
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            text: text.into(),
            stats: None,
        }
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            text: text.into(),
            stats: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// File stem; unique within the store.
    pub id: String,
    pub title: String,
    #[serde(default)]
    pub system: String,
    /// Name of the model the conversation was last used with.
    #[serde(default)]
    pub model: Option<String>,
    /// Seconds since the Unix epoch.
    pub created: u64,
    pub updated: u64,
    pub messages: Vec<Message>,
}

/// Titles come from the first user message, cut at this many characters.
const TITLE_CHARS: usize = 40;

impl Conversation {
    pub fn new(system: impl Into<String>) -> Self {
        let now = now_secs();
        Self {
            id: String::new(),
            title: String::new(),
            system: system.into(),
            model: None,
            created: now,
            updated: now,
            messages: Vec::new(),
        }
    }

    /// The sidebar title: the one given, or the start of the first user message.
    pub fn display_title(&self) -> String {
        if !self.title.trim().is_empty() {
            return self.title.clone();
        }
        let first = self
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.text.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default();
        if first.is_empty() {
            return "New chat".to_string();
        }
        match first.char_indices().nth(TITLE_CHARS) {
            Some((cut, _)) => format!("{}…", first[..cut].trim_end()),
            None => first,
        }
    }

    pub fn touch(&mut self) {
        self.updated = now_secs();
    }
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a saved conversation: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
}

impl StoreError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The conversations directory.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// What [`Store::load_all`] found: conversations, newest first, and files it could not read.
#[derive(Debug, Default)]
pub struct Loaded {
    pub conversations: Vec<Conversation>,
    pub errors: Vec<StoreError>,
}

impl Store {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Every conversation in the directory (none if it does not exist yet).
    pub fn load_all(&self) -> Loaded {
        let mut loaded = Loaded::default();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return loaded,
            Err(e) => {
                loaded.errors.push(StoreError::io(&self.dir, e));
                return loaded;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_json = path.extension().is_some_and(|e| e == "json");
            let hidden = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| n.starts_with('.'));
            if !is_json || hidden {
                continue;
            }
            match read(&path) {
                Ok(c) => loaded.conversations.push(c),
                Err(e) => loaded.errors.push(e),
            }
        }
        loaded
            .conversations
            .sort_by(|a, b| b.updated.cmp(&a.updated).then(b.id.cmp(&a.id)));
        loaded
    }

    /// Writes `conversation`, giving it an id first if it has none.
    pub fn save(&self, conversation: &mut Conversation) -> Result<(), StoreError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| StoreError::io(&self.dir, e))?;
        if conversation.id.is_empty() {
            conversation.id = self.fresh_id(conversation.created);
        }
        let path = self.path(&conversation.id);
        let json = serde_json::to_vec_pretty(conversation).map_err(|e| StoreError::Parse {
            path: path.clone(),
            source: e,
        })?;
        let tmp = self.dir.join(format!(".{}.json.tmp", conversation.id));
        std::fs::write(&tmp, json).map_err(|e| StoreError::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| StoreError::io(&path, e))
    }

    pub fn delete(&self, id: &str) -> Result<(), StoreError> {
        let path = self.path(id);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StoreError::io(&path, e)),
            _ => Ok(()),
        }
    }

    fn fresh_id(&self, created: u64) -> String {
        (0..)
            .map(|n| match n {
                0 => format!("{created}"),
                n => format!("{created}-{n}"),
            })
            .find(|id| !self.path(id).exists())
            .expect("an unused id")
    }
}

fn read(path: &Path) -> Result<Conversation, StoreError> {
    let bytes = std::fs::read(path).map_err(|e| StoreError::io(path, e))?;
    let mut c: Conversation = serde_json::from_slice(&bytes).map_err(|e| StoreError::Parse {
        path: path.to_path_buf(),
        source: e,
    })?;
    // The file name is the identity; a copied or renamed file keeps working.
    if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
        c.id = stem.to_string();
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_rename_delete() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("chats"));
        assert!(store.load_all().conversations.is_empty());

        let mut a = Conversation::new("Be brief.");
        a.messages
            .push(Message::user("What is the capital of France?"));
        a.messages.push(Message::assistant("Paris."));
        store.save(&mut a).unwrap();
        let mut b = Conversation::new("");
        b.created = a.created;
        store.save(&mut b).unwrap();
        assert_ne!(a.id, b.id, "two chats created in the same second");

        let loaded = store.load_all();
        assert!(loaded.errors.is_empty());
        assert_eq!(loaded.conversations.len(), 2);
        let back = loaded.conversations.iter().find(|c| c.id == a.id).unwrap();
        assert_eq!(back, &a);
        assert_eq!(back.display_title(), "What is the capital of France?");

        a.title = "Geography".into();
        store.save(&mut a).unwrap();
        let loaded = store.load_all();
        let back = loaded.conversations.iter().find(|c| c.id == a.id).unwrap();
        assert_eq!(back.display_title(), "Geography");

        store.delete(&a.id).unwrap();
        store.delete(&a.id).unwrap();
        let ids: Vec<String> = store
            .load_all()
            .conversations
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(ids, vec![b.id.clone()]);
        // No temporary files are left behind.
        let names: Vec<_> = std::fs::read_dir(store.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn corrupt_files_are_reported_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut ok = Conversation::new("");
        store.save(&mut ok).unwrap();
        let bad = dir.path().join("broken.json");
        std::fs::write(&bad, b"{\"id\": \"broken\", \"messa").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"not a chat").unwrap();

        let loaded = store.load_all();
        assert_eq!(loaded.conversations.len(), 1);
        assert_eq!(loaded.errors.len(), 1);
        let msg = loaded.errors[0].to_string();
        assert!(msg.contains("broken.json"), "{msg}");
        assert!(bad.exists(), "a file that does not parse is never removed");
    }

    #[test]
    fn long_titles_are_cut_on_a_character_boundary() {
        let mut c = Conversation::new("");
        c.messages.push(Message::user("é".repeat(100)));
        let title = c.display_title();
        assert_eq!(title.chars().count(), TITLE_CHARS + 1);
        assert!(title.ends_with('…'));
    }
}

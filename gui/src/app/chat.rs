//! The open conversation: sending, stopping, editing and regenerating answers, and the saved
//! conversations in the sidebar.

use std::time::Instant;

use hearth_engine::session::GenerateParams;
use hearth_models::ChatMessage;

use super::{App, Generating, View};
use crate::conversations::{Conversation, Message, Role};

impl App {
    pub fn can_send(&self) -> bool {
        self.loaded().is_some() && self.generating.is_none()
    }

    /// Sends the text in the input box.
    pub fn send(&mut self) {
        let text = self.input.trim().to_string();
        if text.is_empty() || !self.can_send() {
            return;
        }
        self.input.clear();
        self.chat.messages.push(Message::user(text));
        self.answer();
    }

    /// Asks for an answer to the conversation as it stands (ending with a user message).
    fn answer(&mut self) {
        let mut messages = Vec::new();
        if !self.chat.system.trim().is_empty() {
            messages.push(ChatMessage::new("system", self.chat.system.trim()));
        }
        messages.extend(
            self.chat
                .messages
                .iter()
                .map(|m| ChatMessage::new(m.role.as_str(), m.text.as_str())),
        );
        let mut sampler = self.settings.sampler.clone();
        sampler.seed = sampler.seed.wrapping_add(self.answers);
        self.answers += 1;
        let params = GenerateParams {
            max_tokens: (self.settings.max_tokens > 0).then_some(self.settings.max_tokens),
            sampler,
            ..GenerateParams::default()
        };
        self.chat.model = self.card().map(|c| c.name.clone());
        self.save_chat();
        let id = self.worker().generate(messages, params);
        self.generating = Some(Generating {
            id,
            text: String::new(),
            started: Instant::now(),
            first_text: None,
            pieces: 0,
            prompt_tokens: None,
            stopping: false,
        });
    }

    pub fn stop(&mut self) {
        if let Some(id) = self.generating.as_mut().map(|g| {
            g.stopping = true;
            g.id
        }) {
            self.worker().stop(id);
        }
    }

    /// Drops the last answer and asks again.
    pub fn regenerate(&mut self) {
        if !self.can_send() || self.chat.messages.last().map(|m| m.role) != Some(Role::Assistant) {
            return;
        }
        self.chat.messages.pop();
        self.answer();
    }

    pub fn start_edit(&mut self, index: usize) {
        if let Some(m) = self.chat.messages.get(index) {
            self.editing = Some((index, m.text.clone()));
        }
    }

    /// Replaces the edited user message, drops everything after it and asks again.
    pub fn finish_edit(&mut self) {
        let Some((index, text)) = self.editing.take() else {
            return;
        };
        if text.trim().is_empty() || !self.can_send() || index >= self.chat.messages.len() {
            self.editing = Some((index, text));
            return;
        }
        self.chat.messages.truncate(index);
        self.chat.messages.push(Message::user(text.trim()));
        self.answer();
    }

    /// Opens an empty conversation (the current one stays saved).
    pub fn new_chat(&mut self) {
        if self.generating.is_some() {
            return;
        }
        self.chat = Conversation::new(self.chat.system.clone());
        self.editing = None;
        self.view = View::Chat;
    }

    pub fn open_chat(&mut self, id: &str) {
        if self.generating.is_some() || self.chat.id == id {
            self.view = View::Chat;
            return;
        }
        if let Some(c) = self.saved.iter().find(|c| c.id == id) {
            self.chat = c.clone();
            self.editing = None;
            self.view = View::Chat;
        }
    }

    pub fn rename_chat(&mut self, id: &str, title: &str) {
        let title = title.trim().to_string();
        if self.chat.id == id {
            self.chat.title = title.clone();
        }
        if let Some(c) = self.saved.iter_mut().find(|c| c.id == id) {
            c.title = title;
            let mut c = c.clone();
            if let Err(e) = self.store.save(&mut c) {
                self.notices.push(e.to_string());
            }
        }
    }

    pub fn delete_chat(&mut self, id: &str) {
        if self.chat.id == id && self.generating.is_some() {
            return;
        }
        if let Err(e) = self.store.delete(id) {
            self.notices.push(e.to_string());
            return;
        }
        self.saved.retain(|c| c.id != id);
        if self.chat.id == id {
            self.chat = Conversation::new(self.chat.system.clone());
        }
    }

    /// Saves the open conversation once it has messages, and updates the sidebar.
    pub fn save_chat(&mut self) {
        if self.chat.messages.is_empty() {
            return;
        }
        self.chat.touch();
        if let Err(e) = self.store.save(&mut self.chat) {
            self.notices.push(e.to_string());
            return;
        }
        self.saved.retain(|c| c.id != self.chat.id);
        self.saved.insert(0, self.chat.clone());
    }

    /// Context in use: during an answer, the prompt plus what came so far.
    pub fn context_used(&self) -> usize {
        match &self.generating {
            Some(g) => g.prompt_tokens.unwrap_or(0) + g.pieces,
            None => self.last_run.context_used,
        }
    }
}

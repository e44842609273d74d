//! What the inference thread reports, applied to the application state.

use std::time::{Duration, Instant};

use hearth_engine::session::FinishReason;

use super::{App, LastRun, ModelState, Serving, View};
use crate::conversations::{AnswerStats, Message, Role};
use crate::worker::Event;

impl App {
    pub(super) fn handle(&mut self, event: Event) {
        match event {
            Event::Loading { done: d, total: t } => {
                if let ModelState::Loading { done, total, .. } = &mut self.model {
                    (*done, *total) = (d, t);
                }
            }
            Event::Loaded(loaded) => {
                if let ModelState::Loading { card, .. } =
                    std::mem::replace(&mut self.model, ModelState::Empty)
                {
                    self.prefs.last_model = Some(card.path.clone());
                    self.save_prefs();
                    self.last_run = LastRun {
                        kv: loaded.kv,
                        ..LastRun::default()
                    };
                    self.model = ModelState::Ready { card, loaded };
                    self.view = View::Chat;
                }
            }
            Event::LoadFailed(message) => {
                self.model = ModelState::Empty;
                self.notices.push(message);
            }
            Event::Started { prompt_tokens } => {
                if let Some(g) = &mut self.generating {
                    g.prompt_tokens = Some(prompt_tokens);
                }
            }
            Event::Text(text) => {
                if let Some(g) = &mut self.generating {
                    g.first_text.get_or_insert_with(Instant::now);
                    g.pieces += 1;
                    g.text.push_str(&text);
                }
            }
            Event::Finished(finished) => {
                let Some(g) = self.generating.take() else {
                    return;
                };
                let gen = &finished.generation;
                let t = &gen.timings;
                let stats = AnswerStats {
                    tokens: t.generated_tokens,
                    tokens_per_second: t.generation_tokens_per_second(),
                    ttft_ms: g
                        .first_text
                        .map_or(t.prompt.as_secs_f64(), |f| (f - g.started).as_secs_f64())
                        * 1e3,
                    finish: finish_name(gen.finish).to_string(),
                };
                self.last_run = LastRun {
                    tokens_per_second: (t.generated_tokens > 1).then_some(stats.tokens_per_second),
                    ttft: Some(Duration::from_secs_f64(stats.ttft_ms / 1e3)),
                    context_used: finished.context_used,
                    kv: finished.kv,
                    fetched: finished
                        .infinigen
                        .filter(|s| s.selections > 0)
                        .map(|s| s.fetched_fraction()),
                };
                let mut message = Message::assistant(gen.text.trim());
                message.stats = Some(stats);
                self.chat.messages.push(message);
                self.save_chat();
            }
            Event::Serving(address) => {
                self.serving = match address {
                    Some(a) => Serving::On(a),
                    None => Serving::Off,
                };
            }
            Event::ServeFailed(message) => {
                self.serving = Serving::Off;
                self.notices
                    .push(format!("Could not start the API server: {message}"));
            }
            Event::Failed(message) => {
                if self.generating.take().is_some() {
                    // The request never produced an answer: give the question back to edit.
                    if let Some(last) = self.chat.messages.last() {
                        if last.role == Role::User && self.input.is_empty() {
                            self.input = last.text.clone();
                            self.chat.messages.pop();
                        }
                    }
                }
                self.notices.push(message);
            }
        }
    }
}

pub fn finish_name(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Eos => "eos",
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
    }
}

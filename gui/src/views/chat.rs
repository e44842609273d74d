//! The conversation: messages rendered as markdown, the answer streaming in, and the input
//! box with Send / Stop.

use crate::app::{App, Generating, ModelState, View};
use crate::conversations::{AnswerStats, Message, Role};

/// Messages are laid out in a column no wider than this, centred.
const COLUMN_WIDTH: f32 = 760.0;

pub fn show(app: &mut App, ui: &mut egui::Ui) {
    input(app, ui);
    if app.chat.messages.is_empty() && app.generating.is_none() {
        return welcome(app, ui);
    }
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .stick_to_bottom(true)
        .show(ui, |ui| centred(ui, |ui| messages(app, ui)));
}

/// Runs `add` in a centred column of at most [`COLUMN_WIDTH`].
fn centred(ui: &mut egui::Ui, add: impl FnOnce(&mut egui::Ui)) {
    let width = ui.available_width().min(COLUMN_WIDTH);
    let margin = (ui.available_width() - width) / 2.0;
    ui.horizontal(|ui| {
        ui.add_space(margin);
        ui.vertical(|ui| {
            ui.set_width(width);
            add(ui);
        });
    });
}

fn welcome(app: &mut App, ui: &mut egui::Ui) {
    ui.add_space(ui.available_height() * 0.3);
    ui.vertical_centered(|ui| match &app.model {
        ModelState::Ready { card, .. } => {
            ui.heading(format!("Chat with {}", card.name));
            ui.label(egui::RichText::new("Type a message below to start.").weak());
        }
        ModelState::Loading { card, .. } => {
            ui.heading(format!("Loading {}…", card.name));
        }
        ModelState::Empty => {
            ui.heading("Welcome to Hearth");
            ui.label(egui::RichText::new("Load a model to start chatting.").weak());
            ui.add_space(8.0);
            if ui.button("Choose a model").clicked() {
                app.view = View::Library;
            }
        }
    });
}

enum Action {
    Edit(usize),
    FinishEdit,
    CancelEdit,
    Regenerate,
}

fn messages(app: &mut App, ui: &mut egui::Ui) {
    ui.add_space(12.0);
    let mut action = None;
    let last = app.chat.messages.len().saturating_sub(1);
    let idle = app.can_send();
    for (i, message) in app.chat.messages.iter().enumerate() {
        let editing = match &mut app.editing {
            Some((at, text)) if *at == i => Some(text),
            _ => None,
        };
        bubble(ui, message.role, |ui| {
            if let Some(text) = editing {
                let edit = ui.add(
                    egui::TextEdit::multiline(text)
                        .desired_rows(2)
                        .desired_width(f32::INFINITY),
                );
                super::name(&edit, "Edit message");
                ui.horizontal(|ui| {
                    if ui
                        .add_enabled(idle, egui::Button::new("Save and resend"))
                        .clicked()
                    {
                        action = Some(Action::FinishEdit);
                    }
                    if ui.button("Cancel").clicked() {
                        action = Some(Action::CancelEdit);
                    }
                });
                return;
            }
            body(ui, &mut app.markdown, i, message);
            ui.horizontal(|ui| {
                ui.spacing_mut().item_spacing.x = 4.0;
                if small(ui, "Copy").clicked() {
                    ui.copy_text(message.text.clone());
                }
                match message.role {
                    Role::User => {
                        if idle && small(ui, "Edit").clicked() {
                            action = Some(Action::Edit(i));
                        }
                    }
                    Role::Assistant => {
                        if i == last && idle && small(ui, "Regenerate").clicked() {
                            action = Some(Action::Regenerate);
                        }
                        if let Some(stats) = &message.stats {
                            ui.label(egui::RichText::new(stats_line(stats)).small().weak());
                        }
                    }
                }
            });
        });
    }
    if let Some(g) = &app.generating {
        bubble(ui, Role::Assistant, |ui| {
            streaming(ui, &mut app.markdown, g)
        });
    }
    ui.add_space(12.0);
    match action {
        Some(Action::Edit(i)) => app.start_edit(i),
        Some(Action::FinishEdit) => app.finish_edit(),
        Some(Action::CancelEdit) => app.editing = None,
        Some(Action::Regenerate) => app.regenerate(),
        None => {}
    }
}

fn small(ui: &mut egui::Ui, text: &str) -> egui::Response {
    ui.add(egui::Button::new(egui::RichText::new(text).small()).frame_when_inactive(false))
}

/// One message: a header with who speaks, then the contents.
fn bubble(ui: &mut egui::Ui, role: Role, add: impl FnOnce(&mut egui::Ui)) {
    let visuals = ui.visuals();
    let (who, fill) = match role {
        Role::User => ("You", visuals.faint_bg_color),
        Role::Assistant => ("Assistant", egui::Color32::TRANSPARENT),
    };
    let stroke = match role {
        Role::User => visuals.widgets.noninteractive.bg_stroke,
        Role::Assistant => egui::Stroke::NONE,
    };
    egui::Frame::new()
        .fill(fill)
        .stroke(stroke)
        .corner_radius(10.0)
        .inner_margin(egui::Margin::symmetric(14, 10))
        .show(ui, |ui| {
            ui.set_width(ui.available_width());
            ui.label(egui::RichText::new(who).small().strong().weak());
            ui.add_space(2.0);
            add(ui);
        });
    ui.add_space(8.0);
}

fn body(ui: &mut egui::Ui, cache: &mut egui_commonmark::CommonMarkCache, i: usize, m: &Message) {
    match m.role {
        // What the user typed is shown as typed.
        Role::User => {
            ui.add(egui::Label::new(&m.text).selectable(true).wrap());
        }
        Role::Assistant => markdown(ui, cache, ("message", i), &m.text),
    }
}

fn markdown(
    ui: &mut egui::Ui,
    cache: &mut egui_commonmark::CommonMarkCache,
    id: impl std::hash::Hash + std::fmt::Debug,
    text: &str,
) {
    let id = ui.scope_id().with(id);
    egui_commonmark::CommonMarkViewer::new().show_with_id(id, ui, cache, text);
}

fn streaming(ui: &mut egui::Ui, cache: &mut egui_commonmark::CommonMarkCache, g: &Generating) {
    if g.text.is_empty() {
        ui.horizontal(|ui| {
            ui.spinner();
            let what = if g.prompt_tokens.is_none() {
                "Waiting for the model…"
            } else {
                "Reading the conversation…"
            };
            ui.label(egui::RichText::new(what).weak());
        });
        return;
    }
    markdown(ui, cache, "streaming", &g.text);
    ui.horizontal(|ui| {
        ui.spinner();
        let text = if g.stopping {
            "Stopping…"
        } else {
            "Generating"
        };
        ui.label(egui::RichText::new(text).small().weak());
    });
}

fn stats_line(s: &AnswerStats) -> String {
    let mut line = format!(
        "{} tokens · {:.1} tok/s · first token {:.2} s",
        s.tokens,
        s.tokens_per_second,
        s.ttft_ms / 1e3
    );
    if s.finish == "cancelled" {
        line.push_str(" · stopped");
    } else if s.finish == "length" {
        line.push_str(" · hit the token limit");
    }
    line
}

/// The input box: Enter sends, Shift+Enter starts a new line; Stop while answering.
fn input(app: &mut App, ui: &mut egui::Ui) {
    egui::Panel::bottom("input")
        .frame(egui::Frame::new().inner_margin(egui::Margin::symmetric(0, 10)))
        .show(ui, |ui| {
            centred(ui, |ui| {
                let id = egui::Id::unique("chat_input");
                let focused = ui.memory(|m| m.has_focus(id));
                let enter = focused && take_plain_enter(ui);
                let ready = app.loaded().is_some();
                let hint = if ready {
                    "Message (Enter to send, Shift+Enter for a new line)"
                } else {
                    "Load a model to chat"
                };
                ui.horizontal(|ui| {
                    let button_width = 72.0;
                    let edit = ui.add_sized(
                        [ui.available_width() - button_width - 8.0, 44.0],
                        egui::TextEdit::multiline(&mut app.input)
                            .id(id)
                            .hint_text(hint)
                            .desired_rows(2)
                            .interactive(ready),
                    );
                    super::name(&edit, "Message");
                    if ready
                        && app.generating.is_none()
                        && !edit.has_focus()
                        && app.input.is_empty()
                    {
                        // Typing goes to the input box without a click first.
                        if ui.memory(|m| m.focused().is_none()) {
                            edit.request_focus();
                        }
                    }
                    let size = [button_width, 44.0];
                    if app.generating.is_some() {
                        if ui.add_sized(size, egui::Button::new("Stop")).clicked() {
                            app.stop();
                        }
                    } else {
                        let send = ui.add_enabled_ui(app.can_send(), |ui| {
                            ui.add_sized(size, egui::Button::new("Send"))
                        });
                        if send.inner.clicked() || enter {
                            app.send();
                        }
                    }
                });
            });
        });
}

/// Removes a plain Enter press from this frame's input (so the text box does not insert a
/// newline) and says whether there was one.
fn take_plain_enter(ui: &mut egui::Ui) -> bool {
    ui.input_mut(|i| {
        let before = i.events.len();
        i.events.retain(|e| {
            !matches!(
                e,
                egui::Event::Key {
                    key: egui::Key::Enter,
                    pressed: true,
                    modifiers,
                    ..
                } if modifiers.is_none()
            )
        });
        i.events.len() != before
    })
}

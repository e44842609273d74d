//! The sidebar: a new chat, and the saved conversations with rename and delete.

use crate::app::App;

pub fn show(app: &mut App, ui: &mut egui::Ui) {
    egui::Panel::left("conversations")
        .default_size(230.0)
        .min_size(160.0)
        .frame(egui::Frame::side_top_panel(ui.style()).inner_margin(10))
        .show(ui, |ui| {
            let new = ui.add_enabled(
                app.generating.is_none(),
                egui::Button::new("+  New chat").min_size(egui::vec2(ui.available_width(), 30.0)),
            );
            super::name(&new, "New chat");
            if new.clicked() {
                app.new_chat();
            }
            ui.add_space(8.0);
            ui.label(egui::RichText::new("Conversations").small().weak());
            ui.add_space(2.0);
            egui::ScrollArea::vertical()
                .auto_shrink([false, false])
                .show(ui, |ui| list(app, ui));
        });
}

enum Action {
    Open(String),
    StartRename(String, String),
    Rename(String, String),
    CancelRename,
    Delete(String),
}

fn list(app: &mut App, ui: &mut egui::Ui) {
    if app.saved.is_empty() {
        ui.label(egui::RichText::new("No saved conversations yet.").weak());
    }
    let mut action = None;
    for c in &app.saved {
        let selected = c.id == app.chat.id;
        if let Some((id, title)) = &mut app.renaming {
            if *id == c.id {
                let edit =
                    ui.add(egui::TextEdit::singleline(title).desired_width(ui.available_width()));
                super::name(&edit, "Conversation title");
                if edit.lost_focus() {
                    action = Some(if ui.input(|i| i.key_pressed(egui::Key::Escape)) {
                        Action::CancelRename
                    } else {
                        Action::Rename(id.clone(), title.clone())
                    });
                } else if !edit.has_focus() {
                    edit.request_focus();
                }
                continue;
            }
        }
        let title = c.display_title();
        let row = ui.add_sized(
            [ui.available_width(), 26.0],
            egui::Button::selectable(selected, egui::RichText::new(&title))
                .truncate()
                .frame_when_inactive(false),
        );
        if row.clicked() {
            action = Some(Action::Open(c.id.clone()));
        }
        row.context_menu(|ui| {
            if ui.button("Rename").clicked() {
                action = Some(Action::StartRename(c.id.clone(), title.clone()));
            }
            if ui.button("Delete").clicked() {
                action = Some(Action::Delete(c.id.clone()));
            }
        });
        if selected {
            ui.horizontal(|ui| {
                ui.add_space(6.0);
                if ui.small_button("Rename").clicked() {
                    action = Some(Action::StartRename(c.id.clone(), title.clone()));
                }
                if ui.small_button("Delete").clicked() {
                    action = Some(Action::Delete(c.id.clone()));
                }
            });
        }
    }
    match action {
        Some(Action::Open(id)) => app.open_chat(&id),
        Some(Action::StartRename(id, title)) => app.renaming = Some((id, title)),
        Some(Action::Rename(id, title)) => {
            app.renaming = None;
            app.rename_chat(&id, &title);
        }
        Some(Action::CancelRename) => app.renaming = None,
        Some(Action::Delete(id)) => app.delete_chat(&id),
        None => {}
    }
}

//! The top bar: which model is loaded, and the switches for the library and settings.

use crate::app::{App, ModelState, View};
use crate::settings::ThemeChoice;

pub fn show(app: &mut App, ui: &mut egui::Ui) {
    egui::Panel::top("top_bar")
        .frame(egui::Frame::side_top_panel(ui.style()).inner_margin(egui::Margin::symmetric(12, 8)))
        .show(ui, |ui| {
            ui.horizontal(|ui| {
                let accent = ui.visuals().selection.bg_fill;
                ui.label(
                    egui::RichText::new("Hearth")
                        .heading()
                        .strong()
                        .color(accent),
                );
                ui.separator();
                let model_label = match &app.model {
                    ModelState::Empty => "No model loaded".to_string(),
                    ModelState::Loading { card, .. } => format!("Loading {}…", card.name),
                    ModelState::Ready { card, .. } => card.name.clone(),
                };
                ui.strong(model_label);
                ui.add_space(8.0);
                if ui
                    .selectable_label(app.view == View::Chat, "Chat")
                    .clicked()
                {
                    app.view = View::Chat;
                }
                if ui
                    .selectable_label(app.view == View::Library, "Models")
                    .clicked()
                {
                    app.refresh_library();
                    app.view = View::Library;
                }
                ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                    theme_switch(app, ui);
                    ui.toggle_value(&mut app.show_settings, "Settings");
                });
            });
        });
}

fn theme_switch(app: &mut App, ui: &mut egui::Ui) {
    // Right to left: the last is leftmost.
    for (theme, icon, label) in [
        (ThemeChoice::Light, "☀", "Light theme"),
        (ThemeChoice::Dark, "🌙", "Dark theme"),
        (ThemeChoice::System, "💻", "System theme"),
    ] {
        let r = ui
            .selectable_label(app.prefs.theme == theme, icon)
            .on_hover_text(label);
        super::name(&r, label);
        if r.clicked() {
            app.set_theme(theme);
        }
    }
}

//! Drawing the app: one module per part of the window.

mod chat;
mod library;
mod settings;
mod sidebar;
mod status_bar;
mod top_bar;

use crate::app::{App, View};

/// The whole window, one frame.
pub fn show(app: &mut App, ui: &mut egui::Ui) {
    app.poll(ui.ctx());
    top_bar::show(app, ui);
    status_bar::show(app, ui);
    sidebar::show(app, ui);
    if app.show_settings {
        settings::show(app, ui);
    }
    egui::CentralPanel::default_margins().show(ui, |ui| {
        notices(app, ui);
        match app.view {
            View::Library => library::show(app, ui),
            View::Chat => chat::show(app, ui),
        }
    });
}

/// Errors and notices, newest last, each with a dismiss button.
fn notices(app: &mut App, ui: &mut egui::Ui) {
    let mut dismissed = None;
    for (i, notice) in app.notices.iter().enumerate() {
        egui::Frame::new()
            .fill(ui.visuals().error_fg_color.gamma_multiply(0.15))
            .stroke(egui::Stroke::new(1.0, ui.visuals().error_fg_color))
            .corner_radius(6.0)
            .inner_margin(egui::Margin::symmetric(10, 6))
            .show(ui, |ui| {
                ui.horizontal(|ui| {
                    let dismiss = ui.small_button("×");
                    name(&dismiss, "Dismiss");
                    if dismiss.clicked() {
                        dismissed = Some(i);
                    }
                    ui.add(egui::Label::new(notice.as_str()).wrap());
                });
            });
        ui.add_space(4.0);
    }
    if let Some(i) = dismissed {
        app.notices.remove(i);
    }
}

/// Gives a widget the name screen readers (and tests) find it by, where its visible text is
/// an icon or is shared by several widgets.
pub(crate) fn name(response: &egui::Response, label: &str) {
    response.ctx.accesskit_node_builder(response.id, |node| {
        node.set_label(label);
    });
}

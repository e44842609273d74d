//! Drawing the app: one module per part of the window.

mod chat;
mod gpu_layers;
mod hub;
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

/// A device's name without the driver's details in parentheses: "llvmpipe (LLVM 15.0.6, 256
/// bits)" is "llvmpipe", "CPU (avx2, 8 threads)" is "CPU".
pub(crate) fn short_device_name(name: &str) -> &str {
    name.split(" (").next().unwrap_or(name).trim()
}

/// Layers `start..end` as people count them: "15-29", or "29" for one.
pub(crate) fn layer_span(start: usize, end: usize) -> String {
    let last = end.saturating_sub(1).max(start);
    match last == start {
        true => start.to_string(),
        false => format!("{start}-{last}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_layers_read_short() {
        assert_eq!(
            short_device_name("llvmpipe (LLVM 15.0.6, 256 bits)"),
            "llvmpipe"
        );
        assert_eq!(
            short_device_name("NVIDIA GeForce RTX 4060"),
            "NVIDIA GeForce RTX 4060"
        );
        assert_eq!(
            short_device_name("Intel(R) UHD Graphics 630 (CFL GT2)"),
            "Intel(R) UHD Graphics 630"
        );
        assert_eq!(layer_span(0, 15), "0-14");
        assert_eq!(layer_span(29, 30), "29");
    }
}

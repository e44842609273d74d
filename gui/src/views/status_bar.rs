//! The status bar: speed, time to first token, context and KV pool in use, the API server's
//! switch and address, and the device.

use crate::app::{App, ModelState, Serving};
use crate::library::size_label;

pub fn show(app: &mut App, ui: &mut egui::Ui) {
    egui::Panel::bottom("status_bar")
        .frame(egui::Frame::side_top_panel(ui.style()).inner_margin(egui::Margin::symmetric(12, 4)))
        .show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.spacing_mut().item_spacing.x = 16.0;
                let weak = |ui: &mut egui::Ui, text: String| {
                    ui.label(egui::RichText::new(text).small().weak());
                };
                match &app.model {
                    ModelState::Empty => weak(ui, "No model".into()),
                    ModelState::Loading { done, total, .. } => weak(
                        ui,
                        format!("Loading {} of {}", size_label(*done), size_label(*total)),
                    ),
                    ModelState::Ready { loaded, .. } => {
                        let speed = match &app.generating {
                            Some(g) => g.tokens_per_second(),
                            None => app.last_run.tokens_per_second,
                        };
                        let speed = speed.map_or("– tok/s".into(), |s| format!("{s:.1} tok/s"));
                        weak(ui, speed);
                        let ttft = app
                            .generating
                            .as_ref()
                            .map_or(app.last_run.ttft, |g| g.first_text.map(|f| f - g.started));
                        weak(
                            ui,
                            ttft.map_or("TTFT –".into(), |t| {
                                format!("TTFT {:.2} s", t.as_secs_f64())
                            }),
                        );
                        weak(
                            ui,
                            format!("Context {} / {}", app.context_used(), loaded.n_ctx),
                        );
                        if let Some(kv) = app.last_run.kv.or(loaded.kv) {
                            let total = kv.blocks_used + kv.blocks_free;
                            // One sequence: its blocks are its context, rounded up.
                            let used = match &app.generating {
                                Some(_) => app.context_used().div_ceil(kv.block_tokens.max(1)),
                                None => kv.blocks_used,
                            };
                            weak(ui, format!("KV blocks {used} / {total} ({})", kv.kv_type));
                        }
                        if let Some(f) = app.last_run.fetched {
                            weak(ui, format!("InfiniGen fetched {:.0}%", 100.0 * f));
                        }
                        let device = loaded.info.device.clone();
                        ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                            weak(ui, device);
                            serve_switch(app, ui);
                        });
                    }
                }
            });
        });
}

/// "Serve API" starts the OpenAI-compatible server; while it runs, its address (click to
/// copy) and a switch to stop it.
fn serve_switch(app: &mut App, ui: &mut egui::Ui) {
    match app.serving {
        Serving::Off => {
            let r = ui
                .small_button("Serve API")
                .on_hover_text("Serve this model over OpenAI's API on this machine");
            if r.clicked() {
                app.toggle_serving();
            }
        }
        Serving::Starting => {
            ui.label(egui::RichText::new("Server…").small().weak());
        }
        Serving::On(_) => {
            let stop = ui.small_button("Stop server");
            super::name(&stop, "Stop server");
            if stop.clicked() {
                app.toggle_serving();
            }
            let url = app.serving.base_url().unwrap_or_default();
            let r = ui
                .link(egui::RichText::new(format!("Serving {url}")).small())
                .on_hover_text("Copy the address");
            if r.clicked() {
                ui.ctx().copy_text(url);
            }
        }
    }
}

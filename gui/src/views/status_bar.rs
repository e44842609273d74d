//! The status bar: speed, time to first token, context and KV pool in use, the API server's
//! switch and address, and the device, or each part's layers where the model is split.

use hearth_model::PlacedPart;

use super::{layer_span, short_device_name};
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
                        let (device, detail) = match placement_label(&loaded.placement) {
                            Some(split) => (split, placement_detail(&loaded.placement)),
                            None => (loaded.info.device.clone(), String::new()),
                        };
                        ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                            let r = ui.label(egui::RichText::new(device).small().weak());
                            if !detail.is_empty() {
                                r.on_hover_text(detail);
                            }
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

/// Where a split model's layers run ("CPU 0-14 + llvmpipe 15-29"); `None` for a model in one
/// place.
fn placement_label(parts: &[PlacedPart]) -> Option<String> {
    if parts.len() < 2 {
        return None;
    }
    let parts: Vec<String> = parts
        .iter()
        .map(|p| {
            let span = layer_span(p.layers[0], p.layers[1]);
            format!("{} {span}", short_device_name(&p.device))
        })
        .collect();
    Some(parts.join(" + "))
}

/// Each part's device and memory, for the hover text.
fn placement_detail(parts: &[PlacedPart]) -> String {
    let lines: Vec<String> = parts
        .iter()
        .map(|p| {
            format!(
                "{} ({}): layers {}, weights {}, KV cache {}",
                p.device,
                p.executor,
                layer_span(p.layers[0], p.layers[1]),
                size_label(p.weight_bytes),
                size_label(p.kv_bytes)
            )
        })
        .collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(executor: &str, device: &str, layers: [usize; 2]) -> PlacedPart {
        PlacedPart {
            executor: executor.into(),
            device: device.into(),
            layers,
            embedding: layers[0] == 0,
            head: layers[1] == 30,
            weight_bytes: 3 << 20,
            kv_bytes: 1 << 20,
            busy_ns: 0,
            shard: None,
        }
    }

    #[test]
    fn split_models_show_each_part() {
        let split = [
            part("cpu", "CPU (avx2, 2 threads)", [0, 15]),
            part("vulkan:0", "llvmpipe (LLVM 15.0.6, 256 bits)", [15, 30]),
        ];
        assert_eq!(
            placement_label(&split).as_deref(),
            Some("CPU 0-14 + llvmpipe 15-29")
        );
        assert_eq!(
            placement_detail(&split).lines().nth(1),
            Some(
                "llvmpipe (LLVM 15.0.6, 256 bits) (vulkan:0): layers 15-29, weights 3.0 MiB, \
                 KV cache 1.0 MiB"
            )
        );
        // One part: the device shows as it always has.
        assert_eq!(placement_label(&split[1..]), None);
        assert_eq!(placement_label(&[]), None);
    }
}

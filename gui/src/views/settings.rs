//! The settings panel: the conversation's system prompt and the model's generation settings
//! (saved per model; the context, the KV cache's settings and the GPU layers take effect on
//! reload).

use crate::app::App;
use crate::settings::{InfinigenSettings, KvOffload};
use hearth_model::kv::KvType;

pub fn show(app: &mut App, ui: &mut egui::Ui) {
    egui::Panel::right("settings")
        .default_size(280.0)
        .min_size(220.0)
        .frame(egui::Frame::side_top_panel(ui.style()).inner_margin(12))
        .show(ui, |ui| {
            egui::ScrollArea::vertical()
                .auto_shrink([false, false])
                .show(ui, |ui| contents(app, ui));
        });
}

fn contents(app: &mut App, ui: &mut egui::Ui) {
    ui.label(egui::RichText::new("System prompt").strong());
    let system = ui.add(
        egui::TextEdit::multiline(&mut app.chat.system)
            .hint_text("You are a helpful assistant.")
            .desired_rows(3)
            .desired_width(f32::INFINITY),
    );
    super::name(&system, "System prompt");
    if system.lost_focus() {
        app.save_chat();
    }
    ui.add_space(10.0);

    let Some(card) = app.card().cloned() else {
        ui.label(egui::RichText::new("Load a model to change how it generates.").weak());
        return;
    };
    ui.label(egui::RichText::new("Generation").strong());
    ui.label(
        egui::RichText::new(format!("Saved for {}", card.name))
            .small()
            .weak(),
    );
    let before = app.settings.clone();
    let s = &mut app.settings;
    egui::Grid::new("sampling")
        .num_columns(2)
        .spacing([10.0, 8.0])
        .show(ui, |ui| {
            let p = &mut s.sampler;
            row(
                ui,
                "Temperature",
                egui::Slider::new(&mut p.temperature, 0.0..=2.0),
            );
            row(ui, "Top-k", egui::Slider::new(&mut p.top_k, 0..=200));
            row(ui, "Top-p", egui::Slider::new(&mut p.top_p, 0.0..=1.0));
            row(ui, "Min-p", egui::Slider::new(&mut p.min_p, 0.0..=1.0));
            row(
                ui,
                "Repeat penalty",
                egui::Slider::new(&mut p.repeat_penalty, 1.0..=2.0),
            );
            row(ui, "Seed", egui::DragValue::new(&mut p.seed));
            row(
                ui,
                "Max tokens",
                egui::DragValue::new(&mut s.max_tokens).range(0..=1_000_000),
            );
        });
    ui.label(
        egui::RichText::new("Max tokens 0: until the model ends its answer.")
            .small()
            .weak(),
    );
    ui.add_space(10.0);

    ui.label(egui::RichText::new("Memory").strong());
    let max_ctx = card.n_ctx_train.unwrap_or(1 << 20).max(1);
    egui::Grid::new("memory")
        .num_columns(2)
        .spacing([10.0, 8.0])
        .show(ui, |ui| {
            row(
                ui,
                "Context length",
                egui::DragValue::new(&mut s.n_ctx)
                    .range(16..=max_ctx)
                    .speed(16),
            );
            row(
                ui,
                "KV budget (tokens)",
                egui::DragValue::new(&mut s.kv_budget_tokens)
                    .range(0..=1 << 24)
                    .speed(16),
            );
        });
    ui.label(
        egui::RichText::new("KV budget 0: room for the whole context.")
            .small()
            .weak(),
    );
    ui.add_space(4.0);
    ui.label("KV cache");
    let combo = egui::ComboBox::from_id_salt("kv_offload")
        .selected_text(s.kv_offload.label())
        .show_ui(ui, |ui| {
            for choice in KvOffload::ALL {
                ui.selectable_value(&mut s.kv_offload, choice, choice.label());
            }
        });
    super::name(&combo.response, "KV cache");
    let combo = egui::ComboBox::from_id_salt("kv_type")
        .selected_text(s.kv_type.name())
        .show_ui(ui, |ui| {
            for choice in KvType::ALL {
                ui.selectable_value(&mut s.kv_type, choice, choice.name());
            }
        });
    super::name(&combo.response, "KV type");
    ui.label(
        egui::RichText::new("KV type: f16 holds twice as many tokens as f32, q8 3.6 times.")
            .small()
            .weak(),
    );
    if s.kv_offload == KvOffload::Infinigen {
        infinigen_settings(ui, &mut s.infinigen);
    }
    ui.add_space(4.0);
    let n_layer = card
        .n_layer
        .or_else(|| app.loaded().map(|l| l.info.config.n_layer));
    super::gpu_layers::show(app, ui, n_layer);

    if app.settings != before {
        app.save_model_settings();
    }
    if app.loaded().is_some() && app.needs_reload() {
        ui.add_space(6.0);
        if ui.button("Reload to apply").clicked() {
            app.reload_model();
        }
    }
    ui.add_space(10.0);
    if ui.button("Reset to the model's defaults").clicked() {
        app.reset_model_settings();
    }
}

/// InfiniGen's settings: how many dimensions speculate, which tokens count as needed, and
/// the most it fetches.
fn infinigen_settings(ui: &mut egui::Ui, ig: &mut InfinigenSettings) {
    egui::Grid::new("infinigen_settings")
        .num_columns(2)
        .spacing([10.0, 8.0])
        .show(ui, |ui| {
            // Until changed, the engine chooses the share per model (a fifth of each head,
            // at least 32 dimensions); the field starts from the paper's fifth.
            ui.label("Partial dimensions");
            let mut ratio = ig
                .partial_ratio
                .unwrap_or(InfinigenSettings::default_partial_ratio());
            let field = ui
                .add(
                    egui::DragValue::new(&mut ratio)
                        .range(0.05..=1.0)
                        .speed(0.01)
                        .fixed_decimals(2),
                )
                .on_hover_text("The model's default until changed");
            super::name(&field, "Partial dimensions");
            if field.changed() {
                ig.partial_ratio = Some(ratio);
            }
            ui.end_row();
            ui.label("Alpha");
            ui.horizontal(|ui| {
                let mut model_default = ig.alpha.is_none();
                let checkbox = ui.checkbox(&mut model_default, "Model's default");
                if checkbox.changed() {
                    ig.alpha = (!model_default).then_some(InfinigenSettings::default_alpha());
                }
                if let Some(alpha) = &mut ig.alpha {
                    let value = ui.add(egui::DragValue::new(alpha).range(0.0..=1000.0).speed(0.1));
                    super::name(&value, "Alpha value");
                }
            });
            ui.end_row();
            row(
                ui,
                "Fetch budget",
                egui::DragValue::new(&mut ig.budget)
                    .range(0.01..=1.0)
                    .speed(0.01)
                    .fixed_decimals(2),
            );
            row(
                ui,
                "Recent tokens",
                egui::DragValue::new(&mut ig.recent).range(0..=4096),
            );
        });
    ui.label(
        egui::RichText::new(
            "Each step fetches the tokens scoring within alpha of the best, at most the budget \
             (a fraction of the context). Small models keep closer to the whole cache with \
             alpha 1000, which fetches the whole budget.",
        )
        .small()
        .weak(),
    );
}

fn row(ui: &mut egui::Ui, label: &str, widget: impl egui::Widget) {
    let label = ui.label(label);
    ui.add(widget).labelled_by(label.id);
    ui.end_row();
}

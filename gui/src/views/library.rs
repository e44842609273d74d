//! The model library: models in the models directory, "Open file…", the device picker,
//! loading progress, and below them the search of the Hugging Face hub (`hub`).

use std::path::PathBuf;

use hearth_engine::Placement;
use hearth_kernels::vk::{DeviceInfo, DeviceKind};

use crate::app::{App, ModelState};
use crate::library::size_label;

pub fn show(app: &mut App, ui: &mut egui::Ui) {
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            ui.add_space(8.0);
            ui.heading("Models");
            ui.label(egui::RichText::new(format!("In {}", app.config.models_dir.display())).weak());
            ui.add_space(8.0);
            loading(app, ui);
            ui.horizontal(|ui| {
                device_picker(app, ui);
                ui.add_space(12.0);
                if ui.button("Open file…").clicked() {
                    if let Some(path) = pick_gguf() {
                        app.load_model(path);
                    }
                }
                if ui.button("Refresh").clicked() {
                    app.refresh_library();
                }
            });
            ui.add_space(10.0);
            table(app, ui);
            ui.add_space(16.0);
            ui.separator();
            super::hub::show(app, ui);
        });
}

fn loading(app: &mut App, ui: &mut egui::Ui) {
    let ModelState::Loading {
        card, done, total, ..
    } = &app.model
    else {
        return;
    };
    let fraction = *done as f32 / (*total).max(1) as f32;
    let mut cancel = false;
    egui::Frame::group(ui.style()).show(ui, |ui| {
        ui.label(format!("Loading {}", card.name));
        ui.horizontal(|ui| {
            ui.add(
                egui::ProgressBar::new(fraction)
                    .show_percentage()
                    .desired_width(320.0),
            );
            cancel = ui.button("Cancel").clicked();
        });
    });
    ui.add_space(8.0);
    if cancel {
        app.cancel_load();
    }
}

fn device_picker(app: &mut App, ui: &mut egui::Ui) {
    let devices: Vec<DeviceInfo> = match &app.devices {
        Ok(d) => d.clone(),
        Err(_) => Vec::new(),
    };
    let describe = |d: &DeviceInfo| {
        format!(
            "{} ({}, {})",
            d.name,
            kind_label(d.kind),
            size_label(d.device_local_bytes().max(d.host_bytes()))
        )
    };
    let cpu = &app.cpu_executor;
    let cpu_label = format!("CPU executor ({}, {} threads)", cpu.isa, cpu.threads);
    let mut choice = app.prefs.placement();
    let selected = match choice {
        Some(Placement::Cpu) => cpu_label.clone(),
        Some(Placement::Vulkan(Some(i))) => devices
            .iter()
            .find(|d| d.index == i)
            .map_or_else(|| format!("Vulkan device {i}"), describe),
        _ => "Best available".to_string(),
    };
    ui.label("Device");
    let combo = egui::ComboBox::from_id_salt("device")
        .selected_text(selected)
        .width(300.0)
        .show_ui(ui, |ui| {
            ui.selectable_value(&mut choice, None, "Best available");
            ui.selectable_value(&mut choice, Some(Placement::Cpu), cpu_label.as_str());
            for d in &devices {
                let placement = Some(Placement::Vulkan(Some(d.index)));
                ui.selectable_value(&mut choice, placement, describe(d));
            }
        });
    super::name(&combo.response, "Device");
    if let Err(e) = &app.devices {
        ui.label(
            egui::RichText::new(format!("No Vulkan device: {e}"))
                .color(ui.visuals().error_fg_color),
        );
    }
    app.set_placement(choice);
}

fn kind_label(kind: DeviceKind) -> &'static str {
    match kind {
        DeviceKind::Discrete => "discrete GPU",
        DeviceKind::Integrated => "integrated GPU",
        DeviceKind::Virtual => "virtual GPU",
        DeviceKind::Cpu => "CPU",
        DeviceKind::Other => "other",
    }
}

fn table(app: &mut App, ui: &mut egui::Ui) {
    let entries = match &app.library {
        Ok(entries) => entries.clone(),
        Err(e) => {
            ui.label(format!("The models directory cannot be read: {e}"));
            return;
        }
    };
    if entries.is_empty() {
        ui.label(
            "No models here yet. Download one from Hugging Face below, or use “Open file…” to \
             load a GGUF file from anywhere.",
        );
        return;
    }
    let busy = app.busy();
    let loaded = app.card().map(|c| c.path.clone());
    let mut load = None;
    egui::Grid::new("models")
        .num_columns(6)
        .spacing([18.0, 10.0])
        .striped(true)
        .show(ui, |ui| {
            for heading in ["Name", "Architecture", "Parameters", "Format", "Size", ""] {
                ui.label(egui::RichText::new(heading).strong());
            }
            ui.end_row();
            for entry in &entries {
                match &entry.card {
                    Ok(card) => {
                        ui.label(&card.name);
                        ui.label(&card.architecture);
                        ui.label(card.params_label());
                        ui.label(&card.format);
                        ui.label(size_label(card.file_bytes));
                        let is_loaded = loaded.as_ref() == Some(&card.path);
                        let text = if is_loaded { "Reload" } else { "Load" };
                        let button = ui.add_enabled(!busy, egui::Button::new(text));
                        super::name(&button, &format!("{text} {}", card.name));
                        if button.clicked() {
                            load = Some(card.path.clone());
                        }
                    }
                    Err(e) => {
                        ui.label(crate::library::file_stem(&entry.path));
                        ui.label(egui::RichText::new(e).color(ui.visuals().error_fg_color));
                    }
                }
                ui.end_row();
            }
        });
    if let Some(path) = load {
        app.load_model(path);
    }
}

/// The system's file dialog, for a GGUF file anywhere.
fn pick_gguf() -> Option<PathBuf> {
    rfd::FileDialog::new()
        .set_title("Open a GGUF model")
        .add_filter("GGUF model", &["gguf"])
        .pick_file()
}

//! The GPU layers control in the settings panel: the whole model where the device picker
//! says, the last N layers on a Vulkan device with the first on the CPU executor, or as many
//! as the device holds; beneath it what the choice takes on the device and on the CPU, or
//! why it does not fit.

use hearth_engine::split::plan::{Executor, LayerPlan};
use hearth_engine::split::GpuLayers;

use super::{layer_span, short_device_name};
use crate::app::App;
use crate::library::size_label;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Off,
    Count,
    Auto,
}

impl Choice {
    const ALL: [Choice; 3] = [Self::Off, Self::Count, Self::Auto];

    fn of(setting: Option<GpuLayers>) -> Self {
        match setting {
            None => Self::Off,
            Some(GpuLayers::Count(_)) => Self::Count,
            Some(GpuLayers::Auto) => Self::Auto,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Off => "Off",
            Self::Count => "Layers",
            Self::Auto => "Auto",
        }
    }
}

/// The control, for a model of `n_layer` layers (where its file says).
pub fn show(app: &mut App, ui: &mut egui::Ui, n_layer: Option<usize>) {
    ui.label("GPU layers");
    let setting = &mut app.settings.gpu_layers;
    let mut choice = Choice::of(*setting);
    let combo = egui::ComboBox::from_id_salt("gpu_layers")
        .selected_text(choice.label())
        .show_ui(ui, |ui| {
            for c in Choice::ALL {
                ui.selectable_value(&mut choice, c, c.label());
            }
        });
    super::name(&combo.response, "GPU layers");
    if choice != Choice::of(*setting) {
        *setting = match choice {
            Choice::Off => None,
            // Every layer on the device to start; the slider moves the first to the CPU.
            Choice::Count => Some(GpuLayers::Count(n_layer.unwrap_or(usize::MAX))),
            Choice::Auto => Some(GpuLayers::Auto),
        };
    }
    if let Some(GpuLayers::Count(count)) = setting {
        // "all" from the preferences file shows as every layer, and stays "all" until moved.
        let mut shown = match n_layer {
            Some(n) => (*count).min(n),
            None => *count,
        };
        let field = match n_layer {
            Some(n) => ui.add(egui::Slider::new(&mut shown, 0..=n)),
            None => ui.add(egui::DragValue::new(&mut shown).range(0..=4096)),
        };
        super::name(&field, "GPU layer count");
        if field.changed() {
            *count = shown;
        }
    }

    let weak = |ui: &mut egui::Ui, text: &str| {
        ui.label(egui::RichText::new(text).small().weak());
    };
    let auto = match app.settings.gpu_layers {
        None => {
            return weak(
                ui,
                "Off: the whole model where the device picker says. Layers: the last N on a \
                 Vulkan device (the picker's, else the best), the first on the CPU.",
            )
        }
        Some(g) => g == GpuLayers::Auto,
    };
    if app.loaded().is_none() {
        return weak(ui, "What it takes shows once the model has loaded.");
    }
    match app.layer_plan(ui.ctx()) {
        None => weak(ui, "Measuring…"),
        Some(Ok(plan)) => {
            for (line, detail) in plan_lines(plan, auto) {
                ui.label(egui::RichText::new(line).small().weak())
                    .on_hover_text(detail);
            }
        }
        Some(Err(e)) => {
            let color = ui.visuals().error_fg_color;
            ui.label(egui::RichText::new(e.as_str()).small().color(color));
        }
    }
}

/// What the plan puts where, one line a part in the order of their layers ("CPU: layers
/// 0-14, 60.1 MiB", "llvmpipe: layers 15-29, 120.3 MiB of 3.2 GiB free"), each with its
/// bytes itemised for the hover text; after `auto`, a line first saying what it chose.
fn plan_lines(plan: &LayerPlan, auto: bool) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    if auto {
        let n_layer: usize = plan.parts.iter().map(|p| p.layers.len()).sum();
        let line = format!("Auto: {} of {n_layer} layers on the GPU", plan.gpu_layers());
        lines.push((
            line,
            "As many as the device's free memory holds".to_string(),
        ));
    }
    for p in &plan.parts {
        let word = if p.layers.len() == 1 {
            "layer"
        } else {
            "layers"
        };
        let span = format!("{word} {}", layer_span(p.layers.start, p.layers.end));
        let total = size_label(p.bytes.total());
        let line = match p.executor {
            Executor::Cpu => format!("CPU: {span}, {total}"),
            Executor::Vulkan(slot) => match plan.devices.get(slot) {
                Some(d) => format!(
                    "{}: {span}, {total} of {} free",
                    short_device_name(&d.name),
                    size_label(d.free)
                ),
                None => format!("{}: {span}, {total}", p.name),
            },
        };
        let detail = format!(
            "{}: weights {}, KV cache {}, scratch {}",
            p.name,
            size_label(p.bytes.weights),
            size_label(p.bytes.kv),
            size_label(p.bytes.scratch)
        );
        lines.push((line, detail));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_engine::split::plan::{DeviceBytes, DeviceRoom, PlannedPart};

    fn split() -> LayerPlan {
        let bytes = |mib: u64| DeviceBytes {
            weights: mib << 20,
            kv: 1 << 20,
            scratch: 0,
        };
        LayerPlan {
            parts: vec![
                PlannedPart {
                    executor: Executor::Cpu,
                    name: "cpu".into(),
                    layers: 0..15,
                    shard: None,
                    bytes: bytes(59),
                },
                PlannedPart {
                    executor: Executor::Vulkan(0),
                    name: "vulkan:0".into(),
                    layers: 15..30,
                    shard: None,
                    bytes: bytes(119),
                },
            ],
            kv_blocks: 8,
            devices: vec![DeviceRoom {
                index: 0,
                name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
                free: 3 << 30,
                max_range: u64::MAX,
            }],
        }
    }

    #[test]
    fn plans_read_part_by_part() {
        let lines = plan_lines(&split(), false);
        let text: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            text,
            [
                "CPU: layers 0-14, 60.0 MiB",
                "llvmpipe: layers 15-29, 120.0 MiB of 3.0 GiB free"
            ]
        );
        assert_eq!(
            lines[1].1,
            "vulkan:0: weights 119.0 MiB, KV cache 1.0 MiB, scratch 0.0 KiB"
        );
        let auto = plan_lines(&split(), true);
        assert_eq!(auto[0].0, "Auto: 15 of 30 layers on the GPU");
        assert_eq!(auto.len(), 3);
    }

    #[test]
    fn choices_follow_the_setting() {
        assert_eq!(Choice::of(None), Choice::Off);
        assert_eq!(
            Choice::of(Some(GpuLayers::Count(usize::MAX))),
            Choice::Count
        );
        assert_eq!(Choice::of(Some(GpuLayers::Auto)), Choice::Auto);
    }
}

//! The library's search of the Hugging Face hub: the search box, its results, the chosen
//! repository's quantizations with a Download button each, and the download's progress bar
//! with Cancel.

use hearth_models::hub::{QuantFile, SearchHit};

use crate::app::{App, Download};
use crate::library::size_label;

pub fn show(app: &mut App, ui: &mut egui::Ui) {
    ui.heading("Download from Hugging Face");
    ui.add_space(4.0);
    ui.horizontal(|ui| {
        let edit = ui.add(
            egui::TextEdit::singleline(&mut app.hub.query)
                .hint_text("Search GGUF models, such as “qwen3” or “smollm2”")
                .desired_width(360.0),
        );
        super::name(&edit, "Search Hugging Face");
        let entered = edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        let button = ui.add_enabled(!app.hub.searching(), egui::Button::new("Search"));
        if (entered || button.clicked()) && !app.hub.searching() {
            app.search_hub();
        }
        if app.hub.searching() {
            ui.spinner();
        }
    });
    ui.add_space(6.0);
    download(app, ui);
    results(app, ui);
    quants(app, ui);
}

/// The download running: file, progress bar with bytes and rate, Cancel; or the last one
/// that completed, with Load.
fn download(app: &mut App, ui: &mut egui::Ui) {
    if let Some(d) = &app.hub.download {
        let mut cancel = false;
        egui::Frame::group(ui.style()).show(ui, |ui| {
            ui.label(format!("Downloading {} from {}", d.file, d.repo));
            ui.horizontal(|ui| {
                let bar = ui.add(
                    egui::ProgressBar::new(d.fraction())
                        .text(progress_text(d))
                        .desired_width(420.0),
                );
                super::name(&bar, "Download progress");
                let button = ui.add_enabled(!d.cancelling, egui::Button::new("Cancel"));
                super::name(&button, "Cancel download");
                cancel = button.clicked();
                if d.cancelling {
                    ui.label("Cancelling…");
                }
            });
        });
        ui.add_space(8.0);
        if cancel {
            app.cancel_download();
        }
        return;
    }
    let Some(path) = app.hub.downloaded.clone() else {
        return;
    };
    let busy = app.busy();
    let mut load = false;
    ui.horizontal(|ui| {
        let name = crate::library::file_stem(&path);
        ui.label(format!("Downloaded {name} into the library."));
        let button = ui.add_enabled(!busy, egui::Button::new("Load"));
        super::name(&button, &format!("Load downloaded {name}"));
        load = button.clicked();
    });
    ui.add_space(8.0);
    if load {
        app.load_model(path);
    }
}

/// "12.5 MiB of 91.7 MiB, 4.2 MiB/s".
pub(crate) fn progress_text(d: &Download) -> String {
    if d.size == 0 {
        return "Starting…".into();
    }
    let mut text = format!("{} of {}", size_label(d.done), size_label(d.size));
    if let Some(rate) = d.rate.bytes_per_second() {
        text.push_str(&format!(", {}/s", size_label(rate as u64)));
    }
    text
}

fn results(app: &mut App, ui: &mut egui::Ui) {
    let Some(query) = &app.hub.searched else {
        return;
    };
    let hits: Vec<SearchHit> = match &app.hub.results {
        None => return,
        Some(Err(e)) => {
            error(ui, &format!("The search failed: {e}"));
            return;
        }
        Some(Ok(hits)) if hits.is_empty() => {
            ui.label(format!("No GGUF models on the hub match “{query}”."));
            return;
        }
        Some(Ok(hits)) => hits.clone(),
    };
    let mut chosen = None;
    egui::ScrollArea::vertical()
        .id_salt("hub results")
        .max_height(220.0)
        .show(ui, |ui| {
            egui::Grid::new("hub results grid")
                .num_columns(3)
                .spacing([18.0, 6.0])
                .striped(true)
                .show(ui, |ui| {
                    for heading in ["Model", "Downloads", "Likes"] {
                        ui.label(egui::RichText::new(heading).strong());
                    }
                    ui.end_row();
                    for hit in &hits {
                        let selected = app.hub.selected.as_ref() == Some(&hit.id);
                        let mut text = hit.id.clone();
                        if hit.gated {
                            text.push_str(" (gated)");
                        }
                        let row = ui.selectable_label(selected, text);
                        super::name(&row, &hit.id);
                        if row.clicked() {
                            chosen = Some(hit.id.clone());
                        }
                        ui.label(count_label(hit.downloads));
                        ui.label(count_label(hit.likes));
                        ui.end_row();
                    }
                });
        });
    ui.add_space(8.0);
    if let Some(repo) = chosen {
        app.select_repo(repo);
    }
}

/// The chosen repository's GGUF files, llama.cpp's pick marked, a Download button each.
fn quants(app: &mut App, ui: &mut egui::Ui) {
    let Some(repo) = app.hub.selected.clone() else {
        return;
    };
    ui.label(egui::RichText::new(&repo).strong());
    let files: Vec<QuantFile> = match &app.hub.quants {
        None => {
            ui.spinner();
            return;
        }
        Some(Err(e)) => {
            error(ui, &format!("Its files could not be listed: {e}"));
            return;
        }
        Some(Ok(files)) if files.is_empty() => {
            ui.label("It holds no GGUF model file.");
            return;
        }
        Some(Ok(files)) => files.clone(),
    };
    let running = app.hub.download.is_some();
    let mut get = None;
    egui::Grid::new("hub quants")
        .num_columns(4)
        .spacing([18.0, 6.0])
        .striped(true)
        .show(ui, |ui| {
            for heading in ["Quantization", "File", "Size", ""] {
                ui.label(egui::RichText::new(heading).strong());
            }
            ui.end_row();
            for q in &files {
                let tag = q.quant.clone().unwrap_or_else(|| "?".into());
                match q.default {
                    true => ui.label(format!("{tag} ★")).on_hover_text(
                        "The one a pull without a quantization takes, as llama.cpp's -hf chooses",
                    ),
                    false => ui.label(tag),
                };
                ui.label(&q.path);
                ui.label(size_label(q.size));
                match q.parts {
                    Some(n) => {
                        ui.label(format!("{n} parts: merge them to load"));
                    }
                    None => {
                        let button = ui.add_enabled(!running, egui::Button::new("Download"));
                        super::name(&button, &format!("Download {}", q.path));
                        if button.clicked() {
                            get = Some(q.path.clone());
                        }
                    }
                }
                ui.end_row();
            }
        });
    if let Some(file) = get {
        app.download(file);
    }
}

fn error(ui: &mut egui::Ui, text: &str) {
    ui.add(egui::Label::new(egui::RichText::new(text).color(ui.visuals().error_fg_color)).wrap());
}

/// "1.2M", "35k", "950".
fn count_label(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3).replace(".0k", "k"),
        _ => format!("{:.1}M", n as f64 / 1e6).replace(".0M", "M"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_short() {
        assert_eq!(count_label(950), "950");
        assert_eq!(count_label(35_000), "35k");
        assert_eq!(count_label(1_240_000), "1.2M");
        assert_eq!(count_label(2_000_000), "2M");
    }
}

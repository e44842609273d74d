//! `hearth-gui`: the desktop chat app.

use std::path::PathBuf;

use clap::Parser;
use hearth_gui::{App, AppConfig};

#[derive(Parser)]
#[command(name = "hearth-gui", version, about = "Hearth's desktop chat app")]
struct Args {
    /// Load this model at start: a path, or a name in the models directory.
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// Directory of installed models [default: ~/.cache/hearth/models].
    #[arg(long, env = "HEARTH_MODELS", value_name = "DIR")]
    models_dir: Option<PathBuf>,
    /// Where conversations and settings are kept [default: the user's data directory].
    #[arg(long, env = "HEARTH_DATA", value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let home = std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .map(PathBuf::from)
        .unwrap_or_default();
    let models_dir = args
        .models_dir
        .unwrap_or_else(|| hearth_models::default_models_dir(&home));
    let data_dir = args.data_dir.unwrap_or_else(|| {
        directories::ProjectDirs::from("", "", "Hearth")
            .map(|d| d.data_dir().to_path_buf())
            .unwrap_or_else(|| home.join(".local/share/hearth"))
    });
    let open_model = args
        .model
        .map(|name| hearth_models::resolve_model(&name, &models_dir))
        .transpose()?;
    let config = AppConfig {
        models_dir,
        data_dir,
        open_model,
        list_devices: true,
        hub: hearth_models::hub::HubOptions::from_vars(|name| std::env::var(name).ok(), &home),
    };
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("Hearth")
            .with_inner_size([1100.0, 720.0])
            .with_min_inner_size([640.0, 420.0]),
        ..eframe::NativeOptions::default()
    };
    eframe::run_native(
        "Hearth",
        options,
        Box::new(move |cc| {
            hearth_gui::app::style(&cc.egui_ctx);
            Ok(Box::new(App::new(config)))
        }),
    )
    .map_err(|e| anyhow::anyhow!("could not open a window: {e}"))
}

//! How the window looks: the chosen theme and Hearth's spacing and text sizes.

use super::App;
use crate::settings::ThemeChoice;

impl App {
    pub fn set_theme(&mut self, theme: ThemeChoice) {
        self.prefs.theme = theme;
        self.save_prefs();
    }

    pub(super) fn apply_theme(&mut self, ctx: &egui::Context) {
        if self.applied_theme == Some(self.prefs.theme) {
            return;
        }
        self.applied_theme = Some(self.prefs.theme);
        ctx.set_theme(match self.prefs.theme {
            ThemeChoice::System => egui::ThemePreference::System,
            ThemeChoice::Dark => egui::ThemePreference::Dark,
            ThemeChoice::Light => egui::ThemePreference::Light,
        });
    }
}

/// Hearth's look: a little more room than egui's defaults, for reading long answers.
pub fn style(ctx: &egui::Context) {
    ctx.all_styles_mut(|style| {
        style.spacing.item_spacing = egui::vec2(8.0, 6.0);
        style.spacing.button_padding = egui::vec2(8.0, 4.0);
        style.spacing.interact_size.y = 24.0;
        for (text_style, size) in [
            (egui::TextStyle::Body, 14.5),
            (egui::TextStyle::Button, 14.0),
            (egui::TextStyle::Monospace, 13.5),
            (egui::TextStyle::Heading, 20.0),
            (egui::TextStyle::Small, 11.5),
        ] {
            if let Some(font) = style.text_styles.get_mut(&text_style) {
                font.size = size;
            }
        }
    });
    // Text a little stronger than egui's grey, for long answers.
    ctx.style_mut_of(egui::Theme::Dark, |style| {
        style.visuals.widgets.noninteractive.fg_stroke.color = egui::Color32::from_gray(208);
    });
    ctx.style_mut_of(egui::Theme::Light, |style| {
        style.visuals.widgets.noninteractive.fg_stroke.color = egui::Color32::from_gray(32);
    });
}

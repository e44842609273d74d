//! The model slot: the library, loading and reloading, and each model's saved settings.

use std::path::PathBuf;

use hearth_engine::Placement;

use super::{App, ModelState, SETTINGS_FILE};
use crate::library::{self, ModelCard};
use crate::planner::{held_on_devices, PlanAnswer, PlanAsk, Planner};
use crate::settings::{KvOffload, ModelSettings};
use crate::worker::{LoadRequest, Loaded};

impl App {
    pub fn refresh_library(&mut self) {
        self.library = library::scan(&self.config.models_dir);
    }

    /// Starts loading `path` with its saved settings; the current model is freed first.
    pub fn load_model(&mut self, path: PathBuf) {
        if self.generating.is_some() {
            self.notices
                .push("Stop the answer being generated before loading a model.".into());
            return;
        }
        let card = match ModelCard::read(&path) {
            Ok(card) => card,
            Err(e) => {
                self.notices.push(format!("Could not open the model: {e}"));
                return;
            }
        };
        self.settings = self.prefs.model(&card);
        let request = LoadRequest::new(path, self.prefs.placement(), &self.settings);
        self.load_request = Some(request.clone());
        let id = self.worker().load(request);
        self.model = ModelState::Loading {
            id,
            card,
            done: 0,
            total: 1,
        };
    }

    /// Reloads the current model (after changing its context, KV cache settings, GPU layers or
    /// the device).
    pub fn reload_model(&mut self) {
        if let Some(card) = self.card() {
            let path = card.path.clone();
            self.save_model_settings();
            self.load_model(path);
        }
    }

    /// Whether the context, KV cache settings, GPU layers or device differ from what the model
    /// was loaded with.
    pub fn needs_reload(&self) -> bool {
        self.load_request.as_ref().is_some_and(|r| {
            r.placement != self.prefs.placement() || r.differs_from(&self.settings)
        })
    }

    /// Where the settings being edited would put the layers and what each part would take,
    /// while they ask for GPU layers and the model has loaded; `None` until the first plan
    /// comes back. Asks again only when the settings or the device change.
    pub fn layer_plan(&mut self, ctx: &egui::Context) -> Option<&PlanAnswer> {
        let ModelState::Ready { card, loaded } = &self.model else {
            return None;
        };
        self.settings.gpu_layers?;
        let kv_on_device = self
            .load_request
            .as_ref()
            .is_some_and(|r| r.kv_offload == KvOffload::None);
        let ask = PlanAsk {
            request: LoadRequest::new(card.path.clone(), self.prefs.placement(), &self.settings),
            held: held_on_devices(&loaded.placement, kv_on_device),
        };
        self.planner
            .get_or_insert_with(|| {
                let ctx = ctx.clone();
                Planner::spawn(move || ctx.request_repaint())
            })
            .plan(ask)
    }

    pub fn cancel_load(&mut self) {
        if let ModelState::Loading { id, .. } = self.model {
            self.worker().cancel_load(id);
        }
    }

    /// Whether a model is loading or answering: no other load may start.
    pub fn busy(&self) -> bool {
        matches!(self.model, ModelState::Loading { .. }) || self.generating.is_some()
    }

    pub fn card(&self) -> Option<&ModelCard> {
        match &self.model {
            ModelState::Empty => None,
            ModelState::Loading { card, .. } | ModelState::Ready { card, .. } => Some(card),
        }
    }

    pub fn loaded(&self) -> Option<&Loaded> {
        match &self.model {
            ModelState::Ready { loaded, .. } => Some(loaded),
            _ => None,
        }
    }

    pub fn save_model_settings(&mut self) {
        if let Some(name) = self.card().map(|c| c.name.clone()) {
            self.prefs.models.insert(name, self.settings.clone());
            self.save_prefs();
        }
    }

    /// Puts back the model's own defaults.
    pub fn reset_model_settings(&mut self) {
        if let Some(card) = self.card() {
            self.settings = ModelSettings::for_model(card);
            self.save_model_settings();
        }
    }

    /// Runs models on `placement` from the next load; `None`: the best place found.
    pub fn set_placement(&mut self, placement: Option<Placement>) {
        if self.prefs.placement() != placement {
            (self.prefs.cpu, self.prefs.device) = match placement {
                Some(Placement::Cpu) => (true, None),
                Some(Placement::Vulkan(index)) => (false, index),
                None => (false, None),
            };
            self.save_prefs();
        }
    }

    pub(super) fn save_prefs(&mut self) {
        if let Err(e) = self.prefs.save(&self.config.data_dir.join(SETTINGS_FILE)) {
            self.notices.push(e);
        }
    }
}

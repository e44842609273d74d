//! Preferences: the app's (last model, device, theme) and each model's generation settings,
//! kept in one JSON file in the user's data directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hearth_engine::sample::SamplerParams;
use hearth_engine::split::GpuLayers;
use hearth_engine::{InfinigenOptions, Placement};
use hearth_model::kv::infinigen::IgParams;
use hearth_model::kv::KvType;
use serde::{Deserialize, Serialize};

use crate::library::ModelCard;

/// The default context when the model's training context is longer (the engine's default).
pub const DEFAULT_MAX_CTX: usize = 4096;

/// How one model generates; saved per model name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelSettings {
    pub sampler: SamplerParams,
    /// Most tokens per answer; 0 runs until the model ends its turn or the context is full.
    pub max_tokens: usize,
    /// Context length in tokens.
    pub n_ctx: usize,
    /// KV pool in tokens; 0 sizes it for the whole context.
    pub kv_budget_tokens: usize,
    /// Where the KV cache lives and how decode reads it.
    pub kv_offload: KvOffload,
    /// How the KV cache stores K and V (`--kv-type`), saved by name.
    #[serde(with = "kv_type_name")]
    pub kv_type: KvType,
    /// How InfiniGen chooses the tokens it fetches (with `KvOffload::Infinigen`).
    pub infinigen: InfinigenSettings,
    /// Layers on a Vulkan device, the first ones on the CPU executor (`--gpu-layers`), saved
    /// as "auto", "all" or a count; `None`: the whole model where the device picker says.
    #[serde(with = "gpu_layers_name")]
    pub gpu_layers: Option<GpuLayers>,
}

/// InfiniGen's settings, as `--ig-partial-ratio`, `--ig-alpha`, `--ig-budget` and
/// `--ig-recent` set them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InfinigenSettings {
    /// Fraction of each head's dimensions that speculation uses; `None`: the model's default
    /// (a fifth, and at least 32 dimensions).
    pub partial_ratio: Option<f32>,
    /// Tokens scoring within this many logits of a head's best count as needed; `None`: the
    /// model's default (5 with RoPE, 4 without, raised on heads narrower than 128).
    pub alpha: Option<f32>,
    /// Most tokens fetched, as a fraction of the context so far.
    pub budget: f32,
    /// The newest tokens, always fetched besides.
    pub recent: usize,
}

impl Default for InfinigenSettings {
    fn default() -> Self {
        let d = IgParams::paper(true);
        Self {
            partial_ratio: None,
            alpha: None,
            budget: d.budget,
            recent: d.recent,
        }
    }
}

impl InfinigenSettings {
    /// Where the alpha field starts when the model's default is turned off: the paper's
    /// setting for RoPE models, which most chat models are.
    pub fn default_alpha() -> f32 {
        IgParams::paper(true).alpha
    }

    /// Where the partial dimensions field starts when the model's default is turned off.
    pub fn default_partial_ratio() -> f32 {
        IgParams::paper(true).partial_ratio
    }

    pub fn options(&self) -> InfinigenOptions {
        InfinigenOptions {
            partial_ratio: self.partial_ratio,
            alpha: self.alpha,
            budget: Some(self.budget),
            recent: Some(self.recent),
            ..InfinigenOptions::default()
        }
    }
}

/// `--kv-offload`: the KV cache in device memory, in system memory read whole every step,
/// or in system memory with InfiniGen fetching only the tokens that matter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvOffload {
    #[default]
    None,
    Full,
    Infinigen,
}

impl KvOffload {
    pub const ALL: [KvOffload; 3] = [Self::None, Self::Full, Self::Infinigen];

    pub fn label(self) -> &'static str {
        match self {
            Self::None => "Device memory",
            Self::Full => "System memory",
            Self::Infinigen => "System memory, InfiniGen",
        }
    }
}

/// A [`KvType`] in the preferences file as its `--kv-type` name.
mod kv_type_name {
    use hearth_model::kv::KvType;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &KvType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(t.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<KvType, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// [`GpuLayers`] in the preferences file as `--gpu-layers` takes it.
mod gpu_layers_name {
    use hearth_engine::split::GpuLayers;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(g: &Option<GpuLayers>, s: S) -> Result<S::Ok, S::Error> {
        g.map(|g| g.to_string()).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<GpuLayers>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(name) => name.parse().map(Some).map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

impl Default for ModelSettings {
    fn default() -> Self {
        Self {
            sampler: SamplerParams::default(),
            max_tokens: 1024,
            n_ctx: DEFAULT_MAX_CTX,
            kv_budget_tokens: 0,
            kv_offload: KvOffload::None,
            kv_type: KvType::default(),
            infinigen: InfinigenSettings::default(),
            gpu_layers: None,
        }
    }
}

impl ModelSettings {
    /// Defaults for `card`: the sampling its authors recommend where the file says, and its
    /// training context up to [`DEFAULT_MAX_CTX`].
    pub fn for_model(card: &ModelCard) -> Self {
        let mut s = Self::default();
        let r = &card.sampling;
        let p = &mut s.sampler;
        p.temperature = r.temperature.unwrap_or(p.temperature);
        p.top_k = r.top_k.unwrap_or(p.top_k);
        p.top_p = r.top_p.unwrap_or(p.top_p);
        p.min_p = r.min_p.unwrap_or(p.min_p);
        p.repeat_penalty = r.repeat_penalty.unwrap_or(p.repeat_penalty);
        if let Some(n) = card.n_ctx_train {
            s.n_ctx = n.clamp(1, DEFAULT_MAX_CTX);
        }
        s
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThemeChoice {
    #[default]
    System,
    Dark,
    Light,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Preferences {
    /// The model loaded last, offered first next time.
    pub last_model: Option<PathBuf>,
    /// Vulkan device index; `None` picks the best.
    pub device: Option<usize>,
    /// The native CPU executor rather than a Vulkan device.
    pub cpu: bool,
    pub theme: ThemeChoice,
    /// Keyed by model name.
    pub models: BTreeMap<String, ModelSettings>,
    /// Port of the OpenAI-compatible server the app can start; `None`: 8080.
    pub serve_port: Option<u16>,
}

impl Preferences {
    /// Where models run: the CPU executor, the chosen Vulkan device, or by default the best
    /// place on this machine ([`Placement::default_for_host`]).
    pub fn placement(&self) -> Option<Placement> {
        match (self.cpu, self.device) {
            (true, _) => Some(Placement::Cpu),
            (false, Some(i)) => Some(Placement::Vulkan(Some(i))),
            (false, None) => None,
        }
    }

    /// Reads `path`; a missing file gives the defaults, a broken one an error naming it.
    pub fn load(path: &Path) -> Result<Self, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                format!(
                    "{}: unreadable settings ({e}); using defaults",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Writes `path` through a temporary file, so a crash leaves the old settings.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let json = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, json).map_err(fail)?;
        std::fs::rename(&tmp, path).map_err(fail)
    }

    /// The saved settings for `card`, or its defaults.
    pub fn model(&self, card: &ModelCard) -> ModelSettings {
        self.models
            .get(&card.name)
            .cloned()
            .unwrap_or_else(|| ModelSettings::for_model(card))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::RecommendedSampling;

    fn card() -> ModelCard {
        ModelCard {
            path: "m.gguf".into(),
            name: "M".into(),
            architecture: "llama".into(),
            n_params: 1,
            format: "Q4_1".into(),
            file_bytes: 1,
            n_ctx_train: Some(8192),
            n_layer: Some(30),
            sampling: RecommendedSampling {
                temperature: Some(0.2),
                ..RecommendedSampling::default()
            },
        }
    }

    #[test]
    fn defaults_come_from_the_model() {
        let s = ModelSettings::for_model(&card());
        assert_eq!(s.sampler.temperature, 0.2);
        assert_eq!(s.sampler.top_k, SamplerParams::default().top_k);
        assert_eq!(s.n_ctx, DEFAULT_MAX_CTX);
    }

    #[test]
    fn round_trip_and_broken_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.json");
        assert_eq!(Preferences::load(&path).unwrap(), Preferences::default());
        let mut p = Preferences {
            theme: ThemeChoice::Light,
            ..Preferences::default()
        };
        let mut s = p.model(&card());
        s.max_tokens = 7;
        p.models.insert("M".into(), s.clone());
        p.save(&path).unwrap();
        let back = Preferences::load(&path).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.model(&card()), s);

        std::fs::write(&path, b"{\"theme\": 3").unwrap();
        let err = Preferences::load(&path).unwrap_err();
        assert!(err.contains("settings.json"), "{err}");
    }

    #[test]
    fn infinigen_settings_reach_the_engine() {
        // Files from before InfiniGen's settings existed load with the engine's defaults.
        let old: ModelSettings =
            serde_json::from_str(r#"{"max_tokens": 9, "kv_offload": "infinigen"}"#).unwrap();
        assert_eq!(old.kv_type, KvType::F16);
        let q8: ModelSettings = serde_json::from_str(r#"{"kv_type": "q8"}"#).unwrap();
        assert_eq!(q8.kv_type, KvType::Q8);
        let json = serde_json::to_string(&q8).unwrap();
        assert!(json.contains(r#""kv_type":"q8""#), "{json}");
        let err = serde_json::from_str::<ModelSettings>(r#"{"kv_type": "q4"}"#).unwrap_err();
        assert!(err.to_string().contains("f32, f16, q8"), "{err}");
        assert_eq!(old.infinigen, InfinigenSettings::default());
        let d = IgParams::defaults(true, 64);
        assert_eq!(old.infinigen.options().params(true, 64, 4096), d);
        assert_eq!(old.infinigen.options().params(false, 128, 4096).alpha, 4.0);
        // Settings saved when the partial ratio was always stored keep it.
        let saved: InfinigenSettings = serde_json::from_str(r#"{"partial_ratio": 0.2}"#).unwrap();
        assert_eq!(saved.options().params(true, 64, 4096).partial_ratio, 0.2);

        let ig = InfinigenSettings {
            partial_ratio: Some(0.5),
            alpha: Some(8.0),
            budget: 0.3,
            recent: 64,
        };
        let p = ig.options().params(true, 64, 4096);
        assert_eq!(
            (p.partial_ratio, p.alpha, p.budget, p.recent),
            (0.5, 8.0, 0.3, 64)
        );
        let s = ModelSettings {
            infinigen: ig,
            ..ModelSettings::default()
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<ModelSettings>(&json).unwrap(), s);
    }

    #[test]
    fn gpu_layers_load_from_old_files_and_save_by_name() {
        // Files from before the GPU layers control run the whole model where the picker says.
        let old: ModelSettings = serde_json::from_str(r#"{"max_tokens": 9}"#).unwrap();
        assert_eq!(old.gpu_layers, None);
        let json = serde_json::to_string(&old).unwrap();
        assert!(json.contains(r#""gpu_layers":null"#), "{json}");
        for (name, want) in [
            ("auto", GpuLayers::Auto),
            ("all", GpuLayers::Count(usize::MAX)),
            ("12", GpuLayers::Count(12)),
        ] {
            let s: ModelSettings =
                serde_json::from_str(&format!(r#"{{"gpu_layers": "{name}"}}"#)).unwrap();
            assert_eq!(s.gpu_layers, Some(want), "{name}");
            let json = serde_json::to_string(&s).unwrap();
            assert!(
                json.contains(&format!(r#""gpu_layers":"{name}""#)),
                "{json}"
            );
            assert_eq!(serde_json::from_str::<ModelSettings>(&json).unwrap(), s);
        }
        let err = serde_json::from_str::<ModelSettings>(r#"{"gpu_layers": "most"}"#).unwrap_err();
        assert!(err.to_string().contains("auto or all"), "{err}");
    }
}

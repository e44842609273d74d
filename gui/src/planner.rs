//! Where a model's layers would go with the settings being edited, and what each part would
//! take (`Engine::plan`), worked out on a thread of its own: planning opens the model file
//! (converting a Hugging Face folder in memory) and the Vulkan devices, too slow for a frame.
//! The thread plans only the newest ask, so dragging a slider queues no backlog.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use hearth_engine::split::plan::LayerPlan;
use hearth_engine::split::GpuLayers;
use hearth_engine::{Engine, EngineOptions, Error};
use hearth_model::PlacedPart;

use crate::worker::LoadRequest;

/// A plan, or why there is none (the device's memory is too small, or there is no device),
/// as a sentence.
pub type PlanAnswer = Result<LayerPlan, String>;

/// What to plan.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanAsk {
    /// The load the settings would make.
    pub request: LoadRequest,
    /// Bytes the loaded model holds on each Vulkan device, by index: a reload frees them
    /// before it loads, so they count as free.
    pub held: Vec<(usize, u64)>,
}

pub struct Planner {
    asks: Option<Sender<PlanAsk>>,
    answers: Receiver<PlanAnswer>,
    /// The last ask sent.
    asked: Option<PlanAsk>,
    /// The newest answer come back.
    latest: Option<PlanAnswer>,
    thread: Option<JoinHandle<()>>,
}

impl Planner {
    /// Starts the thread; `notify` runs after every answer (to wake the UI).
    pub fn spawn(notify: impl Fn() + Send + 'static) -> Self {
        let (asks, rx) = channel::<PlanAsk>();
        let (tx, answers) = channel();
        let thread = std::thread::Builder::new()
            .name("hearth-planner".into())
            .spawn(move || {
                while let Ok(mut ask) = rx.recv() {
                    while let Ok(newer) = rx.try_recv() {
                        ask = newer;
                    }
                    if tx.send(plan(&ask)).is_err() {
                        break;
                    }
                    notify();
                }
            })
            .expect("spawning the planning thread");
        Self {
            asks: Some(asks),
            answers,
            asked: None,
            latest: None,
            thread: Some(thread),
        }
    }

    /// The newest plan: `ask`'s once the thread has answered it, until then the one before
    /// (`None` before the first). Sends `ask` to the thread when it differs from the last.
    pub fn plan(&mut self, ask: PlanAsk) -> Option<&PlanAnswer> {
        while let Ok(answer) = self.answers.try_recv() {
            self.latest = Some(answer);
        }
        if self.asked.as_ref() != Some(&ask) {
            if let Some(asks) = &self.asks {
                // The thread only ends when this sender is dropped.
                let _ = asks.send(ask.clone());
            }
            self.asked = Some(ask);
        }
        self.latest.as_ref()
    }
}

impl Drop for Planner {
    /// Waits for a plan in progress, so no Vulkan device is open when the app exits.
    fn drop(&mut self) {
        self.asks = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn plan(ask: &PlanAsk) -> PlanAnswer {
    let path = &ask.request.path;
    let mut options = ask.request.engine_options();
    if !ask.held.is_empty() {
        // No layer on the device never overflows it: this plan finds the device and its room.
        let probe = EngineOptions {
            gpu_layers: Some(GpuLayers::Count(0)),
            ..options.clone()
        };
        let rooms = Engine::plan(path, &probe)
            .map_err(|e| e.to_string())?
            .devices;
        if let [room] = &rooms[..] {
            if let Some(&(_, held)) = ask.held.iter().find(|(i, _)| *i == room.index) {
                options.gpu_memory = Some(room.free + held);
            }
        }
    }
    Engine::plan(path, &options).map_err(|e| match e {
        Error::DeviceMemory {
            device,
            free_mib,
            what,
            asked,
            ..
        } => {
            let auto = EngineOptions {
                gpu_layers: Some(GpuLayers::Auto),
                ..options
            };
            let fits = Engine::plan(path, &auto).ok().map(|p| p.gpu_layers());
            out_of_memory(&device, free_mib, &what, &asked, fits)
        }
        e => e.to_string(),
    })
}

/// The engine's out-of-memory sentence with advice in the app's terms, where the engine's
/// names command-line flags.
fn out_of_memory(
    device: &str,
    free_mib: f64,
    what: &str,
    asked: &str,
    fits: Option<usize>,
) -> String {
    let fits = match fits {
        Some(n) => format!("{n} layers fit (or choose Auto)"),
        None => "Fewer layers fit".to_string(),
    };
    format!(
        "{device} has {free_mib:.1} MiB free; {what} would take {asked}. {fits}; a shorter \
         context or a smaller KV budget leaves room for more."
    )
}

/// Bytes each Vulkan device holds of a loaded model (`placement`), by device index: its
/// weights, and its KV cache where that is in device memory.
pub fn held_on_devices(placement: &[PlacedPart], kv_on_device: bool) -> Vec<(usize, u64)> {
    let mut held: Vec<(usize, u64)> = Vec::new();
    for p in placement {
        let Some(index) = p
            .executor
            .strip_prefix("vulkan:")
            .and_then(|i| i.parse().ok())
        else {
            continue;
        };
        let bytes = p.weight_bytes + if kv_on_device { p.kv_bytes } else { 0 };
        match held.iter_mut().find(|(i, _)| *i == index) {
            Some((_, b)) => *b += bytes,
            None => held.push((index, bytes)),
        }
    }
    held
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
            head: false,
            weight_bytes: 100,
            kv_bytes: 10,
            busy_ns: 0,
            shard: None,
        }
    }

    #[test]
    fn only_device_memory_counts_as_held() {
        let split = [
            part("cpu", "CPU (avx2, 2 threads)", [0, 15]),
            part("vulkan:1", "llvmpipe", [15, 30]),
        ];
        assert_eq!(held_on_devices(&split, true), vec![(1, 110)]);
        assert_eq!(held_on_devices(&split, false), vec![(1, 100)]);
        assert!(held_on_devices(&split[..1], true).is_empty());
    }

    #[test]
    fn out_of_memory_advice_names_the_app_s_controls() {
        let text = out_of_memory(
            "vulkan:0 (llvmpipe)",
            100.0,
            "layers 0..30 and the output head (every layer of 30 on the GPU)",
            "239.4 MiB: weights 92.1 MiB, KV cache 90.0 MiB, scratch 57.2 MiB",
            Some(2),
        );
        assert_eq!(
            text,
            "vulkan:0 (llvmpipe) has 100.0 MiB free; layers 0..30 and the output head (every \
             layer of 30 on the GPU) would take 239.4 MiB: weights 92.1 MiB, KV cache 90.0 MiB, \
             scratch 57.2 MiB. 2 layers fit (or choose Auto); a shorter context or a smaller KV \
             budget leaves room for more."
        );
        assert!(!text.contains("--"), "{text}");
    }
}

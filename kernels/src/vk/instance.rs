//! The Vulkan instance: loader, optional Khronos validation layer, and the log its messages go to.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

use ash::vk;

use super::error::{CallContext, Result, VkError};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// How to create the instance.
#[derive(Clone, Copy, Debug, Default)]
pub struct InstanceDesc {
    /// Enable the Khronos validation layer when it is installed (tests do).
    pub validation: bool,
}

/// Warnings and errors reported by the validation layer, kept so tests can fail on any.
#[derive(Debug, Default)]
pub struct ValidationLog {
    messages: Mutex<Vec<String>>,
}

impl ValidationLog {
    /// Takes every message logged so far.
    pub fn drain(&self) -> Vec<String> {
        match self.messages.lock() {
            Ok(mut m) => std::mem::take(&mut *m),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        }
    }

    fn push(&self, message: String) {
        if let Ok(mut m) = self.messages.lock() {
            m.push(message);
        }
    }
}

/// The Vulkan version Hearth asks for: what its kernels and the device features it uses need.
pub const API_VERSION: u32 = vk::API_VERSION_1_2;

pub struct Instance {
    /// The loaded Vulkan library; must outlive every handle made from it.
    _entry: ash::Entry,
    pub(crate) raw: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// Kept alive for the messenger's callback, which holds a raw pointer to it.
    log: Arc<ValidationLog>,
}

impl Instance {
    pub fn new(desc: InstanceDesc) -> Result<Arc<Self>> {
        // SAFETY: loading the system's Vulkan loader runs its initialisation code; that is the
        // documented way to use Vulkan and there is no alternative.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| VkError::NoLoader(e.to_string()))?;

        // SAFETY: plain queries on a loaded entry.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }
            .call("vkEnumerateInstanceLayerProperties")?;
        let has_validation = layers
            .iter()
            .any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == VALIDATION_LAYER));
        let validation = desc.validation && has_validation;
        if desc.validation && !has_validation {
            tracing::warn!("Khronos validation layer not installed; running without it");
        }

        // MoltenVK (macOS) is a portability implementation: the loader lists its devices only
        // to an instance that enables portability enumeration.
        // SAFETY: a plain query on a loaded entry.
        let extensions = unsafe { entry.enumerate_instance_extension_properties(None) }
            .call("vkEnumerateInstanceExtensionProperties")?;
        let portability = extensions.iter().any(|e| {
            e.extension_name_as_c_str()
                .is_ok_and(|n| n == ash::khr::portability_enumeration::NAME)
        });

        let app = vk::ApplicationInfo::default()
            .application_name(c"hearth")
            .engine_name(c"hearth")
            .api_version(API_VERSION);
        let layer_names = [VALIDATION_LAYER.as_ptr()];
        let mut ext_names = Vec::new();
        if validation {
            ext_names.push(ash::ext::debug_utils::NAME.as_ptr());
        }
        if portability {
            ext_names.push(ash::khr::portability_enumeration::NAME.as_ptr());
        }
        // Synchronization validation too: the recorder leaves out barriers between
        // independent commands, and a missing one is a race that a CPU device never shows.
        let features = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut checks =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&features);
        let mut info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_extension_names(&ext_names);
        if portability {
            info = info.flags(vk::InstanceCreateFlags::ENUMERATE_PORTABILITY_KHR);
        }
        if validation {
            info = info
                .enabled_layer_names(&layer_names)
                .push_next(&mut checks);
        }
        // SAFETY: every pointer in `info` refers to locals that outlive the call.
        let raw = unsafe { entry.create_instance(&info, None) }.map_err(|r| match r {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => VkError::NoDevice,
            result => VkError::Call {
                call: "vkCreateInstance",
                result,
            },
        })?;

        let log = Arc::new(ValidationLog::default());
        let debug = if validation {
            let loader = ash::ext::debug_utils::Instance::new(&entry, &raw);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                        | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                )
                .pfn_user_callback(Some(on_message))
                .user_data(Arc::as_ptr(&log) as *mut c_void);
            // SAFETY: the user-data pointer stays valid: `log` lives in the Instance, and the
            // messenger is destroyed in Drop before `log` is released.
            let messenger = unsafe { loader.create_debug_utils_messenger(&info, None) }
                .call("vkCreateDebugUtilsMessengerEXT")?;
            Some((loader, messenger))
        } else {
            None
        };
        Ok(Arc::new(Self {
            _entry: entry,
            raw,
            debug,
            log,
        }))
    }

    /// True when the validation layer is active.
    pub fn validating(&self) -> bool {
        self.debug.is_some()
    }

    pub fn validation_log(&self) -> &ValidationLog {
        &self.log
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: every device created from this instance holds an Arc to it, so none is left.
        unsafe {
            if let Some((loader, messenger)) = self.debug.take() {
                loader.destroy_debug_utils_messenger(messenger, None);
            }
            self.raw.destroy_instance(None);
        }
    }
}

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes valid callback data for the duration of the call, and `user` is
    // the ValidationLog registered in Instance::new, alive until the messenger is destroyed.
    unsafe {
        let text = data
            .as_ref()
            .and_then(|d| d.message_as_c_str())
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default();
        tracing::warn!("vulkan validation ({severity:?}): {text}");
        if let Some(log) = (user as *const ValidationLog).as_ref() {
            log.push(format!("{severity:?}: {text}"));
        }
    }
    vk::FALSE
}

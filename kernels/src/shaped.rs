//! Kernels shaped for another kind of device than the test device, so that lavapipe runs the
//! shapes GPUs get.

use std::cell::Cell;

use crate::vk::DeviceKind;

thread_local! {
    static SHAPED_AS: Cell<Option<DeviceKind>> = const { Cell::new(None) };
}

/// What `build` returns, with the kernels it builds shaped as for a device of `kind`.
pub(crate) fn shaped_as<T>(kind: DeviceKind, build: impl FnOnce() -> T) -> T {
    let before = SHAPED_AS.replace(Some(kind));
    let built = build();
    SHAPED_AS.set(before);
    built
}

/// The kind [`shaped_as`] sets for this thread, if any.
pub(super) fn shaped_kind() -> Option<DeviceKind> {
    SHAPED_AS.get()
}

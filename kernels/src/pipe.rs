//! A wrapper's pipeline and its checked dispatch: every binding is checked against the bytes
//! the wrapper's shape needs before anything is recorded, so the wrappers keep only their push
//! constants, size rules and grids.

use std::ops::Deref;
use std::sync::Arc;

use bytemuck::Pod;
use hearth_shaders::Kernel;

use super::{check_sizes, linear_groups, workgroup_size};
use crate::vk::{Buffer, Device, Pipeline, Recorder, Result};

/// A buffer a dispatch binds: the binding's name (for errors), the buffer, and the bytes the
/// shape needs it to hold (0 where the shape asks nothing of it).
pub(crate) type Binding<'n, 'a> = (&'n str, &'a Buffer, u64);

/// One kernel variant built on a device.
pub(crate) struct Pipe(Arc<Pipeline>);

impl Pipe {
    /// `kernel` specialized with the device's [`workgroup_size`] only, as the kernels that
    /// reduce a row or stream elements are.
    pub(crate) fn new(device: &Device, kernel: Kernel) -> Result<Self> {
        Self::specialized(device, kernel, &[workgroup_size(device.info())])
    }

    /// `kernel` with the specialization constants `spec` (constant 0 is the workgroup size).
    pub(crate) fn specialized(device: &Device, kernel: Kernel, spec: &[u32]) -> Result<Self> {
        device.pipeline(kernel, spec).map(Self)
    }

    /// Checks that each binding holds what the shape needs, then records `groups` workgroups.
    pub(crate) fn dispatch<'a, P: Pod, const N: usize>(
        &self,
        rec: &mut Recorder<'a>,
        bindings: [Binding<'_, 'a>; N],
        push: &P,
        groups: [u32; 3],
    ) -> Result<()> {
        check_sizes(self.name, &bindings)?;
        rec.dispatch(
            &self.0,
            &bindings.map(|(_, buffer, _)| buffer),
            push,
            groups,
        )
    }

    /// [`dispatch`](Self::dispatch) over `items` one-dimensional work items.
    pub(crate) fn dispatch_items<'a, P: Pod, const N: usize>(
        &self,
        rec: &mut Recorder<'a>,
        bindings: [Binding<'_, 'a>; N],
        push: &P,
        items: u64,
    ) -> Result<()> {
        let groups = linear_groups(rec.device().info(), items, self.workgroup_size());
        self.dispatch(rec, bindings, push, groups)
    }
}

impl Deref for Pipe {
    type Target = Pipeline;

    fn deref(&self) -> &Pipeline {
        &self.0
    }
}

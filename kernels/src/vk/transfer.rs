//! Moving data between the host and buffers: mapped buffers are copied into directly, others
//! through a staging buffer, a chunk at a time, each chunk one recorded copy.

use std::sync::Arc;

use bytemuck::Pod;

use super::buffer::{Buffer, BufferDesc};
use super::command::Recorder;
use super::device::Device;
use super::error::Result;

/// Staging transfers move at most this much at a time, so a large upload never needs a staging
/// buffer as large as itself.
const STAGING_CHUNK: u64 = 64 << 20;

impl Buffer {
    /// A device-local buffer holding `data`.
    pub fn from_slice<T: Pod>(device: &Arc<Device>, name: &str, data: &[T]) -> Result<Self> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buffer = Self::new(device, BufferDesc::device_local(name, bytes.len() as u64))?;
        buffer.upload(0, bytes)?;
        Ok(buffer)
    }

    /// Copies `data` into the buffer at byte `offset`: directly when the memory is mapped,
    /// otherwise through a staging buffer in chunks.
    pub fn upload<T: Pod>(&self, offset: u64, data: &[T]) -> Result<()> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        self.check_range(offset, bytes.len())?;
        if let Some(ptr) = self.mapped() {
            // SAFETY: the range was checked against the mapped allocation, and no recorded
            // work can be using the buffer (recorders borrow buffers until they complete).
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.add(offset as usize), bytes.len())
            };
            return Ok(());
        }
        let chunk = STAGING_CHUNK.min(bytes.len() as u64).max(4);
        let staging = Buffer::new(
            self.device(),
            BufferDesc::host_visible("staging upload", chunk),
        )?;
        for (i, part) in bytes.chunks(chunk as usize).enumerate() {
            staging.upload(0, part)?;
            let mut rec = Recorder::new(self.device())?;
            rec.copy(
                &staging,
                0,
                self,
                offset + i as u64 * chunk,
                part.len() as u64,
            )?;
            rec.submit()?;
        }
        Ok(())
    }

    /// Reads `out.len()` elements starting at byte `offset`.
    pub fn download_into<T: Pod>(&self, offset: u64, out: &mut [T]) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
        self.check_range(offset, bytes.len())?;
        if let Some(ptr) = self.mapped() {
            // SAFETY: range checked; no recorded work is in flight (see `upload`).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ptr.add(offset as usize),
                    bytes.as_mut_ptr(),
                    bytes.len(),
                )
            };
            return Ok(());
        }
        let chunk = STAGING_CHUNK.min(bytes.len() as u64).max(4);
        let staging = Buffer::new(
            self.device(),
            BufferDesc::readback("staging download", chunk),
        )?;
        for (i, part) in bytes.chunks_mut(chunk as usize).enumerate() {
            let mut rec = Recorder::new(self.device())?;
            rec.copy(
                self,
                offset + i as u64 * chunk,
                &staging,
                0,
                part.len() as u64,
            )?;
            rec.submit()?;
            staging.download_into(0, part)?;
        }
        Ok(())
    }

    /// The first `len` elements of the buffer.
    pub fn download<T: Pod>(&self, len: usize) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); len];
        self.download_into(0, &mut out)?;
        Ok(out)
    }
}

//! The driver's pipeline cache kept on disk between runs, so that a second start does not
//! compile every kernel again: one file per device and driver (named by the device's ids and
//! the driver's `pipelineCacheUUID`, which changes with its version), merged into the device's
//! cache when a frontend names a directory, and written back when the device goes, through a
//! temporary file renamed into place so that a crash never leaves half a file. Vulkan only
//! allows data a driver wrote to be handed back to it, so the file carries its length and a
//! checksum, and the driver's own header (its vendor, device and cache UUID) is checked
//! before the data goes anywhere: a file that fails either is ignored, and the kernels
//! compile as they would have.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use ash::vk;

use super::caps::DeviceInfo;
use super::error::{CallContext, Result};

/// Where this device's cache lives in `dir`.
pub(crate) fn file_for(dir: &Path, info: &DeviceInfo) -> PathBuf {
    let uuid: String = info
        .pipeline_cache_uuid
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(format!(
        "{:04x}-{:04x}-{uuid}.vkcache",
        info.vendor_id, info.device_id
    ))
}

/// Merges the pipelines stored at `file` (when it holds any that `info`'s driver wrote) into
/// `cache`; returns the bytes taken.
///
/// # Safety
/// `cache` must belong to `device`, and no other thread may use it meanwhile.
pub(crate) unsafe fn merge_from(
    device: &ash::Device,
    info: &DeviceInfo,
    cache: vk::PipelineCache,
    file: &Path,
) -> Result<usize> {
    let Ok(stored) = std::fs::read(file) else {
        return Ok(0);
    };
    let Some(data) = unwrap(&stored).filter(|d| written_by(d, info)) else {
        tracing::warn!(
            "pipeline cache {}: not this driver's, ignored",
            file.display()
        );
        return Ok(0);
    };
    let create = vk::PipelineCacheCreateInfo::default().initial_data(data);
    // SAFETY: a valid create info on a live device, with data this driver wrote (checksum
    // and header checked above).
    unsafe {
        let loaded = device
            .create_pipeline_cache(&create, None)
            .call("vkCreatePipelineCache")?;
        let merged = device.merge_pipeline_caches(cache, &[loaded]);
        device.destroy_pipeline_cache(loaded, None);
        merged.call("vkMergePipelineCaches")?;
    }
    Ok(stored.len())
}

/// What the file starts with: these bytes, the data's length and its FNV-1a hash.
const MAGIC: &[u8; 8] = b"HRTHVKPC";

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The file's bytes for `data`.
fn wrap(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&fnv1a(data).to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// The data in a file's bytes, where its length and checksum hold.
fn unwrap(file: &[u8]) -> Option<&[u8]> {
    let (head, data) = file.split_at_checked(24)?;
    let word = |i: usize| u64::from_le_bytes(head[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    (&head[..8] == MAGIC && word(1) == data.len() as u64 && word(2) == fnv1a(data)).then_some(data)
}

/// Whether `data` starts with the header this device's driver writes (Vulkan's
/// `VkPipelineCacheHeaderVersionOne`: its size, version 1, vendor, device, cache UUID).
fn written_by(data: &[u8], info: &DeviceInfo) -> bool {
    let u32_at = |i: usize| {
        data.get(i..i + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
    };
    u32_at(0).is_some_and(|size| size >= 32 && size as usize <= data.len())
        && u32_at(4) == Some(1)
        && u32_at(8) == Some(info.vendor_id)
        && u32_at(12) == Some(info.device_id)
        && data.get(16..32) == Some(&info.pipeline_cache_uuid[..])
}

/// Writes `cache`'s data to `file` when it grew past `known` bytes, atomically.
///
/// # Safety
/// `cache` must belong to `device`.
pub(crate) unsafe fn save(
    device: &ash::Device,
    cache: vk::PipelineCache,
    file: &Path,
    known: usize,
) -> std::io::Result<()> {
    // SAFETY: guaranteed by the caller.
    let data = unsafe { device.get_pipeline_cache_data(cache) }.map_err(std::io::Error::other)?;
    let data = wrap(&data);
    if data.len() <= known {
        return Ok(());
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(&data)?;
        f.sync_all()
    });
    match written.and_then(|()| std::fs::rename(&tmp, file)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_taken_only_whole() {
        let data = b"some cache data".to_vec();
        let file = wrap(&data);
        assert_eq!(unwrap(&file), Some(&data[..]));
        assert_eq!(unwrap(&file[..file.len() - 1]), None, "truncated");
        let mut flipped = file.clone();
        flipped[30] ^= 1;
        assert_eq!(unwrap(&flipped), None, "corrupted");
        assert_eq!(unwrap(b"short"), None);
    }
}

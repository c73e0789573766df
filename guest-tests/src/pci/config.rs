//! Parsing PCI config space: the capability list and the virtio vendor-specific capabilities
//! (virtio 1.x, 4.1.4) that locate the modern register blocks inside the BARs, and memory BAR
//! registers.

use thiserror::Error;
use wddm_gpu_abi::pci::{
    VIRTIO_PCI_CAP64_LEN, VIRTIO_PCI_CAP_COMMON_CFG, VIRTIO_PCI_CAP_DEVICE_CFG,
    VIRTIO_PCI_CAP_ID_VENDOR, VIRTIO_PCI_CAP_ISR_CFG, VIRTIO_PCI_CAP_LEN, VIRTIO_PCI_CAP_MAX_BAR,
    VIRTIO_PCI_CAP_NOTIFY_CFG, VIRTIO_PCI_CAP_SHARED_MEMORY_CFG, VIRTIO_PCI_NOTIFY_CAP_LEN,
};

/// Status register; bit 4 says a capability list exists.
const STATUS: usize = 0x06;
const STATUS_CAP_LIST: u16 = 1 << 4;
/// Pointer to the first capability.
const CAP_PTR: usize = 0x34;

/// Config space is unusable.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Shorter than the standard header.
    #[error("config space has {0} bytes, need at least 64")]
    Truncated(usize),
    /// The status register says there is no capability list.
    #[error("function has no capability list")]
    NoCapabilities,
    /// A capability pointer leaves config space or the list loops.
    #[error("capability list broken at {0:#x}")]
    BrokenList(usize),
    /// A virtio capability is too short for its type.
    #[error("virtio capability at {offset:#x} has length {len}, too short")]
    ShortCap { offset: usize, len: usize },
    /// A required virtio capability is absent.
    #[error("no virtio {0} capability")]
    Missing(&'static str),
}

/// One `struct virtio_pci_cap`: a register block in a BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtioCap {
    /// `cfg_type`.
    pub cfg_type: u8,
    /// BAR index holding the block.
    pub bar: u8,
    /// Offset of the block in the BAR.
    pub offset: u32,
    /// Length of the block.
    pub length: u32,
}

/// The virtio capabilities a driver needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtioCaps {
    /// Common configuration.
    pub common: VirtioCap,
    /// Notification area.
    pub notify: VirtioCap,
    /// Multiplier applied to `queue_notify_off`.
    pub notify_off_multiplier: u32,
    /// ISR status (unused by a polling driver, but part of a sane device).
    pub isr: VirtioCap,
    /// Device-specific configuration.
    pub device: VirtioCap,
}

/// Finds the virtio capabilities in `config` (at least the 64-byte header, normally 256 or 4096
/// bytes). The first capability of each type wins, as the spec asks.
pub fn virtio_caps(config: &[u8]) -> Result<VirtioCaps, ConfigError> {
    let mut found: [Option<(VirtioCap, u32)>; 5] = [None; 5];
    for_each_vendor_cap(config, |ptr| {
        if let Some((cap, multiplier)) = parse_virtio_cap(config, ptr)? {
            let slot = &mut found[usize::from(cap.cfg_type)];
            slot.get_or_insert((cap, multiplier));
        }
        Ok(())
    })?;
    let get = |cfg_type: u8, name| found[usize::from(cfg_type)].ok_or(ConfigError::Missing(name));
    let (notify, notify_off_multiplier) = get(VIRTIO_PCI_CAP_NOTIFY_CFG, "notify")?;
    Ok(VirtioCaps {
        common: get(VIRTIO_PCI_CAP_COMMON_CFG, "common")?.0,
        notify,
        notify_off_multiplier,
        isr: get(VIRTIO_PCI_CAP_ISR_CFG, "ISR")?.0,
        device: get(VIRTIO_PCI_CAP_DEVICE_CFG, "device")?.0,
    })
}

/// One `VIRTIO_PCI_CAP_SHARED_MEMORY_CFG` capability: a shared memory region in a BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedMemoryCap {
    /// The region's shmid.
    pub id: u8,
    /// BAR index holding the region.
    pub bar: u8,
    /// Offset of the region in the BAR (64 bits: `offset` | `offset_hi` << 32).
    pub offset: u64,
    /// Length of the region (64 bits: `length` | `length_hi` << 32).
    pub length: u64,
}

/// Every shared memory region capability in `config`, in list order. Capabilities naming a
/// reserved BAR number are ignored, as the spec asks; one too short for a `virtio_pci_cap64` is
/// an error.
pub fn shared_memory_caps(config: &[u8]) -> Result<Vec<SharedMemoryCap>, ConfigError> {
    let mut caps = Vec::new();
    for_each_vendor_cap(config, |ptr| {
        let short = |len| ConfigError::ShortCap { offset: ptr, len };
        let head = config.get(ptr..ptr + 4).ok_or(short(0))?;
        if head[3] != VIRTIO_PCI_CAP_SHARED_MEMORY_CFG {
            return Ok(());
        }
        let cap_len = usize::from(head[2]);
        let raw = config
            .get(ptr..ptr + VIRTIO_PCI_CAP64_LEN)
            .filter(|_| cap_len >= VIRTIO_PCI_CAP64_LEN)
            .ok_or(short(cap_len))?;
        let cap = SharedMemoryCap {
            id: raw[5],
            bar: raw[4],
            offset: u64::from(u32_at(raw, 8)) | u64::from(u32_at(raw, 16)) << 32,
            length: u64::from(u32_at(raw, 12)) | u64::from(u32_at(raw, 20)) << 32,
        };
        if cap.bar <= VIRTIO_PCI_CAP_MAX_BAR {
            caps.push(cap);
        }
        Ok(())
    })?;
    Ok(caps)
}

/// Walks the capability list and calls `visit` with the offset of every vendor-specific
/// capability, in list order; stops at the first error.
fn for_each_vendor_cap(
    config: &[u8],
    mut visit: impl FnMut(usize) -> Result<(), ConfigError>,
) -> Result<(), ConfigError> {
    if config.len() < 64 {
        return Err(ConfigError::Truncated(config.len()));
    }
    if u16::from_le_bytes([config[STATUS], config[STATUS + 1]]) & STATUS_CAP_LIST == 0 {
        return Err(ConfigError::NoCapabilities);
    }
    let mut ptr = usize::from(config[CAP_PTR] & 0xfc);
    // Standard capabilities live in the first 256 bytes; at most 48 fit there, so more
    // iterations than that means the list loops.
    for _ in 0..48 {
        if ptr == 0 {
            break;
        }
        let cap = config
            .get(ptr..ptr + 2)
            .filter(|_| (0x40..0x100).contains(&ptr))
            .ok_or(ConfigError::BrokenList(ptr))?;
        let (id, next) = (cap[0], usize::from(cap[1] & 0xfc));
        if id == VIRTIO_PCI_CAP_ID_VENDOR {
            visit(ptr)?;
        }
        ptr = next;
    }
    if ptr != 0 {
        return Err(ConfigError::BrokenList(ptr));
    }
    Ok(())
}

/// The little-endian u32 at `at` of `bytes` (which must hold it).
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// A virtio capability at `ptr` of a type this driver uses, with its notify multiplier (0 for
/// other types); `None` for other types and reserved BAR numbers, which the spec says to ignore.
fn parse_virtio_cap(config: &[u8], ptr: usize) -> Result<Option<(VirtioCap, u32)>, ConfigError> {
    let short = |len| ConfigError::ShortCap { offset: ptr, len };
    let raw = config.get(ptr..ptr + VIRTIO_PCI_CAP_LEN).ok_or(short(0))?;
    let cap_len = usize::from(raw[2]);
    if cap_len < VIRTIO_PCI_CAP_LEN {
        return Err(short(cap_len));
    }
    let cap = VirtioCap {
        cfg_type: raw[3],
        bar: raw[4],
        offset: u32_at(raw, 8),
        length: u32_at(raw, 12),
    };
    if !(VIRTIO_PCI_CAP_COMMON_CFG..=VIRTIO_PCI_CAP_DEVICE_CFG).contains(&cap.cfg_type)
        || cap.bar > VIRTIO_PCI_CAP_MAX_BAR
    {
        return Ok(None);
    }
    let mut multiplier = 0;
    if cap.cfg_type == VIRTIO_PCI_CAP_NOTIFY_CFG {
        let full = config
            .get(ptr..ptr + VIRTIO_PCI_NOTIFY_CAP_LEN)
            .filter(|_| cap_len >= VIRTIO_PCI_NOTIFY_CAP_LEN)
            .ok_or(short(cap_len))?;
        multiplier = u32_at(full, 16);
    }
    Ok(Some((cap, multiplier)))
}

/// Offset of the first BAR register.
const BAR0: u64 = 0x10;
/// Bit 0 of a BAR: I/O space rather than memory.
const BAR_IO: u32 = 1;
/// Bits 2:1 of a memory BAR: its type.
const BAR_MEM_TYPE_MASK: u32 = 0b110;
/// Type of a 64-bit memory BAR (the next register holds the high half).
const BAR_MEM_TYPE_64: u32 = 0b100;
/// Read-only flag bits of a memory BAR (I/O, type, prefetchable).
const BAR_MEM_FLAGS: u32 = 0xf;

/// Config-space offset of BAR register `bar` (0..=5).
pub fn bar_register(bar: u32) -> u64 {
    BAR0 + 4 * u64::from(bar)
}

/// A memory BAR as its config registers hold it: the low register (address bits and flags) and,
/// for a 64-bit BAR, the high register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemBar {
    low: u32,
    high: Option<u32>,
}

impl MemBar {
    /// The BAR whose low register reads `low` and whose next register reads `next`; `None` for
    /// an I/O BAR or a reserved memory type.
    pub fn from_registers(low: u32, next: u32) -> Option<Self> {
        if low & BAR_IO != 0 {
            return None;
        }
        match low & BAR_MEM_TYPE_MASK {
            0 => Some(Self { low, high: None }),
            BAR_MEM_TYPE_64 => Some(Self {
                low,
                high: Some(next),
            }),
            _ => None,
        }
    }

    /// True for a 64-bit BAR (two registers).
    pub fn is_64bit(&self) -> bool {
        self.high.is_some()
    }

    /// The address the registers hold.
    pub fn address(&self) -> u64 {
        u64::from(self.high.unwrap_or(0)) << 32 | u64::from(self.low & !BAR_MEM_FLAGS)
    }

    /// The same BAR at `address`, flags kept; `None` if the BAR cannot hold that address (not
    /// 16-byte aligned, or above 4 GiB for a 32-bit BAR).
    pub fn with_address(&self, address: u64) -> Option<Self> {
        if address & u64::from(BAR_MEM_FLAGS) != 0
            || (!self.is_64bit() && address > u32::MAX.into())
        {
            return None;
        }
        Some(Self {
            low: (address & 0xffff_ffff) as u32 | (self.low & BAR_MEM_FLAGS),
            high: self.high.map(|_| (address >> 32) as u32),
        })
    }

    /// The low register's value.
    pub fn low(&self) -> u32 {
        self.low
    }

    /// The high register's value (64-bit BARs only).
    pub fn high(&self) -> Option<u32> {
        self.high
    }
}

#[cfg(test)]
mod tests {
    use wddm_gpu_abi::pci::VIRTIO_PCI_CAP_PCI_CFG;

    use super::*;

    /// Config space shaped like QEMU's virtio-pci modern device: MSI-X first, then the virtio
    /// capabilities in BAR4, plus a PCI_CFG capability (type 5) the driver ignores.
    fn qemu_like() -> Vec<u8> {
        let mut c = vec![0u8; 256];
        c[0..4].copy_from_slice(&[0xf4, 0x1a, 0x50, 0x10]);
        c[STATUS] = STATUS_CAP_LIST.to_le_bytes()[0];
        c[CAP_PTR] = 0x98;
        // MSI-X at 0x98 -> 0x84.
        c[0x98] = 0x11;
        c[0x99] = 0x84;
        let mut put = |at: usize, next: u8, len: u8, ty: u8, bar: u8, off: u32, length: u32| {
            c[at] = VIRTIO_PCI_CAP_ID_VENDOR;
            c[at + 1] = next;
            c[at + 2] = len;
            c[at + 3] = ty;
            c[at + 4] = bar;
            c[at + 8..at + 12].copy_from_slice(&off.to_le_bytes());
            c[at + 12..at + 16].copy_from_slice(&length.to_le_bytes());
        };
        put(0x84, 0x70, 20, VIRTIO_PCI_CAP_PCI_CFG, 0, 0, 0);
        put(0x70, 0x60, 20, 2, 4, 0x3000, 0x1000);
        put(0x60, 0x50, 16, 4, 4, 0x2000, 0x1000);
        put(0x50, 0x40, 16, 3, 4, 0x1000, 0x1000);
        put(0x40, 0x00, 16, 1, 4, 0x0000, 0x1000);
        c[0x70 + 16..0x70 + 20].copy_from_slice(&4u32.to_le_bytes());
        c
    }

    #[test]
    fn finds_qemu_caps() {
        let caps = virtio_caps(&qemu_like()).unwrap();
        assert_eq!(
            caps.common,
            VirtioCap {
                cfg_type: 1,
                bar: 4,
                offset: 0,
                length: 0x1000
            }
        );
        assert_eq!(caps.isr.offset, 0x1000);
        assert_eq!(caps.device.offset, 0x2000);
        assert_eq!(caps.notify.offset, 0x3000);
        assert_eq!(caps.notify_off_multiplier, 4);
    }

    #[test]
    fn first_cap_of_a_type_wins_and_reserved_bars_are_ignored() {
        let mut c = qemu_like();
        // Turn the PCI_CFG cap into a common cap in reserved BAR 6: ignored.
        c[0x84 + 3] = 1;
        c[0x84 + 4] = 6;
        assert_eq!(virtio_caps(&c).unwrap().common.bar, 4);
        // In BAR 2 it comes first and wins.
        c[0x84 + 4] = 2;
        assert_eq!(virtio_caps(&c).unwrap().common.bar, 2);
    }

    #[test]
    fn rejects_broken_config() {
        assert_eq!(virtio_caps(&[0; 10]), Err(ConfigError::Truncated(10)));
        let mut c = qemu_like();
        c[STATUS] = 0;
        assert_eq!(virtio_caps(&c), Err(ConfigError::NoCapabilities));
        let mut looping = qemu_like();
        looping[0x41] = 0x84;
        assert!(matches!(
            virtio_caps(&looping),
            Err(ConfigError::BrokenList(_))
        ));
        let mut outside = qemu_like();
        outside[0x41] = 0x10;
        assert_eq!(virtio_caps(&outside), Err(ConfigError::BrokenList(0x10)));
        let mut short = qemu_like();
        short[0x70 + 2] = 16;
        assert!(matches!(
            virtio_caps(&short),
            Err(ConfigError::ShortCap { offset: 0x70, .. })
        ));
        let mut missing = qemu_like();
        missing[0x60 + 3] = 7;
        assert_eq!(virtio_caps(&missing), Err(ConfigError::Missing("device")));
        // A truncated 64-byte read cannot hold the list.
        assert!(matches!(
            virtio_caps(&qemu_like()[..0x60]),
            Err(ConfigError::BrokenList(_) | ConfigError::ShortCap { .. })
        ));
    }

    /// `qemu_like` plus QEMU 11.1's `vhost-user-test-device-pci` shared memory capability
    /// (`struct virtio_pci_cap64`) at 0xa0, first in the list.
    fn with_shm(bar: u8, id: u8, offset: u64, length: u64) -> Vec<u8> {
        let mut c = qemu_like();
        c[CAP_PTR] = 0xa0;
        let cap = &mut c[0xa0..0xa0 + VIRTIO_PCI_CAP64_LEN];
        cap[0] = VIRTIO_PCI_CAP_ID_VENDOR;
        cap[1] = 0x98;
        cap[2] = u8::try_from(VIRTIO_PCI_CAP64_LEN).unwrap();
        cap[3] = VIRTIO_PCI_CAP_SHARED_MEMORY_CFG;
        cap[4] = bar;
        cap[5] = id;
        cap[8..12].copy_from_slice(&((offset & 0xffff_ffff) as u32).to_le_bytes());
        cap[12..16].copy_from_slice(&((length & 0xffff_ffff) as u32).to_le_bytes());
        cap[16..20].copy_from_slice(&((offset >> 32) as u32).to_le_bytes());
        cap[20..24].copy_from_slice(&((length >> 32) as u32).to_le_bytes());
        c
    }

    #[test]
    fn finds_shared_memory_caps() {
        let c = with_shm(4, 0, 0x1_0000_0000, 0x2_1000_0000);
        assert_eq!(
            shared_memory_caps(&c).unwrap(),
            vec![SharedMemoryCap {
                id: 0,
                bar: 4,
                offset: 0x1_0000_0000,
                length: 0x2_1000_0000
            }]
        );
        // The other virtio capabilities are still found, and the cap64 is not one of them.
        assert_eq!(virtio_caps(&c).unwrap(), virtio_caps(&qemu_like()).unwrap());
        // None on a device without shared memory.
        assert!(shared_memory_caps(&qemu_like()).unwrap().is_empty());
        // A reserved BAR number: ignored.
        assert!(shared_memory_caps(&with_shm(6, 0, 0, 4096))
            .unwrap()
            .is_empty());
        // A capability too short for the 64-bit fields.
        let mut short = with_shm(4, 0, 0, 4096);
        short[0xa0 + 2] = 16;
        assert_eq!(
            shared_memory_caps(&short),
            Err(ConfigError::ShortCap {
                offset: 0xa0,
                len: 16
            })
        );
        assert_eq!(shared_memory_caps(&[0; 8]), Err(ConfigError::Truncated(8)));
    }

    #[test]
    fn decodes_and_moves_memory_bars() {
        // ivshmem's BAR2: 64-bit prefetchable at 0xe000_0000.
        let bar = MemBar::from_registers(0xe000_000c, 0).unwrap();
        assert!(bar.is_64bit());
        assert_eq!(bar.address(), 0xe000_0000);
        let moved = bar.with_address(0x38_0000_0000).unwrap();
        assert_eq!(moved.low(), 0x0000_000c);
        assert_eq!(moved.high(), Some(0x38));
        assert_eq!(moved.address(), 0x38_0000_0000);
        assert_eq!(bar.with_address(0xd000_0008), None);

        let small = MemBar::from_registers(0xfebf_1000, 0x1234).unwrap();
        assert!(!small.is_64bit());
        assert_eq!(small.address(), 0xfebf_1000);
        assert_eq!(small.with_address(1 << 32), None);
        assert_eq!(small.with_address(0xfebf_2000).unwrap().low(), 0xfebf_2000);

        assert_eq!(MemBar::from_registers(0xc001, 0), None, "I/O BAR");
        assert_eq!(
            MemBar::from_registers(0xe000_0002, 0),
            None,
            "reserved type"
        );
        assert_eq!(bar_register(2), 0x18);
    }
}

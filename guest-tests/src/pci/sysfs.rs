//! A PCI function through its sysfs directory (`/sys/bus/pci/devices/<bdf>`): identity, config
//! space, the command register, BAR registers and addresses, and BAR mappings. Needs root.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::mmio::{MmioError, MmioWindow};
use crate::pci::config::{bar_register, MemBar};

const DEVICES: &str = "/sys/bus/pci/devices";
/// Command register offset and the bits this driver sets.
const COMMAND: u64 = 0x04;
/// Memory space decode.
pub const COMMAND_MEMORY: u16 = 1 << 1;
/// Bus mastering (the device may DMA).
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
/// INTx disable: nobody handles the legacy interrupt, so it must never be raised.
pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;

/// Talking to a function through sysfs failed.
#[derive(Debug, Error)]
pub enum PciError {
    /// A sysfs file could not be read or written.
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// A sysfs file did not have the expected format.
    #[error("{path}: unexpected content {content:?}")]
    Format { path: PathBuf, content: String },
    /// No function has the wanted ids.
    #[error("no PCI function {vendor:04x}:{device:04x} in {DEVICES}")]
    NotFound { vendor: u16, device: u16 },
    /// The BAR has no address assigned.
    #[error("{bdf} BAR{bar} has no address assigned")]
    BarUnassigned { bdf: String, bar: u32 },
    /// The BAR is not a memory BAR (or has a reserved type).
    #[error("{bdf} BAR{bar} is not a 32- or 64-bit memory BAR (register {low:#010x})")]
    NotMemoryBar { bdf: String, bar: u32, low: u32 },
    /// A BAR could not be mapped.
    #[error(transparent)]
    Mmio(#[from] MmioError),
}

/// One PCI function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciFunction {
    bdf: String,
    dir: PathBuf,
}

impl PciFunction {
    /// The function at `bdf` (e.g. `0000:00:04.0`).
    pub fn new(bdf: &str) -> Self {
        Self {
            bdf: bdf.to_string(),
            dir: Path::new(DEVICES).join(bdf),
        }
    }

    /// All functions with these ids, in address order.
    pub fn find(vendor: u16, device: u16) -> Result<Vec<Self>, PciError> {
        let entries = fs::read_dir(DEVICES).map_err(|source| PciError::Io {
            path: DEVICES.into(),
            source,
        })?;
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let function = Self::new(&entry.file_name().to_string_lossy());
            // Unreadable entries are not the device we look for.
            if function.ids().ok() == Some((vendor, device)) {
                found.push(function);
            }
        }
        found.sort_by(|a, b| a.bdf.cmp(&b.bdf));
        if found.is_empty() {
            return Err(PciError::NotFound { vendor, device });
        }
        Ok(found)
    }

    /// `domain:bus:slot.function`.
    pub fn bdf(&self) -> &str {
        &self.bdf
    }

    /// Function `function` of the same slot.
    pub fn sibling(&self, function: u32) -> Self {
        let slot = self
            .bdf
            .rsplit_once('.')
            .map_or(self.bdf.as_str(), |(slot, _)| slot);
        Self::new(&format!("{slot}.{function}"))
    }

    /// True if sysfs has this function.
    pub fn exists(&self) -> bool {
        self.dir.exists()
    }

    /// (vendor, device) ids.
    pub fn ids(&self) -> Result<(u16, u16), PciError> {
        Ok((self.hex_u16_file("vendor")?, self.hex_u16_file("device")?))
    }

    /// The kernel driver bound to the function, if any.
    pub fn driver(&self) -> Option<String> {
        let link = fs::read_link(self.dir.join("driver")).ok()?;
        Some(link.file_name()?.to_string_lossy().into_owned())
    }

    /// The whole config space the kernel lets root read.
    pub fn config(&self) -> Result<Vec<u8>, PciError> {
        let path = self.dir.join("config");
        fs::read(&path).map_err(|source| PciError::Io { path, source })
    }

    /// Sets `set` and clears `clear` in the command register (other bits kept); returns the
    /// value read back.
    pub fn update_command(&self, set: u16, clear: u16) -> Result<u16, PciError> {
        let (path, file) = self.config_file()?;
        let io_err = |source| PciError::Io {
            path: path.clone(),
            source,
        };
        let mut raw = [0u8; 2];
        file.read_exact_at(&mut raw, COMMAND).map_err(io_err)?;
        let value = (u16::from_le_bytes(raw) | set) & !clear;
        file.write_all_at(&value.to_le_bytes(), COMMAND)
            .map_err(io_err)?;
        file.read_exact_at(&mut raw, COMMAND).map_err(io_err)?;
        Ok(u16::from_le_bytes(raw))
    }

    /// The command register.
    pub fn command(&self) -> Result<u16, PciError> {
        self.update_command(0, 0)
    }

    /// The config dword at `offset` (4-byte aligned).
    pub fn read_config32(&self, offset: u64) -> Result<u32, PciError> {
        let (path, file) = self.config_file()?;
        let mut raw = [0u8; 4];
        file.read_exact_at(&mut raw, offset)
            .map_err(|source| PciError::Io { path, source })?;
        Ok(u32::from_le_bytes(raw))
    }

    /// Writes the config dword at `offset` (4-byte aligned: one config write).
    pub fn write_config32(&self, offset: u64, value: u32) -> Result<(), PciError> {
        let (path, file) = self.config_file()?;
        file.write_all_at(&value.to_le_bytes(), offset)
            .map_err(|source| PciError::Io { path, source })
    }

    /// Memory BAR `bar` as config space holds it now. Unlike [`Self::bar_address`] this sees
    /// addresses written behind the kernel's back.
    pub fn mem_bar(&self, bar: u32) -> Result<MemBar, PciError> {
        let low = self.read_config32(bar_register(bar))?;
        let next = if bar < 5 {
            self.read_config32(bar_register(bar + 1))?
        } else {
            0
        };
        // A 64-bit BAR needs the next register, which BAR5 does not have.
        MemBar::from_registers(low, next)
            .filter(|b| bar < 5 || !b.is_64bit())
            .ok_or_else(|| PciError::NotMemoryBar {
                bdf: self.bdf.clone(),
                bar,
                low,
            })
    }

    /// Writes memory BAR `bar`'s registers, low then high. The kernel is not told: `resource`
    /// and the `resourceN` mappings keep the address it assigned. Only do this with memory
    /// decode off, or the device decodes the half-written address in between.
    pub fn write_mem_bar(&self, bar: u32, value: &MemBar) -> Result<(), PciError> {
        self.write_config32(bar_register(bar), value.low())?;
        if let Some(high) = value.high() {
            self.write_config32(bar_register(bar + 1), high)?;
        }
        Ok(())
    }

    /// The text of sysfs file `name`, with its path (for errors).
    fn text_file(&self, name: &str) -> Result<(PathBuf, String), PciError> {
        let path = self.dir.join(name);
        match fs::read_to_string(&path) {
            Ok(text) => Ok((path, text)),
            Err(source) => Err(PciError::Io { path, source }),
        }
    }

    fn config_file(&self) -> Result<(PathBuf, File), PciError> {
        let path = self.dir.join("config");
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => Ok((path, file)),
            Err(source) => Err(PciError::Io { path, source }),
        }
    }

    /// Guest-physical address of BAR `bar` as the kernel sees it (line `bar` of `resource`).
    pub fn bar_address(&self, bar: u32) -> Result<u64, PciError> {
        let (path, text) = self.text_file("resource")?;
        match parse_resource_line(&text, bar) {
            Some(0) => Err(PciError::BarUnassigned {
                bdf: self.bdf.clone(),
                bar,
            }),
            Some(address) => Ok(address),
            None => Err(PciError::Format {
                path,
                content: text,
            }),
        }
    }

    /// Size in bytes of BAR `bar` as the kernel sees it (line `bar` of `resource`).
    pub fn bar_size(&self, bar: u32) -> Result<u64, PciError> {
        let (path, text) = self.text_file("resource")?;
        match parse_resource_range(&text, bar) {
            Some((0, _)) => Err(PciError::BarUnassigned {
                bdf: self.bdf.clone(),
                bar,
            }),
            Some((start, end)) if end >= start => Ok(end - start + 1),
            _ => Err(PciError::Format {
                path,
                content: text,
            }),
        }
    }

    /// Maps BAR `bar` (its `resourceN` file).
    pub fn map_bar(&self, bar: u32) -> Result<MmioWindow, PciError> {
        Ok(MmioWindow::map_resource(
            &self.dir.join(format!("resource{bar}")),
        )?)
    }

    fn hex_u16_file(&self, name: &str) -> Result<u16, PciError> {
        let (path, text) = self.text_file(name)?;
        parse_hex(text.trim())
            .and_then(|value| u16::try_from(value).ok())
            .ok_or(PciError::Format {
                path,
                content: text,
            })
    }
}

/// `0x`-prefixed hex number.
fn parse_hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

/// Start address on line `index` of a sysfs `resource` file ("start end flags", hex).
pub fn parse_resource_line(text: &str, index: u32) -> Option<u64> {
    parse_hex(
        text.lines()
            .nth(index as usize)?
            .split_whitespace()
            .next()?,
    )
}

/// Start and end (inclusive) addresses on line `index` of a sysfs `resource` file.
pub fn parse_resource_range(text: &str, index: u32) -> Option<(u64, u64)> {
    let mut words = text.lines().nth(index as usize)?.split_whitespace();
    Some((parse_hex(words.next()?)?, parse_hex(words.next()?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resource_file() {
        let text = "0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    0x00000000febd1000 0x00000000febd1fff 0x0000000000040200\n\
                    0x0000004000000000 0x000000400fffffff 0x000000000014220c\n";
        assert_eq!(parse_resource_line(text, 0), Some(0));
        assert_eq!(parse_resource_line(text, 1), Some(0xfebd_1000));
        assert_eq!(parse_resource_line(text, 2), Some(0x40_0000_0000));
        assert_eq!(parse_resource_line(text, 3), None);
        assert_eq!(parse_resource_line("garbage", 0), None);
        assert_eq!(
            parse_resource_range(text, 2),
            Some((0x40_0000_0000, 0x40_0fff_ffff))
        );
        assert_eq!(parse_resource_range(text, 3), None);
        assert_eq!(parse_resource_range("0x1000", 0), None);
    }

    #[test]
    fn sibling_keeps_the_slot() {
        assert_eq!(
            PciFunction::new("0000:00:04.0").sibling(1).bdf(),
            "0000:00:04.1"
        );
    }
}

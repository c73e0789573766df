//! Scanouts that show VRAM (`WDDM_GPU_CMD_SET_SCANOUT_VRAM`): a KMD's primary surface. The
//! command is checked against the segment layout; the surface it names is shown from the next
//! vblank on (a flip), and each vblank pushes to the display what changed since the last one.
//!
//! Damage is found by comparison, not told: at every vblank the surface's rows are read from
//! VRAM and compared with the copy last pushed; the band from the first to the last changed row
//! goes to the display (the whole surface after a flip). The guest needs no flush command, and a
//! surface written by paging packets, the CPU through the BAR or anything else is shown alike.
//! Reading, comparing and pushing a 1024x768 surface with one changed row takes about 4.5 ms of
//! one core per vblank in a debug build (`comparing_a_1024x768_surface_costs_little` prints it;
//! docs/display.md has the figures).

use wddm_gpu_abi::ctrl::{WddmGpuCmdSetScanoutVram, WDDM_GPU_SCANOUT_VRAM_OFF};

use super::edid::MAX_EDID_DIMENSION;
use super::format::{PixelFormat, BYTES_PER_PIXEL};
use super::rect::Rect;
use super::sink::{DisplaySink, ScanoutState};
use crate::layout::{ResolveError, Resolved, SegmentLayout};
use crate::memory::vram::{Vram, VramRange};

/// Why a SET_SCANOUT_VRAM was refused (all answered `ERR_INVALID_PARAMETER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VramScanoutError {
    #[error("turning a scanout off takes zero address, format, width, height and pitch")]
    OffWithFields,
    #[error("format {0} is not a 2D format")]
    BadFormat(u32),
    #[error("a {width}x{height} surface is empty or larger than {MAX_EDID_DIMENSION} a side")]
    BadSize { width: u32, height: u32 },
    #[error("pitch {pitch} is below {width} pixels of 4 bytes")]
    PitchTooSmall { pitch: u32, width: u32 },
    #[error("surface: {0}")]
    Segment(ResolveError),
    #[error("segment {0} is an aperture: a scanout reads VRAM segments only")]
    Aperture(u32),
    #[error("surface at {address:#x} of segment {segment} is outside the VRAM")]
    OutsideVram { segment: u32, address: u64 },
}

/// A checked surface in VRAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VramSurface {
    /// Where the guest said it is (reported back in vblank events).
    pub segment_id: u32,
    pub address: u64,
    /// Its `pitch * height` bytes, resolved and checked.
    range: VramRange,
    format: PixelFormat,
    pub width: u32,
    pub height: u32,
    pitch: u32,
}

impl VramSurface {
    /// Checks a command: `None` turns the scanout off, `Some` is a surface inside one memory
    /// segment of `layout` and inside `vram`. (The scanout id is the caller's to check.)
    pub fn check(
        cmd: &WddmGpuCmdSetScanoutVram,
        layout: &SegmentLayout,
        vram: &Vram,
    ) -> Result<Option<Self>, VramScanoutError> {
        if cmd.segment_id == WDDM_GPU_SCANOUT_VRAM_OFF {
            let fields = [cmd.format, cmd.width, cmd.height, cmd.pitch];
            if cmd.address != 0 || fields.iter().any(|field| *field != 0) {
                return Err(VramScanoutError::OffWithFields);
            }
            return Ok(None);
        }
        let format =
            PixelFormat::from_wire(cmd.format).ok_or(VramScanoutError::BadFormat(cmd.format))?;
        let (width, height) = (cmd.width, cmd.height);
        let side_ok = |side: u32| (1..=MAX_EDID_DIMENSION).contains(&side);
        if !side_ok(width) || !side_ok(height) {
            return Err(VramScanoutError::BadSize { width, height });
        }
        // Cannot overflow: width is at most MAX_EDID_DIMENSION.
        if u64::from(cmd.pitch) < u64::from(width) * u64::from(BYTES_PER_PIXEL) {
            return Err(VramScanoutError::PitchTooSmall {
                pitch: cmd.pitch,
                width,
            });
        }
        let length = u64::from(cmd.pitch) * u64::from(height);
        let range = match layout.resolve(cmd.segment_id, cmd.address, length) {
            Ok(Resolved::Vram(range)) => range,
            Ok(Resolved::Aperture(_)) => return Err(VramScanoutError::Aperture(cmd.segment_id)),
            Err(error) => return Err(VramScanoutError::Segment(error)),
        };
        let outside = VramScanoutError::OutsideVram {
            segment: cmd.segment_id,
            address: cmd.address,
        };
        let range = vram.range(range.start(), range.len()).ok_or(outside)?;
        vram.range_slice(range).ok_or(outside)?;
        Ok(Some(Self {
            segment_id: cmd.segment_id,
            address: cmd.address,
            range,
            format,
            width,
            height,
            pitch: cmd.pitch,
        }))
    }

    fn row_bytes(self) -> usize {
        self.width as usize * BYTES_PER_PIXEL as usize
    }

    /// Reads the visible rows, packed, into `into` (resized to fit).
    fn read(self, vram: &Vram, into: &mut Vec<u8>) {
        let row_bytes = self.row_bytes();
        into.resize(row_bytes * self.height as usize, 0);
        // Checked when the surface was made; VRAM never shrinks.
        let Some(slice) = vram.range_slice(self.range) else {
            return;
        };
        for (y, row) in into.chunks_exact_mut(row_bytes).enumerate() {
            if let Ok(source) = slice.subslice(y * self.pitch as usize, row_bytes) {
                source.copy_to(row);
            }
        }
    }
}

/// A vblank of a scanout showing VRAM: what its event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vblank {
    pub scanout: u32,
    pub count: u64,
    /// Segment and address shown from this vblank on; segment 0 once turned off.
    pub segment_id: u32,
    pub address: u64,
    /// A flip took effect at this vblank (or the scanout turned off): what the scanout shows
    /// changed, so the driver must get this event even if it posted no WAIT_EVENT in time.
    pub changed: bool,
}

/// What changed on the display at a vblank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// Nothing to announce: the scanout shows a surface of the same size as before.
    SameSize,
    /// The scanout now shows a surface of a new size (or shows VRAM for the first time).
    NewSize { width: u32, height: u32 },
    /// The scanout was turned off.
    Off,
}

/// One scanout's VRAM state.
#[derive(Debug, Default)]
pub struct VramScanout {
    shown: Option<VramSurface>,
    /// A flip waiting for the next vblank: `Some(None)` turns the scanout off.
    pending: Option<Option<VramSurface>>,
    count: u64,
    /// The rows last pushed to the display (packed, the surface's own format).
    pushed: Vec<u8>,
    /// Scratch for the rows read this vblank.
    current: Vec<u8>,
    /// The next push must cover the whole surface (a flip, a new display).
    whole: bool,
}

impl VramScanout {
    /// Whether it shows VRAM or is about to.
    pub fn active(&self) -> bool {
        self.shown.is_some() || self.pending.is_some_and(|next| next.is_some())
    }

    /// Shows `surface` (or turns off) from the next vblank on.
    pub fn flip(&mut self, surface: Option<VramSurface>) {
        if self.shown.is_none() && surface.is_none() {
            self.pending = None;
            return;
        }
        self.pending = Some(surface);
    }

    /// Forgets everything (a 2D SET_SCANOUT took the scanout, or a reset).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// The next push covers the whole surface (a new display was attached).
    pub fn repaint(&mut self) {
        self.whole = true;
    }

    /// The surface shown now.
    pub fn shown(&self) -> Option<VramSurface> {
        self.shown
    }

    /// A vblank: the pending flip takes effect and what changed goes to `sink`. Returns what
    /// the scanout shows now and the event to report, or `None` when it shows no VRAM.
    pub fn vblank(
        &mut self,
        scanout: u32,
        vram: &Vram,
        sink: Option<&mut (dyn DisplaySink + '_)>,
    ) -> Option<(Shown, Vblank)> {
        let before = self.shown;
        let mut shown = Shown::SameSize;
        let changed = self.pending.is_some();
        if let Some(next) = self.pending.take() {
            self.shown = next;
            self.whole = true;
            shown = match next {
                None => Shown::Off,
                Some(surface)
                    if before.is_some_and(|old| {
                        (old.width, old.height) == (surface.width, surface.height)
                    }) =>
                {
                    Shown::SameSize
                }
                Some(surface) => Shown::NewSize {
                    width: surface.width,
                    height: surface.height,
                },
            };
        }
        if before.is_none() && self.shown.is_some() {
            self.count = 0;
        }
        let surface = self.shown.or(before)?;
        self.count += 1;
        let event = Vblank {
            scanout,
            count: self.count,
            segment_id: self
                .shown
                .map_or(WDDM_GPU_SCANOUT_VRAM_OFF, |s| s.segment_id),
            address: self.shown.map_or(0, |s| s.address),
            changed,
        };
        if self.shown.is_none() {
            self.pushed = Vec::new();
            self.current = Vec::new();
            if let Some(sink) = sink {
                sink.scanout(scanout, ScanoutState::Disabled);
            }
            return Some((shown, event));
        }
        surface.read(vram, &mut self.current);
        let damage = if self.whole || self.pushed.len() != self.current.len() {
            Some((0, surface.height))
        } else {
            changed_rows(&self.pushed, &self.current, surface.row_bytes())
        };
        std::mem::swap(&mut self.pushed, &mut self.current);
        if let (Some((top, bottom)), Some(sink)) = (damage, sink) {
            // The display learns a new size before the pixels that fill it.
            if let Shown::NewSize { width, height } = shown {
                sink.scanout(scanout, ScanoutState::Enabled { width, height });
            }
            push_rows(sink, scanout, surface, &self.pushed, top, bottom);
            self.whole = false;
        }
        Some((shown, event))
    }
}

/// The first and one past the last row where `old` and `new` differ.
fn changed_rows(old: &[u8], new: &[u8], row_bytes: usize) -> Option<(u32, u32)> {
    let differs = |(a, b): (&[u8], &[u8])| a != b;
    let rows = || old.chunks_exact(row_bytes).zip(new.chunks_exact(row_bytes));
    let top = rows().position(differs)?;
    let last = rows().rposition(differs)?;
    // Rows of a surface, at most its height: they fit.
    let row = |index: usize| u32::try_from(index).unwrap_or(u32::MAX);
    Some((row(top), row(last).saturating_add(1)))
}

/// Sends rows `top..bottom` of the packed `rows`, converted to the display's bytes, as one
/// update (QEMU reads any payload size).
fn push_rows(
    sink: &mut (dyn DisplaySink + '_),
    scanout: u32,
    surface: VramSurface,
    rows: &[u8],
    top: u32,
    bottom: u32,
) {
    let row_bytes = surface.row_bytes();
    let height = bottom - top;
    let start = top as usize * row_bytes;
    let bytes = row_bytes * height as usize;
    let pixels = surface
        .format
        .pack_for_display(rows[start..start + bytes].chunks_exact(row_bytes), bytes);
    let rect = Rect {
        x: 0,
        y: top,
        width: surface.width,
        height,
    };
    sink.update(scanout, rect, pixels.into());
}

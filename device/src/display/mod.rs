//! The standard virtio-gpu 2D device (virtio 1.2 device 16): scanouts with their EDID, 2D
//! resources with guest backing, transfers, flushes to the display and the cursor, and the VRAM
//! scanouts (SET_SCANOUT_VRAM, shown at each vblank). Every guest value is checked; a refused
//! command is answered with the spec's error and a rate-limited warning. The display itself is a
//! [`DisplaySink`] the transport provides.
//!
//! The VRAM scanouts live here rather than with the paging GPU (`crate::gpu`): a scanout shows a
//! 2D resource or a VRAM surface, never both, and every change of what it shows (SET_SCANOUT, a
//! flip taking effect, a reset, a new display announced) must see and change both under one
//! lock. The GPU's part is only the vblank events, which the device (`crate::model::gpu`)
//! hands from [`Display::vblank`] to the GPU's event queue once the display lock is released.

pub mod edid;
pub mod format;
pub mod pixel_buffer;
pub mod rect;
pub mod resource;
pub mod sink;
pub mod vblank;
pub mod vram_scanout;

use std::collections::HashMap;
use std::sync::Arc;

use vm_memory::GuestMemoryBackend;
use wddm_gpu_abi::ctrl::{
    WddmGpuCmdSetScanoutVram, WddmGpuCtrlHdr, WddmGpuDisplayOne, WddmGpuRespDisplayInfo,
    VIRTIO_GPU_MAX_SCANOUTS, VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER, VIRTIO_GPU_RESP_ERR_UNSPEC,
    VIRTIO_GPU_RESP_OK_DISPLAY_INFO, VIRTIO_GPU_RESP_OK_NODATA,
};
use wddm_gpu_abi::display::{
    WddmGpuRect, WddmGpuRespEdid, VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID,
    VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID, VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY,
    VIRTIO_GPU_RESP_OK_EDID,
};
use wddm_gpu_abi::request::{CursorCommand, DisplayCommand};
use wddm_gpu_abi::size_of_u32;
use zerocopy::IntoBytes;

use self::edid::{edid, EDID_SIZE};
use self::format::{PixelFormat, BYTES_PER_PIXEL};
use self::pixel_buffer::PixelBuffer;
use self::rect::{Rect, RectError};
use self::resource::{Backing, BackingError, Resource, TransferError};
use self::sink::{
    CursorImage, DisplayPixels, DisplaySink, ScanoutState, CURSOR_BYTES, CURSOR_SIZE,
};
use self::vram_scanout::{Shown, Vblank, VramScanout, VramScanoutError, VramSurface};
use crate::layout::SegmentLayout;
use crate::memory::guest_ram::GuestRam;
use crate::memory::vram::Vram;

/// Transfers of at least this many bytes into a shown resource are streamed to the display.
const STREAM_MIN_BYTES: u64 = 1 << 20;
/// Bytes of one streamed band (whole rows of the transfer, at least one).
const STREAM_BAND_BYTES: u64 = 512 << 10;

/// [`VIRTIO_GPU_MAX_SCANOUTS`] as the `u32` that scanouts are counted and named in.
const MAX_SCANOUTS: u32 = 16;
const _: () = assert!(MAX_SCANOUTS as usize == VIRTIO_GPU_MAX_SCANOUTS);

/// Default vblank rate.
pub const DEFAULT_VBLANK_HZ: u32 = 60;
/// Highest vblank rate.
pub const MAX_VBLANK_HZ: u32 = 240;

/// The displays and the host memory of 2D resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DisplayConfig {
    /// Scanouts, 1 to 16.
    pub scanouts: u32,
    /// Preferred width and height of every scanout (its EDID and display info).
    pub width: u32,
    pub height: u32,
    /// Host bytes all 2D resources may take together.
    pub max_memory: u64,
    /// Vblanks a second of scanouts showing VRAM; 0 = none: a flip shows at once, once.
    pub vblank_hz: u32,
}

impl Default for DisplayConfig {
    fn default() -> Self {
        Self {
            scanouts: 1,
            width: 1024,
            height: 768,
            max_memory: 256 << 20,
            vblank_hz: DEFAULT_VBLANK_HZ,
        }
    }
}

/// Why a command was refused; each maps to a spec error response.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DisplayError {
    #[error("scanout {0} does not exist")]
    NoScanout(u32),
    #[error("resource {0} does not exist")]
    NoResource(u32),
    #[error("resource id {0} is 0 or already in use")]
    ResourceIdTaken(u32),
    #[error("format {0} is not a 2D format")]
    BadFormat(u32),
    #[error(
        "a {width}x{height} resource needs {needed:#x} bytes; {used:#x} of {limit:#x} are in use"
    )]
    OutOfMemory {
        width: u32,
        height: u32,
        needed: u64,
        used: u64,
        limit: u64,
    },
    #[error("resource {0}: {1}")]
    Rect(u32, RectError),
    #[error("resource {0} already has a backing")]
    BackingAttached(u32),
    #[error("resource {0} has no backing to detach")]
    NoBacking(u32),
    #[error("resource {0}: {1}")]
    Backing(u32, BackingError),
    #[error("resource {0}: transfer refused: {1}")]
    Transfer(u32, TransferError),
    #[error("SET_SCANOUT_VRAM on scanout {0}: {1}")]
    VramScanout(u32, VramScanoutError),
    #[error("unsupported cursor command {0:#x}")]
    UnknownCursorCommand(u32),
}

impl DisplayError {
    /// The response type answering it.
    pub fn response_type(&self) -> u32 {
        match self {
            Self::NoScanout(_) => VIRTIO_GPU_RESP_ERR_INVALID_SCANOUT_ID,
            Self::NoResource(_) | Self::ResourceIdTaken(_) => {
                VIRTIO_GPU_RESP_ERR_INVALID_RESOURCE_ID
            }
            Self::OutOfMemory { .. } => VIRTIO_GPU_RESP_ERR_OUT_OF_MEMORY,
            Self::BadFormat(_) | Self::Rect(..) | Self::Transfer(..) | Self::VramScanout(..) => {
                VIRTIO_GPU_RESP_ERR_INVALID_PARAMETER
            }
            Self::BackingAttached(_)
            | Self::NoBacking(_)
            | Self::Backing(..)
            | Self::UnknownCursorCommand(_) => VIRTIO_GPU_RESP_ERR_UNSPEC,
        }
    }
}

/// Resource `resource_id` and `rect` checked to lie inside it.
fn resource_and_rect(
    resources: &HashMap<u32, Resource>,
    resource_id: u32,
    rect: WddmGpuRect,
) -> Result<(&Resource, Rect), DisplayError> {
    let resource = resources
        .get(&resource_id)
        .ok_or(DisplayError::NoResource(resource_id))?;
    let rect = Rect::inside(rect, resource.width, resource.height)
        .map_err(|error| DisplayError::Rect(resource_id, error))?;
    Ok((resource, rect))
}

/// What one scanout shows: part of a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Binding {
    resource_id: u32,
    rect: Rect,
}

/// The 2D device state.
pub struct Display {
    config: DisplayConfig,
    resources: HashMap<u32, Resource>,
    /// Host bytes the resources take.
    used: u64,
    scanouts: Vec<Option<Binding>>,
    /// What each scanout shows of VRAM (a scanout shows a 2D resource or VRAM, never both).
    vram_scanouts: Vec<VramScanout>,
    /// Scanouts a reset turned off since the display was attached: QEMU closes the socket
    /// before a guest reset reaches the backend, so that "disabled" may never have arrived.
    reset_off: Vec<bool>,
    sink: Option<Box<dyn DisplaySink>>,
}

/// Tells the display the size of a scanout showing a 2D resource.
fn announce(sink: &mut dyn DisplaySink, scanout: u32, binding: Binding) {
    let (width, height) = (binding.rect.width, binding.rect.height);
    sink.scanout(scanout, ScanoutState::Enabled { width, height });
}

fn nodata() -> Vec<u8> {
    WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_NODATA)
        .as_bytes()
        .to_vec()
}

impl Display {
    /// No resources, every scanout disabled, no display attached.
    pub fn new(config: DisplayConfig) -> Self {
        let count = config.scanouts.clamp(1, MAX_SCANOUTS);
        Self {
            config: DisplayConfig {
                scanouts: count,
                ..config
            },
            resources: HashMap::new(),
            used: 0,
            scanouts: vec![None; count as usize],
            vram_scanouts: (0..count).map(|_| VramScanout::default()).collect(),
            reset_off: vec![false; count as usize],
            sink: None,
        }
    }

    /// The scanout count.
    pub fn scanout_count(&self) -> u32 {
        self.config.scanouts
    }

    /// A display command of a kick is about to run: the display may hold what the kick shows
    /// (see [`DisplaySink::hold`]). Only the kick's hold guard (`crate::model::kick`) calls it.
    pub fn hold(&mut self) {
        if let Some(sink) = &mut self.sink {
            sink.hold();
        }
    }

    /// The kick's answers are out: the display passes on what it held. Only the kick's hold
    /// guard calls it.
    pub fn release(&mut self) {
        if let Some(sink) = &mut self.sink {
            sink.release();
        }
    }

    /// Host bytes the resources take now.
    pub fn used_memory(&self) -> u64 {
        self.used
    }

    /// The display to drive from now on (QEMU's new socket), or none. Scanouts that are set
    /// are announced to it, and those a reset turned off as disabled: without that, QEMU's
    /// console went on showing the last frame from before the reset.
    pub fn attach_sink(&mut self, sink: Option<Box<dyn DisplaySink>>) {
        self.sink = sink;
        // A new display has had nothing streamed: the next flushes send it all.
        for resource in self.resources.values_mut() {
            resource.streamed = None;
        }
        let Some(sink) = &mut self.sink else {
            return;
        };
        for (scanout, id) in (0..self.scanouts.len()).zip(0u32..) {
            let vram_scanout = &mut self.vram_scanouts[scanout];
            if let Some(surface) = vram_scanout.shown() {
                let (width, height) = (surface.width, surface.height);
                sink.scanout(id, ScanoutState::Enabled { width, height });
                vram_scanout.repaint();
            } else if let Some(binding) = self.scanouts[scanout] {
                announce(sink.as_mut(), id, binding);
            } else if self.reset_off[scanout] {
                sink.scanout(id, ScanoutState::Disabled);
            }
            self.reset_off[scanout] = false;
        }
    }

    /// A guest-visible reset: every resource goes and every scanout is disabled.
    pub fn reset(&mut self) {
        for (scanout, id) in (0..self.scanouts.len()).zip(0u32..) {
            let showed_vram = self.vram_scanouts[scanout].shown().is_some();
            self.vram_scanouts[scanout].clear();
            if self.scanouts[scanout].take().is_some() || showed_vram {
                if let Some(sink) = &mut self.sink {
                    sink.scanout(id, ScanoutState::Disabled);
                }
                self.reset_off[scanout] = true;
            }
        }
        self.resources.clear();
        self.used = 0;
    }

    /// GET_DISPLAY_INFO: every configured scanout enabled at the preferred size.
    pub fn display_info(&self) -> Vec<u8> {
        let mut info = WddmGpuRespDisplayInfo {
            hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_DISPLAY_INFO),
            ..Default::default()
        };
        for mode in info.pmodes.iter_mut().take(self.scanouts.len()) {
            *mode = WddmGpuDisplayOne {
                rect: [0, 0, self.config.width, self.config.height],
                enabled: 1,
                flags: 0,
            };
        }
        info.as_bytes().to_vec()
    }

    /// Answers a 2D command: the response bytes, or why it was refused.
    pub fn handle<M: GuestMemoryBackend>(
        &mut self,
        command: DisplayCommand,
        ram: &GuestRam<'_, M>,
    ) -> Result<Vec<u8>, DisplayError> {
        match command {
            DisplayCommand::GetEdid { scanout } => self.get_edid(scanout),
            DisplayCommand::ResourceCreate2d {
                resource_id,
                format,
                width,
                height,
            } => self.create(resource_id, format, width, height),
            DisplayCommand::ResourceUnref { resource_id } => self.unref(resource_id),
            DisplayCommand::SetScanout {
                scanout_id,
                resource_id,
                rect,
            } => self.set_scanout(scanout_id, resource_id, rect),
            DisplayCommand::ResourceFlush { resource_id, rect } => self.flush(resource_id, rect),
            DisplayCommand::TransferToHost2d {
                resource_id,
                rect,
                offset,
            } => self.transfer(resource_id, rect, offset, ram),
            DisplayCommand::AttachBacking {
                resource_id,
                entries,
            } => {
                let resource = self.resource_mut(resource_id)?;
                if resource.backing.is_some() {
                    return Err(DisplayError::BackingAttached(resource_id));
                }
                let backing = Backing::attach(entries, ram)
                    .map_err(|error| DisplayError::Backing(resource_id, error))?;
                resource.backing = Some(backing);
                Ok(nodata())
            }
            DisplayCommand::DetachBacking { resource_id } => {
                let resource = self.resource_mut(resource_id)?;
                resource
                    .backing
                    .take()
                    .ok_or(DisplayError::NoBacking(resource_id))?;
                Ok(nodata())
            }
        }
    }

    /// TRANSFER_TO_HOST_2D. A large transfer into a resource a scanout shows goes to the display
    /// band by band as it is copied, so the display takes one band while the next is copied
    /// instead of the whole frame after it: the flush that follows finds it sent. Showing the
    /// pixels before that flush is what QEMU's own virtio-gpu does, whose scanout surface is the
    /// resource's host memory.
    fn transfer<M: GuestMemoryBackend>(
        &mut self,
        resource_id: u32,
        rect: WddmGpuRect,
        offset: u64,
        ram: &GuestRam<'_, M>,
    ) -> Result<Vec<u8>, DisplayError> {
        let resource = self
            .resources
            .get_mut(&resource_id)
            .ok_or(DisplayError::NoResource(resource_id))?;
        let rect = Rect::inside(rect, resource.width, resource.height)
            .map_err(|error| DisplayError::Rect(resource_id, error))?;
        let failed = |error| DisplayError::Transfer(resource_id, error);
        // Until it is all copied (and sent), a flush must send what it covers.
        let streamed_before = resource.streamed.take();
        let bytes = u64::from(rect.width) * u64::from(rect.height) * u64::from(BYTES_PER_PIXEL);
        let shown = |binding: &Binding| {
            binding.resource_id == resource_id && binding.rect.intersect(rect).is_some()
        };
        let Some(sink) = self
            .sink
            .as_deref_mut()
            .filter(|_| bytes >= STREAM_MIN_BYTES && self.scanouts.iter().flatten().any(shown))
        else {
            resource
                .transfer_to_host(rect, offset, ram)
                .map_err(failed)?;
            return Ok(nodata());
        };
        // All of it is checked before the first band is shown.
        resource.check_transfer(rect, offset).map_err(failed)?;
        let band_rows = u32::try_from(STREAM_BAND_BYTES / resource.stride()).unwrap_or(1);
        let mut all_taken = true;
        for band in rect.bands(band_rows) {
            // Inside the checked rectangle: no overflow, and within the backing.
            let band_offset = offset + u64::from(band.y - rect.y) * resource.stride();
            resource
                .transfer_to_host(band, band_offset, ram)
                .map_err(failed)?;
            for (scanout, binding) in (0u32..).zip(&self.scanouts) {
                let Some(binding) = binding.filter(|b| b.resource_id == resource_id) else {
                    continue;
                };
                let Some(shown) = band.intersect(binding.rect) else {
                    continue;
                };
                let row_bytes = shown.width as usize * BYTES_PER_PIXEL as usize;
                let mut pixels = sink.band_buffer(row_bytes * shown.height as usize);
                for (row, out) in resource.rows(shown).zip(pixels.chunks_exact_mut(row_bytes)) {
                    resource.format.to_display_into(row, out);
                }
                all_taken &= sink.stream(scanout, shown.relative_to(binding.rect), pixels);
            }
        }
        // What was sent before and not overwritten since is still shown; keeping one rectangle,
        // the larger when one holds the other, may make a flush send again, never send less.
        resource.streamed = all_taken.then(|| match streamed_before {
            Some(before) if before.contains(rect) => before,
            _ => rect,
        });
        Ok(nodata())
    }

    fn resource_mut(&mut self, resource_id: u32) -> Result<&mut Resource, DisplayError> {
        self.resources
            .get_mut(&resource_id)
            .ok_or(DisplayError::NoResource(resource_id))
    }

    fn get_edid(&self, scanout: u32) -> Result<Vec<u8>, DisplayError> {
        if scanout >= self.config.scanouts {
            return Err(DisplayError::NoScanout(scanout));
        }
        let mut response = WddmGpuRespEdid {
            hdr: WddmGpuCtrlHdr::with_type(VIRTIO_GPU_RESP_OK_EDID),
            size: size_of_u32::<[u8; EDID_SIZE]>(),
            padding: 0,
            edid: [0; 1024],
        };
        response.edid[..EDID_SIZE].copy_from_slice(&edid(
            self.config.width,
            self.config.height,
            scanout + 1,
        ));
        Ok(response.as_bytes().to_vec())
    }

    fn create(
        &mut self,
        resource_id: u32,
        format: u32,
        width: u32,
        height: u32,
    ) -> Result<Vec<u8>, DisplayError> {
        if resource_id == 0 || self.resources.contains_key(&resource_id) {
            return Err(DisplayError::ResourceIdTaken(resource_id));
        }
        let pixel_format = PixelFormat::from_wire(format).ok_or(DisplayError::BadFormat(format))?;
        if width == 0 || height == 0 {
            return Err(DisplayError::Rect(
                resource_id,
                RectError::Empty(WddmGpuRect {
                    x: 0,
                    y: 0,
                    width,
                    height,
                }),
            ));
        }
        let out_of_memory = |needed| DisplayError::OutOfMemory {
            width,
            height,
            needed,
            used: self.used,
            limit: self.config.max_memory,
        };
        let needed = Resource::host_size(width, height).unwrap_or(u64::MAX);
        let total = self
            .used
            .checked_add(needed)
            .filter(|total| *total <= self.config.max_memory);
        let (Some(total), Ok(len)) = (total, usize::try_from(needed)) else {
            return Err(out_of_memory(needed));
        };
        let Some(pixels) = PixelBuffer::try_zeroed(len) else {
            return Err(out_of_memory(needed));
        };
        self.resources.insert(
            resource_id,
            Resource {
                format: pixel_format,
                width,
                height,
                pixels: Arc::new(pixels),
                backing: None,
                streamed: None,
            },
        );
        self.used = total;
        Ok(nodata())
    }

    fn unref(&mut self, resource_id: u32) -> Result<Vec<u8>, DisplayError> {
        let resource = self
            .resources
            .remove(&resource_id)
            .ok_or(DisplayError::NoResource(resource_id))?;
        self.used -= Resource::host_size(resource.width, resource.height).unwrap_or(0);
        // A scanout showing it is disabled, as QEMU does.
        for (scanout, id) in (0..self.scanouts.len()).zip(0u32..) {
            if self.scanouts[scanout].is_some_and(|binding| binding.resource_id == resource_id) {
                self.scanouts[scanout] = None;
                if let Some(sink) = &mut self.sink {
                    sink.scanout(id, ScanoutState::Disabled);
                }
            }
        }
        Ok(nodata())
    }

    fn set_scanout(
        &mut self,
        scanout_id: u32,
        resource_id: u32,
        rect: WddmGpuRect,
    ) -> Result<Vec<u8>, DisplayError> {
        if scanout_id >= self.config.scanouts {
            return Err(DisplayError::NoScanout(scanout_id));
        }
        let scanout = scanout_id as usize;
        // A 2D resource replaces the VRAM surface at once (Linux's driver does not wait).
        let showed_vram = self.vram_scanouts[scanout].shown().is_some();
        self.vram_scanouts[scanout].clear();
        if resource_id == 0 {
            if showed_vram {
                if let Some(sink) = &mut self.sink {
                    sink.scanout(scanout_id, ScanoutState::Disabled);
                }
            }
            if self.scanouts[scanout].take().is_some() {
                if let Some(sink) = &mut self.sink {
                    sink.scanout(scanout_id, ScanoutState::Disabled);
                }
            }
            return Ok(nodata());
        }
        let (_, rect) = resource_and_rect(&self.resources, resource_id, rect)?;
        // The new scanout has not had what was streamed to the others.
        self.resource_mut(resource_id)?.streamed = None;
        let binding = Binding { resource_id, rect };
        self.scanouts[scanout] = Some(binding);
        if let Some(sink) = &mut self.sink {
            announce(sink.as_mut(), scanout_id, binding);
        }
        Ok(nodata())
    }

    /// WDDM_GPU_CMD_SET_SCANOUT_VRAM: `cmd`'s surface is shown from the next vblank on (at once
    /// when vblanks are off).
    pub fn set_scanout_vram(
        &mut self,
        cmd: &WddmGpuCmdSetScanoutVram,
        layout: &SegmentLayout,
        vram: &Vram,
    ) -> Result<Vec<u8>, DisplayError> {
        let scanout_id = cmd.scanout_id;
        self.check_scanout(scanout_id)?;
        let surface = VramSurface::check(cmd, layout, vram)
            .map_err(|error| DisplayError::VramScanout(scanout_id, error))?;
        self.vram_scanouts[scanout_id as usize].flip(surface);
        if self.config.vblank_hz == 0 {
            self.vblank_of(scanout_id, vram);
        }
        Ok(nodata())
    }

    /// Whether any scanout shows VRAM or is about to.
    pub fn shows_vram(&self) -> bool {
        self.vram_scanouts.iter().any(VramScanout::active)
    }

    /// A vblank of every scanout: flips take effect, changed VRAM goes to the display. Returns
    /// the events of the scanouts showing VRAM.
    pub fn vblank(&mut self, vram: &Vram) -> Vec<Vblank> {
        (0u32..)
            .take(self.vram_scanouts.len())
            .filter_map(|scanout| self.vblank_of(scanout, vram))
            .collect()
    }

    fn vblank_of(&mut self, id: u32, vram: &Vram) -> Option<Vblank> {
        let scanout = id as usize;
        let sink = self.sink.as_deref_mut();
        let (shown, event) = self.vram_scanouts[scanout].vblank(id, vram, sink)?;
        if shown != Shown::Off {
            // The VRAM surface took the scanout from a 2D resource, if one was shown.
            self.scanouts[scanout] = None;
        }
        Some(event)
    }

    fn flush(&mut self, resource_id: u32, rect: WddmGpuRect) -> Result<Vec<u8>, DisplayError> {
        let (_, rect) = resource_and_rect(&self.resources, resource_id, rect)?;
        let streamed = self.resource_mut(resource_id)?.streamed.take();
        let resource = &self.resources[&resource_id];
        let Some(sink) = &mut self.sink else {
            return Ok(nodata());
        };
        for (scanout, binding) in (0u32..).zip(&self.scanouts) {
            let Some(binding) = binding.filter(|b| b.resource_id == resource_id) else {
                continue;
            };
            let Some(shown) = rect.intersect(binding.rect) else {
                continue;
            };
            if streamed.is_some_and(|streamed| streamed.contains(shown)) {
                // The transfers sent these pixels as they copied them.
                continue;
            }
            // One UPDATE for the flushed rectangle (the largest is a 4095x4095 scanout, 64 MiB;
            // QEMU reads any payload size, and any number of UPDATEs).
            let pixels = if resource.format.is_display_order() && shown == resource.whole() {
                // A whole frame already in the display's order: shared, not copied.
                DisplayPixels::Frame(Arc::clone(&resource.pixels))
            } else {
                let bytes = shown.width as usize * shown.height as usize * BYTES_PER_PIXEL as usize;
                DisplayPixels::Packed(
                    resource
                        .format
                        .pack_for_display(resource.rows(shown), bytes),
                )
            };
            sink.update(scanout, shown.relative_to(binding.rect), pixels);
        }
        Ok(nodata())
    }

    /// A cursor-queue command (no response: the cursor queue has none). Refused commands are
    /// described in the error.
    pub fn cursor(&mut self, command: CursorCommand) -> Result<(), DisplayError> {
        match command {
            CursorCommand::Unknown(type_) => return Err(DisplayError::UnknownCursorCommand(type_)),
            CursorCommand::Move { scanout_id, x, y } => {
                self.check_scanout(scanout_id)?;
                if let Some(sink) = &mut self.sink {
                    sink.cursor(scanout_id, x, y, None);
                }
            }
            CursorCommand::Update {
                scanout_id,
                resource_id: 0,
                ..
            } => {
                self.check_scanout(scanout_id)?;
                if let Some(sink) = &mut self.sink {
                    sink.hide_cursor(scanout_id);
                }
            }
            CursorCommand::Update {
                scanout_id,
                x,
                y,
                resource_id,
                hot_x,
                hot_y,
            } => {
                self.check_scanout(scanout_id)?;
                let resource = self
                    .resources
                    .get(&resource_id)
                    .ok_or(DisplayError::NoResource(resource_id))?;
                // The image is the resource's top-left 64x64 pixels (Linux makes them 64x64).
                let size = Rect::inside(
                    WddmGpuRect {
                        x: 0,
                        y: 0,
                        width: resource.width.min(CURSOR_SIZE),
                        height: resource.height.min(CURSOR_SIZE),
                    },
                    resource.width,
                    resource.height,
                )
                .map_err(|error| DisplayError::Rect(resource_id, error))?;
                let mut pixels = Box::new([0u8; CURSOR_BYTES]);
                let row_bytes = (CURSOR_SIZE * BYTES_PER_PIXEL) as usize;
                for (y, row) in resource.rows(size).enumerate() {
                    let at = y * row_bytes;
                    resource
                        .format
                        .to_display_into(row, &mut pixels[at..at + row.len()]);
                }
                let image = CursorImage {
                    hot_x,
                    hot_y,
                    pixels,
                };
                if let Some(sink) = &mut self.sink {
                    sink.cursor(scanout_id, x, y, Some(&image));
                }
            }
        }
        Ok(())
    }

    fn check_scanout(&self, scanout_id: u32) -> Result<(), DisplayError> {
        if scanout_id >= self.config.scanouts {
            return Err(DisplayError::NoScanout(scanout_id));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

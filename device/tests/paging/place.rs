//! Where TRANSFER endpoints and DMA buffers live, and how a test reaches those bytes directly.

use wddm_gpu_abi::build::Endpoint;
use wddm_gpu_frontend_kit::{
    harness::{Harness, PAGE, PAGE_USIZE},
    requests::{frames, segment},
};

use crate::common::{assert_bytes, map_pages, APERTURE_SEGMENT, GUARD, SENTINEL, VRAM_SEGMENT};

/// Where an endpoint's bytes are, and how the test reaches them directly.
#[derive(Clone, Debug)]
pub enum Place {
    /// VRAM segment address (= VRAM offset: `BaseAddress` 0).
    Vram(u64),
    /// Aperture segment address; `frames[i]` backs aperture page `address / PAGE + i`.
    Aperture { address: u64, frames: Vec<u64> },
    /// Guest pages: the list at `list` holds `frames`; data starts `byte_offset` into them.
    Frames {
        list: u64,
        frames: Vec<u64>,
        byte_offset: u32,
    },
}

impl Place {
    pub fn name(&self) -> &'static str {
        match self {
            Place::Vram(_) => "VRAM",
            Place::Aperture { .. } => "aperture",
            Place::Frames { .. } => "frame list",
        }
    }

    pub fn endpoint(&self) -> Endpoint {
        match self {
            Place::Vram(address) => segment(VRAM_SEGMENT, *address),
            Place::Aperture { address, .. } => segment(APERTURE_SEGMENT, *address),
            Place::Frames {
                list,
                frames: list_frames,
                byte_offset,
            } => frames(
                *list,
                u32::try_from(list_frames.len()).unwrap(),
                *byte_offset,
            ),
        }
    }

    /// The backing frames and where the data starts in them (guest-page places).
    pub fn backing(&self) -> Option<(&[u64], u64)> {
        match self {
            Place::Vram(_) => None,
            Place::Aperture { address, frames } => Some((frames, address % PAGE)),
            Place::Frames {
                frames,
                byte_offset,
                ..
            } => Some((frames, u64::from(*byte_offset))),
        }
    }

    /// Writes the list (frame lists) or the mapping (apertures) the place needs.
    pub fn prepare(&self, h: &mut Harness, list: u64, fence: u32) {
        match self {
            Place::Vram(_) => {}
            Place::Aperture { address, frames } => {
                map_pages(h, address / PAGE, frames, list, fence)
            }
            Place::Frames {
                list: at, frames, ..
            } => h.write_frame_list(*at, frames),
        }
    }

    /// Guest-physical runs (address, length) behind logical bytes `[0, len)`.
    pub fn runs(&self, len: u64) -> Vec<(u64, u64)> {
        let (frames, start) = self.backing().unwrap();
        let mut runs = Vec::new();
        let mut position = 0;
        while position < len {
            let at = start + position;
            let in_page = at % PAGE;
            let step = (PAGE - in_page).min(len - position);
            runs.push((frames[(at / PAGE) as usize] * PAGE + in_page, step));
            position += step;
        }
        runs
    }

    /// Puts `data` where the place's bytes are, bypassing the device.
    pub fn write(&self, h: &Harness, data: &[u8]) {
        if let Place::Vram(address) = self {
            return h.write_vram(*address, data);
        }
        let mut done = 0;
        for (gpa, step) in self.runs(data.len() as u64) {
            h.write_ram(gpa, &data[done..done + usize::try_from(step).unwrap()]);
            done += usize::try_from(step).unwrap();
        }
    }

    /// Reads the place's first `len` bytes, bypassing the device.
    pub fn read(&self, h: &Harness, len: usize) -> Vec<u8> {
        if let Place::Vram(address) = self {
            return h.read_vram(*address, len);
        }
        let mut bytes = Vec::with_capacity(len);
        for (gpa, step) in self.runs(len as u64) {
            bytes.extend(h.read_ram(gpa, usize::try_from(step).unwrap()));
        }
        bytes
    }

    /// Fills everything the place could write with [`SENTINEL`]: every backing frame, or
    /// `len` bytes of VRAM and [`GUARD`] bytes each side.
    pub fn clear(&self, h: &Harness, len: u64) {
        match self.backing() {
            None => {
                let Place::Vram(address) = self else {
                    unreachable!()
                };
                h.write_vram(
                    address - GUARD,
                    &vec![SENTINEL; usize::try_from(len + 2 * GUARD).unwrap()],
                );
            }
            Some((frames, _)) => {
                for frame in frames {
                    h.write_ram(frame * PAGE, &[SENTINEL; PAGE_USIZE]);
                }
            }
        }
    }

    /// After a transfer of `data` into a [`Place::clear`]ed place: `data` where it belongs,
    /// [`SENTINEL`] in every other byte of every backing frame (or the VRAM guards).
    #[track_caller]
    pub fn check(&self, h: &Harness, data: &[u8], what: &str) {
        let len = data.len() as u64;
        match self.backing() {
            None => {
                let Place::Vram(address) = self else {
                    unreachable!()
                };
                let mut expected = vec![SENTINEL; usize::try_from(GUARD).unwrap()];
                expected.extend_from_slice(data);
                expected.extend(vec![SENTINEL; usize::try_from(GUARD).unwrap()]);
                let actual =
                    h.read_vram(address - GUARD, usize::try_from(len + 2 * GUARD).unwrap());
                assert_bytes(&actual, &expected, what);
            }
            Some((frames, start)) => {
                for (index, frame) in frames.iter().enumerate() {
                    let expected: Vec<u8> = (0..PAGE)
                        .map(|in_page| {
                            (index as u64 * PAGE + in_page)
                                .checked_sub(start)
                                .filter(|&i| i < len)
                                .map_or(SENTINEL, |i| data[usize::try_from(i).unwrap()])
                        })
                        .collect();
                    let actual = h.read_ram(frame * PAGE, PAGE_USIZE);
                    assert_bytes(
                        &actual,
                        &expected,
                        &format!("{what}: frame #{index} ({frame:#x})"),
                    );
                }
            }
        }
    }
}

pub fn place_address(place: &Place) -> u64 {
    match place {
        Place::Vram(address) | Place::Aperture { address, .. } => *address,
        Place::Frames { .. } => unreachable!(),
    }
}

//! A model of memory for the engine tests: what the data pages, the BAR VRAM and the first
//! aperture pages' table entries must hold, computed with plain slices.

use std::sync::OnceLock;

use crate::testkit::bytes::{first_difference, pattern};
use crate::testkit::engine_rig::{Rig, DATA, DATA_SIZE, PAGE, VRAM_SIZE};

/// Where one byte lives: a VRAM offset or a guest-physical address inside DATA.
#[derive(Clone, Copy, Debug)]
pub(super) enum Loc {
    Vram(u64),
    Ram(u64),
}

/// What the data pages, the BAR VRAM and aperture pages `0..gart.len()` must hold.
pub(super) struct Model {
    pub(super) ram: Vec<u8>,
    pub(super) vram: Vec<u8>,
    pub(super) gart: Vec<Option<u64>>,
}

impl Model {
    /// Fills the rig's data pages and VRAM with patterns and models them; the engine's table
    /// must be empty.
    pub(super) fn new(rig: &Rig, pages: u64) -> Self {
        static PATTERNS: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
        let (ram, vram) = PATTERNS.get_or_init(|| {
            (
                pattern(usize::try_from(DATA_SIZE).unwrap(), 1),
                pattern(usize::try_from(VRAM_SIZE).unwrap(), 2),
            )
        });
        let model = Self {
            ram: ram.clone(),
            vram: vram.clone(),
            gart: vec![None; usize::try_from(pages).unwrap()],
        };
        rig.ram_write(DATA, &model.ram);
        rig.vram_write(0, &model.vram);
        model
    }

    fn ram_index(address: u64) -> usize {
        assert!(
            (DATA..DATA + DATA_SIZE).contains(&address),
            "{address:#x} is not a data page"
        );
        usize::try_from(address - DATA).unwrap()
    }

    pub(super) fn get(&self, loc: Loc) -> u8 {
        match loc {
            Loc::Vram(offset) => self.vram[usize::try_from(offset).unwrap()],
            Loc::Ram(address) => self.ram[Self::ram_index(address)],
        }
    }

    pub(super) fn set(&mut self, loc: Loc, byte: u8) {
        match loc {
            Loc::Vram(offset) => self.vram[usize::try_from(offset).unwrap()] = byte,
            Loc::Ram(address) => self.ram[Self::ram_index(address)] = byte,
        }
    }

    /// The byte at aperture offset `at`.
    pub(super) fn aperture(&self, at: u64) -> Loc {
        let frame = self.gart[(at / PAGE) as usize].expect("aperture page mapped in the model");
        Loc::Ram(frame * PAGE + at % PAGE)
    }

    pub(super) fn mapped(&self, offset: u64, length: u64) -> bool {
        length == 0
            || (offset / PAGE..=(offset + length - 1) / PAGE)
                .all(|p| self.gart[usize::try_from(p).unwrap()].is_some())
    }

    /// A transfer, byte after byte in order (the engine copies run after run in order; no test
    /// copies between aliasing ranges, so the two agree).
    pub(super) fn copy(
        &mut self,
        length: u64,
        src: impl Fn(&Self, u64) -> Loc,
        dst: impl Fn(&Self, u64) -> Loc,
    ) {
        for i in 0..length {
            let byte = self.get(src(self, i));
            let to = dst(self, i);
            self.set(to, byte);
        }
    }

    pub(super) fn vram_to_aperture(&mut self, vram: u64, aperture: u64, length: u64) {
        self.copy(
            length,
            |_, i| Loc::Vram(vram + i),
            |m, i| m.aperture(aperture + i),
        );
    }

    pub(super) fn aperture_to_vram(&mut self, aperture: u64, vram: u64, length: u64) {
        self.copy(
            length,
            |m, i| m.aperture(aperture + i),
            |_, i| Loc::Vram(vram + i),
        );
    }

    pub(super) fn fill(&mut self, offset: u64, length: u64, pattern: u32) {
        let bytes = pattern.to_le_bytes();
        for i in 0..length {
            self.vram[usize::try_from(offset + i).unwrap()] = bytes[(i % 4) as usize];
        }
    }

    pub(super) fn map(&mut self, first: u64, frames: &[u64]) {
        for (i, &frame) in frames.iter().enumerate() {
            self.gart[usize::try_from(first).unwrap() + i] = Some(frame);
        }
    }

    /// Writes `bytes` at aperture offset `at` through the model's table, into the rig's RAM too.
    pub(super) fn write_aperture(&mut self, rig: &Rig, at: u64, bytes: &[u8]) {
        for (i, &byte) in bytes.iter().enumerate() {
            let loc = self.aperture(at + i as u64);
            self.set(loc, byte);
            let Loc::Ram(address) = loc else {
                unreachable!()
            };
            rig.ram_write(address, &[byte]);
        }
    }

    /// Compares the rig with the model; the first difference found.
    pub(super) fn diff(&self, rig: &Rig) -> Result<(), String> {
        if let Some(i) = first_difference(
            &rig.vram_read(0, usize::try_from(VRAM_SIZE).unwrap()),
            &self.vram,
        ) {
            return Err(format!("VRAM differs at {i:#x}"));
        }
        if let Some(i) = first_difference(
            &rig.ram_read(DATA, usize::try_from(DATA_SIZE).unwrap()),
            &self.ram,
        ) {
            return Err(format!("RAM differs at {:#x}", DATA + i as u64));
        }
        let entries = rig.entries(0..self.gart.len() as u64);
        if let Some(p) = first_difference(&entries, &self.gart) {
            return Err(format!(
                "GART page {p}: {:?}, model {:?}",
                entries[p], self.gart[p]
            ));
        }
        Ok(())
    }

    #[track_caller]
    pub(super) fn check(&self, rig: &Rig) {
        if let Err(difference) = self.diff(rig) {
            panic!("{difference}");
        }
    }
}

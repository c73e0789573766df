//! Frame lists built from 4 KiB pieces of pinned memory, like the PFN array of an MDL. The
//! shuffled form lists pieces in a random order so the device must really follow the list: a
//! device that assumed contiguous or ordered frames would produce wrong data.

use thiserror::Error;
use wddm_gpu_abi::WDDM_GPU_PAGE_SIZE;

use crate::prng::Prng;

const PAGE: u64 = WDDM_GPU_PAGE_SIZE;

/// A frame list could not be built.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ScatterError {
    /// The pool has fewer pieces than the transfer spans.
    #[error("frame list needs {need} pieces, the pool has {have}")]
    PoolTooSmall { need: u64, have: usize },
}

/// One 4 KiB piece of pinned memory: where the CPU sees it and its guest-physical address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Virtual address in this process.
    pub virt: usize,
    /// Guest-physical address (page aligned).
    pub phys: u64,
}

/// A stretch of the listed memory: `len` bytes at offset `offset` of piece `piece`, holding
/// data positions `pos..pos + len` (for guard stretches, `pos` is meaningless and 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Index into the listed pieces.
    pub piece: usize,
    /// Byte offset inside that piece.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
    /// Position of the first byte in the transferred data.
    pub pos: u64,
}

/// A frame list for a transfer of `length` bytes starting `byte_offset` into the listed frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameList {
    pieces: Vec<Piece>,
    byte_offset: u32,
    length: u64,
}

/// Frames a transfer of `length` bytes at `byte_offset` spans.
pub fn frames_needed(byte_offset: u32, length: u64) -> u64 {
    if length == 0 {
        0
    } else {
        (u64::from(byte_offset) + length).div_ceil(PAGE)
    }
}

impl FrameList {
    /// Pieces drawn from `pool` in a random order.
    pub fn shuffled(
        pool: &[Piece],
        byte_offset: u32,
        length: u64,
        rng: &mut Prng,
    ) -> Result<Self, ScatterError> {
        let need = Self::check_pool(pool, byte_offset, length)?;
        let mut order: Vec<usize> = (0..pool.len()).collect();
        rng.shuffle(&mut order);
        let pieces = order[..need].iter().map(|&i| pool[i]).collect();
        Ok(Self {
            pieces,
            byte_offset,
            length,
        })
    }

    /// The first pieces of `pool` in order (physically contiguous when the pool is).
    pub fn in_order(pool: &[Piece], byte_offset: u32, length: u64) -> Result<Self, ScatterError> {
        let need = Self::check_pool(pool, byte_offset, length)?;
        Ok(Self {
            pieces: pool[..need].to_vec(),
            byte_offset,
            length,
        })
    }

    /// Exactly these pieces, in this order (they must cover `byte_offset + length`).
    pub fn from_pieces(
        pieces: Vec<Piece>,
        byte_offset: u32,
        length: u64,
    ) -> Result<Self, ScatterError> {
        Self::check_pool(&pieces, byte_offset, length)?;
        Ok(Self {
            pieces,
            byte_offset,
            length,
        })
    }

    fn check_pool(pool: &[Piece], byte_offset: u32, length: u64) -> Result<usize, ScatterError> {
        let need = frames_needed(byte_offset, length);
        match usize::try_from(need) {
            Ok(n) if n <= pool.len() => Ok(n),
            _ => Err(ScatterError::PoolTooSmall {
                need,
                have: pool.len(),
            }),
        }
    }

    /// The listed pieces, in list order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// The PFN array the device reads.
    pub fn pfns(&self) -> Vec<u64> {
        self.pieces.iter().map(|p| p.phys / PAGE).collect()
    }

    /// The PFN array as little-endian bytes.
    pub fn pfn_bytes(&self) -> Vec<u8> {
        self.pfns().iter().flat_map(|p| p.to_le_bytes()).collect()
    }

    /// Entries in the list.
    pub fn frame_count(&self) -> u32 {
        u32::try_from(self.pieces.len()).unwrap()
    }

    /// Offset of the data in the listed frames.
    pub fn byte_offset(&self) -> u32 {
        self.byte_offset
    }

    /// Bytes of data.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Adjacent list entries whose frames are physically consecutive (few means well scattered).
    pub fn consecutive_pairs(&self) -> usize {
        self.pieces
            .windows(2)
            .filter(|w| w[1].phys == w[0].phys + PAGE)
            .count()
    }

    /// The stretches holding the data, in data order.
    pub fn data_runs(&self) -> Vec<Run> {
        let start = u64::from(self.byte_offset);
        self.runs_in(start, start + self.length)
            .into_iter()
            .map(|mut r| {
                r.pos -= start;
                r
            })
            .collect()
    }

    /// The stretches of the listed frames the transfer must not touch (before and after the data).
    pub fn guard_runs(&self) -> Vec<Run> {
        let start = u64::from(self.byte_offset);
        let total = self.pieces.len() as u64 * PAGE;
        let mut runs = self.runs_in(0, start.min(total));
        runs.extend(self.runs_in((start + self.length).min(total), total));
        runs.iter_mut().for_each(|r| r.pos = 0);
        runs
    }

    /// Stretches covering list positions `[from, to)`; `pos` is the list position.
    fn runs_in(&self, from: u64, to: u64) -> Vec<Run> {
        let mut runs = Vec::new();
        let mut at = from;
        while at < to {
            let piece = (at / PAGE) as usize;
            let offset = at % PAGE;
            let len = (PAGE - offset).min(to - at);
            runs.push(Run {
                piece,
                offset: offset as usize,
                len: usize::try_from(len).unwrap(),
                pos: at,
            });
            at += len;
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> Vec<Piece> {
        (0..n)
            .map(|i| Piece {
                virt: 0x7000_0000 + i * 4096,
                phys: 0x4000_0000 + i as u64 * 4096,
            })
            .collect()
    }

    #[test]
    fn frames_needed_counts_partial_pages() {
        assert_eq!(frames_needed(0, 0), 0);
        assert_eq!(frames_needed(0, 1), 1);
        assert_eq!(frames_needed(0, 4096), 1);
        assert_eq!(frames_needed(1, 4096), 2);
        assert_eq!(frames_needed(0x321, (1 << 20) + 123), 257);
        assert_eq!(frames_needed(3 * 4096 + 5, 10), 4);
    }

    #[test]
    fn shuffled_list_is_scattered_and_deterministic() {
        let pool = pool(1024);
        let a = FrameList::shuffled(&pool, 0x321, (1 << 20) + 123, &mut Prng::new(9)).unwrap();
        let b = FrameList::shuffled(&pool, 0x321, (1 << 20) + 123, &mut Prng::new(9)).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.frame_count(), 257);
        assert!(a.consecutive_pairs() < 10);
        let mut pfns = a.pfns();
        pfns.sort_unstable();
        pfns.dedup();
        assert_eq!(pfns.len(), 257, "pieces must be distinct");
        assert_eq!(a.pfn_bytes().len(), 257 * 8);
    }

    #[test]
    fn in_order_list_is_contiguous() {
        let list = FrameList::in_order(&pool(8), 0, 3 * 4096).unwrap();
        assert_eq!(list.consecutive_pairs(), 2);
        assert_eq!(list.pfns(), vec![0x40000, 0x40001, 0x40002]);
    }

    #[test]
    fn pool_too_small() {
        assert_eq!(
            FrameList::in_order(&pool(2), 1, 8192),
            Err(ScatterError::PoolTooSmall { need: 3, have: 2 })
        );
    }

    #[test]
    fn runs_cover_data_and_guards_exactly() {
        let list = FrameList::in_order(&pool(4), 100, 2 * 4096).unwrap();
        let data = list.data_runs();
        assert_eq!(
            data,
            vec![
                Run {
                    piece: 0,
                    offset: 100,
                    len: 3996,
                    pos: 0
                },
                Run {
                    piece: 1,
                    offset: 0,
                    len: 4096,
                    pos: 3996
                },
                Run {
                    piece: 2,
                    offset: 0,
                    len: 100,
                    pos: 8092
                },
            ]
        );
        let guards = list.guard_runs();
        assert_eq!(
            guards,
            vec![
                Run {
                    piece: 0,
                    offset: 0,
                    len: 100,
                    pos: 0
                },
                Run {
                    piece: 2,
                    offset: 100,
                    len: 3996,
                    pos: 0
                },
            ]
        );
        let covered: usize = data.iter().chain(&guards).map(|r| r.len).sum();
        assert_eq!(covered, 3 * 4096);
    }

    #[test]
    fn byte_offset_beyond_first_page_skips_frames() {
        let list = FrameList::in_order(&pool(8), 2 * 4096 + 8, 16).unwrap();
        assert_eq!(list.frame_count(), 3);
        assert_eq!(
            list.data_runs(),
            vec![Run {
                piece: 2,
                offset: 8,
                len: 16,
                pos: 0
            }]
        );
        assert_eq!(
            list.guard_runs().iter().map(|r| r.len).sum::<usize>(),
            3 * 4096 - 16
        );
    }
}

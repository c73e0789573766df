//! Rectangles from the guest, checked against the surface they address.

use wddm_gpu_abi::display::WddmGpuRect;

/// A non-empty rectangle whose right and bottom edges fit in `u32` (made only by
/// [`Rect::inside`] and [`Rect::intersect`], which check that).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// Why a guest rectangle was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RectError {
    #[error("rectangle {0:?} is empty")]
    Empty(WddmGpuRect),
    #[error("rectangle {rect:?} reaches past the {width}x{height} surface")]
    Outside {
        rect: WddmGpuRect,
        width: u32,
        height: u32,
    },
}

impl Rect {
    /// `rect` if it is non-empty and lies within a `width` x `height` surface.
    pub fn inside(rect: WddmGpuRect, width: u32, height: u32) -> Result<Self, RectError> {
        if rect.width == 0 || rect.height == 0 {
            return Err(RectError::Empty(rect));
        }
        let fits = |start: u32, len: u32, limit: u32| {
            start.checked_add(len).is_some_and(|end| end <= limit)
        };
        if !fits(rect.x, rect.width, width) || !fits(rect.y, rect.height, height) {
            return Err(RectError::Outside {
                rect,
                width,
                height,
            });
        }
        Ok(Self {
            x: rect.x,
            y: rect.y,
            width: rect.width,
            height: rect.height,
        })
    }

    /// One past the right edge (cannot overflow: checked when made).
    pub fn right(self) -> u32 {
        self.x + self.width
    }

    /// One past the bottom edge.
    pub fn bottom(self) -> u32 {
        self.y + self.height
    }

    /// The common part of two rectangles, if any.
    pub fn intersect(self, other: Rect) -> Option<Rect> {
        let x = self.x.max(other.x);
        let y = self.y.max(other.y);
        let right = self.right().min(other.right());
        let bottom = self.bottom().min(other.bottom());
        // Lazily: the widths underflow when the rectangles are apart.
        (x < right && y < bottom).then(|| Rect {
            x,
            y,
            width: right - x,
            height: bottom - y,
        })
    }

    /// Whether `other` lies wholly inside this rectangle.
    pub fn contains(self, other: Rect) -> bool {
        self.intersect(other) == Some(other)
    }

    /// Bands of at most `rows` rows (at least 1) covering this rectangle, top to bottom.
    pub fn bands(self, rows: u32) -> impl Iterator<Item = Rect> {
        let rows = rows.max(1);
        (self.y..self.bottom())
            .step_by(rows as usize)
            .map(move |y| Rect {
                y,
                height: rows.min(self.bottom() - y),
                ..self
            })
    }

    /// This rectangle moved so that `origin` becomes (0, 0); `origin` must be at or above and
    /// left of it.
    pub fn relative_to(self, origin: Rect) -> Rect {
        Rect {
            x: self.x - origin.x,
            y: self.y - origin.y,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(x: u32, y: u32, width: u32, height: u32) -> WddmGpuRect {
        WddmGpuRect {
            x,
            y,
            width,
            height,
        }
    }

    #[test]
    fn rectangles_must_be_non_empty_and_inside_without_overflow() {
        assert!(Rect::inside(wire(0, 0, 64, 32), 64, 32).is_ok());
        assert!(Rect::inside(wire(63, 31, 1, 1), 64, 32).is_ok());
        assert!(matches!(
            Rect::inside(wire(0, 0, 0, 5), 64, 32),
            Err(RectError::Empty(_))
        ));
        assert!(matches!(
            Rect::inside(wire(0, 0, 5, 0), 64, 32),
            Err(RectError::Empty(_))
        ));
        for bad in [
            wire(1, 0, 64, 1),
            wire(0, 1, 1, 32),
            wire(u32::MAX, 0, 2, 1),
            wire(0, u32::MAX, 1, 2),
            wire(2, 0, u32::MAX, 1),
        ] {
            assert!(
                matches!(Rect::inside(bad, 64, 32), Err(RectError::Outside { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn intersection_and_relative_position() {
        let a = Rect::inside(wire(10, 10, 20, 20), 100, 100).unwrap();
        let b = Rect::inside(wire(25, 0, 50, 15), 100, 100).unwrap();
        let common = a.intersect(b).unwrap();
        assert_eq!(
            common,
            Rect {
                x: 25,
                y: 10,
                width: 5,
                height: 5
            }
        );
        assert_eq!(
            common.relative_to(a),
            Rect {
                x: 15,
                y: 0,
                width: 5,
                height: 5
            }
        );
        let apart = Rect::inside(wire(30, 30, 1, 1), 100, 100).unwrap();
        assert_eq!(a.intersect(apart), None);
        // Far apart, the widths would underflow: still none, never a panic.
        let far = Rect::inside(wire(50, 60, 1, 1), 100, 100).unwrap();
        assert_eq!(a.intersect(far), None);
        assert_eq!(far.intersect(a), None);
    }

    #[test]
    fn containment_and_bands() {
        let a = Rect::inside(wire(10, 10, 20, 20), 100, 100).unwrap();
        let inner = Rect::inside(wire(12, 29, 18, 1), 100, 100).unwrap();
        let across = Rect::inside(wire(25, 25, 10, 10), 100, 100).unwrap();
        assert!(a.contains(a) && a.contains(inner));
        assert!(!a.contains(across) && !inner.contains(a));

        let bands: Vec<Rect> = a.bands(7).collect();
        let heights: Vec<u32> = bands.iter().map(|band| band.height).collect();
        assert_eq!(heights, [7, 7, 6]);
        assert_eq!(bands[0].y, 10);
        assert_eq!(bands[2].bottom(), a.bottom());
        assert!(bands
            .iter()
            .all(|band| band.x == a.x && band.width == a.width));
        assert_eq!(a.bands(0).count(), 20, "0 rows a band means 1");
        assert_eq!(a.bands(u32::MAX).collect::<Vec<_>>(), [a]);
    }
}

//! Warnings a guest can cause, rate-limited: a guest looping on bad requests must not fill the
//! host's disk with log lines. At most [`BURST`] such lines are written per [`WINDOW`]; the rest
//! are counted and reported in one line when the next window opens. Every refusal is still
//! counted in the stats.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::sync::lock;

/// Guest-caused warnings written per window.
pub const BURST: u32 = 20;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(1);

struct Window {
    start: Option<Instant>,
    written: u32,
    suppressed: u64,
}

static LIMIT: Mutex<Window> = Mutex::new(Window {
    start: None,
    written: 0,
    suppressed: 0,
});

/// Whether one more guest-caused warning may be written now; counts it as suppressed if not.
pub fn allow() -> bool {
    let mut window = lock(&LIMIT);
    let now = Instant::now();
    let open = window
        .start
        .is_some_and(|start| now.duration_since(start) < WINDOW);
    if !open {
        let suppressed = std::mem::take(&mut window.suppressed);
        if suppressed > 0 {
            log::warn!(
                "{suppressed} more guest-caused warning(s) suppressed (at most {BURST} a second are written)"
            );
        }
        window.start = Some(now);
        window.written = 0;
    }
    if window.written < BURST {
        window.written += 1;
        true
    } else {
        window.suppressed += 1;
        false
    }
}

/// `log::warn!` for what a guest caused, within the rate limit of [`allow`]. Crate-private: a
/// path below every layer that uses it (`crate::support::guest_log::guest_warn!`).
macro_rules! guest_warn {
    ($($arg:tt)*) => {
        if $crate::support::guest_log::allow() {
            log::warn!($($arg)*);
        }
    };
}
pub(crate) use guest_warn;

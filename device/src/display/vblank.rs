//! The vblank timer: a thread of its own (`wddm-gpu-vblank`) that calls a tick at a fixed rate,
//! on absolute deadlines so the rate does not drift (a late tick is not repeated: the next
//! deadline is the next one still ahead). Paused while the frontend has stopped the rings, so
//! nothing completes requests or reads VRAM then; stopped and joined when dropped. The tick runs
//! with the timer's own lock held, so it must not pause or resume the timer itself.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::warn;

use crate::support::sync::lock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    Ticking,
    Paused,
    Stopping,
}

/// What the timer's owner and its thread share: whether it ticks, and the wake-up for a change.
struct TimerControl {
    run: Mutex<Run>,
    changed: Condvar,
}

/// A running vblank timer.
pub struct VblankTimer {
    shared: Arc<TimerControl>,
    thread: Option<JoinHandle<()>>,
}

impl VblankTimer {
    /// Calls `tick` `hz` times a second on a new thread; `None` for 0 Hz.
    pub fn start(hz: u32, tick: impl FnMut() + Send + 'static) -> std::io::Result<Option<Self>> {
        if hz == 0 {
            return Ok(None);
        }
        let shared = Arc::new(TimerControl {
            run: Mutex::new(Run::Ticking),
            changed: Condvar::new(),
        });
        let period = Duration::from_secs(1) / hz;
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("wddm-gpu-vblank".into())
            .spawn(move || run(&thread_shared, period, tick))?;
        Ok(Some(Self {
            shared,
            thread: Some(thread),
        }))
    }

    /// No ticks until [`Self::resume`]; a tick under way has ended when this returns.
    pub fn pause(&self) {
        self.set(Run::Paused);
    }

    /// Ticks again.
    pub fn resume(&self) {
        self.set(Run::Ticking);
    }

    fn set(&self, to: Run) {
        let mut run = lock(&self.shared.run);
        if *run != Run::Stopping {
            *run = to;
        }
        self.shared.changed.notify_all();
    }
}

fn run(shared: &TimerControl, period: Duration, mut tick: impl FnMut()) {
    let mut deadline = Instant::now() + period;
    loop {
        {
            // Held through the tick: pausing waits for a tick under way to end.
            let mut run = lock(&shared.run);
            loop {
                match *run {
                    Run::Stopping => return,
                    Run::Paused => {
                        run = shared
                            .changed
                            .wait(run)
                            .unwrap_or_else(|poisoned| poisoned.into_inner());
                        deadline = Instant::now() + period;
                    }
                    Run::Ticking => {
                        let now = Instant::now();
                        if now >= deadline {
                            break;
                        }
                        run = shared
                            .changed
                            .wait_timeout(run, deadline - now)
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .0;
                    }
                }
            }
            tick();
        }
        deadline += period;
        let now = Instant::now();
        if deadline <= now {
            // Late by a period or more (a stalled host): skip the missed vblanks.
            let missed = (now - deadline).as_nanos() / period.as_nanos() + 1;
            deadline += period * u32::try_from(missed).unwrap_or(u32::MAX);
        }
    }
}

impl Drop for VblankTimer {
    fn drop(&mut self) {
        *lock(&self.shared.run) = Run::Stopping;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                warn!("the vblank thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[test]
    fn ticks_at_about_the_rate_pauses_and_stops() {
        let ticks = Arc::new(AtomicU32::new(0));
        let counted = ticks.clone();
        let timer = VblankTimer::start(100, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap()
        .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let ticked = ticks.load(Ordering::SeqCst);
        // 50 expected; a loaded CI machine may be late, never early.
        assert!(
            (20..=52).contains(&ticked),
            "{ticked} ticks in 0.5 s at 100 Hz"
        );
        timer.pause();
        std::thread::sleep(Duration::from_millis(30));
        let paused_at = ticks.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(ticks.load(Ordering::SeqCst), paused_at);
        timer.resume();
        std::thread::sleep(Duration::from_millis(200));
        assert!(ticks.load(Ordering::SeqCst) > paused_at);
        drop(timer);
        let stopped_at = ticks.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(ticks.load(Ordering::SeqCst), stopped_at);
    }

    #[test]
    fn zero_hz_is_no_timer() {
        assert!(VblankTimer::start(0, || {}).unwrap().is_none());
    }
}

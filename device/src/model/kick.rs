//! One kick of a queue, as a guard: made when the transport takes the kick, dropped once the
//! kick's requests are handed over and the answers given on its thread are on the used ring.
//! The display's output is held for the kick here, in one place: the kick's first display
//! command holds it (under the display lock it takes anyway), and dropping the kick releases it,
//! after the answers, so a fenced flush's round trip does not pay for the display's thread. A
//! kick that carries no display command never takes the display lock.

use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};

use crate::display::Display;
use crate::support::sync::lock;

/// A display whose output a kick can hold back until its answers are out.
pub trait HeldOutput: Send {
    /// From now on, hold what is shown (streamed bands still go at once, after it).
    fn hold(&mut self);
    /// Pass on what was held.
    fn release(&mut self);
}

impl HeldOutput for Display {
    fn hold(&mut self) {
        Display::hold(self);
    }

    fn release(&mut self) {
        Display::release(self);
    }
}

/// A kick being served. Display commands of the kick reach the display through
/// [`Kick::display`]; the kick releases the display's output when it is dropped, if it held it.
/// It borrows the display: a kick lives within the transport's handling of it.
pub struct Kick<'a, D: HeldOutput = Display> {
    display: &'a Mutex<D>,
    /// A display command of this kick held the display's output.
    held: Cell<bool>,
}

impl<'a, D: HeldOutput> Kick<'a, D> {
    /// A kick of the device showing `display`; touches nothing yet.
    pub fn new(display: &'a Mutex<D>) -> Self {
        Self {
            display,
            held: Cell::new(false),
        }
    }

    /// The display, locked, for one display command of this kick: the kick's first holds the
    /// display's output until the kick is dropped.
    pub fn display(&self) -> MutexGuard<'_, D> {
        let mut display = lock(self.display);
        if !self.held.replace(true) {
            display.hold();
        }
        display
    }
}

impl<D: HeldOutput> Drop for Kick<'_, D> {
    /// The kick's answers are out: what its display commands showed goes on to the display.
    fn drop(&mut self) {
        if self.held.get() {
            lock(self.display).release();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Counts the calls the kick makes.
    #[derive(Default)]
    struct Counting {
        holds: u32,
        releases: u32,
    }

    impl HeldOutput for Counting {
        fn hold(&mut self) {
            self.holds += 1;
        }
        fn release(&mut self) {
            self.releases += 1;
        }
    }

    fn counts(display: &Arc<Mutex<Counting>>) -> (u32, u32) {
        let display = lock(display);
        (display.holds, display.releases)
    }

    #[test]
    fn a_kick_without_display_commands_neither_holds_nor_releases() {
        let display = Arc::new(Mutex::new(Counting::default()));
        drop(Kick::new(&display));
        assert_eq!(counts(&display), (0, 0));
    }

    #[test]
    fn a_kick_holds_at_its_first_display_command_and_releases_once_when_dropped() {
        let display = Arc::new(Mutex::new(Counting::default()));
        let kick = Kick::new(&display);
        assert_eq!(counts(&display), (0, 0));
        drop(kick.display());
        assert_eq!(counts(&display), (1, 0));
        drop(kick.display());
        drop(kick.display());
        assert_eq!(counts(&display), (1, 0), "one hold for the whole kick");
        drop(kick);
        assert_eq!(counts(&display), (1, 1));
    }

    #[test]
    fn a_kick_without_display_commands_never_takes_the_display_lock() {
        let display = Arc::new(Mutex::new(Counting::default()));
        // The lock is held elsewhere for the whole kick: a kick that took it would never end.
        let taken = lock(&display);
        let (done, finished) = std::sync::mpsc::channel();
        let kicked = display.clone();
        std::thread::spawn(move || {
            drop(Kick::new(&kicked));
            let _ = done.send(());
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the kick waited for the display lock");
        drop(taken);
        assert_eq!(counts(&display), (0, 0));
    }
}

//! What the engine is told between chunks: run on, stop for a PREEMPT or a RESET, or park for a
//! pause. The state is one atomic the engine reads at every chunk boundary; [`EngineSignal`]
//! stores and loads only [`EngineState`] values, so no other byte can ever be read back.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::engine::Interruption;

/// What the engine does at its next chunk boundary.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineState {
    /// Go on.
    Run = 0,
    /// Stop the running submission: PREEMPT.
    Preempt = 1,
    /// Stop the running submission: the driver's RESET, a device reset, or shutdown.
    Reset = 2,
    /// Park until the pause ends (the frontend stopped the rings).
    Pause = 3,
}

impl TryFrom<u8> for EngineState {
    type Error = u8;

    fn try_from(value: u8) -> Result<Self, u8> {
        Ok(match value {
            0 => Self::Run,
            1 => Self::Preempt,
            2 => Self::Reset,
            3 => Self::Pause,
            other => return Err(other),
        })
    }
}

impl EngineState {
    /// The interruption a raised PREEMPT or RESET stands for; `None` to run on or park.
    pub fn interruption(self) -> Option<Interruption> {
        match self {
            Self::Preempt => Some(Interruption::Preempted),
            Self::Reset => Some(Interruption::Reset),
            Self::Run | Self::Pause => None,
        }
    }
}

/// The engine's state, shared by the threads that raise and read it.
#[derive(Debug)]
pub struct EngineSignal(AtomicU8);

impl EngineSignal {
    /// A signal in `state`.
    pub fn new(state: EngineState) -> Self {
        Self(AtomicU8::new(state as u8))
    }

    /// The state now.
    pub fn load(&self) -> EngineState {
        let raw = self.0.load(Ordering::Acquire);
        // Only `new`, `store` and `replace` write the byte, each an `EngineState`.
        EngineState::try_from(raw).expect("the engine signal holds only EngineState values")
    }

    /// Raises `state`.
    pub fn store(&self, state: EngineState) {
        self.0.store(state as u8, Ordering::Release);
    }

    /// Sets `to` if the state is `from`; any other state stays.
    pub fn replace(&self, from: EngineState, to: EngineState) {
        let _ = self
            .0
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_and_other_bytes_are_refused() {
        for state in [
            EngineState::Run,
            EngineState::Preempt,
            EngineState::Reset,
            EngineState::Pause,
        ] {
            assert_eq!(EngineState::try_from(state as u8), Ok(state));
            let signal = EngineSignal::new(EngineState::Run);
            signal.store(state);
            assert_eq!(signal.load(), state);
        }
        for other in [4u8, 0x80, u8::MAX] {
            assert_eq!(EngineState::try_from(other), Err(other));
        }
    }

    #[test]
    fn replace_changes_only_the_state_it_expects() {
        let signal = EngineSignal::new(EngineState::Preempt);
        signal.replace(EngineState::Run, EngineState::Pause);
        assert_eq!(signal.load(), EngineState::Preempt);
        signal.replace(EngineState::Preempt, EngineState::Run);
        assert_eq!(signal.load(), EngineState::Run);
        assert_eq!(
            EngineState::Preempt.interruption(),
            Some(Interruption::Preempted)
        );
        assert_eq!(EngineState::Reset.interruption(), Some(Interruption::Reset));
        assert_eq!(EngineState::Pause.interruption(), None);
    }
}

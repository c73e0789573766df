//! The adapter's power state (`DxgkDdiSetPowerState`, WDDM_GPU_CMD_SET_POWER_STATE): below D0
//! the device does no work, and with a `power-loss` injection armed its memory segments lose
//! what the power action does not preserve, as a real adapter's VRAM would, so a driver's
//! save and restore paths meet the contract they rely on.

use std::sync::atomic::{AtomicBool, Ordering};

use wddm_gpu_abi::segment_flags::SegmentFlags;
use wddm_gpu_abi::status::{
    WddmGpuCmdSetPowerState, WDDM_GPU_POWER_ACTION_HIBERNATE, WDDM_GPU_POWER_ACTION_SHUTDOWN,
    WDDM_GPU_POWER_D0, WDDM_GPU_POWER_D3, WDDM_GPU_POWER_LOST_BYTE,
};

use crate::layout::{SegmentKind, SegmentLayout};
use crate::memory::vram::Vram;

/// The highest `POWER_ACTION` value (`PowerActionDisplayOff`).
const MAX_POWER_ACTION: u32 = 8;

/// Why a SET_POWER_STATE was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PowerError {
    /// Not a `DEVICE_POWER_STATE` from D0 to D3.
    #[error("device_power_state {0} is not 1 (D0) to 4 (D3)")]
    State(u32),
    /// Not a `POWER_ACTION`.
    #[error("action {0} is not a POWER_ACTION (0 to 8)")]
    Action(u32),
}

/// What a transition does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// To D0 from below: work is taken again.
    Up,
    /// From D0 to below it, for this `POWER_ACTION`.
    Down(u32),
    /// No change of working or not.
    Stay,
}

/// Whether the adapter works (D0) or not.
#[derive(Debug, Default)]
pub struct Power {
    down: AtomicBool,
}

impl Power {
    /// Whether the adapter is below D0 (submissions are refused).
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// Checks `cmd` and records the new state; returns what changed.
    pub fn set(&self, cmd: &WddmGpuCmdSetPowerState) -> Result<Transition, PowerError> {
        if !(WDDM_GPU_POWER_D0..=WDDM_GPU_POWER_D3).contains(&cmd.device_power_state) {
            return Err(PowerError::State(cmd.device_power_state));
        }
        if cmd.action > MAX_POWER_ACTION {
            return Err(PowerError::Action(cmd.action));
        }
        let down = cmd.device_power_state != WDDM_GPU_POWER_D0;
        let was_down = self.down.swap(down, Ordering::AcqRel);
        Ok(match (was_down, down) {
            (true, false) => Transition::Up,
            (false, true) => Transition::Down(cmd.action),
            _ => Transition::Stay,
        })
    }

    /// A device reset: the adapter starts in D0 again.
    pub fn reset(&self) {
        self.down.store(false, Ordering::Release);
    }
}

/// Whether a segment with `flags` keeps its contents through a power-down for `action`.
pub fn preserved(flags: SegmentFlags, action: u32) -> bool {
    match action {
        WDDM_GPU_POWER_ACTION_SHUTDOWN => false,
        WDDM_GPU_POWER_ACTION_HIBERNATE => flags.contains(SegmentFlags::PRESERVED_DURING_HIBERNATE),
        // Sleep, and an adapter's own power-down: the standby contract.
        _ => flags.contains(SegmentFlags::PRESERVED_DURING_STANDBY),
    }
}

/// Fills every memory segment `action` does not preserve with [`WDDM_GPU_POWER_LOST_BYTE`]; returns the ids
/// of the segments lost.
pub fn lose_contents(layout: &SegmentLayout, vram: &Vram, action: u32) -> Vec<u32> {
    const STEP: usize = 1 << 20;
    let lost_bytes = vec![WDDM_GPU_POWER_LOST_BYTE; STEP];
    let mut lost = Vec::new();
    for segment in &layout.segments {
        let SegmentKind::Memory { vram_offset, .. } = segment.kind else {
            continue;
        };
        if preserved(segment.flags, action) {
            continue;
        }
        let mut done = 0u64;
        while done < segment.size {
            let len = usize::try_from(segment.size - done).map_or(STEP, |left| left.min(STEP));
            let Some(slice) = vram.slice(vram_offset + done, len) else {
                break;
            };
            slice.copy_from(&lost_bytes[..len]);
            done += len as u64;
        }
        lost.push(segment.id);
    }
    lost
}

#[cfg(test)]
mod tests {
    use wddm_gpu_abi::status::WDDM_GPU_POWER_ACTION_SLEEP;

    use super::*;

    fn cmd(state: u32, action: u32) -> WddmGpuCmdSetPowerState {
        WddmGpuCmdSetPowerState {
            device_power_state: state,
            action,
            ..Default::default()
        }
    }

    #[test]
    fn transitions_are_down_up_or_nothing_and_bad_values_are_refused() {
        let power = Power::default();
        assert_eq!(power.set(&cmd(1, 0)), Ok(Transition::Stay));
        assert_eq!(power.set(&cmd(4, 2)), Ok(Transition::Down(2)));
        assert!(power.is_down());
        assert_eq!(power.set(&cmd(3, 2)), Ok(Transition::Stay));
        assert_eq!(power.set(&cmd(1, 0)), Ok(Transition::Up));
        assert_eq!(power.set(&cmd(0, 0)), Err(PowerError::State(0)));
        assert_eq!(power.set(&cmd(5, 0)), Err(PowerError::State(5)));
        assert_eq!(power.set(&cmd(4, 9)), Err(PowerError::Action(9)));
        assert!(!power.is_down(), "a refused transition changes nothing");
    }

    #[test]
    fn each_action_preserves_what_its_flag_says() {
        let standby = SegmentFlags::PRESERVED_DURING_STANDBY;
        let hibernate = SegmentFlags::PRESERVED_DURING_HIBERNATE;
        assert!(preserved(standby, WDDM_GPU_POWER_ACTION_SLEEP));
        assert!(!preserved(standby, WDDM_GPU_POWER_ACTION_HIBERNATE));
        assert!(preserved(hibernate, WDDM_GPU_POWER_ACTION_HIBERNATE));
        assert!(!preserved(hibernate, WDDM_GPU_POWER_ACTION_SLEEP));
        assert!(!preserved(
            standby | hibernate,
            WDDM_GPU_POWER_ACTION_SHUTDOWN
        ));
    }
}

//! The device model, apart from any transport: control requests decoded and answered, the
//! scheduler that runs submissions on the engine, the status page and posted events.

pub mod display;
pub mod gpu;
pub mod reply;
pub mod scheduler;
pub mod status_page;
pub mod vblank;

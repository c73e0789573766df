//! The transport on real rings: descriptor chains written into guest memory from the driver's
//! side, a backend over a real GPU driven as the vring worker and the request thread drive it,
//! and what lands on the used rings, in the response buffers and on the call eventfds.

mod broken;
mod buffers;
mod cursor;
mod in_flight;
mod pause;
mod requests;
mod reset;
mod rig;
mod start;

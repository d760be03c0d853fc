//! Online reshapes of served arrays (`raidkit grow --control`): the array keeps serving while
//! the engine's [`OnlineReshape`] moves it step by step (see the engine's `array/online.rs`).
//!
//! [`start`] switches a served array to its reshape: with the array's slot held (no request
//! reaches the array meanwhile), the array is stopped, its member disks handed to the reshape,
//! and the reshape becomes what serves requests. [`drive`] then runs the steps on a thread of
//! its own, each with the slot held (requests wait for one step), pacing itself: when clients
//! made requests since the last step, it takes only its share of the time (the task rates'
//! reshape percent, 30 % by default, as for every task). When the last step is done the array is assembled in its new shape and swapped in;
//! clients connected before see the old size until they reconnect (NBD fixes a size at
//! connection). A server stopped mid-reshape leaves it recorded; `serve` goes on with it.

use super::export::{ArraySlot, Backend};
use super::log::ServerLog;
use crate::common::engine_error;
use crate::error::CliError;
use raidkit_engine::{Array, AssembleOptions, OnlineReshape, ReshapeTarget};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of the array moved by one step while clients use the array (requests wait at most
/// one step).
pub const STEP_BYTES: u64 = 16 << 20;

/// The largest step, reached by doubling while no client comes: a step's fixed cost
/// (superblocks read and written on every member, members flushed) costs a few seeks on a
/// hard disk, which small steps would pay hundreds of times.
pub const IDLE_STEP_BYTES: u64 = 512 << 20;

/// Starts reshaping the served array in `slot` to `target`. A change that moves nothing
/// (md's takeovers) is done at once and the array assembled again; one that is refused
/// writes nothing and leaves the array served as it was. Returns the reshape to drive, if any.
pub fn start(
    name: &str,
    slot: &ArraySlot,
    target: &ReshapeTarget,
    log: &ServerLog,
) -> Result<Option<Arc<OnlineReshape>>, CliError> {
    let mut held = slot.write();
    let Backend::Array(array) = held.clone() else {
        return Err(CliError::usage(format!(
            "{name}: an online reshape runs already"
        )));
    };
    let disks = array.stop_and_release().map_err(engine_error)?;
    let opts = AssembleOptions {
        run: true,
        ..Default::default()
    };
    let started = OnlineReshape::start(disks.clone(), target, opts.clone(), STEP_BYTES);
    let online = match started {
        Ok(o) => o,
        Err(e) => {
            // Refused before anything was written: the array is served as it was.
            let (again, _) = Array::assemble(raidkit_engine::shared_disks(&disks), opts)
                .map_err(engine_error)?;
            let again = Arc::new(again);
            slot.configure(&again);
            again.start_background().map_err(engine_error)?;
            *held = Backend::Array(again);
            return Err(engine_error(e));
        }
    };
    if online.finished() {
        let (again, _) = online.assemble().map_err(engine_error)?;
        let again = Arc::new(again);
        slot.configure(&again);
        again.start_background().map_err(engine_error)?;
        log.info(
            "reshape-finished",
            Some(name),
            &format!("taken over: now RAID {}", again.status().level),
        );
        *held = Backend::Array(again);
        return Ok(None);
    }
    let online = Arc::new(online);
    let r = online.report();
    log.info(
        "reshape-started",
        Some(name),
        &format!(
            "online reshape: {} to {} members, RAID {} to {}, chunk {}K to {}K; {} bytes, served throughout",
            r.old_raid_devices,
            r.new_raid_devices,
            r.old_level,
            r.new_level,
            r.old_chunk_sectors / 2,
            r.new_chunk_sectors / 2,
            r.new_array_bytes
        ),
    );
    *held = Backend::Reshaping(online.clone());
    Ok(Some(online))
}

/// Runs the reshape's steps until it is done (then swaps the reassembled array into `slot`),
/// it fails (recorded; the error goes to `detail` and the log), or the server stops.
pub fn drive(name: &str, slot: &ArraySlot, online: &OnlineReshape, log: &ServerLog) {
    slot.driving.store(true, Ordering::SeqCst);
    steps(name, slot, online, log);
    slot.driving.store(false, Ordering::SeqCst);
}

fn steps(name: &str, slot: &ArraySlot, online: &OnlineReshape, log: &ServerLog) {
    let mut seen = slot.requests.load(Ordering::Relaxed);
    let mut decile = 0;
    let mut step = STEP_BYTES;
    let started = Instant::now();
    let (first, _) = online.progress();
    let mut left_out = online.report().failed_members.len();
    loop {
        if slot.stopping.load(Ordering::SeqCst) {
            let pos = online.position();
            log.info(
                "reshape-paused",
                Some(name),
                &format!("the server stops; the reshape is recorded at array sector {pos} and goes on when the array is served again"),
            );
            return;
        }
        let t0 = Instant::now();
        {
            let mut held = slot.write();
            match online.step_by(step) {
                Ok(false) => {}
                Ok(true) => {
                    let again = online.assemble().map_err(engine_error).and_then(|(a, _)| {
                        let a = Arc::new(a);
                        slot.configure(&a);
                        a.start_background().map_err(engine_error)?;
                        Ok(a)
                    });
                    match again {
                        Ok(a) => {
                            log.info(
                                "reshape-finished",
                                Some(name),
                                &format!(
                                    "online reshape done in {:.1} s: {} bytes over {} members; clients see the new size when they reconnect",
                                    started.elapsed().as_secs_f64(),
                                    a.size_bytes(),
                                    a.status().raid_disks
                                ),
                            );
                            *held = Backend::Array(a);
                        }
                        Err(e) => {
                            online.set_error(e.message.clone());
                            log.warning(
                                "reshape-failed",
                                Some(name),
                                &format!("reshaped, but not assembled again: {}", e.message),
                            );
                        }
                    }
                    return;
                }
                Err(e) => {
                    online.set_error(e.to_string());
                    log.warning("reshape-stopped", Some(name), &e.to_string());
                    return;
                }
            }
        }
        let failed = online.report().failed_members;
        for m in failed.iter().skip(left_out) {
            log.warning(
                "reshape-degraded",
                Some(name),
                &format!("{m} failed during the online reshape; it goes on without it"),
            );
        }
        left_out = left_out.max(failed.len());
        let (pos, end) = online.progress();
        let d = pos * 10 / end.max(1);
        if d > decile {
            decile = d;
            log.info(
                "reshape-progress",
                Some(name),
                &format!("online reshape {}% done", d * 10),
            );
        }
        // Clients came meanwhile: the reshape takes its share of the time (the task rates'
        // reshape percent, 30 unless set), and steps are short; while none come, steps grow.
        let now = slot.requests.load(Ordering::Relaxed);
        if now != seen {
            step = STEP_BYTES;
            let share = u32::from(slot.rates().reshape_percent.clamp(1, 100));
            std::thread::sleep(t0.elapsed() * (100 - share) / share);
        } else {
            step = (step * 2).min(IDLE_STEP_BYTES);
        }
        // The task rates' cap (md's speed_limit_max) holds the reshape too: array bytes
        // moved per second since it started here, in steps no longer than a busy one.
        if let Some(max) = slot.rates().max_bytes_per_s.filter(|&m| m > 0) {
            step = STEP_BYTES;
            let moved = pos.abs_diff(first) * 512;
            let due = Duration::from_secs_f64(moved as f64 / max as f64);
            while started.elapsed() < due && !slot.stopping.load(Ordering::SeqCst) {
                std::thread::sleep((due - started.elapsed()).min(Duration::from_millis(20)));
            }
        }
        seen = slot.requests.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(1));
    }
}

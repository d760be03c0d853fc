//! One seeded run: geometry, workload, fault schedule, crashes and reassembly, all drawn from
//! one `u64`, checked against the reference model and the independent encoder.
//!
//! Fault budget: each run picks a set of "fault-prone" slots that the array survives losing
//! (checked with raidkit-layout's placement, not the engine's); every fault that costs a member
//! (death, latent sector errors, write errors, fail-after-N, an administrative fail) goes only
//! to those slots' disks. Within budget every request must succeed and every read must match.
//! About one run in ten goes over budget on purpose: then requests may fail, but a read that
//! succeeds must still return the right data.
//!
//! The write hole: RAID 4/5/6 without a journal or partial parity log can lose data outside
//! the write in flight when a crash is followed by the loss of a member (or happens while
//! degraded), and md needs a resync after every unclean stop. Some RAID 4/5/6 seeds (half of
//! RAID 4 and 6, a third of RAID 5) get md's write journal on a device of their own; the
//! other RAID 5 arrays are created with md's partial parity log (the engine's default). Both
//! close the hole, so those runs keep every crash and fault. With the partial parity log, a
//! sector in flight on a member lost with the crash reads back old or new, or, where the
//! same write modified another data member in its row, is given up at the replay
//! (`PplRowsLost`): it then reads as an error, and writes over its stripe rows may fail. The
//! run accepts exactly that, after checking that every sector given up was written and not
//! flushed at the crash. The other RAID 4 and 6 arrays have no guard (md has no partial parity
//! log for them): unless [`SimOptions::write_hole`] is set, a run on them skips crashes while
//! degraded and every member fault after a crash, and says so in [`SeedReport::excluded`].

use crate::check::{check_members, SlotMember};
use crate::disk::{SimDisk, SimWorld};
use crate::model::{sector_pattern, Model, Verdict, SECTOR};
use crate::rng::{mix, Rng};
use raidkit_disk::Disk;
use raidkit_engine::{Array, AssembleOptions, CreateOptions, EngineConfig, EngineError};
use raidkit_layout::{Geometry, MdParams};
use raidkit_metadata::{Location, SuperblockVersion};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Knobs of a run (everything else comes from the seed).
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Allow crash-then-degrade on RAID 4/6 without a journal (the write hole, which md has no
    /// means to close there); failures are then expected.
    pub write_hole: bool,
    /// Workload operations per run.
    pub ops: u32,
    /// Keep a step-by-step trace in the report.
    pub trace: bool,
    /// Keep members removed with `remove_member` attached at every later assembly (an
    /// operator who never pulled the old disk). Off by default, and then each seed draws it:
    /// half the seeds keep them, half detach them as when the disk is swapped.
    pub keep_removed: bool,
    /// Threads rebuild, replace, check, repair, resync and patrol run their steps on
    /// ([`EngineConfig::task_threads`]). 1, the default, keeps a seed exactly reproducible;
    /// more runs those tasks' steps side by side (a burst), whose member I/O order then
    /// varies from run to run, so a failure found that way may not replay.
    pub task_threads: usize,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            write_hole: false,
            ops: 120,
            trace: false,
            keep_removed: false,
            task_threads: 1,
        }
    }
}

/// What one seed did and found.
#[derive(Clone, Debug, Default)]
pub struct SeedReport {
    pub seed: u64,
    /// "RAID 5 left-symmetric, 4 disks, chunk 16 sectors, ...".
    pub scenario: String,
    pub ops: u64,
    /// Faults injected: member faults applied plus disk-level errors returned plus crashes.
    pub faults: u64,
    pub crashes: u64,
    /// Of the crashes, power cuts at a superblock write (the first one after a member fault:
    /// between the engine's decision and the superblock update that records it).
    pub superblock_cuts: u64,
    pub rebuilds: u64,
    /// Resyncs after a crash run to completion.
    pub resyncs: u64,
    /// md-style checks run on whole arrays (each must find 0 mismatches).
    pub scrubs: u64,
    /// Patrol reads run.
    pub patrols: u64,
    pub member_checks: u64,
    /// Reshapes finished (after a power cut in some: crash, then continued).
    pub reshapes: u64,
    pub over_budget: bool,
    /// Why parts of the schedule were left out (write-hole class), empty when nothing was.
    pub excluded: Vec<String>,
    pub failure: Option<String>,
    pub trace: Vec<String>,
}

#[derive(Clone, Debug)]
enum FaultKind {
    Die,
    Latent(u32),
    WriteErrors(u32),
    FailAfter(u64),
    AdminFail,
    Slow,
}

#[derive(Clone, Debug)]
enum Event {
    /// A fault on a slot's disk; `cut`: the power goes at the next superblock write.
    Fault {
        disk: usize,
        kind: FaultKind,
        cut: bool,
    },
    Crash {
        mid_flush: bool,
    },
}

struct Scenario {
    level: i32,
    layout: u32,
    raid_disks: usize,
    chunk_sectors: u32,
    size_sectors: u64,
    metadata: SuperblockVersion,
    fault_prone: Vec<usize>,
    over_budget: bool,
    spares: u32,
    events: Vec<(u32, Event)>,
}

fn layout_geometry(s: &Scenario) -> Result<Geometry, String> {
    Geometry::from_md(&MdParams {
        level: s.level,
        layout: s.layout,
        raid_disks: s.raid_disks as u32,
        chunk_sectors: s.chunk_sectors,
        member_data_sectors: vec![s.size_sectors; s.raid_disks],
    })
    .map_err(|e| e.to_string())
}

/// Whether every array chunk keeps a copy (or enough of its stripe) without `lost` slots,
/// answered from raidkit-layout's placement.
fn survives(geo: &Geometry, lost: &[usize]) -> bool {
    match geo {
        Geometry::Parity(_) => lost.len() as u32 <= geo.max_degraded(),
        _ => {
            let total = geo.array_sectors();
            let step = (geo.chunk_sectors() as u64).max(1);
            let mut s = 0;
            while s < total {
                match geo.map(s) {
                    Ok(m) => {
                        if m.placements
                            .iter()
                            .all(|p| lost.contains(&(p.member as usize)))
                        {
                            return false;
                        }
                    }
                    Err(_) => return false,
                }
                s += step;
            }
            true
        }
    }
}

fn gen_scenario(rng: &mut Rng, opts: &SimOptions) -> Result<(Scenario, Geometry), String> {
    let level = *rng.pick(&[0, 1, 4, 5, 5, 6, 6, 10, 10]);
    let (raid_disks, layout) = match level {
        0 => (rng.range(2, 5) as usize, 0),
        1 => (rng.range(2, 4) as usize, 0),
        4 => (rng.range(3, 6) as usize, 0),
        5 => (rng.range(3, 6) as usize, rng.range(0, 5) as u32),
        6 => (
            rng.range(4, 7) as usize,
            *rng.pick(&[0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20]),
        ),
        _ => {
            let n = rng.range(2, 6) as usize;
            let copies = if n >= 3 && rng.chance(250) { 3 } else { 2 };
            let layout = match rng.below(3) {
                0 => 0x100 | copies,
                1 => (copies << 8) | 1,
                _ => 0x10000 | (copies << 8) | 1,
            };
            (n, layout)
        }
    };
    let chunk_sectors = if level == 1 { 0 } else { 8u32 << rng.below(5) };
    let data_disks = match level {
        0 => raid_disks,
        1 => 1,
        4 | 5 => raid_disks - 1,
        6 => raid_disks - 2,
        _ => raid_disks.div_ceil(2),
    } as u64;
    let size_sectors = if level == 1 {
        rng.range(64, 2048)
    } else {
        let chunk = chunk_sectors as u64;
        let max_chunks = (4096 / (chunk * data_disks)).max(2);
        let far_mult = if level == 10 { 4 } else { 1 };
        rng.range(2, max_chunks.clamp(2, 16)) * chunk * far_mult
    };
    let metadata = *rng.pick(&[
        SuperblockVersion::V1_2,
        SuperblockVersion::V1_2,
        SuperblockVersion::V1_1,
        SuperblockVersion::V1_0,
    ]);
    let mut sc = Scenario {
        level,
        layout,
        raid_disks,
        chunk_sectors,
        size_sectors,
        metadata,
        fault_prone: Vec::new(),
        over_budget: false,
        spares: rng.range(0, 2) as u32,
        events: Vec::new(),
    };
    let geo = layout_geometry(&sc)?;
    // Fault-prone slots: a random set the array survives losing; sometimes one more.
    let mut order: Vec<usize> = (0..raid_disks).collect();
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let want = rng.range(0, raid_disks as u64) as usize;
    for &slot in &order {
        if sc.fault_prone.len() >= want {
            break;
        }
        let mut trial = sc.fault_prone.clone();
        trial.push(slot);
        if survives(&geo, &trial) {
            sc.fault_prone = trial;
        }
    }
    if rng.chance(100) {
        if let Some(&extra) = order.iter().find(|s| !sc.fault_prone.contains(s)) {
            let mut trial = sc.fault_prone.clone();
            trial.push(extra);
            if !survives(&geo, &trial) {
                sc.fault_prone = trial;
                sc.over_budget = true;
            }
        }
    }
    let ops = opts.ops.max(1);
    for &slot in &sc.fault_prone {
        if rng.chance(850) {
            let kind = match rng.below(5) {
                0 => FaultKind::Die,
                1 => FaultKind::Latent(rng.range(1, 4) as u32),
                2 => FaultKind::WriteErrors(rng.range(100, 500) as u32),
                3 => FaultKind::FailAfter(rng.range(1, 300)),
                _ => FaultKind::AdminFail,
            };
            let cut = rng.chance(250);
            sc.events.push((
                rng.below(ops as u64) as u32,
                Event::Fault {
                    disk: slot,
                    kind,
                    cut,
                },
            ));
        }
    }
    if rng.chance(300) {
        let disk = rng.below(raid_disks as u64) as usize;
        sc.events.push((
            rng.below(ops as u64) as u32,
            Event::Fault {
                disk,
                kind: FaultKind::Slow,
                cut: false,
            },
        ));
    }
    let crashes = *rng.pick(&[0, 0, 1, 1, 1, 2]);
    for _ in 0..crashes {
        let mid_flush = rng.chance(300);
        sc.events
            .push((rng.range(1, ops as u64) as u32, Event::Crash { mid_flush }));
    }
    sc.events.sort_by_key(|(at, _)| *at);
    Ok((sc, geo))
}

fn describe(sc: &Scenario) -> String {
    let meta = match sc.metadata {
        SuperblockVersion::V1_0 => "1.0",
        SuperblockVersion::V1_1 => "1.1",
        SuperblockVersion::V1_2 => "1.2",
    };
    format!(
        "RAID {} layout {:#x}, {} disks, chunk {} sectors, {} sectors per member, metadata {}, fault-prone slots {:?}{}, {} spare(s), events {:?}",
        sc.level,
        sc.layout,
        sc.raid_disks,
        sc.chunk_sectors,
        sc.size_sectors,
        meta,
        sc.fault_prone,
        if sc.over_budget { " (over budget)" } else { "" },
        sc.spares,
        sc.events
    )
}

struct Run<'a> {
    opts: &'a SimOptions,
    sc: Scenario,
    geo: Geometry,
    world: SimWorld,
    /// World disk index of each scenario slot's original disk.
    model: Model,
    unsynced: BTreeSet<u64>,
    /// Array sectors the engine gave up at a crash with a member lost (the partial parity
    /// log's rows written over several members, one of them the lost one): reads of them
    /// may fail from then on ...
    given_up: BTreeSet<u64>,
    /// ... and so may writes over their stripe rows (md fails them too: parity is a bad
    /// block there and a member is missing).
    given_up_rows: BTreeSet<u64>,
    next_id: u32,
    array: Option<Array>,
    crashed_parity: bool,
    /// Members in sync when a power cut at the next superblock write was armed: the
    /// superblocks on disk say the same until it fires (every membership change writes them).
    cut_insync: Option<Vec<(usize, usize)>>,
    /// Names of members removed from the array and pulled from the machine.
    detached: BTreeSet<String>,
    /// Engine stripe cache for this run: 1 MiB makes the engine's band narrower than the
    /// larger chunks (KNOWN_FAILURES.md #1), 4 MiB keeps it at least a chunk wide.
    stripe_cache_bytes: usize,
    /// Members removed with `remove_member` stay attached at later assemblies (an operator
    /// who never pulled the old disk; KNOWN_FAILURES.md #2) instead of being detached.
    keep_removed: bool,
    /// The array has md's write journal (RAID 4/5/6): the write hole is closed.
    journal: bool,
    /// The read policy the array reads through.
    read_ahead: raidkit_engine::ReadAhead,
    /// The array writes back through its journal (md's journal_mode write-back).
    write_back: bool,
    /// The array has md's partial parity log (RAID 5's default): the write hole is closed.
    ppl: bool,
    /// The members start full of old data and the array is created with a background
    /// initialisation (md's initial resync): usable at once, parity and copies built behind
    /// the workload; the seed of the old data.
    bgi: Option<u64>,
    report: SeedReport,
    scratch: Vec<u8>,
    rng: Rng,
    uuid_rng: Rng,
    /// Reshape decisions draw from their own stream, so seeds without one run as before.
    reshape_rng: Rng,
    /// Reshapes that change the member count or the level.
    sized_reshape_rng: Rng,
}

type Step = Result<(), String>;

impl Run<'_> {
    fn trace(&mut self, line: impl FnOnce() -> String) {
        if self.opts.trace {
            self.report.trace.push(line());
        }
    }

    /// Crash-then-degrade is left out on parity levels unless the run asked for it.
    fn hole_open(&self) -> bool {
        !self.opts.write_hole && !self.journal && !self.ppl
    }

    fn parity(&self) -> bool {
        matches!(self.sc.level, 4..=6)
    }

    fn in_budget(&self) -> bool {
        !self.sc.over_budget
    }

    fn uuid(&mut self) -> [u8; 16] {
        let a = self.uuid_rng.next_u64().to_le_bytes();
        let b = self.uuid_rng.next_u64().to_le_bytes();
        let mut u = [0u8; 16];
        u[..8].copy_from_slice(&a);
        u[8..].copy_from_slice(&b);
        u
    }

    fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            stripe_cache_bytes: self.stripe_cache_bytes,
            max_inflight: 2,
            // One task thread (the default): a seed replays the same member I/O in the same
            // order.
            task_threads: Some(self.opts.task_threads.max(1)),
        }
    }

    fn device_bytes(&self) -> u64 {
        // RAID 5 members also hold md's 1 MiB partial parity log, which moves data 1 MiB on.
        let log = if self.sc.level == 5 { 4096 } else { 0 };
        (self.sc.size_sectors + 4096 + 128 + log) * SECTOR as u64
    }

    /// Gives the array the seed's write policy.
    fn set_write_policy(&self, array: &Array) -> Step {
        if self.write_back {
            array
                .set_write_policy(raidkit_engine::WritePolicy::Back)
                .map_err(|e| format!("write-back refused: {e}"))?;
        }
        Ok(())
    }

    fn create(&mut self) -> Step {
        let bytes = self.device_bytes();
        let mut members: Vec<Box<dyn Disk>> = Vec::new();
        for _ in 0..self.sc.raid_disks {
            members.push(Box::new(self.world.add_disk(bytes)));
        }
        if self.journal {
            // The journal goes last; it gets no faults (losing it stops writes, as in md).
            // Write-back needs room for sixteen stripes' write-backs at once.
            let stripe =
                u64::from(self.sc.chunk_sectors) * SECTOR as u64 * (self.sc.raid_disks as u64 + 2);
            let bytes = if self.write_back {
                (4 << 20u64).max(32 * stripe + (2 << 20))
            } else {
                4 << 20
            };
            members.push(Box::new(self.world.add_disk(bytes)));
        }
        if let Some(old_data) = self.bgi {
            // Used disks: every byte old data, the superblock's and logs' places too.
            let mut junk = Rng::new(old_data);
            for d in self.world.disks() {
                let mut bytes = vec![0u8; d.size_bytes() as usize];
                for c in bytes.chunks_mut(8) {
                    c.copy_from_slice(&junk.next_u64().to_le_bytes()[..c.len()]);
                }
                d.scribble(0, &bytes);
            }
        }
        let device_uuids = (0..members.len()).map(|_| self.uuid()).collect();
        let set_uuid = self.uuid();
        let opts = CreateOptions {
            level: self.sc.level,
            layout: Some(self.sc.layout),
            chunk_sectors: self.sc.chunk_sectors,
            raid_devices: self.sc.raid_disks,
            metadata: self.sc.metadata,
            size_sectors: Some(self.sc.size_sectors),
            name: "sim:0".into(),
            set_uuid,
            device_uuids,
            ctime_seconds: 1_700_000_000,
            init: if self.bgi.is_some() {
                raidkit_engine::Init::Background
            } else {
                raidkit_engine::Init::Zeroed
            },
            consistency: if self.journal {
                raidkit_engine::ConsistencyPolicy::Journal
            } else {
                raidkit_engine::ConsistencyPolicy::Auto
            },
            config: self.engine_config(),
        };
        let array = Array::create(members, opts).map_err(|e| format!("create failed: {e}"))?;
        // Background tasks never yield to the workload in simulation: the workload runs between
        // tasks, not beside them, and yielding would only add wall-clock sleeps.
        array.set_task_rates(raidkit_engine::TaskRates::full());
        array.set_read_ahead(self.read_ahead);
        self.set_write_policy(&array)?;
        self.ppl = array.consistency_policy() == raidkit_engine::ConsistencyPolicy::Ppl;
        let engine_sectors = array.size_bytes() / SECTOR as u64;
        if engine_sectors != self.geo.array_sectors() {
            return Err(format!(
                "array size disagrees: engine {engine_sectors} sectors, raidkit-layout {}",
                self.geo.array_sectors()
            ));
        }
        self.model = if self.bgi.is_some() {
            Model::undefined(engine_sectors)
        } else {
            Model::new(engine_sectors)
        };
        self.array = Some(array);
        Ok(())
    }

    /// World disk index of the member the array knows by `name`.
    fn disk_index(name: &str) -> Option<usize> {
        name.strip_prefix("sim").and_then(|n| n.parse().ok())
    }

    fn slot_disk(&self, slot: usize) -> Option<(usize, usize, u64)> {
        // (world disk, array member index, data offset) of the member in `slot`.
        let st = self.array.as_ref()?.status();
        st.members
            .iter()
            .find(|m| m.slot == Some(slot))
            .and_then(|m| Some((Self::disk_index(&m.name)?, m.index, m.data_offset_sectors)))
    }

    fn fill(&self, start: u64, n: u64, id: u32) -> Vec<u8> {
        let mut buf = vec![0u8; n as usize * SECTOR];
        for i in 0..n {
            sector_pattern(
                id,
                start + i,
                &mut buf[i as usize * SECTOR..(i as usize + 1) * SECTOR],
            );
        }
        buf
    }

    fn random_range(&mut self) -> (u64, u64) {
        let total = self.model.sectors();
        let stripe = match self.sc.level {
            1 => 64,
            _ => {
                self.sc.chunk_sectors as u64
                    * self.geo.data_disks().unwrap_or(self.sc.raid_disks as u32) as u64
            }
        };
        if self.rng.chance(250) {
            // Stripe-aligned, whole stripes: full-stripe writes.
            let stripes = (total / stripe).max(1);
            let k = self.rng.range(1, 2.min(stripes));
            let start = self.rng.below(stripes - k + 1) * stripe;
            return (start, (k * stripe).min(total - start));
        }
        let n = self.rng.range(1, (2 * stripe).min(total).min(512));
        let start = self.rng.below(total - n + 1);
        (start, n)
    }

    fn read_check(&mut self, start: u64, n: u64, what: &str) -> Step {
        let Some(array) = self.array.as_ref() else {
            return Ok(());
        };
        let mut buf = vec![0u8; n as usize * SECTOR];
        let r = array.read_at(&mut buf, start * SECTOR as u64);
        if what == "read" {
            self.trace(|| {
                format!(
                    "  read {start}+{n}: {}",
                    if r.is_ok() { "ok" } else { "error" }
                )
            });
        }
        match r {
            Ok(()) => {
                for i in 0..n {
                    let s = start + i;
                    let sec = &buf[i as usize * SECTOR..(i as usize + 1) * SECTOR];
                    if let Verdict::Wrong {
                        expected, found, ..
                    } = self.model.judge(s, sec, &mut self.scratch)
                    {
                        return Err(format!(
                            "{what}: array sector {s} returned wrong data (expected write id(s) {expected:?}, got {})",
                            match found {
                                Some((id, at)) => format!("write {id}'s data for sector {at}"),
                                None => "bytes of no write".into(),
                            }
                        ));
                    }
                }
                Ok(())
            }
            Err(e)
                if self.in_budget() && self.given_up.range(start..start + n).next().is_none() =>
            {
                Err(format!(
                    "{what}: read of {n} sectors at {start} failed within the fault budget: {e}"
                ))
            }
            Err(e) => {
                self.trace(|| {
                    format!("  read {start}+{n}: clean error (over budget or given up): {e}")
                });
                Ok(())
            }
        }
    }

    fn op_write(&mut self, zeroes: bool, fua: bool) -> Step {
        let (start, n) = self.random_range();
        let id = if zeroes {
            0
        } else {
            self.next_id += 1;
            self.next_id
        };
        let Some(array) = self.array.as_ref() else {
            return Ok(());
        };
        let r = if zeroes {
            array.write_zeroes(start * SECTOR as u64, n * SECTOR as u64)
        } else {
            let buf = self.fill(start, n, id);
            array.write_at(&buf, start * SECTOR as u64, fua)
        };
        self.trace(|| format!("  write id {id} at {start}+{n} fua={fua}: {r:?}"));
        match r {
            Ok(()) => {
                self.model.write_acked(start, n, id, fua);
                Ok(())
            }
            Err(e) => {
                self.model.write_failed(start, n, id);
                if self.in_budget() && self.given_up_rows.range(start..start + n).next().is_none() {
                    Err(format!(
                        "write of {n} sectors at {start} failed within the fault budget: {e}"
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }

    fn op_flush(&mut self) -> Step {
        let Some(array) = self.array.as_ref() else {
            return Ok(());
        };
        let r = array.flush();
        self.trace(|| format!("  flush: {r:?}"));
        match r {
            Ok(()) => {
                self.model.flushed();
                Ok(())
            }
            Err(e) if self.in_budget() => Err(format!("flush failed within the fault budget: {e}")),
            Err(_) => Ok(()),
        }
    }

    fn quiet_check(&mut self, why: &str) -> Step {
        if self.array.is_none() {
            return Ok(());
        }
        let total = self.model.sectors();
        let mut s = 0;
        while s < total {
            let n = (total - s).min(256);
            self.read_check(s, n, why)?;
            s += n;
        }
        let Some(array) = self.array.as_ref() else {
            return Ok(());
        };
        // The members hold what the write-back cache still has only once it wrote it back.
        if let Err(e) = array.write_back_now() {
            if self.in_budget() {
                return Err(format!(
                    "{why}: writing the cache back failed within the fault budget: {e}"
                ));
            }
            return Ok(());
        }
        let st = array.status();
        if st.degraded || st.failed {
            return Ok(());
        }
        if st.members.iter().any(|m| m.bad_block_ranges > 0) {
            // What a bad-block log lists is not data (reads there come from redundancy, or
            // fail where none is left), so member bytes there need not match the model.
            self.trace(|| format!("  {why}: member check skipped: bad-block logs list ranges"));
            return Ok(());
        }
        let mut slots = Vec::with_capacity(self.sc.raid_disks);
        for slot in 0..self.sc.raid_disks {
            match self.slot_disk(slot) {
                Some((d, _, off)) => slots.push((d, off)),
                None => return Ok(()),
            }
        }
        let members: Vec<SlotMember<'_>> = slots
            .iter()
            .map(|&(d, off)| SlotMember {
                disk: self.world.disk(d),
                data_offset_sectors: off,
            })
            .collect();
        let stats = check_members(&self.geo, &members, &self.model, &mut self.unsynced)
            .map_err(|e| format!("{why}: members disagree with the independent encoding: {e}"))?;
        self.report.member_checks += 1;
        self.trace(|| {
            format!(
                "  {why}: members match the independent encoding ({} sectors checked, {} skipped, {} not yet consistent since a crash)",
                stats.sectors_checked, stats.sectors_skipped, stats.sectors_unsynced
            )
        });
        Ok(())
    }

    fn apply_fault(&mut self, slot: usize, kind: FaultKind) -> Step {
        if !matches!(kind, FaultKind::Slow)
            && self.parity()
            && self.crashed_parity
            && self.hole_open()
        {
            {
                self.report.excluded.push(format!(
                    "{kind:?} on slot {slot} after a crash on RAID {} (write hole)",
                    self.sc.level
                ));
                return Ok(());
            }
        }
        let Some((disk, member_index, off)) = self.slot_disk(slot) else {
            return Ok(());
        };
        self.report.faults += 1;
        self.trace(|| format!("  fault {kind:?} on slot {slot} (sim{disk})"));
        let d = self.world.disk(disk).clone();
        match kind {
            FaultKind::Die => d.update_faults(|f| f.dead = true),
            FaultKind::Latent(k) => {
                let mut bad = Vec::new();
                for _ in 0..k {
                    bad.push(off + self.rng.below(self.sc.size_sectors));
                }
                d.update_faults(|f| f.bad_sectors.extend(bad));
            }
            FaultKind::WriteErrors(r) => d.update_faults(|f| f.write_error_per_mille = r),
            FaultKind::FailAfter(n) => d.update_faults(|f| f.fail_after_ops = Some(n)),
            FaultKind::AdminFail => {
                if let Some(a) = self.array.as_ref() {
                    let _ = a.fail_member(member_index);
                }
            }
            FaultKind::Slow => d.update_faults(|f| {
                f.latency_ns = 100_000;
                f.slow_factor = 20;
                f.stall_per_mille = 20;
                f.stall_ns = 2_000_000_000;
            }),
        }
        Ok(())
    }

    fn crash(&mut self, mid_flush: bool) -> Step {
        let Some(array) = self.array.as_ref() else {
            return Ok(());
        };
        let status = array.status();
        let degraded = status.degraded;
        let insync = Self::insync_members(&status);
        if self.parity() && degraded && self.hole_open() {
            self.report.excluded.push(format!(
                "crash while degraded on RAID {} (write hole)",
                self.sc.level
            ));
            return Ok(());
        }
        let hardened: Vec<usize> = if mid_flush {
            (0..self.world.disks().len())
                .filter(|_| self.rng.below(2) == 0)
                .collect()
        } else {
            Vec::new()
        };
        self.trace(|| format!("  crash (hardened first: {hardened:?})"));
        self.power_loss(&hardened, &insync)
    }

    /// Arms a power cut at the next superblock write on any member (see
    /// [`SimWorld::arm_power_cut`]), unless the crash would open the write hole this run
    /// leaves out.
    fn arm_superblock_cut(&mut self, slot: usize) {
        let Some(array) = self.array.as_ref() else {
            return;
        };
        if self.parity() && self.hole_open() {
            self.report.excluded.push(format!(
                "power cut at the superblock update after a fault on slot {slot}, RAID {} (write hole)",
                self.sc.level
            ));
            return;
        }
        let status = array.status();
        self.cut_insync = Some(Self::insync_members(&status));
        let version = self.sc.metadata;
        let ranges: Vec<Option<(u64, u64)>> = self
            .world
            .disks()
            .iter()
            .map(|d| {
                let at = superblock_offset(version, d);
                Some((at, at + 4096))
            })
            .collect();
        self.world.arm_power_cut(&ranges);
        self.trace(|| {
            format!("  power cut armed at the next superblock write (fault on slot {slot})")
        });
    }

    /// The armed power cut fired: the crash that follows, from the members in sync when it
    /// was armed.
    fn superblock_cut(&mut self) -> Step {
        let insync = self.cut_insync.take().unwrap_or_default();
        self.trace(|| "  power cut at a superblock write".into());
        self.report.superblock_cuts += 1;
        self.power_loss(&[], &insync)
    }

    /// Power loss on every disk (after `hardened` wrote back their caches), then reassembly
    /// from what survived; `insync`: the members the superblocks on disk call in sync.
    fn power_loss(&mut self, hardened: &[usize], insync: &[(usize, usize)]) -> Step {
        self.world.crash(hardened);
        self.report.crashes += 1;
        self.report.faults += 1;
        self.array = None; // dropped without stop: dirty, like the power loss it is
        let doubt = self.model.crashed();
        self.unsynced.extend(doubt);
        self.world.power_on();
        if self.only_stale_left(insync) {
            // Every member still in sync has died: what is left are members the array had
            // already failed. md (and any RAID without outside knowledge) would assemble their
            // stale contents; the array is lost, so the run ends here.
            self.trace(|| "  array lost: only members failed earlier remain".into());
            return Ok(());
        }
        if self.parity() {
            self.crashed_parity = true;
            if self.hole_open() {
                // Latent faults already planted would degrade the array after the crash.
                for &slot in &self.sc.fault_prone {
                    if let Some(d) = self.world.disks().get(slot) {
                        let f = d.faults();
                        if !f.dead
                            && (!f.bad_sectors.is_empty()
                                || f.write_error_per_mille > 0
                                || f.fail_after_ops.is_some())
                        {
                            d.update_faults(|f| {
                                f.bad_sectors.clear();
                                f.write_error_per_mille = 0;
                                f.fail_after_ops = None;
                            });
                            self.report.excluded.push(format!(
                                "pending faults on sim{slot} cleared at a crash on RAID {} (write hole)",
                                self.sc.level
                            ));
                        }
                    }
                }
            }
        }
        self.assemble("after crash")
    }

    /// (slot, world disk) of every member in sync.
    fn insync_members(status: &raidkit_engine::Status) -> Vec<(usize, usize)> {
        status
            .members
            .iter()
            .filter(|m| m.role == "active")
            .filter_map(|m| Some((m.slot?, Self::disk_index(&m.name)?)))
            .collect()
    }

    /// Whether `d`'s superblock sector is all zeros on the medium (never written).
    fn blank_superblock(&self, d: &SimDisk) -> bool {
        let at = superblock_offset(self.sc.metadata, d);
        d.peek_durable(at, SECTOR).iter().all(|&b| b == 0)
    }

    /// True when the members in sync that are still alive no longer hold the array.
    fn only_stale_left(&self, insync: &[(usize, usize)]) -> bool {
        let lost: Vec<usize> = (0..self.sc.raid_disks)
            .filter(|&slot| {
                !insync
                    .iter()
                    .any(|&(s, d)| s == slot && !self.world.disk(d).faults().dead)
            })
            .collect();
        !survives(&self.geo, &lost)
    }

    fn assemble(&mut self, why: &str) -> Step {
        let mut disks = self.world.surviving_disks();
        disks.retain(|d| !self.detached.contains(d.name()));
        let result = loop {
            let members: Vec<Box<dyn Disk>> = disks
                .iter()
                .map(|d| Box::new(d.clone()) as Box<dyn Disk>)
                .collect();
            let opts = AssembleOptions {
                force: self.opts.write_hole,
                // Only survivors are offered (dead members are gone for good), as an
                // operator would start it with mdadm --run.
                run: true,
                config: self.engine_config(),
                ..AssembleOptions::default()
            };
            match Array::assemble(members, opts) {
                // A member that fails I/O while its superblock is read is left out and assembly
                // tried again, as an operator would (the engine refuses the whole set).
                Err(EngineError::Disk(e)) if disks.iter().any(|d| d.name() == e.member) => {
                    self.trace(|| format!("  assembly {why}: {e}; retrying without that member"));
                    disks.retain(|d| d.name() != e.member);
                }
                // A disk the power went out on before its first superblock landed (a spare
                // being added) is blank: mdadm finds no superblock there and an operator leaves
                // it out. Only a blank disk: a member with a damaged superblock is a failure.
                Err(EngineError::NoSuperblock { member, .. })
                    if disks
                        .iter()
                        .any(|d| d.name() == member && self.blank_superblock(d)) =>
                {
                    self.trace(|| {
                        format!("  assembly {why}: {member} is blank; retrying without it")
                    });
                    disks.retain(|d| d.name() != member);
                }
                r => break r,
            }
        };
        match result {
            Ok((a, rep)) => {
                a.set_task_rates(raidkit_engine::TaskRates::full());
                a.set_read_ahead(self.read_ahead);
                if !a.is_read_only() {
                    self.set_write_policy(&a)?;
                }
                self.trace(|| format!("  assembled {why}: {rep:?}"));
                self.note_given_up(&rep.events)?;
                self.array = Some(a);
                Ok(())
            }
            Err(e) => {
                let dirty_degraded = matches!(e, EngineError::DirtyDegraded { .. });
                if dirty_degraded {
                    // A member died unnoticed before the crash: crash-then-degrade on a parity
                    // level, which md also refuses to start without --force.
                    self.report.excluded.push(format!(
                        "assembly {why} refused as dirty and degraded (write hole): {e}"
                    ));
                }
                if self.in_budget() && !dirty_degraded {
                    Err(format!(
                        "assembly {why} failed within the fault budget: {e}"
                    ))
                } else {
                    self.trace(|| format!("  assembly {why} refused: {e}"));
                    Ok(())
                }
            }
        }
    }

    /// Takes in the sectors a replay gave up ([`raidkit_engine::ArrayEvent::PplRowsLost`]),
    /// after checking that each was written and not flushed at the crash: the engine may
    /// give up only what the crash left in doubt, never data that was durable.
    fn note_given_up(&mut self, events: &[raidkit_engine::ArrayEvent]) -> Step {
        for e in events {
            let raidkit_engine::ArrayEvent::PplRowsLost {
                array_sector,
                sectors,
                ..
            } = e
            else {
                continue;
            };
            let (start, n) = (*array_sector, *sectors);
            if let Some(s) = (start..start + n).find(|&s| !self.model.unflushed_at_crash(s)) {
                return Err(format!(
                    "the replay gave up array sector {s}, which no unflushed write covered at the crash ({e})"
                ));
            }
            let chunk = self.sc.chunk_sectors as u64;
            let d = u64::from(self.geo.data_disks().unwrap_or(1));
            let stripe_base = start / (d * chunk) * (d * chunk);
            let off = start % chunk;
            self.given_up.extend(start..start + n);
            for dd in 0..d {
                let s = stripe_base + dd * chunk + off;
                self.given_up_rows.extend(s..s + n);
            }
            self.trace(|| format!("  given up at the replay: {start}+{n}"));
        }
        Ok(())
    }

    fn maybe_add_spare(&mut self) -> Step {
        let Some(array) = self.array.as_ref() else {
            return Ok(());
        };
        let st = array.status();
        if !st.degraded || st.failed || self.sc.spares == 0 {
            return Ok(());
        }
        self.sc.spares -= 1;
        if self.rng.below(2) == 0 {
            // md's usual order: remove the faulty member first, then add the replacement.
            for m in st.members.iter().filter(|m| m.role == "faulty") {
                let r = self.array.as_ref().map(|a| a.remove_member(m.index));
                self.trace(|| format!("  remove faulty member {} ({}): {r:?}", m.index, m.name));
                match r {
                    Some(Ok(())) if !self.keep_removed => {
                        self.detached.insert(m.name.clone());
                    }
                    Some(Err(e)) if self.in_budget() => {
                        return Err(format!("removing faulty member {} failed: {e}", m.name));
                    }
                    _ => {}
                }
            }
        }
        let disk = self.world.add_disk(self.device_bytes());
        let uuid = self.uuid();
        // The rebuild itself runs at later background ops, a few steps at a time.
        let r = self
            .array
            .as_ref()
            .map(|a| a.add_spare(Box::new(disk), uuid));
        self.trace(|| format!("  add spare: {r:?}"));
        match r {
            Some(Ok(())) => {
                self.report.rebuilds += 1;
                Ok(())
            }
            Some(Err(e)) if self.in_budget() => Err(format!(
                "rebuild onto a spare failed within the fault budget: {e}"
            )),
            _ => Ok(()),
        }
    }

    fn step(&mut self, op_index: u32) -> Step {
        while self
            .sc
            .events
            .first()
            .is_some_and(|(at, _)| *at <= op_index)
        {
            let (_, ev) = self.sc.events.remove(0);
            match ev {
                Event::Fault { disk, kind, cut } => {
                    if cut {
                        self.arm_superblock_cut(disk);
                    }
                    self.apply_fault(disk, kind)?;
                    if self.world.power_was_cut() {
                        self.superblock_cut()?;
                    }
                }
                Event::Crash { mid_flush } => self.crash(mid_flush)?,
            }
        }
        if self.array.is_none() {
            return Ok(());
        }
        let r = self.op();
        if self.world.power_was_cut() {
            // The machine died inside the request: what it returned never reached anyone.
            self.trace(|| format!("  (request cut short by the power cut: {r:?})"));
            return self.superblock_cut();
        }
        r
    }

    fn op(&mut self) -> Step {
        self.report.ops += 1;
        let roll = self.rng.below(100);
        match roll {
            0..=39 => self.op_write(false, false),
            40..=44 => self.op_write(false, true),
            45..=49 => self.op_write(true, false),
            50..=79 => {
                let (s, n) = self.random_range();
                self.read_check(s, n, "read")
            }
            80..=91 => self.op_flush(),
            92..=94 => self.maybe_add_spare(),
            95..=96 => self.op_background(),
            _ => {
                self.quiet_check("quiet point")?;
                if self.reshape_rng.chance(200) {
                    self.reshape()?;
                }
                Ok(())
            }
        }
    }

    /// A reshape as an operator would run it (`raidkit grow` on the stopped array): a RAID
    /// 4/5/6's chunk size or layout, a RAID 10's chunk (near or offset copies; not a layout
    /// change, which changes which pairs of members it survives losing, and so the seed's
    /// fault budget), a RAID 5 becoming a RAID 6 on a spare;
    /// a RAID 4/5/6 growing by a member (the model's new room reads zeros), a RAID 6 becoming
    /// a RAID 5 (its Q member left as a spare), a RAID 5 a RAID 4, a RAID 4 a RAID 5. Sometimes the power is cut at one of its writes (then a
    /// crash, and the reshape continued, or started again when the cut came before it was
    /// recorded); a member fault during it degrades it. The data must read back the same, and
    /// the members match the independent encoding of the new geometry.
    fn reshape(&mut self) -> Step {
        let Some(array) = self.array.as_ref() else {
            return Ok(());
        };
        let st = array.status();
        // A RAID 10 of near copies over any number of members, or of offset copies over a
        // whole number of its near copies (md reshapes no far layout).
        let l10 = self.sc.layout;
        let (near, far, offset) = (l10 & 0xff, (l10 >> 8) & 0xff, l10 & 0x10000 != 0);
        let reshapable10 = self.sc.level == 10
            && (far == 1 || offset)
            && near * far > 0
            && (!offset || self.sc.raid_disks.is_multiple_of(near as usize));
        // Not while a resync is still to run (an initialisation in the background a partial
        // background op left): a member lost in the reshape's stop would leave the array
        // unsynced and degraded, which md does not start without --force.
        if st.degraded
            || st.failed
            || st.resync_from_sectors.is_some()
            || self.journal
            || self.ppl
            || self.world.power_cut_armed()
            || !(self.parity() || reshapable10)
        {
            return Ok(());
        }
        let mut target = raidkit_engine::ReshapeTarget::default();
        let (level, layout, chunk) = (self.sc.level, self.sc.layout, self.sc.chunk_sectors);
        // One in three: a reshape that changes the size or the level (its own stream, so the
        // others draw as they did).
        let sized = &mut self.sized_reshape_rng;
        let parity = matches!(level, 4..=6);
        let grows = if (parity || reshapable10) && sized.chance(333) {
            match sized.below(2) {
                // A RAID 10 of near copies over one member more puts copies of a chunk on
                // members that held none together before (4 to 5 members of 2 copies: slots 1
                // and 2 hold both copies of chunk 3): only while the fault-prone slots are
                // fewer than the copies does the seed's fault budget still hold.
                0 if self.sc.spares > 0
                    && (level != 10 || self.sc.fault_prone.len() < (near * far) as usize) =>
                {
                    target.raid_devices = Some(self.sc.raid_disks + 1);
                    true
                }
                // md changes no RAID 10's level in a reshape.
                _ if level == 10 => return Ok(()),
                // A RAID 5 loses one member where a RAID 6 lost two: only when the seed's
                // faults stay within what a RAID 5 survives (its budget is drawn per level).
                _ if level == 6 && self.sc.fault_prone.len() > 1 => return Ok(()),
                _ => {
                    match level {
                        6 => {
                            target.level = Some(5);
                            // A layout without a RAID 5 form (the DDF ones) names one.
                            if !matches!(layout, 0..=5 | 16..=20) {
                                target.layout = Some(*sized.pick(&[0, 1, 2, 3, 4, 5]));
                            }
                        }
                        5 => target.level = Some(4),
                        _ => {
                            target.level = Some(5);
                            target.layout = Some(*sized.pick(&[0, 1, 2, 3, 4, 5]));
                        }
                    }
                    false
                }
            }
        } else {
            let r = &mut self.reshape_rng;
            match r.below(3) {
                0 if level == 5 && self.sc.spares > 0 => target.level = Some(6),
                1 if level == 5 => target.layout = Some(*r.pick(&[0, 1, 2, 3, 4, 5])),
                1 if level == 6 => {
                    target.layout = Some(*r.pick(&[0, 1, 2, 3, 4, 5, 16, 17, 18, 19]))
                }
                _ => target.chunk_sectors = Some(8u64 << r.below(5)),
            }
            false
        };
        let same = target.layout == Some(layout) || target.chunk_sectors == Some(chunk as u64);
        if same
            || target
                .chunk_sectors
                .is_some_and(|c| !self.sc.size_sectors.is_multiple_of(c))
        {
            return Ok(());
        }
        let cut = self.reshape_rng.chance(500);
        self.trace(|| {
            format!(
                "  reshape to {target:?}{}",
                if cut {
                    ", power cut at one of its writes"
                } else {
                    ""
                }
            )
        });
        if target.level == Some(6) || grows {
            let disk = self.world.add_disk(self.device_bytes());
            let uuid = self.uuid();
            let added = self
                .array
                .as_ref()
                .map(|a| a.add_spare(Box::new(disk), uuid));
            if let Some(Err(e)) = added {
                return if self.in_budget() {
                    Err(format!("adding a spare for a reshape failed: {e}"))
                } else {
                    Ok(())
                };
            }
            self.sc.spares -= 1;
        }
        let Some(array) = self.array.take() else {
            return Ok(());
        };
        if let Err(e) = array.stop() {
            return if self.in_budget() {
                Err(format!(
                    "clean stop before a reshape failed within the fault budget: {e}"
                ))
            } else {
                Ok(())
            };
        }
        drop(array);
        self.model.flushed();
        if cut {
            // The power goes at the first write into a random range of a random disk
            // (superblocks, the old data, the new: wherever the reshape writes first).
            let disks = self.world.disks().len();
            let d = self.reshape_rng.below(disks as u64) as usize;
            let sectors = self.world.disk(d).size_bytes() / SECTOR as u64;
            let at = self.reshape_rng.below(sectors);
            let span = 1 + self.reshape_rng.below(sectors / 4);
            let ranges: Vec<Option<(u64, u64)>> = (0..disks)
                .map(|i| (i == d).then_some((at * SECTOR as u64, (at + span) * SECTOR as u64)))
                .collect();
            self.world.arm_power_cut(&ranges);
        }
        let never = std::sync::atomic::AtomicBool::new(false);
        let ctl = raidkit_engine::ReshapeControl {
            progress: &|_, _| {},
            stop: &never,
            pause_at_bytes: None,
        };
        // The members an operator would give: the disks not dead, not pulled, and not one
        // whose superblock could not be read (left out and the command run again, as
        // assembly does).
        let unreadable = std::cell::RefCell::new(BTreeSet::<String>::new());
        let members = |run: &Self| -> Vec<Box<dyn Disk>> {
            run.world
                .surviving_disks()
                .into_iter()
                .filter(|d| !run.detached.contains(d.name()))
                .filter(|d| !unreadable.borrow().contains(d.name()))
                .map(|d| Box::new(d) as Box<dyn Disk>)
                .collect()
        };
        // A disk left blank by a power cut while it was being added as a spare: mdadm finds
        // no superblock there and the operator leaves it out, as assembly does.
        let blank: BTreeSet<String> = self
            .world
            .surviving_disks()
            .iter()
            .filter(|d| self.blank_superblock(d))
            .map(|d| d.name().to_string())
            .collect();
        // Not when the power went (`cut`): every disk fails then, and the crash comes first.
        let again = |r: &Result<raidkit_engine::ReshapeReport, EngineError>, cut: bool| match r {
            Err(EngineError::Disk(e)) if !cut && e.member.starts_with("sim") => {
                unreadable.borrow_mut().insert(e.member.clone())
            }
            Err(EngineError::NoSuperblock { member, .. }) if blank.contains(member) => {
                unreadable.borrow_mut().insert(member.clone())
            }
            _ => false,
        };
        let opts = AssembleOptions {
            run: true,
            config: self.engine_config(),
            ..AssembleOptions::default()
        };
        let mut result = Array::reshape(members(self), &target, &opts, &ctl);
        while again(&result, self.world.power_was_cut()) {
            result = Array::reshape(members(self), &target, &opts, &ctl);
        }
        if self.world.power_was_cut() {
            self.trace(|| {
                format!(
                    "  power cut in the reshape: {:?}",
                    result.as_ref().map(|r| r.position_sectors)
                )
            });
            self.world.crash(&[]);
            self.world.power_on();
            self.model.crashed();
            result = Array::continue_reshape(members(self), &opts, &ctl);
            while again(&result, self.world.power_was_cut()) {
                result = Array::continue_reshape(members(self), &opts, &ctl);
            }
            // Cut before the start was recorded, or after the end: once more.
            if let Err(EngineError::CannotGrow(raidkit_engine::GrowRefusal::NoReshape)) = result {
                result = Array::reshape(members(self), &target, &opts, &ctl);
            }
        } else if self.world.power_cut_armed() {
            self.world.disarm_power_cut();
        }
        match &result {
            Ok(rep) => {
                self.trace(|| format!("  reshaped: {rep:?}"));
                self.report.reshapes += 1;
            }
            Err(EngineError::CannotGrow(why)) => self.trace(|| format!("  reshape refused: {why}")),
            Err(e) if self.in_budget() => {
                return Err(format!("reshape failed within the fault budget: {e}"))
            }
            Err(e) => self.trace(|| format!("  reshape failed (over budget): {e}")),
        }
        self.assemble("after a reshape")?;
        if let Some(a) = self.array.as_ref() {
            let g = a.geometry();
            (
                self.sc.level,
                self.sc.layout,
                self.sc.raid_disks,
                self.sc.chunk_sectors,
            ) = (
                g.md_level(),
                g.md_layout(),
                g.raid_disks,
                g.chunk_sectors as u32,
            );
            // The reshape records the space each member uses as its old geometry used it
            // (an offset layout's whole groups of rows), which md reads back: with a smaller
            // chunk, the space the seed asked for would hold more groups than the array has.
            self.sc.size_sectors = g.member_data_sectors;
            self.geo = layout_geometry(&self.sc)?;
            if result.is_ok() {
                // Every stripe was rewritten with fresh parity.
                self.unsynced.clear();
            }
            // More members: the new room reads zeros (the reshape writes them there).
            self.model.grow(a.size_bytes() / SECTOR as u64);
        }
        self.quiet_check("check after a reshape")
    }

    /// Runs the array's pending background work (rebuild onto spares, resync after a crash),
    /// then, on a whole and synced array, md's check, which must find nothing.
    fn op_background(&mut self) -> Step {
        self.background(true)
    }

    /// Background work; with `partial`, a task may be stopped after a few steps (it resumes
    /// from its checkpoint at a later background op), so workload, faults and crashes land
    /// in the middle of rebuilds and resyncs.
    fn background(&mut self, partial: bool) -> Step {
        let Some(array) = self.array.take() else {
            return Ok(());
        };
        let limit = if partial && self.rng.below(2) == 0 {
            1 + self.rng.below(6)
        } else {
            u64::MAX
        };
        let patrol = self.rng.below(4) == 0;
        let r = self.background_on(&array, limit, patrol);
        self.array = Some(array);
        r
    }

    fn background_on(&mut self, array: &Array, limit: u64, patrol: bool) -> Step {
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut steps = 0u64;
        let reports = match array.run_pending(
            &mut |_| {
                steps += 1;
                if steps > limit {
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            },
            &stop,
        ) {
            Ok(r) => r,
            Err(e) if self.in_budget() => {
                return Err(format!(
                    "background work failed within the fault budget: {e}"
                ))
            }
            Err(_) => return Ok(()),
        };
        let mut resynced = false;
        let (whole, degraded) = {
            let st = array.status();
            (!st.failed, st.degraded)
        };
        for r in &reports {
            self.trace(|| {
                format!(
                    "  {}: {:?} ({} mismatched sectors)",
                    r.progress.kind, r.outcome, r.progress.mismatch_sectors
                )
            });
            match &r.outcome {
                // A member failing mid-resync ends it on a parity level (md aborts a resync
                // the same way): the array runs degraded, its data still checked below.
                raidkit_engine::TaskOutcome::Failed { .. }
                    if r.progress.kind == raidkit_engine::TaskKind::Resync
                        && degraded
                        && self.parity() => {}
                raidkit_engine::TaskOutcome::Failed { error } if self.in_budget() && whole => {
                    return Err(format!(
                        "{} failed within the fault budget: {error}",
                        r.progress.kind
                    ));
                }
                raidkit_engine::TaskOutcome::Completed
                    if r.progress.kind == raidkit_engine::TaskKind::Resync =>
                {
                    resynced = true;
                }
                _ => {}
            }
        }
        if resynced {
            // Parity and copies agree with data everywhere again: the members must now match
            // the independent encoding even where a crash left writes in doubt.
            self.unsynced.clear();
            self.report.resyncs += 1;
        }
        let never = std::sync::atomic::AtomicBool::new(false);
        if patrol {
            match array.run_task(raidkit_engine::TaskKind::Patrol, &mut |_| {}, &never) {
                Ok(r) => {
                    self.report.patrols += 1;
                    self.trace(|| {
                        format!(
                            "  patrol: {:?}, {} sectors rewritten, {} to the bad-block log",
                            r.outcome, r.progress.corrected_sectors, r.progress.bad_block_sectors
                        )
                    });
                }
                Err(e) => self.trace(|| format!("  patrol refused: {e}")),
            }
        }
        let st = array.status();
        if st.degraded || st.failed || st.level == 0 || st.resync_from_sectors.is_some() {
            return Ok(());
        }
        let r = array.run_task(raidkit_engine::TaskKind::Check, &mut |_| {}, &never);
        self.trace(|| match &r {
            Ok(r) => format!(
                "  check: {:?}, {} mismatched sectors",
                r.outcome, r.progress.mismatch_sectors
            ),
            Err(e) => format!("  check refused: {e}"),
        });
        // A member failing during the check ends it; that is the fault, not a finding.
        let whole = {
            let st = array.status();
            !st.degraded && !st.failed
        };
        match r {
            Ok(r) if r.outcome == raidkit_engine::TaskOutcome::Completed => {
                self.report.scrubs += 1;
                if r.progress.mismatch_sectors > 0 && self.in_budget() {
                    return Err(format!(
                        "check found {} mismatched sectors on a whole, synced array",
                        r.progress.mismatch_sectors
                    ));
                }
                Ok(())
            }
            Ok(r) => match r.outcome {
                raidkit_engine::TaskOutcome::Failed { error } if self.in_budget() && whole => {
                    Err(format!("check failed within the fault budget: {error}"))
                }
                _ => Ok(()),
            },
            Err(e) if self.in_budget() && whole => Err(format!("check refused: {e}")),
            Err(_) => Ok(()),
        }
    }

    fn finish(&mut self) -> Step {
        if self.world.power_cut_armed() {
            self.world.disarm_power_cut();
            self.cut_insync = None;
        }
        self.quiet_check("final check")?;
        self.maybe_add_spare()?;
        self.background(false)?;
        self.quiet_check("final check after rebuild and resync")?;
        let Some(array) = self.array.take() else {
            return Ok(());
        };
        let status = array.status();
        if status.failed {
            return Ok(());
        }
        let insync = Self::insync_members(&status);
        // A resync that cannot run (a parity array missing a member, as a background
        // initialisation can be left) stays pending across the stop: the superblocks
        // record its cursor, so the array comes back not clean.
        let resync_left = status.resync_from_sectors.is_some();
        if let Err(e) = array.stop() {
            if self.in_budget() {
                return Err(format!("clean stop failed within the fault budget: {e}"));
            }
            return Ok(());
        }
        drop(array);
        self.model.flushed();
        if self.only_stale_left(&insync) {
            return Ok(());
        }
        self.assemble("after a clean stop")?;
        if let Some(a) = self.array.as_ref() {
            let st = a.status();
            let clean = st.state == raidkit_engine::ArrayState::Clean;
            // (A pending resync may also be dropped at the stop: md's rule when a parity
            // array has lost all the members it can lose, where nothing could resync.)
            if self.in_budget() && !resync_left && (!clean || st.resync_from_sectors.is_some()) {
                return Err("reassembled after a clean stop but not clean".into());
            }
        }
        self.quiet_check("check after a clean stop and reassembly")
    }
}

/// Byte offset of the md superblock of `version` on `d`.
fn superblock_offset(version: SuperblockVersion, d: &SimDisk) -> u64 {
    Location::new(version, d.size_bytes() / SECTOR as u64).superblock_byte_offset()
}

/// Runs one seed.
pub fn run_seed(seed: u64, opts: &SimOptions) -> SeedReport {
    let rng = Rng::new(seed);
    let mut gen = rng.fork(1);
    let mut report = SeedReport {
        seed,
        ..SeedReport::default()
    };
    // Engine and operator choices draw from their own stream, so they do not shift the
    // scenario or the workload of a seed.
    let mut choices = rng.fork(5);
    let stripe_cache_bytes = if choices.below(2) == 0 {
        1 << 20
    } else {
        4 << 20
    };
    // Half the seeds leave removed members attached (an operator who never pulled the old
    // disk), unless asked for always.
    let keep_removed = opts.keep_removed || choices.below(2) == 0;
    // RAID 4/5/6 get md's write journal on a device of their own in some seeds (half of
    // RAID 4 and 6, a third of RAID 5, whose default is the partial parity log); with it the
    // write hole is closed, so those runs keep crash-then-degrade in.
    let journal_draw = choices.below(6);
    // The read policy, from a stream of its own: a third of the seeds each read through no
    // cache, a read-ahead of every miss, or the adaptive one, so the cache meets the faults,
    // crashes and reassemblies of every scenario.
    let read_ahead = match rng.fork(8).below(3) {
        0 => raidkit_engine::ReadAhead::None,
        1 => raidkit_engine::ReadAhead::Always,
        _ => raidkit_engine::ReadAhead::Adaptive,
    };
    // Arrays with a journal write back through it in half the seeds (a stream of its own
    // again): acknowledged writes then live in the journal and the cache until written back,
    // across the same crashes, member losses and reassemblies.
    let write_back_draw = rng.fork(9).below(2) == 0;
    let (sc, geo) = match gen_scenario(&mut gen, opts) {
        Ok(x) => x,
        Err(e) => {
            report.failure = Some(format!("scenario geometry refused by raidkit-layout: {e}"));
            return report;
        }
    };
    let journal = match sc.level {
        4 | 6 => journal_draw < 3,
        5 => journal_draw < 2,
        _ => false,
    };
    let write_back = journal && write_back_draw;
    // A quarter of the arrays with redundancy are created over old data with a background
    // initialisation (a stream of its own, so other seeds run as before).
    let mut bgi_rng = rng.fork(10);
    let bgi = (sc.level != 0 && bgi_rng.below(4) == 0).then(|| bgi_rng.next_u64());
    report.scenario = format!(
        "{}{}{}, engine stripe cache {} MiB, read-ahead {}, removed members {}",
        describe(&sc),
        match (journal, write_back) {
            (true, true) => ", write journal (write-back)",
            (true, false) => ", write journal",
            _ => "",
        },
        if bgi.is_some() {
            ", created over old data with a background initialisation"
        } else {
            ""
        },
        stripe_cache_bytes >> 20,
        read_ahead.name(),
        if keep_removed {
            "stay attached"
        } else {
            "detached"
        }
    );
    report.over_budget = sc.over_budget;
    let mut run = Run {
        opts,
        world: SimWorld::new(mix(seed, 2)),
        sc,
        geo,
        model: Model::new(0),
        unsynced: BTreeSet::new(),
        given_up: BTreeSet::new(),
        given_up_rows: BTreeSet::new(),
        next_id: 0,
        array: None,
        crashed_parity: false,
        cut_insync: None,
        detached: BTreeSet::new(),
        stripe_cache_bytes,
        keep_removed,
        journal,
        read_ahead,
        write_back,
        ppl: false,
        bgi,
        report,
        scratch: vec![0u8; SECTOR],
        rng: rng.fork(3),
        uuid_rng: rng.fork(4),
        reshape_rng: rng.fork(6),
        sized_reshape_rng: rng.fork(7),
    };
    let mut result = run.create();
    if result.is_ok() {
        for i in 0..opts.ops {
            result = run.step(i);
            if result.is_err() {
                break;
            }
        }
    }
    if result.is_ok() {
        result = run.finish();
    }
    run.array = None;
    let c = run.world.counters();
    run.report.faults += c.injected_errors + c.stalls;
    if let Err(e) = result {
        let mut msg = e;
        let _ = write!(msg, " [after {} ops]", run.report.ops);
        run.report.failure = Some(msg);
    }
    run.report
}

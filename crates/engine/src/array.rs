//! The real driver: an [`Array`] runs the sans-IO core on worker threads over member [`Disk`]s
//! and keeps md's superblocks up to date.
//!
//! Owns: create (mdadm's placement, clean and consistent from the start), assemble (md's
//! rules: newest events wins; foreign, mismatched, duplicated, stale and undersized members are
//! refused with the member named; dirty + degraded RAID 4/5/6 needs force), the clean/dirty
//! state (dirty before the first write, clean on [`Array::stop`]), members failing (role 0xfffe
//! in the survivors' superblocks, events + 1), spares, and the blocking request API.
//!
//! Concurrency: each member has a worker thread with a queue; one request's member I/O runs on
//! all members at once; requests lock only the stripes they touch, so requests on different
//! stripes never wait on each other. Memory: requests in flight are bounded by
//! `EngineConfig::max_inflight` and each request's scratch by `stripe_cache_bytes /
//! max_inflight` (large requests are split into bounded batches), independent of array size.
//!
//! Durability and write ordering: a write returns once every member write of it has completed
//! (not necessarily durable). `flush()` fdatasyncs every in-sync member; a write with `fua`
//! does the same before it returns. The dirty mark reaches every member (written and flushed)
//! before the first data write after a clean state, so a crash afterwards is always detected
//! as an unclean stop at the next assembly. There is no write-hole journal: after an unclean
//! stop of RAID 4/5/6, stripes written at the time may have parity that disagrees with data.

use crate::core::{
    self, BufRef, Dir, MemberState, Piece, PieceKind, PieceOp, PlanError, Step, UserBuf, SECTOR,
};
use crate::error::{EngineError, Result};
use crate::geo::{Geo, Scheme};
use crate::meta::{read_superblock, write_superblock};
use crate::pool::{Batch, Job, JobKind, Semaphore, StripeLocks, Worker};
use raidkit_disk::Disk;
use raidkit_metadata::{
    mdadm_max_dev, CreateShape, DataLayout, DevRole, Level, MdTime, NewMember, SetName, Superblock,
    SuperblockVersion, Uuid,
};
use serde::Serialize;
use std::sync::{Arc, Mutex, MutexGuard};

/// Memory and concurrency bounds of the driver.
#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    /// Bytes of scratch (stripe) memory all requests in flight may hold together.
    pub stripe_cache_bytes: usize,
    /// Requests processed at the same time; further callers wait.
    pub max_inflight: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            stripe_cache_bytes: 64 << 20,
            max_inflight: 16,
        }
    }
}

/// Parameters of a new array. UUIDs and the creation time come from the caller (the CLI reads
/// /dev/urandom and the clock), so creating is deterministic given them.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    pub level: i32,
    /// md layout number; `None` for mdadm's default (left-symmetric for RAID 5/6, n2 for 10).
    pub layout: Option<u32>,
    /// Chunk in sectors (ignored for RAID 1); mdadm's default is 1024 (512 KiB).
    pub chunk_sectors: u32,
    /// Active members; the remaining given members become spares.
    pub raid_devices: usize,
    pub metadata: SuperblockVersion,
    /// Sectors of each member to use (mdadm --size); `None` for all that fits.
    pub size_sectors: Option<u64>,
    /// The set name as stored (mdadm stores "homehost:name").
    pub name: String,
    pub set_uuid: [u8; 16],
    /// One per member.
    pub device_uuids: Vec<[u8; 16]>,
    pub ctime_seconds: u64,
    /// True when every member's data area is known to read as zeroes (freshly created sparse
    /// image files): all-zero data has all-zero P and Q, so the array is consistent as is.
    /// When false, create writes zeroes over the data areas to make it so.
    pub members_zeroed: bool,
    pub config: EngineConfig,
}

/// How to assemble.
#[derive(Clone, Debug, Default)]
pub struct AssembleOptions {
    /// Accept stale members and start a dirty degraded RAID 4/5/6 (mdadm --force).
    pub force: bool,
    /// Refuse unless the members form this level.
    pub level: Option<i32>,
    /// Never write anything to the members (no dirty mark, failures only in memory).
    pub read_only: bool,
    /// Refuse members whose array UUID differs from this one.
    pub uuid: Option<[u8; 16]>,
    pub config: EngineConfig,
}

/// What assembly found, for the caller to report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AssembleReport {
    /// The array was not stopped cleanly (resync_offset != ~0).
    pub was_dirty: bool,
    /// Members not used, with why.
    pub excluded: Vec<(String, String)>,
    /// Other observations, one sentence each.
    pub notes: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArrayState {
    /// Stopped cleanly and not written since assembly.
    Clean,
    /// Written since assembly (superblocks say dirty until stop).
    Active,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemberStatus {
    pub index: usize,
    pub name: String,
    /// Raid slot for active members.
    pub slot: Option<usize>,
    /// "active", "spare", "faulty".
    pub role: String,
    pub state: Option<MemberState>,
    pub device_uuid: String,
    pub data_offset_sectors: u64,
    pub events: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub uuid: String,
    pub name: String,
    pub metadata: String,
    pub level: i32,
    pub layout: u32,
    pub raid_disks: usize,
    pub chunk_sectors: u64,
    pub member_data_sectors: u64,
    pub array_bytes: u64,
    pub state: ArrayState,
    pub degraded: bool,
    pub failed: bool,
    pub read_only: bool,
    pub events: u64,
    /// Slots without a working member.
    pub missing_slots: Vec<usize>,
    pub members: Vec<MemberStatus>,
    /// What happened to the array since assembly (member failures and such), oldest first.
    pub log: Vec<String>,
}

struct Member {
    disk: Arc<dyn Disk>,
    worker: Worker,
    data_offset_bytes: u64,
}

struct State {
    /// Every device attached, in the order given (spares and faulty ones too); `None` once
    /// removed.
    members: Vec<Option<Arc<Member>>>,
    /// Each attached member's superblock (kept in memory, written on every change).
    sbs: Vec<Superblock>,
    slot_member: Vec<Option<usize>>,
    slot_state: Vec<MemberState>,
    dirty: bool,
    failed: Option<String>,
    log: Vec<String>,
}

/// An assembled array. All methods take `&self` and may be called from many threads.
pub struct Array {
    geo: Geo,
    version: SuperblockVersion,
    read_only: bool,
    config: EngineConfig,
    max_band_sectors: u64,
    batch_budget_bytes: usize,
    state: Mutex<State>,
    locks: StripeLocks,
    inflight: Semaphore,
    /// Serialises superblock updates (dirty marking, failures) without blocking data I/O.
    sb_lock: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // State stays consistent across a panic in another thread: every update is applied whole.
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn now() -> MdTime {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    MdTime::new(d.as_secs(), d.subsec_micros())
}

fn meta_err(e: impl std::fmt::Display) -> EngineError {
    EngineError::Metadata(e.to_string())
}

/// mdadm's default layout for a level.
pub fn default_layout(level: i32) -> u32 {
    match level {
        5 | 6 => 2,
        10 => 0x102,
        _ => 0,
    }
}

fn level_from_md(level: i32) -> Level {
    Level::from_md(level)
}

impl Array {
    /// Creates a new array on `members` (the first `raid_devices` active, the rest spares).
    pub fn create(members: Vec<Box<dyn Disk>>, opts: CreateOptions) -> Result<Array> {
        let n = members.len();
        if opts.raid_devices == 0 || opts.raid_devices > n {
            return Err(EngineError::Invalid(format!(
                "{} raid devices asked for but {} members given",
                opts.raid_devices, n
            )));
        }
        if opts.device_uuids.len() != n {
            return Err(EngineError::Invalid(format!(
                "{} device UUIDs for {} members",
                opts.device_uuids.len(),
                n
            )));
        }
        for (i, m) in members.iter().enumerate() {
            if m.is_read_only() {
                return Err(EngineError::Invalid(format!(
                    "{}: opened read-only; create writes to it",
                    m.name()
                )));
            }
            for other in &members[..i] {
                if other.name() == m.name() {
                    return Err(EngineError::Invalid(format!("{}: listed twice", m.name())));
                }
            }
        }
        let level = opts.level;
        let layout = opts.layout.unwrap_or_else(|| default_layout(level));
        let chunk_sectors = if level == 1 { 0 } else { opts.chunk_sectors };
        let device_sectors = members
            .iter()
            .map(|m| m.size_bytes() / 512)
            .min()
            .unwrap_or(0);
        let dl = DataLayout::mdadm_create(&CreateShape {
            version: opts.metadata,
            device_sectors,
            level: level_from_md(level),
            layout,
            raid_disks: opts.raid_devices as u32,
            chunk_sectors,
            with_bitmap: false,
        })
        .map_err(meta_err)?;
        let fits = if chunk_sectors > 0 {
            dl.data_size_sectors / chunk_sectors as u64 * chunk_sectors as u64
        } else {
            dl.data_size_sectors
        };
        let size_sectors = match opts.size_sectors {
            Some(s) if s > fits => {
                return Err(EngineError::SizeMismatch {
                    member: members
                        .iter()
                        .min_by_key(|m| m.size_bytes())
                        .map(|m| m.name().to_string())
                        .unwrap_or_default(),
                    detail: format!("--size of {s} sectors does not fit: at most {fits} sectors per member are free"),
                })
            }
            Some(s) => {
                if chunk_sectors > 0 {
                    s / chunk_sectors as u64 * chunk_sectors as u64
                } else {
                    s
                }
            }
            None if dl.size_sectors > 0 => dl.size_sectors,
            None => fits,
        };
        let geo = Geo::new(
            level,
            layout,
            opts.raid_devices,
            chunk_sectors as u64,
            size_sectors,
        )
        .map_err(|e| EngineError::Invalid(e.to_string()))?;
        let total = n as u32;
        let max_dev = mdadm_max_dev(total);
        let roles: Vec<(u32, DevRole)> = (0..total)
            .map(|i| {
                let r = if (i as usize) < opts.raid_devices {
                    DevRole::Active(i as u16)
                } else {
                    DevRole::Spare
                };
                (i, r)
            })
            .collect();
        let ctime = MdTime::new(opts.ctime_seconds, 0);
        let mut sbs = Vec::with_capacity(n);
        for (i, disk) in members.iter().enumerate() {
            let dl_i = DataLayout::mdadm_create(&CreateShape {
                version: opts.metadata,
                device_sectors: disk.size_bytes() / 512,
                level: level_from_md(level),
                layout,
                raid_disks: opts.raid_devices as u32,
                chunk_sectors,
                with_bitmap: false,
            })
            .map_err(meta_err)?;
            let sb = Superblock::new_member(&NewMember {
                set_uuid: Uuid(opts.set_uuid),
                device_uuid: Uuid(opts.device_uuids[i]),
                set_name: SetName::new(&opts.name),
                ctime,
                level: level_from_md(level),
                layout,
                chunk_sectors,
                raid_disks: opts.raid_devices as u32,
                max_dev,
                dev_number: i as u32,
                role: roles[i].1,
                roles: roles.clone(),
                size_sectors: geo.member_data_sectors,
                data_offset_sectors: dl_i.data_offset_sectors,
                data_size_sectors: dl_i.data_size_sectors,
                super_offset_sectors: dl_i.super_offset_sectors,
                bitmap_offset: None,
                bblog: if dl_i.bblog_size_sectors > 0 {
                    Some((dl_i.bblog_offset, dl_i.bblog_size_sectors))
                } else {
                    None
                },
                events: 0,
                clean: true,
            })
            .map_err(meta_err)?;
            if sb.data_size_sectors < geo.member_data_sectors {
                return Err(EngineError::SizeMismatch {
                    member: disk.name().to_string(),
                    detail: format!(
                        "only {} data sectors, the array needs {}",
                        sb.data_size_sectors, geo.member_data_sectors
                    ),
                });
            }
            sbs.push(sb);
        }
        // Make the array consistent: zero data areas unless known zero already.
        if !opts.members_zeroed {
            for (i, disk) in members.iter().enumerate().take(opts.raid_devices) {
                disk.write_zeroes(
                    sbs[i].data_offset_sectors * 512,
                    geo.member_data_sectors * 512,
                )?;
            }
        }
        for (disk, sb) in members.iter().zip(&sbs) {
            write_superblock(disk.as_ref(), sb, opts.metadata)?;
        }
        for disk in &members {
            disk.flush()?;
        }
        let slot_member = (0..opts.raid_devices).map(Some).collect();
        let slot_state = vec![MemberState::InSync; opts.raid_devices];
        Self::build(
            geo,
            opts.metadata,
            false,
            opts.config,
            members,
            sbs,
            slot_member,
            slot_state,
            false,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        geo: Geo,
        version: SuperblockVersion,
        read_only: bool,
        config: EngineConfig,
        disks: Vec<Box<dyn Disk>>,
        sbs: Vec<Superblock>,
        slot_member: Vec<Option<usize>>,
        slot_state: Vec<MemberState>,
        dirty: bool,
    ) -> Result<Array> {
        let mut members = Vec::with_capacity(disks.len());
        for (i, (disk, sb)) in disks.into_iter().zip(&sbs).enumerate() {
            let disk: Arc<dyn Disk> = Arc::from(disk);
            let worker = Worker::spawn(format!("raidkit-m{i}"), disk.clone()).map_err(|e| {
                EngineError::Invalid(format!("cannot start a member worker thread: {e}"))
            })?;
            members.push(Some(Arc::new(Member {
                disk,
                worker,
                data_offset_bytes: sb.data_offset_sectors * 512,
            })));
        }
        let config = EngineConfig {
            stripe_cache_bytes: config.stripe_cache_bytes.max(1 << 20),
            max_inflight: config.max_inflight.max(1),
        };
        let batch_budget_bytes = config.stripe_cache_bytes / config.max_inflight;
        let per_block = batch_budget_bytes / (geo.raid_disks + 2);
        let mut max_band_sectors = (per_block / SECTOR) as u64 / 8 * 8;
        max_band_sectors = max_band_sectors.clamp(8, 4096);
        Ok(Array {
            geo,
            version,
            read_only,
            config,
            max_band_sectors,
            batch_budget_bytes,
            state: Mutex::new(State {
                members,
                sbs,
                slot_member,
                slot_state,
                dirty,
                failed: None,
                log: Vec::new(),
            }),
            locks: StripeLocks::default(),
            inflight: Semaphore::new(config.max_inflight),
            sb_lock: Mutex::new(()),
        })
    }

    /// Assembles an array from its members, validating them the way md and mdadm do.
    pub fn assemble(
        members: Vec<Box<dyn Disk>>,
        opts: AssembleOptions,
    ) -> Result<(Array, AssembleReport)> {
        let mut report = AssembleReport::default();
        if members.is_empty() {
            return Err(EngineError::Invalid("no members given".into()));
        }
        // 1. Superblocks.
        let mut found = Vec::with_capacity(members.len());
        for m in &members {
            found.push(read_superblock(m.as_ref())?);
        }
        // 2. Same member twice.
        for i in 0..members.len() {
            for j in 0..i {
                if members[i].name() == members[j].name()
                    || found[i].sb.device_uuid == found[j].sb.device_uuid
                {
                    return Err(EngineError::Duplicate {
                        member: members[i].name().to_string(),
                        other: members[j].name().to_string(),
                        device_uuid: found[i].sb.device_uuid.to_mdadm_string(),
                    });
                }
            }
        }
        // 3. One array: the given UUID or the first member's.
        let (ref_uuid, ref_name) = match opts.uuid {
            Some(u) => (Uuid(u), "the UUID asked for".to_string()),
            None => (found[0].sb.set_uuid, members[0].name().to_string()),
        };
        for (m, f) in members.iter().zip(&found) {
            if f.sb.set_uuid != ref_uuid {
                return Err(EngineError::Foreign {
                    member: m.name().to_string(),
                    member_uuid: f.sb.set_uuid.to_mdadm_string(),
                    array_uuid: ref_uuid.to_mdadm_string(),
                    reference: ref_name,
                });
            }
        }
        // 4. The members must agree on the array's shape. The shape most members share is
        //    the reference (ties go to the newest), so the odd member out is the one named.
        let newest = (0..found.len())
            .max_by_key(|&i| found[i].sb.events)
            .unwrap_or(0);
        let shape = |f: &crate::meta::FoundSuperblock| {
            (
                f.sb.level.to_md(),
                f.sb.layout,
                f.sb.chunk_sectors,
                f.sb.raid_disks,
                f.version.name(),
            )
        };
        let count =
            |k: &(i32, u32, u32, u32, &str)| found.iter().filter(|f| shape(f) == *k).count();
        let mut reference = newest;
        for i in 0..found.len() {
            if count(&shape(&found[i])) > count(&shape(&found[reference])) {
                reference = i;
            }
        }
        let rsb = found[reference].sb.clone();
        let rname = members[reference].name().to_string();
        for (m, f) in members.iter().zip(&found) {
            let s = &f.sb;
            let checks: [(&'static str, String, String); 5] = [
                (
                    "level",
                    s.level.to_md().to_string(),
                    rsb.level.to_md().to_string(),
                ),
                ("layout", s.layout.to_string(), rsb.layout.to_string()),
                (
                    "chunk size (sectors)",
                    s.chunk_sectors.to_string(),
                    rsb.chunk_sectors.to_string(),
                ),
                (
                    "raid devices",
                    s.raid_disks.to_string(),
                    rsb.raid_disks.to_string(),
                ),
                (
                    "metadata version",
                    f.version.name().to_string(),
                    found[reference].version.name().to_string(),
                ),
            ];
            for (field, a, b) in checks {
                if a != b {
                    return Err(EngineError::Mismatched {
                        member: m.name().to_string(),
                        field,
                        member_value: a,
                        array_value: b,
                        reference: rname.clone(),
                    });
                }
            }
        }
        // The newest superblock speaks for the array's state.
        let nsb = found[newest].sb.clone();
        let version = found[newest].version;
        let level = nsb.level.to_md();
        if let Some(asked) = opts.level {
            if asked != level {
                return Err(EngineError::WrongLevel {
                    asked,
                    found: level,
                });
            }
        }
        if nsb.reshape().is_some() {
            return Err(EngineError::Invalid(
                "a reshape is in progress on these members; raidkit does not continue reshapes"
                    .into(),
            ));
        }
        let raid_disks = nsb.raid_disks as usize;
        // 5. Sizes.
        let used = if nsb.size_sectors > 0 {
            nsb.size_sectors
        } else {
            let min = found
                .iter()
                .map(|f| f.sb.data_size_sectors)
                .min()
                .unwrap_or(0);
            if nsb.chunk_sectors > 0 {
                min / nsb.chunk_sectors as u64 * nsb.chunk_sectors as u64
            } else {
                min
            }
        };
        for (m, f) in members.iter().zip(&found) {
            let need = f.sb.data_offset_sectors + used;
            if f.sb.data_size_sectors < used || need > f.device_sectors {
                return Err(EngineError::SizeMismatch {
                    member: m.name().to_string(),
                    detail: format!(
                        "holds {} data sectors from sector {} on a {}-sector device, the array needs {} per member; the member is too small or truncated",
                        f.sb.data_size_sectors, f.sb.data_offset_sectors, f.device_sectors, used
                    ),
                });
            }
        }
        let geo = Geo::new(
            level,
            nsb.layout,
            raid_disks,
            nsb.chunk_sectors as u64,
            used,
        )
        .map_err(|e| EngineError::Invalid(e.to_string()))?;
        // 6. Roles from the newest superblock.
        let mut slot_member: Vec<Option<usize>> = vec![None; raid_disks];
        let mut slot_state = vec![MemberState::Missing; raid_disks];
        let mut stale: Vec<usize> = Vec::new();
        let mut use_member = vec![true; members.len()];
        // Newest members first, so that when two claim one slot (a removed member whose
        // device number was reused for its replacement), the newer keeps it, as mdadm does.
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(found[i].sb.events));
        for i in order {
            let (m, f) = (&members[i], &found[i]);
            let role = nsb.role_of(f.sb.dev_number);
            match role {
                DevRole::Active(slot) => {
                    let slot = slot as usize;
                    if slot >= raid_disks {
                        report.excluded.push((
                            m.name().into(),
                            format!("role {slot} is beyond raid devices"),
                        ));
                        use_member[i] = false;
                        continue;
                    }
                    if let Some(other) = slot_member[slot] {
                        if f.sb.events < found[other].sb.events {
                            report.excluded.push((
                                m.name().into(),
                                format!(
                                    "slot {slot} is held by {} (events {} > {}); this member was replaced",
                                    members[other].name(),
                                    found[other].sb.events,
                                    f.sb.events
                                ),
                            ));
                            continue;
                        }
                        return Err(EngineError::DuplicateRole {
                            member: m.name().to_string(),
                            other: members[other].name().to_string(),
                            slot,
                        });
                    }
                    if f.sb.events < nsb.events && f.sb.role() != DevRole::Active(slot as u16) {
                        report.excluded.push((
                            m.name().into(),
                            "its own superblock no longer gives it this slot".into(),
                        ));
                        continue;
                    }
                    slot_member[slot] = Some(i);
                    if f.sb.recovery_offset().is_some() {
                        report.excluded.push((
                            m.name().into(),
                            "was being rebuilt (recovery_offset set); not used until rebuilt"
                                .into(),
                        ));
                        slot_state[slot] = MemberState::Faulty;
                    } else if f.sb.events < nsb.events {
                        stale.push(i);
                        slot_state[slot] = MemberState::Faulty;
                    } else {
                        slot_state[slot] = MemberState::InSync;
                    }
                }
                DevRole::Faulty => {
                    report.excluded.push((
                        m.name().into(),
                        "marked faulty in the newest superblock".into(),
                    ));
                }
                DevRole::Spare => {
                    report.notes.push(format!("{}: spare", m.name()));
                }
                other => {
                    report
                        .excluded
                        .push((m.name().into(), format!("role {other:?} is not supported")));
                    use_member[i] = false;
                }
            }
        }
        let _ = use_member;
        let failed_now =
            |states: &[MemberState]| states.iter().map(|s| !s.usable()).collect::<Vec<bool>>();
        if !stale.is_empty() {
            if !opts.force {
                let i = stale[0];
                return Err(EngineError::Stale {
                    member: members[i].name().to_string(),
                    events: found[i].sb.events,
                    newest_events: nsb.events,
                });
            }
            if geo.survives(&failed_now(&slot_state)) {
                for &i in &stale {
                    report.excluded.push((
                        members[i].name().into(),
                        format!(
                            "stale (events {} < {}); left out",
                            found[i].sb.events, nsb.events
                        ),
                    ));
                }
            } else {
                // md --force: take stale members back, newest first, until the array can run.
                let mut by_events = stale.clone();
                by_events.sort_by_key(|&i| std::cmp::Reverse(found[i].sb.events));
                for i in by_events {
                    if geo.survives(&failed_now(&slot_state)) {
                        report
                            .excluded
                            .push((members[i].name().into(), "stale; left out".into()));
                        continue;
                    }
                    if let Some(slot) = slot_member.iter().position(|&m| m == Some(i)) {
                        slot_state[slot] = MemberState::InSync;
                        report.notes.push(format!(
                            "{}: stale (events {} < {}) but taken back because of --force",
                            members[i].name(),
                            found[i].sb.events,
                            nsb.events
                        ));
                    }
                }
            }
        }
        // Members not in use (stale/faulty) keep their place in the members list but never
        // get I/O: only slots in sync are planned with.
        let failed = failed_now(&slot_state);
        let degraded = failed.iter().any(|&f| f);
        if !geo.survives(&failed) {
            let missing: Vec<String> = (0..raid_disks)
                .filter(|&s| failed[s])
                .map(|s| s.to_string())
                .collect();
            return Err(EngineError::Unavailable {
                detail: format!(
                    "RAID {level} over {raid_disks} devices cannot run without slots {}",
                    missing.join(", ")
                ),
            });
        }
        if level == 0 && nsb.chunk_sectors > 0 {
            let sizes: Vec<u64> = found
                .iter()
                .map(|f| f.sb.data_size_sectors / nsb.chunk_sectors as u64)
                .collect();
            if sizes.iter().min() != sizes.iter().max() {
                report.notes.push(format!(
                    "RAID 0 over members of different sizes: only the first zone ({} bytes, where md's ORIGINAL and ALTERNATE layouts agree) is served",
                    geo.array_sectors() * 512
                ));
            }
        }
        if nsb.bitmap_offset().is_some() {
            report.notes.push(
                "the array has an internal write-intent bitmap; raidkit does not update it, so after an unclean stop under raidkit run a full resync in md (not a bitmap resync)".into(),
            );
        }
        report.was_dirty = !nsb.is_clean();
        if report.was_dirty {
            report
                .notes
                .push("the array was not stopped cleanly (superblock dirty)".into());
            if degraded && matches!(geo.scheme(), Scheme::Parity { .. }) {
                if !opts.force {
                    return Err(EngineError::DirtyDegraded {
                        detail: format!(
                            "missing slots {:?}",
                            (0..raid_disks).filter(|&s| failed[s]).collect::<Vec<_>>()
                        ),
                    });
                }
                report
                    .notes
                    .push("dirty and degraded, started because of --force".into());
            }
        }
        if degraded {
            report.notes.push(format!(
                "running degraded: slots {:?} missing or failed",
                (0..raid_disks).filter(|&s| failed[s]).collect::<Vec<_>>()
            ));
        }
        let read_only = opts.read_only || members.iter().any(|m| m.is_read_only());
        // Superblocks in memory follow the newest one's shared state; each keeps its own
        // identity and placement.
        let sbs: Vec<Superblock> = found
            .iter()
            .map(|f| {
                let mut sb = nsb.clone();
                sb.device_uuid = f.sb.device_uuid;
                sb.dev_number = f.sb.dev_number;
                sb.data_offset_sectors = f.sb.data_offset_sectors;
                sb.data_size_sectors = f.sb.data_size_sectors;
                sb.super_offset_sectors = f.sb.super_offset_sectors;
                sb.bblog_offset = f.sb.bblog_offset;
                sb.bblog_size_sectors = f.sb.bblog_size_sectors;
                sb.bblog_shift = f.sb.bblog_shift;
                sb.bitmap_offset = f.sb.bitmap_offset;
                sb.recovery_offset_sectors = f.sb.recovery_offset_sectors;
                sb.devflags = f.sb.devflags;
                sb.cnt_corrected_read = f.sb.cnt_corrected_read;
                sb
            })
            .collect();
        let array = Self::build(
            geo,
            version,
            read_only,
            opts.config,
            members,
            sbs,
            slot_member,
            slot_state,
            report.was_dirty,
        )?;
        if degraded && !read_only {
            // Record the lost slots as faulty in the survivors, as md does when it starts
            // degraded (super_1_sync writes 0xfffe for every device it does not have).
            let st = lock(&array.state);
            let lost: Vec<u32> = st
                .slot_state
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.usable())
                .filter_map(|(slot, _)| {
                    st.sbs
                        .iter()
                        .enumerate()
                        .find(|(i, _)| st.slot_member[slot] == Some(*i))
                        .map(|(_, sb)| sb.dev_number)
                })
                .collect();
            if !lost.is_empty() {
                drop(st);
                let _g = lock(&array.sb_lock);
                let mut st = lock(&array.state);
                array.update_superblocks(&mut st, |sb| {
                    for &d in &lost {
                        let _ = sb.set_role(d, DevRole::Faulty);
                    }
                });
            }
        }
        Ok((array, report))
    }

    pub fn geometry(&self) -> &Geo {
        &self.geo
    }

    pub fn size_bytes(&self) -> u64 {
        self.geo.array_sectors() * SECTOR as u64
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    pub fn config(&self) -> EngineConfig {
        self.config
    }

    /// Reads `buf.len()` bytes at `offset_bytes` of the array.
    pub fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<()> {
        self.check_range(offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let (start, len) = aligned_window(offset_bytes, buf.len());
        if start == offset_bytes && len == buf.len() {
            return self.run(
                Dir::Read,
                start / SECTOR as u64,
                buf.as_mut_ptr(),
                buf.len(),
                false,
            );
        }
        let mut bounce = vec![0u8; len];
        self.run(
            Dir::Read,
            start / SECTOR as u64,
            bounce.as_mut_ptr(),
            len,
            false,
        )?;
        let skip = (offset_bytes - start) as usize;
        buf.copy_from_slice(&bounce[skip..skip + buf.len()]);
        Ok(())
    }

    /// Writes `buf` at `offset_bytes`; with `fua` the data is durable when this returns.
    /// Unaligned edges are read, patched and written back (not atomic against a concurrent
    /// write to the same sectors).
    pub fn write_at(&self, buf: &[u8], offset_bytes: u64, fua: bool) -> Result<()> {
        self.check_writable()?;
        self.check_range(offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        self.ensure_dirty()?;
        let (start, len) = aligned_window(offset_bytes, buf.len());
        if start == offset_bytes && len == buf.len() {
            self.run(
                Dir::Write,
                start / SECTOR as u64,
                buf.as_ptr() as *mut u8,
                buf.len(),
                fua,
            )?;
        } else {
            let mut bounce = vec![0u8; len];
            self.run(
                Dir::Read,
                start / SECTOR as u64,
                bounce.as_mut_ptr(),
                len,
                false,
            )?;
            let skip = (offset_bytes - start) as usize;
            bounce[skip..skip + buf.len()].copy_from_slice(buf);
            self.run(
                Dir::Write,
                start / SECTOR as u64,
                bounce.as_mut_ptr(),
                len,
                fua,
            )?;
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    /// Makes every completed write durable on every in-sync member.
    pub fn flush(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        let targets: Vec<(usize, Arc<Member>)> = {
            let st = lock(&self.state);
            st.slot_member
                .iter()
                .enumerate()
                .filter(|(s, _)| st.slot_state[*s].usable())
                .filter_map(|(s, m)| m.and_then(|i| st.members[i].clone()).map(|mm| (s, mm)))
                .collect()
        };
        let batch = Batch::new();
        batch.add(targets.len());
        for (tag, (_, m)) in targets.iter().enumerate() {
            m.worker.submit(
                Job {
                    kind: JobKind::Flush,
                    offset_bytes: 0,
                    ptr: std::ptr::null_mut(),
                    len: 0,
                    batch: batch.clone(),
                    tag,
                },
                m.disk.name(),
            );
        }
        for (tag, err) in batch.wait() {
            self.member_failed(targets[tag].0, &err.to_string());
        }
        self.check_failed()
    }

    /// Discards a range: afterwards it reads as zeroes (written as zeroes through the normal
    /// write path, so parity stays consistent).
    pub fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.write_zeroes(offset_bytes, len_bytes)
    }

    /// Makes a range read as zeroes.
    pub fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.check_writable()?;
        self.check_range(offset_bytes, len_bytes)?;
        let step = 1usize << 20;
        let zeros = vec![0u8; step];
        let mut done = 0u64;
        while done < len_bytes {
            let n = ((len_bytes - done) as usize).min(step);
            self.write_at(&zeros[..n], offset_bytes + done, false)?;
            done += n as u64;
        }
        Ok(())
    }

    /// Marks the member at `index` (in the order given at create/assemble) faulty.
    pub fn fail_member(&self, index: usize) -> Result<()> {
        let slot = {
            let st = lock(&self.state);
            if index >= st.members.len() || st.members[index].is_none() {
                return Err(EngineError::Invalid(format!("no member {index}")));
            }
            st.slot_member.iter().position(|&m| m == Some(index))
        };
        match slot {
            Some(slot) => {
                self.member_failed(slot, "failed on request");
                Ok(())
            }
            None => Err(EngineError::Invalid(format!(
                "member {index} is not an active member (spare or already failed)"
            ))),
        }
    }

    /// Detaches a faulty member or a spare (md refuses to remove an active in-sync member).
    pub fn remove_member(&self, index: usize) -> Result<()> {
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        if index >= st.members.len() || st.members[index].is_none() {
            return Err(EngineError::Invalid(format!("no member {index}")));
        }
        if let Some(slot) = st.slot_member.iter().position(|&m| m == Some(index)) {
            if st.slot_state[slot].usable() {
                return Err(EngineError::Invalid(format!(
                    "member {index} is active in slot {slot}; fail it first (md refuses to remove an active member)"
                )));
            }
            st.slot_member[slot] = None;
            st.slot_state[slot] = MemberState::Missing;
        }
        let dev_number = st.sbs[index].dev_number;
        let name = st.members[index]
            .as_ref()
            .map(|m| m.disk.name().to_string())
            .unwrap_or_default();
        st.members[index] = None;
        st.log.push(format!("{name}: removed"));
        self.update_superblocks(&mut st, |sb| {
            let _ = sb.set_role(dev_number, DevRole::Faulty);
        });
        Ok(())
    }

    /// Adds `disk` as a spare (it gets a superblock of this array with role spare). When a slot
    /// is missing, the spare takes it and is rebuilt from the others before this returns.
    pub fn add_spare(&self, disk: Box<dyn Disk>, device_uuid: [u8; 16]) -> Result<()> {
        self.check_writable()?;
        let disk: Arc<dyn Disk> = Arc::from(disk);
        let (index, target_slot) = {
            let _g = lock(&self.sb_lock);
            let mut st = lock(&self.state);
            let Some(template) = st
                .sbs
                .iter()
                .zip(&st.members)
                .find(|(_, m)| m.is_some())
                .map(|(sb, _)| sb.clone())
            else {
                return Err(EngineError::Invalid(
                    "no member left to copy the superblock from".into(),
                ));
            };
            let used: Vec<u32> = st
                .sbs
                .iter()
                .zip(&st.members)
                .filter(|(_, m)| m.is_some())
                .map(|(sb, _)| sb.dev_number)
                .collect();
            let dev_number = (0..).find(|d| !used.contains(d)).unwrap_or(0);
            let dl = DataLayout::mdadm_create(&CreateShape {
                version: self.version,
                device_sectors: disk.size_bytes() / 512,
                level: level_from_md(self.geo.level),
                layout: self.geo.layout,
                raid_disks: self.geo.raid_disks as u32,
                chunk_sectors: self.geo.chunk_sectors as u32,
                with_bitmap: false,
            })
            .map_err(meta_err)?;
            if dl.data_size_sectors < self.geo.member_data_sectors {
                return Err(EngineError::SizeMismatch {
                    member: disk.name().to_string(),
                    detail: format!(
                        "only {} data sectors, the array needs {} per member",
                        dl.data_size_sectors, self.geo.member_data_sectors
                    ),
                });
            }
            let mut sb = template;
            sb.device_uuid = Uuid(device_uuid);
            sb.dev_number = dev_number;
            sb.data_offset_sectors = dl.data_offset_sectors;
            sb.data_size_sectors = dl.data_size_sectors;
            sb.super_offset_sectors = dl.super_offset_sectors;
            sb.bblog_offset = dl.bblog_offset;
            sb.bblog_size_sectors = dl.bblog_size_sectors;
            sb.set_role(dev_number, DevRole::Spare).map_err(meta_err)?;
            sb.clear_recovery_offset();
            let worker = Worker::spawn(format!("raidkit-m{}", st.members.len()), disk.clone())
                .map_err(|e| {
                    EngineError::Invalid(format!("cannot start a member worker thread: {e}"))
                })?;
            st.members.push(Some(Arc::new(Member {
                disk: disk.clone(),
                worker,
                data_offset_bytes: dl.data_offset_sectors * 512,
            })));
            st.sbs.push(sb);
            let index = st.members.len() - 1;
            st.log.push(format!("{}: added as spare", disk.name()));
            let target = st.slot_state.iter().position(|s| !s.usable());
            self.update_superblocks(&mut st, |sb| {
                let _ = sb.set_role(dev_number, DevRole::Spare);
            });
            (index, target)
        };
        if let Some(slot) = target_slot {
            self.rebuild(index, slot)?;
        }
        Ok(())
    }

    /// Flushes and marks the array clean (resync_offset = ~0, events + 1). Dropping an array
    /// without `stop` leaves it dirty, exactly like a crash.
    pub fn stop(&self) -> Result<()> {
        self.flush()?;
        if self.read_only {
            return Ok(());
        }
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        if st.failed.is_some() {
            return Ok(());
        }
        if st.dirty {
            self.update_superblocks(&mut st, |sb| sb.mark_clean());
            st.dirty = false;
        }
        Ok(())
    }

    pub fn status(&self) -> Status {
        let st = lock(&self.state);
        let any = st
            .sbs
            .iter()
            .zip(&st.members)
            .find(|(_, m)| m.is_some())
            .map(|(sb, _)| sb)
            .or(st.sbs.first());
        let missing_slots: Vec<usize> = (0..self.geo.raid_disks)
            .filter(|&s| !st.slot_state[s].usable())
            .collect();
        let members = st
            .members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let m = m.as_ref()?;
                let slot = st.slot_member.iter().position(|&x| x == Some(i));
                let state = slot.map(|s| st.slot_state[s]);
                let role = match state {
                    Some(MemberState::InSync) => "active",
                    Some(_) => "faulty",
                    None => {
                        if any.is_some_and(|sb| sb.role_of(st.sbs[i].dev_number) == DevRole::Faulty)
                        {
                            "faulty"
                        } else {
                            "spare"
                        }
                    }
                };
                Some(MemberStatus {
                    index: i,
                    name: m.disk.name().to_string(),
                    slot,
                    role: role.to_string(),
                    state,
                    device_uuid: st.sbs[i].device_uuid.to_mdadm_string(),
                    data_offset_sectors: st.sbs[i].data_offset_sectors,
                    events: st.sbs[i].events,
                })
            })
            .collect();
        Status {
            uuid: any
                .map(|sb| sb.set_uuid.to_mdadm_string())
                .unwrap_or_default(),
            name: any.map(|sb| sb.set_name.as_string()).unwrap_or_default(),
            metadata: self.version.name().to_string(),
            level: self.geo.level,
            layout: self.geo.layout,
            raid_disks: self.geo.raid_disks,
            chunk_sectors: self.geo.chunk_sectors,
            member_data_sectors: self.geo.member_data_sectors,
            array_bytes: self.size_bytes(),
            state: if st.dirty {
                ArrayState::Active
            } else {
                ArrayState::Clean
            },
            degraded: !missing_slots.is_empty(),
            failed: st.failed.is_some(),
            read_only: self.read_only,
            events: st.sbs.iter().map(|sb| sb.events).max().unwrap_or(0),
            missing_slots,
            members,
            log: st.log.clone(),
        }
    }

    fn check_range(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        match offset_bytes.checked_add(len_bytes) {
            Some(end) if end <= self.size_bytes() => Ok(()),
            _ => Err(EngineError::Invalid(format!(
                "request of {len_bytes} bytes at byte {offset_bytes} reaches past the end of the array ({} bytes)",
                self.size_bytes()
            ))),
        }
    }

    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(EngineError::ReadOnly);
        }
        self.check_failed()
    }

    fn check_failed(&self) -> Result<()> {
        match &lock(&self.state).failed {
            Some(d) => Err(EngineError::ArrayFailed { detail: d.clone() }),
            None => Ok(()),
        }
    }

    fn ensure_dirty(&self) -> Result<()> {
        if lock(&self.state).dirty {
            return Ok(());
        }
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        if st.dirty {
            return Ok(());
        }
        self.update_superblocks(&mut st, |sb| sb.mark_dirty(0));
        st.dirty = true;
        match &st.failed {
            Some(d) => Err(EngineError::ArrayFailed { detail: d.clone() }),
            None => Ok(()),
        }
    }

    /// Applies `change` to every working member's superblock, bumps events and writes them
    /// (then flushes). A member whose superblock cannot be written is failed in turn.
    /// Caller holds `sb_lock` and passes the state guard.
    fn update_superblocks(&self, st: &mut State, change: impl Fn(&mut Superblock)) {
        let t = now();
        for sb in st.sbs.iter_mut() {
            change(sb);
            sb.bump_events(t);
        }
        if self.read_only || st.failed.is_some() {
            return;
        }
        let mut failures = Vec::new();
        for i in 0..st.members.len() {
            let Some(m) = st.members[i].clone() else {
                continue;
            };
            let slot = st.slot_member.iter().position(|&x| x == Some(i));
            if let Some(s) = slot {
                if !st.slot_state[s].usable() {
                    continue;
                }
            } else if st.sbs[i].role_of(st.sbs[i].dev_number) == DevRole::Faulty {
                continue;
            }
            let r = write_superblock(m.disk.as_ref(), &st.sbs[i], self.version)
                .and_then(|_| m.disk.flush().map_err(EngineError::from));
            if let Err(e) = r {
                failures.push((slot, m.disk.name().to_string(), e.to_string()));
            }
        }
        for (slot, name, err) in failures {
            if let Some(s) = slot {
                self.fail_locked(st, s, &format!("{name}: superblock write failed: {err}"));
            }
        }
    }

    /// Marks slot `slot` faulty after an error (or on request).
    fn member_failed(&self, slot: usize, why: &str) {
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        self.fail_locked(&mut st, slot, why);
    }

    fn fail_locked(&self, st: &mut State, slot: usize, why: &str) {
        if !st.slot_state[slot].usable() {
            return;
        }
        st.slot_state[slot] = MemberState::Faulty;
        let (name, dev_number) = match st.slot_member[slot] {
            Some(i) => (
                st.members[i]
                    .as_ref()
                    .map(|m| m.disk.name().to_string())
                    .unwrap_or_default(),
                Some(st.sbs[i].dev_number),
            ),
            None => (format!("slot {slot}"), None),
        };
        st.log.push(format!("{name}: marked faulty ({why})"));
        let failed: Vec<bool> = st.slot_state.iter().map(|s| !s.usable()).collect();
        if let Some(d) = dev_number {
            self.update_superblocks(st, |sb| {
                let _ = sb.set_role(d, DevRole::Faulty);
            });
        }
        if !self.geo.survives(&failed) && st.failed.is_none() {
            let lost: Vec<usize> = (0..failed.len()).filter(|&s| failed[s]).collect();
            let detail = format!(
                "RAID {} over {} devices has lost slots {:?}, more than it can; no further writes",
                self.geo.level, self.geo.raid_disks, lost
            );
            st.log.push(detail.clone());
            st.failed = Some(detail);
        }
    }

    /// Runs one request through the core: split, then batches of pieces phase by phase.
    fn run(
        &self,
        dir: Dir,
        array_sector: u64,
        user_ptr: *mut u8,
        user_len: usize,
        _fua: bool,
    ) -> Result<()> {
        let sectors = (user_len / SECTOR) as u64;
        let pieces = core::split(&self.geo, array_sector, sectors, self.max_band_sectors);
        let mut i = 0;
        while i < pieces.len() {
            // One batch: consecutive pieces within the scratch budget (at least one).
            let mut j = i;
            let mut bytes = 0usize;
            while j < pieces.len() {
                let b = piece_scratch_estimate(&pieces[j], self.geo.raid_disks);
                if j > i && bytes + b > self.batch_budget_bytes {
                    break;
                }
                bytes += b;
                j += 1;
                if j - i >= 256 {
                    break;
                }
            }
            self.inflight.acquire();
            let mut keys: Vec<u64> = pieces[i..j].iter().map(|p| p.lock_key).collect();
            keys.sort_unstable();
            keys.dedup();
            self.locks.acquire(&keys);
            let r = self.run_batch(dir, &pieces[i..j], user_ptr, user_len);
            self.locks.release(&keys);
            self.inflight.release();
            r?;
            i = j;
        }
        Ok(())
    }

    fn snapshot(&self) -> (Vec<MemberState>, Vec<Option<Arc<Member>>>) {
        let st = lock(&self.state);
        let members = st
            .slot_member
            .iter()
            .map(|m| m.and_then(|i| st.members[i].clone()))
            .collect();
        (st.slot_state.clone(), members)
    }

    fn plan(&self, piece: &Piece, dir: Dir, states: &[MemberState]) -> Result<PieceOp> {
        PieceOp::new(&self.geo, piece, dir, states).map_err(|e| match e {
            PlanError::Unrecoverable { lost_members } => EngineError::ArrayFailed {
                detail: format!(
                    "RAID {} cannot {} this range without slots {:?}",
                    self.geo.level,
                    if dir == Dir::Read { "read" } else { "write" },
                    lost_members
                ),
            },
        })
    }

    fn run_batch(
        &self,
        dir: Dir,
        pieces: &[Piece],
        user_ptr: *mut u8,
        user_len: usize,
    ) -> Result<()> {
        let (mut states, mut members) = self.snapshot();
        let mut ops: Vec<PieceOp> = Vec::with_capacity(pieces.len());
        for p in pieces {
            ops.push(self.plan(p, dir, &states)?);
        }
        let mut done = vec![false; ops.len()];
        loop {
            // Collect the next phase of every op.
            let mut ios: Vec<(usize, core::MemberIo)> = Vec::new();
            let mut phase_dir = vec![Dir::Read; ops.len()];
            for (k, op) in ops.iter_mut().enumerate() {
                if done[k] {
                    continue;
                }
                // SAFETY: no member I/O is in flight on the user buffer between phases; the
                // caller's buffer is valid for user_len bytes for the whole call.
                let user = unsafe {
                    match dir {
                        Dir::Read => {
                            UserBuf::Read(std::slice::from_raw_parts_mut(user_ptr, user_len))
                        }
                        Dir::Write => UserBuf::Write(std::slice::from_raw_parts(
                            user_ptr as *const u8,
                            user_len,
                        )),
                    }
                };
                match op.next(user) {
                    Step::Done => done[k] = true,
                    Step::Io { dir: d, ios: list } => {
                        phase_dir[k] = d;
                        ios.extend(list.into_iter().map(|io| (k, io)));
                    }
                }
            }
            if ios.is_empty() {
                return Ok(());
            }
            let batch = Batch::new();
            let mut submitted: Vec<(usize, usize)> = Vec::with_capacity(ios.len()); // (op, slot)
            let mut skipped_reads: Vec<usize> = Vec::new();
            let mut jobs: Vec<(Arc<Member>, Job)> = Vec::with_capacity(ios.len());
            for (k, io) in &ios {
                let member = match (&members[io.member], states[io.member].usable()) {
                    (Some(m), true) => m.clone(),
                    _ => {
                        // The member went away after planning: a read must be replanned,
                        // a write to it is simply no longer needed.
                        if io.dir == Dir::Read {
                            skipped_reads.push(*k);
                        }
                        continue;
                    }
                };
                let len = io.sectors as usize * SECTOR;
                let ptr = match io.buf {
                    BufRef::User { offset_bytes } => {
                        debug_assert!(offset_bytes + len <= user_len);
                        // SAFETY: in bounds of the caller's buffer (the core plans within it).
                        unsafe { user_ptr.add(offset_bytes) }
                    }
                    BufRef::Scratch { index } => ops[*k].scratch_mut()[index].as_mut_ptr(),
                };
                let tag = submitted.len();
                submitted.push((*k, io.member));
                jobs.push((
                    member.clone(),
                    Job {
                        kind: if io.dir == Dir::Read {
                            JobKind::Read
                        } else {
                            JobKind::Write
                        },
                        offset_bytes: member.data_offset_bytes + io.member_sector * SECTOR as u64,
                        ptr,
                        len,
                        batch: batch.clone(),
                        tag,
                    },
                ));
            }
            batch.add(jobs.len());
            // The calling thread performs the last job itself: one thread handoff fewer per
            // phase, which is most of the latency of a small request on a busy machine.
            let inline = jobs.pop();
            for (m, job) in jobs {
                m.worker.submit(job, m.disk.name());
            }
            if let Some((m, job)) = inline {
                crate::pool::execute(m.disk.as_ref(), job);
            }
            let errors = batch.wait();
            let mut replan: Vec<usize> = skipped_reads;
            for (tag, err) in errors {
                let (k, slot) = submitted[tag];
                self.member_failed(slot, &err.to_string());
                if phase_dir[k] == Dir::Read {
                    replan.push(k);
                }
            }
            if !replan.is_empty() {
                replan.sort_unstable();
                replan.dedup();
                (states, members) = self.snapshot();
                for k in replan {
                    ops[k] = self.plan(&pieces[k], dir, &states)?;
                    done[k] = false;
                }
            }
            if dir == Dir::Write {
                self.check_failed()?;
            }
        }
    }

    /// Rebuilds slot `slot` onto member `index` (a spare): reconstructs every chunk of the
    /// slot from the others and writes it, then gives the member the slot.
    fn rebuild(&self, index: usize, slot: usize) -> Result<()> {
        let member = {
            let st = lock(&self.state);
            st.members[index].clone()
        };
        let Some(member) = member else { return Ok(()) };
        let dev_number = lock(&self.state).sbs[index].dev_number;
        // Record the recovery start in the new member's superblock only.
        {
            let _g = lock(&self.sb_lock);
            let mut st = lock(&self.state);
            st.sbs[index]
                .set_role(dev_number, DevRole::Active(slot as u16))
                .map_err(meta_err)?;
            st.sbs[index].set_recovery_offset(0);
            write_superblock(member.disk.as_ref(), &st.sbs[index], self.version)?;
        }
        self.ensure_dirty()?;
        let chunk = if self.geo.chunk_sectors > 0 {
            self.geo.chunk_sectors
        } else {
            256
        };
        let step = chunk.min(self.max_band_sectors.max(8));
        let data_sectors = self.geo.member_data_sectors;
        let mut ms = 0u64;
        while ms < data_sectors {
            // Each step stays inside one chunk: the reconstruction works chunk by chunk.
            let n = step.min(data_sectors - ms).min(chunk - ms % chunk);
            let block = self.reconstruct_member_range(slot, ms, n)?;
            member
                .disk
                .write_at(&block, member.data_offset_bytes + ms * SECTOR as u64)?;
            ms += n;
        }
        member.disk.flush()?;
        let _g = lock(&self.sb_lock);
        let mut st = lock(&self.state);
        st.sbs[index].clear_recovery_offset();
        st.slot_member[slot] = Some(index);
        st.slot_state[slot] = MemberState::InSync;
        let name = member.disk.name().to_string();
        st.log.push(format!("{name}: rebuilt into slot {slot}"));
        self.update_superblocks(&mut st, |sb| {
            let _ = sb.set_role(dev_number, DevRole::Active(slot as u16));
        });
        Ok(())
    }

    /// Contents slot `slot` should hold at member sectors `[ms, ms+n)`, computed from the
    /// other members (n stays within one chunk).
    fn reconstruct_member_range(&self, slot: usize, ms: u64, n: u64) -> Result<Vec<u8>> {
        let len = n as usize * SECTOR;
        let mut out = vec![0u8; len];
        match self.geo.scheme() {
            Scheme::Copies => {
                // Find which array range this member range holds: scan the array chunks that
                // map a copy here. For RAID 1 the array sector is the member sector.
                if self.geo.level == 1 {
                    self.read_at(&mut out, ms * SECTOR as u64)?;
                    return Ok(out);
                }
                // RAID 10: ask the layout crate's inverse map (md's raid10 unmap) which array
                // sector this member sector holds.
                let theirs = raidkit_layout::Geometry::from_md(&raidkit_layout::MdParams {
                    level: self.geo.level,
                    layout: self.geo.layout,
                    raid_disks: self.geo.raid_disks as u32,
                    chunk_sectors: self.geo.chunk_sectors as u32,
                    member_data_sectors: vec![self.geo.member_data_sectors; self.geo.raid_disks],
                })
                .map_err(|e| EngineError::Invalid(e.to_string()))?;
                match theirs.unmap(slot as u32, ms) {
                    Ok(raidkit_layout::MemberChunkRole::Data { array_sector, .. }) => {
                        self.read_at(&mut out, array_sector * SECTOR as u64)?;
                    }
                    // Past the used area: nothing of the array lives there.
                    Ok(_) => {}
                    Err(e) => return Err(EngineError::Invalid(e.to_string())),
                }
                Ok(out)
            }
            Scheme::Parity { .. } => {
                let stripe = ms / self.geo.chunk_sectors;
                let lo = ms % self.geo.chunk_sectors;
                let info = self.geo.stripe(stripe);
                let d = info.data_members.len();
                // Read the whole band of data through the array (degraded reads recover the
                // lost slot if it is data), then derive P/Q or pick the data block.
                let mut data = vec![vec![0u8; len]; d];
                let base = stripe * d as u64 * self.geo.chunk_sectors;
                for (dd, blk) in data.iter_mut().enumerate() {
                    let array_sector = base + dd as u64 * self.geo.chunk_sectors + lo;
                    self.read_at(blk, array_sector * SECTOR as u64)?;
                }
                if let Some(dd) = info.data_members.iter().position(|&m| m == slot) {
                    return Ok(std::mem::take(&mut data[dd]));
                }
                let mut p = vec![0u8; len];
                let mut q = vec![0u8; len];
                let refs: Vec<Option<&[u8]>> = if info.q_member.is_some() {
                    info.syndrome_slots
                        .iter()
                        .map(|e| e.map(|dd| data[dd].as_slice()))
                        .collect()
                } else {
                    data.iter().map(|b| Some(b.as_slice())).collect()
                };
                crate::gf::gen_pq(&refs, &mut p, Some(&mut q));
                Ok(if slot == info.p_member { p } else { q })
            }
        }
    }
}

fn piece_scratch_estimate(p: &Piece, raid_disks: usize) -> usize {
    match &p.kind {
        PieceKind::Copies { .. } => 0,
        PieceKind::Band { sectors, .. } => (raid_disks + 2) * *sectors as usize * SECTOR,
    }
}

fn aligned_window(offset: u64, len: usize) -> (u64, usize) {
    let s = SECTOR as u64;
    let start = offset / s * s;
    let end = (offset + len as u64).div_ceil(s) * s;
    (start, (end - start) as usize)
}

impl Drop for Array {
    fn drop(&mut self) {
        // Workers are joined when their Member is dropped (last Arc).
        let mut st = lock(&self.state);
        st.members.clear();
    }
}

/// Names of the members, for messages.
pub fn member_names(members: &[Box<dyn Disk>]) -> Vec<String> {
    members.iter().map(|m| m.name().to_string()).collect()
}

/// The NBD server calls one `Array` from many connection threads.
#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Array>();
}

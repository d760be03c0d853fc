//! The engine's errors: each names the member and the rule involved, so the CLI can print it
//! as is and map it to an exit code.

use raidkit_disk::DiskError;
use std::fmt;

#[derive(Debug)]
pub enum EngineError {
    /// A member could not be read or written while no redundancy could cover for it.
    Disk(DiskError),
    /// No valid md v1.x superblock on a member.
    NoSuperblock { member: String, detail: String },
    /// A member belongs to another array.
    Foreign {
        member: String,
        member_uuid: String,
        array_uuid: String,
        reference: String,
    },
    /// A member's array geometry differs from the others'.
    Mismatched {
        member: String,
        field: &'static str,
        member_value: String,
        array_value: String,
        /// The member whose value is taken as the array's.
        reference: String,
    },
    /// The same member (same device UUID) is listed more than once.
    Duplicate {
        member: String,
        other: String,
        device_uuid: String,
    },
    /// Two members claim the same role slot.
    DuplicateRole {
        member: String,
        other: String,
        slot: usize,
    },
    /// A member's event count is behind the newest one; md would not trust its data.
    Stale {
        member: String,
        events: u64,
        newest_events: u64,
    },
    /// The caller asked for a level the members do not have.
    WrongLevel { asked: i32, found: i32 },
    /// A member is too small for the array's layout.
    SizeMismatch { member: String, detail: String },
    /// Too many members missing or failed for the level.
    Unavailable { detail: String },
    /// The array was stopped dirty and is degraded: a RAID 4/5/6 write hole may have left
    /// parity inconsistent, so it does not start without force (md's rule).
    DirtyDegraded { detail: String },
    /// The array has lost more members than it can and refuses further writes.
    ArrayFailed { detail: String },
    /// Invalid parameters for create or a request.
    Invalid(String),
    /// The array is read-only (assembled read-only, or members opened read-only).
    ReadOnly,
    /// Metadata could not be built or decoded.
    Metadata(String),
    /// Another background task is running on the array.
    Busy(String),
    /// Members the superblocks list as active were not given, and the assembly would write
    /// (mdadm refuses this without `--run`).
    Incomplete {
        level: i32,
        raid_disks: usize,
        set_uuid: [u8; 16],
        absent: Vec<AbsentMember>,
    },
    /// `grow` refused: why. Nothing was written.
    CannotGrow(GrowRefusal),
    /// The members record a reshape in progress: the array runs again once it is finished
    /// (`raidkit grow --continue`).
    ReshapeInProgress {
        position_sectors: u64,
        old_raid_disks: i64,
        new_raid_disks: u32,
    },
    /// The members cannot be split into the RAID 50/60 spans asked for.
    Stack(crate::array::StackSplit),
}

/// Why an array cannot be grown as asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrowRefusal {
    /// RAID 0 uses all of every member; md has no size to change either.
    StripeLevel,
    /// RAID 10 far layouts keep the far copies at a fixed distance (md refuses too).
    FarLayout,
    /// The array has an internal write-intent bitmap (raidkit does not resize it yet).
    Bitmap,
    /// A slot has no member in sync: missing, faulty or being rebuilt.
    NotWhole { slots: Vec<usize> },
    /// Stopped uncleanly, or with a resync, rebuild or replacement still to do.
    WorkPending { what: String },
    /// The size asked for is below the current one.
    Shrink {
        current_sectors: u64,
        asked_sectors: u64,
    },
    /// A member has no room for the size asked for.
    NoRoom {
        member: String,
        available_sectors: u64,
        asked_sectors: u64,
    },
    /// The members already use every sector they have (or the size asked for).
    AlreadyThatSize { sectors: u64 },
    /// Changing the number of members is done here for RAID 1 (slots) and RAID 0/4/5/6
    /// (adding members) only so far.
    CountNotMirror { level: i32 },
    /// The array already has that many slots.
    SameCount { raid_devices: usize },
    /// Fewer slots than members in them: members must be failed and removed first (md
    /// refuses the same).
    MembersInUse { in_use: usize, asked: usize },
    /// A RAID 1 keeps at least two slots here (a one-slot mirror mirrors nothing).
    TooFew { asked: usize },
    /// A reshape raidkit does not do yet.
    ReshapeNotYet { what: String },
    /// More slots than spares given to fill them.
    NoSpare { needed: usize, given: usize },
    /// A member has too little room in front of its data for the data to move down (md
    /// would need a backup file here).
    NoHeadroom {
        member: String,
        available_sectors: u64,
        needed_sectors: u64,
    },
    /// md refuses to reshape an array with a partial parity log or a write journal.
    WriteLog { policy: &'static str },
    /// `--continue` on members that record no reshape.
    NoReshape,
    /// The recorded position is not one a reshape can go on from safely (md: "reshape_position
    /// too early for auto-recovery").
    TooEarly { position: u64 },
    /// A level change md cannot make either (mdadm: "Impossible level change requested").
    LevelImpossible { from: i32, to: i32, why: String },
    /// The members' data size is not a whole number of the new chunk (md refuses too).
    ChunkNotDividing {
        chunk_sectors: u64,
        member_sectors: u64,
    },
    /// What was asked for is what the array already is.
    NothingToChange,
    /// Fewer data members shrink the array; refused unless the caller gave an array size at
    /// or below the new one (mdadm's `--array-size`), its word that nothing past it is needed.
    WouldShrink {
        array_sectors: u64,
        new_sectors: u64,
    },
    /// A member has too little room behind its data for the data to move up (a shrinking
    /// reshape; md would need a backup file here).
    NoTailroom {
        member: String,
        available_sectors: u64,
        needed_sectors: u64,
    },
}

impl fmt::Display for GrowRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrowRefusal::StripeLevel => write!(
                f,
                "RAID 0 uses all of every member and has no size to grow (md neither); add members instead"
            ),
            GrowRefusal::FarLayout => write!(
                f,
                "RAID 10 with a far layout keeps each far copy half a member away; its size and member count cannot change (md refuses too)"
            ),
            GrowRefusal::Bitmap => write!(
                f,
                "the array has an internal write-intent bitmap, which raidkit cannot resize yet"
            ),
            GrowRefusal::NotWhole { slots } => write!(
                f,
                "slots {slots:?} have no member in sync; finish the rebuild (`raidkit rebuild`) or add members first"
            ),
            GrowRefusal::WorkPending { what } => write!(
                f,
                "{what} is still to do; run `raidkit rebuild` first"
            ),
            GrowRefusal::Shrink { current_sectors, asked_sectors } => write!(
                f,
                "asked for {} per member, below the current {}; shrinking would cut off data and is not done",
                sectors_text(*asked_sectors),
                sectors_text(*current_sectors)
            ),
            GrowRefusal::NoRoom { member, available_sectors, asked_sectors } => write!(
                f,
                "{member}: has room for {} of data, {} asked for",
                sectors_text(*available_sectors),
                sectors_text(*asked_sectors)
            ),
            GrowRefusal::CountNotMirror { level } => write!(
                f,
                "changing the number of members of a RAID {level} moves its data in a way raidkit does not do yet (it changes a RAID 1's slots and adds members to RAID 0, 4, 5 and 6)"
            ),
            GrowRefusal::SameCount { raid_devices } => {
                write!(f, "the array already has {raid_devices} slots; nothing to change")
            }
            GrowRefusal::MembersInUse { in_use, asked } => write!(
                f,
                "{in_use} members are in slots, more than the {asked} asked for; fail and remove {} of them first (`raidkit fail`, `raidkit remove`), as md requires",
                in_use - asked
            ),
            GrowRefusal::TooFew { asked } => write!(
                f,
                "{asked} slot(s) asked for; a RAID 1 keeps at least 2"
            ),
            GrowRefusal::LevelImpossible { from, to, why } => write!(
                f,
                "RAID {from} cannot become RAID {to}: {why}"
            ),
            GrowRefusal::ChunkNotDividing { chunk_sectors, member_sectors } => write!(
                f,
                "each member holds {} of data, not a whole number of {} chunks (md refuses too); shrink the array to a multiple first",
                sectors_text(*member_sectors),
                sectors_text(*chunk_sectors)
            ),
            GrowRefusal::WouldShrink { array_sectors, new_sectors } => write!(
                f,
                "with fewer data members the array shrinks from {} to {}: whatever lies past that is lost; give --array-size {} or less (K, M, G suffix), after shrinking what the array holds, to go on (as mdadm's --array-size)",
                sectors_text(*array_sectors),
                sectors_text(*new_sectors),
                sectors_text(*new_sectors)
            ),
            GrowRefusal::NoTailroom { member, available_sectors, needed_sectors } => write!(
                f,
                "{member}: {} free behind the data, the reshape moves it up by {}; md would need a backup file here, raidkit does not take that risk (create arrays with --size below the members' size to leave room)",
                sectors_text(*available_sectors),
                sectors_text(*needed_sectors)
            ),
            GrowRefusal::NothingToChange => write!(
                f,
                "the array already has that level, layout, chunk size and number of members; nothing to change"
            ),
            GrowRefusal::ReshapeNotYet { what } => {
                write!(f, "{what} is a reshape raidkit does not do yet")
            }
            GrowRefusal::NoSpare { needed, given } => write!(
                f,
                "{needed} new slot(s) need as many spares among the members given; {given} given (add them first: `raidkit add`)"
            ),
            GrowRefusal::NoHeadroom { member, available_sectors, needed_sectors } => write!(
                f,
                "{member}: {} free in front of the data, the reshape moves it down by {}; md would need a backup file here, raidkit does not take that risk",
                sectors_text(*available_sectors),
                sectors_text(*needed_sectors)
            ),
            GrowRefusal::WriteLog { policy } => write!(
                f,
                "the array's consistency policy is {policy}; md does not reshape with a write log either (create the array with --consistency-policy resync to reshape it)"
            ),
            GrowRefusal::NoReshape => write!(f, "these members record no reshape in progress"),
            GrowRefusal::TooEarly { position } => write!(
                f,
                "the reshape is recorded at array sector {position}, where going on would overwrite data it still needs (md: too early for auto-recovery)"
            ),
            GrowRefusal::AlreadyThatSize { sectors } => write!(
                f,
                "the array already uses {} of every member, all the room they have (or asked for); nothing to grow",
                sectors_text(*sectors)
            ),
        }
    }
}

/// `sectors` as bytes with a binary unit.
fn sectors_text(sectors: u64) -> String {
    let bytes = sectors * 512;
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// A member the array's superblocks list as active that was not given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbsentMember {
    /// The raid slot it holds.
    pub slot: usize,
    /// Its device number (md's dev_number, the index into the superblocks' role table).
    pub dev_number: u32,
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Disk(e) => write!(f, "{e}"),
            EngineError::NoSuperblock { member, detail } => {
                write!(f, "{member}: no valid md v1.x superblock ({detail})")
            }
            EngineError::Foreign { member, member_uuid, array_uuid, reference } => write!(
                f,
                "{member}: belongs to another array (array UUID {member_uuid}, but {reference} has {array_uuid}); members of one array share the array UUID"
            ),
            EngineError::Mismatched { member, field, member_value, array_value, reference } => write!(
                f,
                "{member}: {field} is {member_value} but {reference} (and the majority of members) says {array_value}; all members of an array must agree on level, layout, chunk, raid devices and metadata version"
            ),
            EngineError::Duplicate { member, other, device_uuid } => write!(
                f,
                "{member}: the same member as {other} (device UUID {device_uuid}); each member may be given once"
            ),
            EngineError::DuplicateRole { member, other, slot } => write!(
                f,
                "{member}: claims raid slot {slot}, which {other} already holds; one device per slot"
            ),
            EngineError::Stale { member, events, newest_events } => write!(
                f,
                "{member}: out of date (events {events}, newest member has {newest_events}); its data is older than the array's. Leave it out (then `raidkit add` brings it back up to date), or give --force: as mdadm --force, that starts the array without it where the array can run without it, and takes it back (its events raised to the array's) only where the array cannot start otherwise"
            ),
            EngineError::WrongLevel { asked, found } => write!(
                f,
                "the members form a RAID {found} array, not RAID {asked} as asked"
            ),
            EngineError::SizeMismatch { member, detail } => write!(f, "{member}: {detail}"),
            EngineError::Unavailable { detail } => write!(f, "array unavailable: {detail}"),
            EngineError::DirtyDegraded { detail } => write!(
                f,
                "array was not stopped cleanly and is degraded ({detail}); parity may be inconsistent (RAID write hole), so it will not start without --force"
            ),
            EngineError::ArrayFailed { detail } => write!(f, "array failed: {detail}"),
            EngineError::Invalid(s) => write!(f, "{s}"),
            EngineError::Stack(why) => write!(f, "{why}"),
            EngineError::ReadOnly => write!(f, "the array is read-only"),
            EngineError::Metadata(s) => write!(f, "metadata: {s}"),
            EngineError::Busy(s) => write!(f, "busy: {s}"),
            EngineError::Incomplete { level, raid_disks, absent, .. } => {
                let names: Vec<String> = absent
                    .iter()
                    .map(|a| format!("slot {} (device {})", a.slot, a.dev_number))
                    .collect();
                write!(
                    f,
                    "RAID {level} over {raid_disks} devices was last active with {} not given now; writing without {} would record {} faulty for good, so that {} could only come back through a full rebuild. Give every member, or --run to start degraded anyway (as mdadm --run); nothing was written",
                    names.join(", "),
                    if absent.len() == 1 { "it" } else { "them" },
                    if absent.len() == 1 { "it" } else { "them" },
                    if absent.len() == 1 { "it" } else { "they" },
                )
            }
            EngineError::CannotGrow(why) => write!(f, "cannot grow: {why}; nothing was written"),
            EngineError::ReshapeInProgress { position_sectors, old_raid_disks, new_raid_disks } => write!(
                f,
                "a reshape from {old_raid_disks} to {new_raid_disks} members is in progress at array sector {position_sectors}; raidkit serves the array once it is finished: run `raidkit grow --continue` with the same members; nothing was written"
            ),
        }
    }
}

impl std::error::Error for EngineError {}

impl From<DiskError> for EngineError {
    fn from(e: DiskError) -> Self {
        EngineError::Disk(e)
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

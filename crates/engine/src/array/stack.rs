//! RAID 50 and RAID 60 the way md stacks them: RAID 5 (or 6) arrays on the members, the
//! "spans", and a RAID 0 whose members are those arrays, as when md's RAID 0 is created on
//! /dev/md0 /dev/md1. Every superblock is md's own: each span's v1.2 superblocks sit on its
//! member disks, and the RAID 0's superblocks sit inside each span's data area at the start
//! of the span array, so the Linux kernel assembles the same stack (the spans first, then
//! the RAID 0 on them).
//!
//! Owns: [`ArrayDisk`] (an assembled array as a member of another), the split of members into
//! spans and its refusals ([`StackSplit`]), creating and assembling a stack, and the spans a
//! stack's top array keeps: the top [`Array`] is the stack (reads, writes, flush and size are
//! its), and stopping it stops its spans after it.
//!
//! Invariants: spans are whole arrays of equal shape (level, member count, chunk, layout),
//! span `i` on members `i * per_span .. (i + 1) * per_span` in the order given at create;
//! the RAID 0 has the same chunk as the spans. Degraded operation is the spans' own: each span
//! loses what its level allows (one member of a RAID 5 span, two of a RAID 6 span) and the
//! RAID 0 above never sees it.

use super::*;

/// An assembled array as a member of another: reads, writes, flush and size are the
/// array's; a discard or write-zeroes writes zeroes through it (parity stays consistent).
pub struct ArrayDisk {
    array: Arc<Array>,
    name: String,
    logical_block_size: u32,
}

impl ArrayDisk {
    /// `array` as a member named `name` (names of members of one array must differ).
    pub fn new(array: Arc<Array>, name: String) -> ArrayDisk {
        let logical_block_size = {
            let st = lock(&array.state);
            st.members
                .iter()
                .flatten()
                .map(|m| m.disk.logical_block_size())
                .max()
                .unwrap_or(512)
        };
        ArrayDisk {
            array,
            name,
            logical_block_size,
        }
    }

    /// The array beneath.
    pub fn array(&self) -> &Arc<Array> {
        &self.array
    }

    fn err(&self, op: &'static str, offset_bytes: u64, e: EngineError) -> DiskError {
        let kind = match e {
            EngineError::ReadOnly => DiskErrorKind::ReadOnly,
            EngineError::Disk(d) => return DiskError::new(&self.name, op, offset_bytes, d.kind),
            other => DiskErrorKind::Io(std::io::Error::other(other.to_string())),
        };
        DiskError::new(&self.name, op, offset_bytes, kind)
    }
}

impl std::fmt::Debug for ArrayDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrayDisk")
            .field("name", &self.name)
            .field("size_bytes", &self.array.size_bytes())
            .finish()
    }
}

impl Disk for ArrayDisk {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> std::result::Result<(), DiskError> {
        self.array
            .read_at(buf, offset_bytes)
            .map_err(|e| self.err("read", offset_bytes, e))
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> std::result::Result<(), DiskError> {
        self.array
            .write_at(buf, offset_bytes, false)
            .map_err(|e| self.err("write", offset_bytes, e))
    }
    /// A vectored read is one request to the array (its pieces gathered): a span's whole
    /// stripes read as one, not chunk by chunk.
    fn read_vectored_at(
        &self,
        bufs: &mut [std::io::IoSliceMut<'_>],
        offset_bytes: u64,
    ) -> std::result::Result<(), DiskError> {
        raidkit_disk::read_gathered(bufs, offset_bytes, |b, at| self.read_at(b, at))
    }
    /// A vectored write is one request to the array: a RAID 50's 1 MiB request with 64 KiB
    /// chunks reaches each span as 512 KiB it can write in whole stripes, not as eight
    /// chunks that each cost the span a read-modify-write.
    fn write_vectored_at(
        &self,
        bufs: &mut [std::io::IoSlice<'_>],
        offset_bytes: u64,
    ) -> std::result::Result<(), DiskError> {
        raidkit_disk::write_gathered(bufs, offset_bytes, |b, at| self.write_at(b, at))
    }
    fn flush(&self) -> std::result::Result<(), DiskError> {
        self.array.flush().map_err(|e| self.err("flush", 0, e))
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> std::result::Result<(), DiskError> {
        self.array
            .trim(offset_bytes, len_bytes)
            .map_err(|e| self.err("discard", offset_bytes, e))
    }
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> std::result::Result<(), DiskError> {
        self.array
            .write_zeroes(offset_bytes, len_bytes)
            .map_err(|e| self.err("write-zeroes", offset_bytes, e))
    }
    fn size_bytes(&self) -> u64 {
        self.array.size_bytes()
    }
    fn logical_block_size(&self) -> u32 {
        self.logical_block_size
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn is_read_only(&self) -> bool {
        self.array.is_read_only()
    }
}

use raidkit_disk::{DiskError, DiskErrorKind};

/// Why members cannot be split into the spans asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "refusal")]
pub enum StackSplit {
    /// Only RAID 50 and RAID 60 are stacks here.
    NotAStackLevel { level: i32 },
    /// A stack is a RAID 0 over at least two spans.
    TooFewSpans { spans: usize },
    /// Every span has the same number of members.
    NotDivisible { members: usize, spans: usize },
    /// Each span is a RAID 5 of at least 3 members or a RAID 6 of at least 4.
    TooFewPerSpan {
        span_level: i32,
        per_span: usize,
        least: usize,
    },
}

impl std::fmt::Display for StackSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            StackSplit::NotAStackLevel { level } => {
                write!(f, "RAID {level} is not a stack level (50 or 60)")
            }
            StackSplit::TooFewSpans { spans } => write!(
                f,
                "{spans} span{}: a stack is a RAID 0 over at least 2 spans",
                if spans == 1 { "" } else { "s" }
            ),
            StackSplit::NotDivisible { members, spans } => {
                write!(f, "{members} members do not split into {spans} equal spans")
            }
            StackSplit::TooFewPerSpan {
                span_level,
                per_span,
                least,
            } => write!(
                f,
                "{per_span} members per span: a RAID {span_level} span needs at least {least}"
            ),
        }
    }
}

/// The span level and members per span of a RAID `level` (50 or 60) stack of `members`
/// members in `spans` spans.
pub fn split_stack(
    level: i32,
    members: usize,
    spans: usize,
) -> std::result::Result<(i32, usize), StackSplit> {
    let (span_level, least) = match level {
        50 => (5, 3),
        60 => (6, 4),
        _ => return Err(StackSplit::NotAStackLevel { level }),
    };
    if spans < 2 {
        return Err(StackSplit::TooFewSpans { spans });
    }
    if !members.is_multiple_of(spans) {
        return Err(StackSplit::NotDivisible { members, spans });
    }
    let per_span = members / spans;
    if per_span < least {
        return Err(StackSplit::TooFewPerSpan {
            span_level,
            per_span,
            least,
        });
    }
    Ok((span_level, per_span))
}

/// What a stack adds to [`CreateOptions`]: the spans' own UUIDs.
#[derive(Clone, Debug)]
pub struct StackOptions {
    pub spans: usize,
    /// One array UUID per span.
    pub span_set_uuids: Vec<[u8; 16]>,
    /// One device UUID per span: the RAID 0's superblock on that span.
    pub span_device_uuids: Vec<[u8; 16]>,
}

/// One span's array UUID and the members given for it.
type SpanMembers = ([u8; 16], Vec<Box<dyn Disk>>);

/// What a stack's top array keeps of its spans.
pub(crate) struct Spans {
    /// 50 or 60.
    level: i32,
    /// In the RAID 0's slot order.
    arrays: Vec<Arc<Array>>,
}

/// A stack's state: its level and each span's own status, in the RAID 0's slot order.
#[derive(Clone, Debug, Serialize)]
pub struct StackStatus {
    pub level: i32,
    pub spans: Vec<Status>,
}

/// The name a span has as a member of the RAID 0: its array UUID, as mdadm prints it.
fn span_name(span: &Array) -> String {
    format!("span:{}", span.status().uuid)
}

/// True when `found` (the members' superblocks) look like a stack's: members of at least two
/// arrays, every one RAID 5 or every one RAID 6, of one shape.
pub fn looks_stacked(found: &[crate::meta::FoundSuperblock]) -> bool {
    let Some(first) = found.first() else {
        return false;
    };
    let first = &first.sb;
    if !matches!(first.level, Level::Raid5 | Level::Raid6) {
        return false;
    }
    let same_shape = found.iter().all(|f| {
        f.sb.level == first.level
            && f.sb.raid_disks == first.raid_disks
            && f.sb.chunk_sectors == first.chunk_sectors
            && f.sb.layout == first.layout
    });
    let mut uuids: Vec<[u8; 16]> = found.iter().map(|f| f.sb.set_uuid.0).collect();
    uuids.sort();
    uuids.dedup();
    same_shape && uuids.len() >= 2
}

impl Array {
    /// Creates a RAID 50 or 60 stack (`opts.level`) on `members`: `stack.spans` span arrays,
    /// span `i` a RAID 5 (or 6) of the `i`-th run of members, then a RAID 0 over the spans
    /// whose chunk is a span's whole stripe of data (the spans' chunk times their data
    /// members): a RAID 0 chunk is then one full-stripe write on a span, where a chunk of the
    /// spans' size made every write a partial-stripe write (read-modify-write) on its span. `opts.set_uuid` and `opts.name` are the RAID 0's; the spans are
    /// named after it with "-0", "-1", ... Spares are refused (a stack's spare belongs to a
    /// span).
    pub fn create_stack(
        members: Vec<Box<dyn Disk>>,
        opts: CreateOptions,
        stack: StackOptions,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<Array> {
        let n = members.len();
        let (span_level, per_span) =
            split_stack(opts.level, n, stack.spans).map_err(EngineError::Stack)?;
        if opts.raid_devices != n {
            return Err(EngineError::Invalid(format!(
                "a RAID {} stack takes no spares: {n} members given for {} raid devices",
                opts.level, opts.raid_devices
            )));
        }
        if opts.device_uuids.len() != n
            || stack.span_set_uuids.len() != stack.spans
            || stack.span_device_uuids.len() != stack.spans
        {
            return Err(EngineError::Invalid(format!(
                "{} device UUIDs for {n} members, {} array and {} device UUIDs for {} spans",
                opts.device_uuids.len(),
                stack.span_set_uuids.len(),
                stack.span_device_uuids.len(),
                stack.spans
            )));
        }
        let mut spans: Vec<Arc<Array>> = Vec::with_capacity(stack.spans);
        let mut members = members.into_iter();
        for i in 0..stack.spans {
            let span_members: Vec<Box<dyn Disk>> = members.by_ref().take(per_span).collect();
            let span_opts = CreateOptions {
                level: span_level,
                raid_devices: per_span,
                name: format!("{}-{i}", opts.name),
                set_uuid: stack.span_set_uuids[i],
                device_uuids: opts.device_uuids[i * per_span..(i + 1) * per_span].to_vec(),
                ..opts.clone()
            };
            match Array::create_observed(span_members, span_opts, progress) {
                Ok(a) => spans.push(Arc::new(a)),
                Err(e) => {
                    stop_all(&spans);
                    return Err(e);
                }
            }
        }
        let top_members: Vec<Box<dyn Disk>> = spans
            .iter()
            .map(|s| Box::new(ArrayDisk::new(s.clone(), span_name(s))) as Box<dyn Disk>)
            .collect();
        let top_opts = CreateOptions {
            level: 0,
            layout: None,
            raid_devices: stack.spans,
            size_sectors: None,
            device_uuids: stack.span_device_uuids.clone(),
            // RAID 0 has nothing to make consistent.
            init: Init::AssumeClean,
            consistency: ConsistencyPolicy::Auto,
            chunk_sectors: opts.chunk_sectors * (per_span - stack_parity(span_level)) as u32,
            ..opts
        };
        match Array::create(top_members, top_opts) {
            Ok(mut top) => {
                top.stack = Some(Spans {
                    level: stack_level(span_level),
                    arrays: spans,
                });
                Ok(top)
            }
            Err(e) => {
                stop_all(&spans);
                Err(e)
            }
        }
    }

    /// Assembles a stack from the members of all its spans: the members are grouped by
    /// their array UUID, each span is assembled from its group (md's rules, degraded where
    /// its level allows), then the RAID 0 from the spans. Members without a superblock are
    /// left out and named in the report.
    pub fn assemble_stack(
        members: Vec<Box<dyn Disk>>,
        opts: AssembleOptions,
    ) -> Result<(Array, AssembleReport)> {
        let mut report = AssembleReport::default();
        // Members by array UUID, in the order first seen.
        let mut groups: Vec<SpanMembers> = Vec::new();
        let mut span_level = None;
        for m in members {
            let found = match read_superblock(m.as_ref()) {
                Ok(f) => f,
                Err(e) => {
                    report.excluded.push((m.name().to_string(), e.to_string()));
                    continue;
                }
            };
            span_level.get_or_insert(found.sb.level);
            if span_level != Some(found.sb.level) {
                return Err(EngineError::Invalid(format!(
                    "{}: a RAID {} member among the members of RAID {} spans",
                    m.name(),
                    found.sb.level.to_md(),
                    span_level.map(|l| l.to_md()).unwrap_or_default()
                )));
            }
            let uuid = found.sb.set_uuid.0;
            match groups.iter_mut().find(|(u, _)| *u == uuid) {
                Some((_, g)) => g.push(m),
                None => groups.push((uuid, vec![m])),
            }
        }
        let span_level = match span_level {
            Some(Level::Raid5) => 5,
            Some(Level::Raid6) => 6,
            _ => {
                return Err(EngineError::Invalid(
                    "no RAID 5 or RAID 6 span among the members: not a RAID 50 or 60 stack".into(),
                ))
            }
        };
        let mut spans = Vec::with_capacity(groups.len());
        for (uuid, group) in groups {
            let span_opts = AssembleOptions {
                uuid: Some(uuid),
                level: None,
                ..opts.clone()
            };
            match Array::assemble(group, span_opts) {
                Ok((span, r)) => {
                    report.was_dirty |= r.was_dirty;
                    report.excluded.extend(r.excluded);
                    report.events.extend(r.events);
                    spans.push(Arc::new(span));
                }
                Err(e) => {
                    stop_all(&spans);
                    return Err(e);
                }
            }
        }
        let mut top_members: Vec<Box<dyn Disk>> = Vec::with_capacity(spans.len());
        for s in &spans {
            let disk = ArrayDisk::new(s.clone(), span_name(s));
            match read_superblock(&disk) {
                Ok(f) if f.sb.level == Level::Raid0 => top_members.push(Box::new(disk)),
                found => {
                    let what = match found {
                        Ok(f) => format!("a RAID {} superblock", f.sb.level.to_md()),
                        Err(e) => e.to_string(),
                    };
                    stop_all(&spans);
                    return Err(EngineError::Invalid(format!(
                        "the members form {} RAID {span_level} arrays, but array {} holds no RAID 0 over them ({what}): not a RAID {} stack; give the members of one array",
                        spans.len(),
                        span_name(s),
                        stack_level(span_level)
                    )));
                }
            }
        }
        let top_opts = AssembleOptions {
            level: Some(0),
            uuid: None,
            ..opts
        };
        match Array::assemble(top_members, top_opts) {
            Ok((mut top, r)) => {
                report.was_dirty |= r.was_dirty;
                report.excluded.extend(r.excluded);
                report.events.extend(r.events);
                // The spans in the RAID 0's slot order.
                let slots: Vec<(String, Option<usize>)> = top
                    .status()
                    .members
                    .into_iter()
                    .map(|m| (m.name, m.slot))
                    .collect();
                let slot_of = |s: &Arc<Array>| {
                    let name = span_name(s);
                    slots
                        .iter()
                        .find(|(n, _)| *n == name)
                        .and_then(|(_, slot)| *slot)
                        .unwrap_or(usize::MAX)
                };
                spans.sort_by_key(slot_of);
                top.stack = Some(Spans {
                    level: stack_level(span_level),
                    arrays: spans,
                });
                Ok((top, report))
            }
            Err(e) => {
                stop_all(&spans);
                Err(e)
            }
        }
    }

    /// A stack's spans in the RAID 0's slot order (none for an array that is no stack).
    pub fn spans(&self) -> &[Arc<Array>] {
        self.stack.as_ref().map_or(&[], |s| &s.arrays)
    }

    /// 50 or 60 for a stack's top array, `None` otherwise.
    pub fn stack_level(&self) -> Option<i32> {
        self.stack.as_ref().map(|s| s.level)
    }

    /// A stack's status: its level and each span's.
    pub(crate) fn stack_status(&self) -> Option<StackStatus> {
        self.stack.as_ref().map(|s| StackStatus {
            level: s.level,
            spans: s.arrays.iter().map(|a| a.status()).collect(),
        })
    }

    /// Stops a stack's spans (after the array above them stopped).
    pub(crate) fn stop_spans(&self) -> Result<()> {
        let mut first = Ok(());
        for span in self.spans() {
            if let Err(e) = span.stop() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

fn stack_level(span_level: i32) -> i32 {
    span_level * 10
}

/// Stops spans already made when the stack cannot be: they stay consistent and clean.
fn stop_all(spans: &[Arc<Array>]) {
    for s in spans {
        let _ = s.stop();
    }
}

/// Parity members of a span of `level` (RAID 5: one, RAID 6: two).
fn stack_parity(level: i32) -> usize {
    if level == 6 {
        2
    } else {
        1
    }
}

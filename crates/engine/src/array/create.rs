//! Creating an array: md's defaults and refusals, the superblocks and the first resync's
//! state written to new members.

use super::*;

impl Array {
    /// Creates a new array on `members` (the first `raid_devices` active, the rest spares),
    /// with raidkit's default consistency policy for the level
    /// ([`ConsistencyPolicy::default_for`]: the partial parity log for RAID 5).
    ///
    /// Members too small for md's log area next to the data (mdadm reserves 1 MiB for it,
    /// which moves data 1 MiB further in) get the resync policy instead; [`Status`] and
    /// `examine` show which one an array has.
    pub fn create(members: Vec<Box<dyn Disk>>, opts: CreateOptions) -> Result<Array> {
        Self::create_observed(members, opts, &|_, _| {})
    }

    /// [`Array::create`], telling `progress` (bytes zeroed, bytes to zero over every
    /// member) how a foreground zeroing ([`Init::Zero`]) goes, a few times a second.
    pub fn create_observed(
        members: Vec<Box<dyn Disk>>,
        opts: CreateOptions,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<Array> {
        if opts.consistency != ConsistencyPolicy::Auto {
            let policy = opts.consistency;
            return Self::create_policy_observed(members, opts, policy, progress);
        }
        let mut policy = ConsistencyPolicy::default_for(opts.level);
        if policy == ConsistencyPolicy::Ppl {
            let fits = members.iter().all(|m| {
                DataLayout::mdadm_create_ppl(&CreateShape {
                    version: opts.metadata,
                    device_sectors: m.size_bytes() / 512,
                    level: level_from_md(opts.level),
                    layout: opts.layout.unwrap_or_else(|| default_layout(opts.level)),
                    raid_disks: opts.raid_devices as u32,
                    chunk_sectors: opts.chunk_sectors,
                    with_bitmap: false,
                })
                .is_ok_and(|dl| {
                    dl.size_sectors > 0
                        && !matches!(opts.size_sectors, Some(s) if s > dl.size_sectors)
                })
            });
            if !fits {
                policy = ConsistencyPolicy::Resync;
            }
        }
        Self::create_policy_observed(members, opts, policy, progress)
    }

    /// Creates a new array with the given consistency policy (mdadm's
    /// `--consistency-policy`); `Ppl` is refused for levels other than RAID 5, as mdadm does.
    pub fn create_with_policy(
        members: Vec<Box<dyn Disk>>,
        opts: CreateOptions,
        policy: ConsistencyPolicy,
    ) -> Result<Array> {
        Self::create_policy_observed(members, opts, policy, &|_, _| {})
    }

    fn create_policy_observed(
        members: Vec<Box<dyn Disk>>,
        mut opts: CreateOptions,
        policy: ConsistencyPolicy,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<Array> {
        if policy == ConsistencyPolicy::Auto {
            opts.consistency = ConsistencyPolicy::Auto;
            return Self::create_observed(members, opts, progress);
        }
        opts.consistency = policy;
        // The checks before there is a geometry ask the level as a type too.
        let raid_level =
            RaidLevel::from_md(opts.level).map_err(|e| EngineError::Invalid(e.to_string()))?;
        let with_ppl = policy == ConsistencyPolicy::Ppl;
        if with_ppl && raid_level != RaidLevel::Raid5 {
            return Err(EngineError::Invalid(format!(
                "the partial parity log (consistency policy ppl) is for RAID 5 only, as in md; RAID {} has none",
                opts.level
            )));
        }
        let place = |shape: &CreateShape| {
            if with_ppl {
                DataLayout::mdadm_create_ppl(shape)
            } else {
                DataLayout::mdadm_create(shape)
            }
        };
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
        match opts.consistency {
            ConsistencyPolicy::Resync => {}
            ConsistencyPolicy::Bitmap { .. } if raid_level == RaidLevel::Raid0 => {
                return Err(EngineError::Invalid(
                    "RAID 0 has no redundancy to keep consistent: no bitmap".into(),
                ))
            }
            ConsistencyPolicy::Bitmap { chunk_bytes } => {
                if chunk_bytes != 0 && (chunk_bytes < 4096 || !chunk_bytes.is_power_of_two()) {
                    return Err(EngineError::Invalid(format!(
                        "bitmap chunk of {chunk_bytes} bytes: md needs a power of two of at least 4 KiB (0 for mdadm's default)"
                    )));
                }
            }
            ConsistencyPolicy::Journal
                if !matches!(
                    raid_level,
                    RaidLevel::Raid4 | RaidLevel::Raid5 | RaidLevel::Raid6
                ) =>
            {
                return Err(EngineError::Invalid(format!(
                    "the write journal is for RAID 4, 5 and 6, as in md; RAID {level} has none"
                )))
            }
            ConsistencyPolicy::Journal if n < opts.raid_devices + 1 => {
                return Err(EngineError::Invalid(
                    "the write journal needs a device of its own after the members".into(),
                ))
            }
            ConsistencyPolicy::Ppl | ConsistencyPolicy::Auto | ConsistencyPolicy::Journal => {}
        }
        // With a journal, the last device given is the journal.
        let with_journal = opts.consistency == ConsistencyPolicy::Journal;
        let journal_index = with_journal.then_some(n - 1);
        let layout = opts.layout.unwrap_or_else(|| default_layout(level));
        let chunk_sectors = if raid_level == RaidLevel::Raid1 {
            0
        } else {
            opts.chunk_sectors
        };
        let device_sectors = members
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != journal_index)
            .map(|(_, m)| m.size_bytes() / 512)
            .min()
            .unwrap_or(0);
        let dl = place(&CreateShape {
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
                } else if Some(i as usize) == journal_index {
                    DevRole::Journal
                } else {
                    DevRole::Spare
                };
                (i, r)
            })
            .collect();
        let ctime = MdTime::new(opts.ctime_seconds, 0);
        let mut sbs = Vec::with_capacity(n);
        let with_bitmap = matches!(opts.consistency, ConsistencyPolicy::Bitmap { .. });
        // (offset from the superblock, mdadm's default chunk) of the internal bitmap.
        let mut bitmap_place: Option<(i32, u64)> = None;
        for (i, disk) in members.iter().enumerate() {
            let dl_i = place(&CreateShape {
                version: opts.metadata,
                device_sectors: disk.size_bytes() / 512,
                level: level_from_md(level),
                layout,
                raid_disks: opts.raid_devices as u32,
                chunk_sectors,
                with_bitmap,
            })
            .map_err(meta_err)?;
            if let Some(p) = dl_i.bitmap {
                bitmap_place.get_or_insert((p.offset_sectors, p.chunk_bytes));
            }
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
                // RAID 0 records only the part it uses: md builds RAID 0 zones from each
                // member's data size, and members of unequal recorded sizes would make a
                // multi-zone array, which md refuses without a zone layout flag.
                data_size_sectors: if geo.level() == RaidLevel::Raid0 {
                    geo.member_data_sectors.min(dl_i.data_size_sectors)
                } else {
                    dl_i.data_size_sectors
                },
                super_offset_sectors: dl_i.super_offset_sectors,
                bitmap_offset: dl_i.bitmap.map(|p| p.offset_sectors),
                bblog: if dl_i.bblog_size_sectors > 0 {
                    Some((dl_i.bblog_offset, dl_i.bblog_size_sectors))
                } else {
                    None
                },
                events: 0,
                // A background initialisation is md's initial resync: resync_offset 0.
                clean: opts.init != Init::Background || geo.level() == RaidLevel::Raid0,
            })
            .map_err(meta_err)?;
            let mut sb = sb;
            if let Some(area) = dl_i.ppl {
                sb.feature_map.insert(FeatureMap::PPL);
                sb.set_ppl_area(area);
            }
            if with_journal {
                sb.feature_map.insert(FeatureMap::JOURNAL);
            }
            if Some(i) == journal_index {
                // The whole data area is log; journal_tail (recovery_offset) starts at 0.
                sb.data_size_sectors = dl_i.data_size_sectors;
                sb.recovery_offset_sectors = 0;
            } else if sb.data_size_sectors < geo.member_data_sectors {
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
        // Space for everything that is not data (superblock, bitmap, bad-block log, partial
        // parity log, the whole journal device), before anything is written: metadata writes
        // then never meet a full filesystem, and create fails cleanly when there is no room.
        for (disk, sb) in members.iter().zip(&sbs) {
            let size = disk.size_bytes();
            let start = (sb.data_offset_sectors * 512).min(size);
            let end = if sb.role() == DevRole::Journal {
                start
            } else {
                ((sb.data_offset_sectors + sb.data_size_sectors) * 512).min(size)
            };
            disk.reserve(0, start)?;
            // Metadata after the data: v1.0's superblock at the end of the device.
            if sb.super_offset_sectors * 512 >= end {
                disk.reserve(end, size - end)?;
            }
        }
        // Make the array consistent: zero data areas unless known zero already.
        if opts.init == Init::Zero {
            let ranges: Vec<(&dyn Disk, u64)> = members
                .iter()
                .zip(&sbs)
                .take(opts.raid_devices)
                .map(|(d, sb)| (d.as_ref(), sb.data_offset_sectors * 512))
                .collect();
            zero_data_areas(&ranges, geo.member_data_sectors * 512, progress)?;
        }
        let intent = match (opts.consistency, bitmap_place) {
            (ConsistencyPolicy::Bitmap { chunk_bytes }, Some((offset, default_chunk))) => {
                let chunk = if chunk_bytes == 0 {
                    default_chunk
                } else {
                    chunk_bytes
                };
                let sync = if geo.level() == RaidLevel::Raid10 {
                    geo.array_sectors()
                } else {
                    geo.member_data_sectors
                };
                let space =
                    raidkit_metadata::data_layout::calc_bitmap_size_bytes(sync, chunk, 4096) / 512;
                for sb in &sbs {
                    // 1.1/1.2: the bitmap sits between the superblock and the data.
                    let room = if offset > 0 {
                        sb.data_offset_sectors as i64
                            - sb.super_offset_sectors as i64
                            - offset as i64
                    } else {
                        -(offset as i64)
                    };
                    if (space as i64) > room {
                        return Err(EngineError::Invalid(format!(
                            "a bitmap chunk of {chunk} bytes needs {space} sectors of bitmap, but only {room} are reserved; use a larger chunk"
                        )));
                    }
                }
                Some(bitmap::WriteIntent::create(
                    opts.set_uuid,
                    offset,
                    sync,
                    chunk,
                    0,
                    opts.init == Init::Background,
                )?)
            }
            (ConsistencyPolicy::Bitmap { .. }, None) => {
                return Err(EngineError::Invalid(
                    "mdadm's placement gave no room for an internal bitmap on these members".into(),
                ))
            }
            _ => None,
        };
        for (disk, sb) in members.iter().zip(&sbs) {
            write_superblock(disk.as_ref(), sb, opts.metadata)?;
            if let Some(area) = ppl::area_of(sb) {
                ppl::write_empty_log(
                    disk.as_ref(),
                    area,
                    raidkit_metadata::ppl::ppl_signature(&opts.set_uuid),
                )?;
            }
        }
        if let Some(wi) = &intent {
            let image = wi.image_for_create();
            for (disk, sb) in members.iter().zip(&sbs) {
                let at = (sb.super_offset_sectors as i64 + wi.offset_sectors() as i64) as u64 * 512;
                disk.write_at(&image, at)?;
            }
        }
        for disk in &members {
            disk.flush()?;
        }
        let slot_member =
            BySlot::from_vec((0..opts.raid_devices).map(|i| Some(MemberId(i))).collect());
        let slot_state = BySlot::filled(MemberState::InSync, opts.raid_devices);
        let mut array = Self::build(
            geo,
            opts.metadata,
            false,
            opts.config,
            members,
            ByMember::from_vec(sbs),
            slot_member,
            slot_state,
            false,
        )?;
        array.bitmap = intent;
        let mut events = Vec::new();
        array.start_log(write_log::LogStart::Created, &mut events)?;
        if opts.init == Init::Background && array.geo.level() != RaidLevel::Raid0 {
            array.needs_resync_from(0);
            lock(&array.state)
                .events
                .push(ArrayEvent::ResyncNeeded { from_sector: 0 });
            if array.consistency_policy() == ConsistencyPolicy::Ppl {
                // The first step of the initial resync here, so that the first write
                // records the array dirty from past 0 (`Ppl::dirty_resync_offset`): from
                // 0, md's rule would take the log's clean replay after a crash for
                // consistency and lose the initialisation.
                let stop = std::sync::atomic::AtomicBool::new(false);
                let mut published = 0;
                array.run_task(
                    crate::TaskKind::Resync,
                    &mut |_| {
                        // At the start, then after each step.
                        published += 1;
                        if published >= 2 {
                            stop.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    },
                    &stop,
                )?;
            }
        }
        Ok(array)
    }
}

/// Zeroes `len` bytes of each member from its offset, every member on a thread of its own
/// (members are separate disks), 64 MiB at a time, telling `progress` the bytes done over
/// all of them every 200 ms and at the end.
fn zero_data_areas(
    ranges: &[(&dyn Disk, u64)],
    len: u64,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const PIECE: u64 = 64 << 20;
    let total = len * ranges.len() as u64;
    let done = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let workers: Vec<_> = ranges
            .iter()
            .map(|&(disk, at)| {
                let (done, failed) = (&done, &failed);
                scope.spawn(move || -> Result<()> {
                    let mut off = 0;
                    while off < len && !failed.load(Ordering::Relaxed) {
                        let n = PIECE.min(len - off);
                        if let Err(e) = disk.write_zeroes(at + off, n) {
                            failed.store(true, Ordering::Relaxed);
                            return Err(e.into());
                        }
                        off += n;
                        done.fetch_add(n, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        let mut told = std::time::Instant::now();
        progress(0, total);
        while !workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(std::time::Duration::from_millis(5));
            if told.elapsed() >= std::time::Duration::from_millis(200) {
                progress(done.load(Ordering::Relaxed), total);
                told = std::time::Instant::now();
            }
        }
        progress(done.load(Ordering::Relaxed), total);
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(EngineError::Invalid("a zeroing thread panicked".into()))
                })
            })
            .collect::<Result<Vec<()>>>()
            .map(|_| ())
    })
}

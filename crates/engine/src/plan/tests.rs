use super::*;

fn plan_of(
    geo: &Geo,
    first_sector: u64,
    sectors: u64,
    states: &[MemberState],
) -> Vec<(PlanKind, usize)> {
    split(geo, first_sector, sectors, 4096)
        .iter()
        .map(|p| {
            let mut op = PieceOp::new(geo, p, Dir::Write, states).unwrap();
            let user = vec![0u8; sectors as usize * SECTOR];
            let reads = match op.next(UserBuf::Write(&user)) {
                Step::Io {
                    dir: Dir::Read,
                    ios,
                } => ios.len(),
                _ => 0,
            };
            (op.kind(), reads)
        })
        .collect()
}

#[test]
fn write_plans_take_the_fewest_reads() {
    let ok = vec![MemberState::InSync; 6];
    // RAID 6 on 6 members, chunk 16 sectors: 4 data chunks per stripe
    let g = Geo::new(6, 2, 6, 16, 16 * 100).unwrap();
    // whole stripe: no reads
    assert_eq!(plan_of(&g, 0, 64, &ok), vec![(PlanKind::FullStripe, 0)]);
    // one chunk: rmw reads old data + P + Q = 3, rcw reads the 3 other chunks = 3 -> rcw (md prefers rcw on ties)
    assert_eq!(
        plan_of(&g, 0, 16, &ok),
        vec![(PlanKind::ReconstructWrite, 3)]
    );
    // three chunks: rcw reads 1
    assert_eq!(
        plan_of(&g, 0, 48, &ok),
        vec![(PlanKind::ReconstructWrite, 1)]
    );
    // RAID 5 on 6 members (5 data): one chunk -> rmw reads 2 instead of 4
    let g5 = Geo::new(5, 2, 6, 16, 16 * 100).unwrap();
    assert_eq!(
        plan_of(&g5, 0, 16, &ok),
        vec![(PlanKind::ReadModifyWrite, 2)]
    );
    // a partial chunk splits into bands by the data it covers
    assert_eq!(
        plan_of(&g5, 8, 16, &ok),
        vec![
            (PlanKind::ReadModifyWrite, 2),
            (PlanKind::ReadModifyWrite, 2)
        ]
    );
}

#[test]
fn parity_writes_where_a_resync_has_not_passed_reconstruct() {
    // RAID 5 on 6 members: one chunk is a read-modify-write, unless the stripe lies where a
    // pending resync has not passed (its parity may be wrong: md forces reconstruct-write).
    let g5 = Geo::new(5, 2, 6, 16, 16 * 100).unwrap();
    let ok = [MemberState::InSync; 6];
    let kinds = |unsynced_from: Option<u64>, at: u64| -> Vec<PlanKind> {
        let inputs = PlanInputs {
            states: &ok,
            resync_pending: unsynced_from.is_some(),
            unsynced_from,
            unreadable: &[],
            bad: None,
            mirrors: None,
        };
        split(&g5, at, 16, 4096)
            .iter()
            .map(|p| plan_piece(&g5, p, Dir::Write, inputs).unwrap().kind())
            .collect()
    };
    assert_eq!(kinds(None, 0), vec![PlanKind::ReadModifyWrite]);
    // Stripe 10 (array sectors 800..880) is member sectors 160..176.
    assert_eq!(kinds(Some(0), 800), vec![PlanKind::ReconstructWrite]);
    assert_eq!(kinds(Some(170), 800), vec![PlanKind::ReconstructWrite]);
    assert_eq!(kinds(Some(176), 800), vec![PlanKind::ReadModifyWrite]);
}

#[test]
fn degraded_plans_never_touch_lost_members() {
    let g = Geo::new(6, 2, 6, 16, 16 * 100).unwrap();
    for lost in 0..6 {
        for lost2 in lost..6 {
            let mut states = vec![MemberState::InSync; 6];
            states[lost] = MemberState::Faulty;
            states[lost2] = MemberState::Missing;
            for (start, len) in [(0u64, 64u64), (0, 16), (20, 30), (70, 5)] {
                for dir in [Dir::Read, Dir::Write] {
                    for p in split(&g, start, len, 4096) {
                        let mut op = PieceOp::new(&g, &p, dir, &states).unwrap();
                        let mut user = vec![0u8; len as usize * SECTOR];
                        loop {
                            let ub = match dir {
                                Dir::Read => UserBuf::Read(&mut user),
                                Dir::Write => UserBuf::Write(&user),
                            };
                            match op.next(ub) {
                                Step::Done => break,
                                Step::Io { ios, .. } => {
                                    for io in ios {
                                        assert!(
                                            states[io.member].usable(),
                                            "I/O planned on lost member {}",
                                            io.member
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    // three lost: refused
    let mut states = vec![MemberState::InSync; 6];
    states[0] = MemberState::Faulty;
    states[1] = MemberState::Faulty;
    states[2] = MemberState::Faulty;
    let p = &split(&g, 0, 64, 4096)[0];
    assert!(matches!(
        PieceOp::new(&g, p, Dir::Read, &states),
        Err(PlanError::Unrecoverable { .. })
    ));
}

#[test]
fn reads_of_members_that_are_there_go_direct_however_many_are_lost() {
    // RAID 5 over 4 members, 16-sector chunks: stripe 0 holds data indices 0..3 on members
    // 0, 1, 2 (left-symmetric) and parity on member 3. Members 0 and 3 are lost (more than
    // RAID 5 can lose): a read of data index 1 reads member 1 alone, a read that needs
    // member 0 is refused, and so is any write.
    let g = Geo::new(5, 2, 4, 16, 16 * 100).unwrap();
    let info = g.stripe(0);
    let mut states = vec![MemberState::InSync; 4];
    states[info.data_members[0]] = MemberState::Missing;
    states[info.p_member] = MemberState::Faulty;
    let there = info.data_members[1];
    let p = &split(&g, 16, 16, 4096)[0];
    let mut op = PieceOp::new(&g, p, Dir::Read, &states).unwrap();
    let mut user = vec![0u8; 16 * SECTOR];
    let mut members = Vec::new();
    while let Step::Io { ios, .. } = op.next(UserBuf::Read(&mut user)) {
        members.extend(ios.iter().map(|io| io.member));
    }
    assert_eq!(
        members,
        vec![there],
        "one direct read of the member that is there"
    );
    let needs_lost = &split(&g, 0, 16, 4096)[0];
    assert!(matches!(
        PieceOp::new(&g, needs_lost, Dir::Read, &states),
        Err(PlanError::Unrecoverable { .. })
    ));
    assert!(matches!(
        PieceOp::new(&g, p, Dir::Write, &states),
        Err(PlanError::Unrecoverable { .. })
    ));
}

#[test]
fn a_member_being_rebuilt_is_written_never_read() {
    // RAID 5 and RAID 6: whatever the plan, no read touches the rebuilding member, every
    // write of the band that lands on it is issued, and the parity written is that of the
    // whole new band (checked by XOR over what the plan writes plus the untouched data).
    for (level, n) in [(5, 5), (6, 6)] {
        let g = Geo::new(level, 2, n, 16, 16 * 100).unwrap();
        for target in 0..n {
            let mut states = vec![MemberState::InSync; n];
            states[target] = MemberState::Rebuilding;
            for (start, len) in [(0u64, 16 * (n as u64 - 2)), (0, 16), (20, 30), (70, 5)] {
                for p in split(&g, start, len, 4096) {
                    let mut op = PieceOp::new(&g, &p, Dir::Write, &states).unwrap();
                    let user = vec![7u8; len as usize * SECTOR];
                    let mut wrote = Vec::new();
                    loop {
                        match op.next(UserBuf::Write(&user)) {
                            Step::Done => break,
                            Step::Io { dir, ios } => {
                                for io in ios {
                                    if dir == Dir::Read {
                                        assert_ne!(
                                            io.member, target,
                                            "read from a rebuilding member"
                                        );
                                    } else {
                                        wrote.push(io.member);
                                    }
                                }
                            }
                        }
                    }
                    let PieceKind::Band {
                        stripe,
                        dd_first,
                        dd_last,
                        ..
                    } = p.kind
                    else {
                        unreachable!()
                    };
                    let info = g.stripe(stripe);
                    let touched_target = info.data_members[dd_first..=dd_last].contains(&target)
                        || info.p_member == target
                        || info.q_member == Some(target);
                    assert_eq!(
                        wrote.contains(&target),
                        touched_target,
                        "level {level} target {target} stripe {stripe}: {wrote:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn split_covers_the_request_exactly_once() {
    let g = Geo::new(5, 0, 5, 16, 16 * 100).unwrap();
    let (start, len) = (13u64, 200u64);
    let mut covered = vec![0u8; len as usize];
    for p in split(&g, start, len, 8) {
        let PieceKind::Band {
            sectors,
            dd_first,
            dd_last,
            user_offset_bytes,
            ..
        } = p.kind
        else {
            panic!()
        };
        assert!(sectors <= 8);
        for dd in dd_first..=dd_last {
            let off = user_offset_bytes / SECTOR + (dd - dd_first) * 16;
            for s in 0..sectors as usize {
                covered[off + s] += 1;
            }
        }
    }
    assert!(covered.iter().all(|&c| c == 1), "{covered:?}");
}

/// The members a read plan reads first, for each piece of `[first_sector, +sectors)`.
fn first_reads(geo: &Geo, first_sector: u64, sectors: u64, inputs: PlanInputs<'_>) -> Vec<usize> {
    let mut out = Vec::new();
    for p in split(geo, first_sector, sectors, 4096) {
        let mut op = plan_piece(geo, &p, Dir::Read, inputs).unwrap();
        let mut user = vec![0u8; sectors as usize * SECTOR];
        if let Step::Io { ios, .. } = op.next(UserBuf::Read(&mut user)) {
            out.extend(ios.iter().map(|io| io.member));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

#[test]
fn reads_avoid_bad_blocks_unreadable_members_and_follow_a_pending_resync() {
    // RAID 5 over 4 members, 16-sector chunks: stripe 0's data index 0 is on slot 0.
    let g = Geo::new(5, 2, 4, 16, 16 * 100).unwrap();
    let states = [MemberState::InSync; 4];
    let plain = PlanInputs {
        states: &states,
        resync_pending: false,
        unsynced_from: None,
        unreadable: &[],
        bad: None,
        mirrors: None,
    };
    assert_eq!(first_reads(&g, 0, 8, plain), vec![0]);
    // Slot 0 returned a read error to this piece: the others rebuild it.
    let without = PlanInputs {
        unreadable: &[0],
        ..plain
    };
    assert_eq!(first_reads(&g, 0, 8, without), vec![1, 2, 3]);
    // Slot 0's bad-block log covers member sectors 4..6: a read there is served from the
    // others, a read beside it is not.
    let bad = |slot: usize, from: u64, n: u64| slot == 0 && from < 6 && 4 < from + n;
    let listed = PlanInputs {
        bad: Some(&bad),
        ..plain
    };
    assert_eq!(first_reads(&g, 0, 8, listed), vec![1, 2, 3]);
    assert_eq!(first_reads(&g, 8, 8, listed), vec![0]);

    // RAID 1 over 3: reads spread over copies, but go to the first live copy while a
    // resync is pending.
    let m = Geo::new(1, 0, 3, 0, 4096).unwrap();
    let states = [MemberState::InSync; 3];
    let spread = PlanInputs {
        states: &states,
        resync_pending: false,
        unsynced_from: None,
        unreadable: &[],
        bad: None,
        mirrors: None,
    };
    let hinted: Vec<usize> = (0..3u64)
        .flat_map(|k| first_reads(&m, k * 256, 8, spread))
        .collect();
    assert_ne!(hinted, vec![0, 0, 0], "reads spread over the copies");
    let pending = PlanInputs {
        resync_pending: true,
        ..spread
    };
    for k in 0..3u64 {
        assert_eq!(first_reads(&m, k * 256, 8, pending), vec![0]);
    }
}

#[test]
fn a_member_error_fails_the_member_unless_redundancy_can_serve_the_read() {
    let r5 = Geo::new(5, 2, 4, 16, 1600).unwrap();
    let r0 = Geo::new(0, 0, 4, 16, 1600).unwrap();
    use ErrorAction::*;
    let (r, w) = (Dir::Read, Dir::Write);
    assert_eq!(
        on_member_error(&r5, r, r, false, false, false),
        ReplanWithout
    );
    assert_eq!(
        on_member_error(&r5, r, r, false, false, true),
        FailMember { replan: true },
        "a second error from the same member to the same piece fails it"
    );
    assert_eq!(
        on_member_error(&r0, r, r, false, false, false),
        FailMember { replan: true },
        "RAID 0 has nothing to serve the read from"
    );
    assert_eq!(
        on_member_error(&r5, w, w, false, false, false),
        FailMember { replan: false }
    );
    assert_eq!(
        on_member_error(&r5, w, r, false, false, false),
        FailMember { replan: true },
        "a read of a read-modify-write fails the member and plans again"
    );
    assert_eq!(
        on_member_error(&r5, w, w, false, true, false),
        FailReplacement
    );
    assert_eq!(
        on_member_error(&r5, w, w, true, true, false),
        ResyncAndRefuse
    );
}

/// Mirror reads on spinning disks: far copies read the near (lowest) copy, streaming reads
/// take whole extents of each copy in turn, small reads the least busy copy; solid-state
/// members keep the interleave.
#[test]
fn mirror_reads_on_spinning_disks_go_where_the_head_is_cheapest() {
    let spinning = MirrorInputs {
        rotational: vec![true; 3],
        in_flight: vec![2, 0, 1],
        heads: vec![u64::MAX; 3],
    };
    let all = |_: usize| true;
    // Far layout: copies at different addresses; the lowest wins, unless it is lost.
    let far = [(0, 5000), (1, 40), (2, 90_000)];
    assert_eq!(choose_copy(&far, 8, all, &spinning), Some(1));
    assert_eq!(choose_copy(&far, 8, |s| s != 1, &spinning), Some(0));
    // Same address: streaming reads rotate per extent of member sectors.
    let near = |ms: u64| [(0, ms), (1, ms), (2, ms)];
    let picks: Vec<Option<usize>> = (0..6)
        .map(|k| {
            choose_copy(
                &near(k * STREAM_EXTENT_SECTORS),
                STREAMING_SECTORS,
                all,
                &spinning,
            )
        })
        .collect();
    assert_eq!(picks, [0, 1, 2, 0, 1, 2].map(Some));
    // Within an extent, the same copy.
    assert_eq!(
        choose_copy(&near(STREAM_EXTENT_SECTORS + 100), 1024, all, &spinning),
        Some(1)
    );
    // Small reads: the least busy copy (slot 1 has nothing in flight).
    assert_eq!(choose_copy(&near(77), 8, all, &spinning), Some(1));
    // ... among the live copies (index into them: slots 0 and 2 left, 2 is less busy).
    assert_eq!(choose_copy(&near(77), 8, |s| s != 1, &spinning), Some(1));
    // Solid-state or mixed: no choice here.
    let mixed = MirrorInputs {
        rotational: vec![true, false, true],
        in_flight: vec![0; 3],
        heads: vec![u64::MAX; 3],
    };
    assert_eq!(choose_copy(&near(0), 8, all, &mixed), None);
    assert_eq!(choose_copy(&far, 8, |s| s == 0, &spinning), None);
    // Two copies at one address: streaming reads keep the interleave.
    assert_eq!(choose_copy(&near(0)[..2], 1024, all, &spinning), None);
    // A lone stream (nothing in flight) stays on the copy whose last read ended where it
    // goes on, whatever the extent, with two copies or three (md's rule) ...
    let lone = MirrorInputs {
        rotational: vec![true; 3],
        in_flight: vec![0; 3],
        heads: vec![7, 5 * STREAM_EXTENT_SECTORS, 9],
    };
    let at = 5 * STREAM_EXTENT_SECTORS;
    assert_eq!(choose_copy(&near(at), 1024, all, &lone), Some(1));
    assert_eq!(choose_copy(&near(at)[..2], 1024, all, &lone), Some(1));
    // ... not when that copy is busy (a deeper stream spreads over the extents), nor for
    // small reads, nor when the copy is lost.
    let deep = MirrorInputs {
        in_flight: vec![0, 1, 0],
        ..lone.clone()
    };
    assert_eq!(choose_copy(&near(at), 1024, all, &deep), Some(2));
    assert_eq!(choose_copy(&near(at), 8, all, &lone), Some(0));
    assert_eq!(choose_copy(&near(at), 1024, |s| s != 1, &lone), None);
}

#[test]
fn pieces_are_cut_where_a_listed_range_starts_or_ends_inside_them() {
    let g = Geo::new(5, 2, 4, 16, 16 * 100).unwrap();
    // Stripe 2, rows 0..16 of all three data chunks.
    let pieces = split(&g, 2 * 48, 48, 64);
    assert_eq!(pieces.len(), 1);
    let p = &pieces[0];
    // Slot 1 lists member sectors 36..40 (rows 4..8 of stripe 2); slot 3 lists all of it.
    let lists: Vec<Vec<(u64, u64)>> = vec![vec![], vec![(36, 4)], vec![], vec![(0, 100)]];
    let edges = listed_edges(&g, p, |s| Some(lists[s].as_slice()));
    assert_eq!(edges, vec![4, 8]);
    let parts = cut(p, &edges);
    let rows: Vec<(u64, u64, usize)> = parts
        .iter()
        .map(|q| match q.kind {
            PieceKind::Band {
                lo,
                sectors,
                user_offset_bytes,
                ..
            } => (lo, sectors, user_offset_bytes),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(rows, vec![(0, 4, 0), (4, 4, 4 * 512), (8, 8, 8 * 512)]);
    assert!(parts.iter().all(|q| q.lock_key == p.lock_key));
    // Each part is listed by slot 1 wholly or not at all.
    for q in &parts {
        let e = listed_edges(&g, q, |s| Some(lists[s].as_slice()));
        assert!(e.is_empty(), "{q:?}: {e:?}");
    }
    // Copies: offsets follow each copy's own member sector.
    let c = Piece {
        lock_key: 0,
        kind: PieceKind::Copies {
            copies: vec![(0, 100), (1, 200)],
            sectors: 16,
            user_offset_bytes: 512,
            read_hint: 0,
        },
    };
    let lists: Vec<Vec<(u64, u64)>> = vec![vec![(104, 2)], vec![(190, 20)]];
    let edges = listed_edges(&g, &c, |s| Some(lists[s].as_slice()));
    assert_eq!(edges, vec![4, 6, 10]);
    let parts = cut(&c, &edges);
    assert_eq!(parts.len(), 4);
    match &parts[2].kind {
        PieceKind::Copies {
            copies,
            sectors,
            user_offset_bytes,
            ..
        } => {
            assert_eq!(copies, &vec![(0, 106), (1, 206)]);
            assert_eq!((*sectors, *user_offset_bytes), (4, 512 + 6 * 512));
        }
        _ => unreachable!(),
    }
}

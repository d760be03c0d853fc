//! The journal's replay at assembly: the log read from its checkpoint as md analyzes it, the
//! stripe rows it holds completed and written to the members.

use super::*;

/// One 4 KiB stripe row of a log write: data pages by array sector, and parity pages.
#[derive(Default)]
pub(super) struct Row {
    pub(super) data: BTreeMap<u64, (usize, Vec<u8>)>,
    pub(super) p: Option<Vec<u8>>,
    pub(super) q: Option<Vec<u8>>,
}

/// What a replayed row writes: (slot, member sector, page).
pub(super) type RowWrites = Vec<(usize, u64, Vec<u8>)>;

/// What a log holds ([`Array::analyze_log`]): the rows to replay onto the members, in order,
/// and the data-only rows by member sector.
pub(super) struct LogFound {
    pub(super) replays: Vec<RowWrites>,
    pub(super) data_only: BTreeMap<u64, Row>,
    /// The first log write (by index) holding a page of a data-only row.
    pub(super) first_data_only: Option<usize>,
}

impl Array {
    /// Where array sector `a` of a parity level lives: (slot, member sector).
    pub(super) fn data_place(&self, a: u64) -> (usize, u64) {
        let chunk = self.geo.chunk_sectors;
        let width = chunk * self.geo.data_disks() as u64;
        let stripe = a / width;
        let within = a % width;
        let info = self.geo.stripe(stripe);
        (
            info.data_members[(within / chunk) as usize],
            stripe * chunk + within % chunk,
        )
    }

    /// md's reading of a log (`r5c_recovery_analyze_meta_block`), log write by log write
    /// (`None`: its pages did not match, it counts for nothing): data pages gather per stripe
    /// row until its parity comes; a row with parity is replayed when data for it comes again
    /// (written back before that data was cached) or at the end; a flush payload drops the
    /// rows it lists; rows with data but no parity at the end are data-only (cached in
    /// write-back mode, never on the members); rows with parity alone were written back.
    pub(super) fn analyze_log(&self, units: &[(MetaBlock, Option<Vec<u8>>)]) -> LogFound {
        let chunk = self.geo.chunk_sectors;
        let stripes = self.geo.array_sectors() / (chunk * self.geo.data_disks() as u64);
        let mut rows: BTreeMap<u64, Row> = BTreeMap::new();
        // Per row, the first log write holding a page of its data since its last parity.
        let mut since: BTreeMap<u64, usize> = BTreeMap::new();
        let mut replays = Vec::new();
        let take = |row: Row, ms: u64, replays: &mut Vec<RowWrites>| {
            if !row.data.is_empty() {
                replays.push(self.row_writes(ms, row));
            }
        };
        for (unit, (mb, data)) in units.iter().enumerate() {
            let Some(data) = data else { continue };
            let mut page = 0usize;
            for p in &mb.payloads {
                match p {
                    Payload::Data {
                        location,
                        checksums,
                        ..
                    } => {
                        for i in 0..checksums.len() {
                            let a = location + i as u64 * PAGE_SECTORS;
                            let bytes = data[page * PAGE..(page + 1) * PAGE].to_vec();
                            page += 1;
                            if a + PAGE_SECTORS > self.geo.array_sectors() {
                                continue;
                            }
                            let (slot, ms) = self.data_place(a);
                            let row = rows.entry(ms).or_default();
                            if row.p.is_some() {
                                take(std::mem::take(row), ms, &mut replays);
                                since.remove(&ms);
                            }
                            row.data.insert(a, (slot, bytes));
                            since.entry(ms).or_insert(unit);
                        }
                    }
                    Payload::Parity {
                        location,
                        checksums,
                        ..
                    } => {
                        let pages: Vec<Vec<u8>> = (0..checksums.len())
                            .map(|i| data[(page + i) * PAGE..(page + i + 1) * PAGE].to_vec())
                            .collect();
                        page += checksums.len();
                        if location / chunk >= stripes {
                            continue;
                        }
                        let row = rows.entry(*location).or_default();
                        let mut pages = pages.into_iter();
                        row.p = pages.next();
                        row.q = pages.next();
                    }
                    Payload::Flush { stripes, .. } => {
                        for ms in stripes {
                            rows.remove(ms);
                            since.remove(ms);
                        }
                    }
                }
            }
        }
        let mut data_only = BTreeMap::new();
        let mut first_data_only: Option<usize> = None;
        for (ms, row) in rows {
            if row.p.is_some() {
                take(row, ms, &mut replays);
            } else if !row.data.is_empty() {
                let u = since.get(&ms).copied().unwrap_or(0);
                first_data_only = Some(first_data_only.map_or(u, |f| f.min(u)));
                data_only.insert(ms, row);
            }
        }
        LogFound {
            replays,
            data_only,
            first_data_only,
        }
    }

    /// A row's pages as member writes: its data, P and Q.
    pub(super) fn row_writes(&self, ms: u64, row: Row) -> RowWrites {
        let info = self.geo.stripe(ms / self.geo.chunk_sectors);
        let mut w: RowWrites = row
            .data
            .into_values()
            .map(|(slot, page)| (slot, ms, page))
            .collect();
        if let Some(p) = row.p {
            w.push((info.p_member, ms, p));
        }
        if let (Some(q), Some(slot)) = (row.q, info.q_member) {
            w.push((slot, ms, q));
        }
        w
    }

    /// Fills the missing parity pages of `row` (stripe row at member sector `ms`) from its new
    /// data and the current data of the members it does not write.
    pub(super) fn complete_parity(
        &self,
        ms: u64,
        row: &mut Row,
        states: &[MemberState],
        members: &[Option<Arc<Member>>],
    ) -> Result<()> {
        let chunk = self.geo.chunk_sectors;
        let stripe = ms / chunk;
        let info = self.geo.stripe(stripe);
        let n = self.geo.raid_disks;
        let mut bufs: Vec<Vec<u8>> = vec![vec![0u8; PAGE]; n];
        let mut readable = vec![true; n];
        for (dd, &slot) in info.data_members.iter().enumerate() {
            let a = (stripe * self.geo.data_disks() as u64 + dd as u64) * chunk + ms % chunk;
            let logged = row.data.get(&a);
            let mut source = row_source(
                logged.is_some(),
                states[slot],
                members[slot].is_some(),
                false,
            );
            if let (RowSource::Member, Some(m)) = (source, &members[slot]) {
                let at = m.data_offset_bytes + ms * SECTOR as u64;
                let failed = m.disk.read_at(&mut bufs[slot], at).is_err();
                source = row_source(false, states[slot], true, failed);
            }
            match (source, logged) {
                (RowSource::Logged, Some((_, page))) => bufs[slot].copy_from_slice(page),
                (RowSource::Rebuild, _) => {
                    let mut rebuilt = Vec::new();
                    self.reconstruct_parity_range(slot, ms, PAGE_SECTORS, &mut rebuilt)?;
                    bufs[slot].copy_from_slice(&rebuilt[slot][..PAGE]);
                }
                _ => {}
            }
        }
        match &row.p {
            Some(p) => bufs[info.p_member].copy_from_slice(p),
            None => readable[info.p_member] = false,
        }
        if let Some(q) = info.q_member {
            match &row.q {
                Some(page) => bufs[q].copy_from_slice(page),
                None => readable[q] = false,
            }
        }
        crate::recon::parity_recover(&self.geo, ms, PAGE_SECTORS, &mut bufs, &readable).map_err(
            |e| EngineError::ArrayFailed {
                detail: format!("write journal: parity of row {ms}: {e}"),
            },
        )?;
        if row.p.is_none() {
            row.p = Some(std::mem::take(&mut bufs[info.p_member]));
        }
        if let (Some(q), None) = (info.q_member, &row.q) {
            row.q = Some(std::mem::take(&mut bufs[q]));
        }
        Ok(())
    }
}

impl Journal {
    /// At assembly: reads the log from the checkpoint and writes every complete stripe row
    /// it holds to the members, then starts a new chain (see the module comment). Returns
    /// the number of rows replayed.
    pub(super) fn replay(&self, array: &Array, events: &mut Vec<ArrayEvent>) -> Result<usize> {
        let tail = lock(&self.st).tail;
        let name = self.disk.disk.name().to_string();
        let Some(first) = self.read_meta(tail).filter(|m| m.position == tail) else {
            // No chain (a new journal, or one md never wrote): start one at 0.
            let seq = fresh_seq();
            if !array.read_only {
                self.write_empty(0, seq)?;
                self.set_tail(array, 0)?;
            }
            let mut st = lock(&self.st);
            st.tail = 0;
            st.head = PAGE_SECTORS;
            st.seq = seq + 1;
            events.push(ArrayEvent::JournalStartedEmpty { member: name });
            return Ok(0);
        };
        // Walk the chain.
        let mut pos = tail;
        let mut seq = first.seq;
        let mut units: Vec<(MetaBlock, Option<Vec<u8>>)> = Vec::new();
        let mut starts: Vec<u64> = Vec::new();
        let mut scanned = 0u64;
        while let Some(mb) = self.read_meta(pos) {
            if mb.seq != seq || mb.position != pos {
                break;
            }
            let pages = mb.pages();
            let span = PAGE_SECTORS * (1 + pages);
            if scanned + span > self.ring {
                break;
            }
            let mut data = vec![0u8; pages as usize * PAGE];
            if self
                .ring_io(self.add(pos, PAGE_SECTORS), &mut data, false)
                .is_err()
            {
                break;
            }
            let mut ok = true;
            let mut page = 0usize;
            for p in &mb.payloads {
                if let Payload::Data { checksums, .. } | Payload::Parity { checksums, .. } = p {
                    for c in checksums {
                        let b = &data[page * PAGE..(page + 1) * PAGE];
                        if page_checksum(self.seed, b) != *c {
                            ok = false;
                        }
                        page += 1;
                    }
                }
            }
            scanned += span;
            pos = self.add(pos, span);
            seq += 1;
            // md: a log write whose pages do not all match keeps its place in the chain, but
            // none of its payloads count (log writes may complete out of order).
            starts.push(mb.position);
            units.push((mb, ok.then_some(data)));
        }
        let found = array.analyze_log(&units);
        let replayed = found.replays.len();
        if !array.read_only {
            self.write_rows(array, found.replays);
        }
        let next_seq = seq + 10_000;
        let data_only_rows = found.data_only.len();
        let mut data_only: Vec<(u64, Vec<u8>)> = found
            .data_only
            .into_values()
            .flat_map(|row| row.data.into_iter().map(|(a, (_, page))| (a, page)))
            .collect();
        data_only.sort_by_key(|(a, _)| *a);
        // md's r5c_recovery_rewrite_data_only_stripes: the data-only rows are logged anew at
        // the head of a new chain (seq + 10000), then the checkpoint moves there; until then a
        // crash replays the old chain again.
        let mut first_seq = next_seq;
        if !array.read_only {
            if replayed > 0 {
                array.flush()?;
            }
            {
                let mut st = lock(&self.st);
                st.head = pos;
                st.seq = next_seq;
                st.units.clear();
            }
            if data_only.is_empty() {
                self.write_empty(pos, next_seq)?;
                let mut st = lock(&self.st);
                st.head = self.add(pos, PAGE_SECTORS);
                st.seq = next_seq + 1;
            } else {
                // Only the log from the first data-only page on is still needed (the rows
                // with parity are on the members and flushed): the checkpoint moves there
                // first, which leaves the ring room for the pages' new log writes.
                if let Some(first) = found.first_data_only.map(|u| starts[u]) {
                    if first != tail {
                        self.set_tail(array, first)?;
                        lock(&self.st).tail = first;
                    }
                }
                let refs: Vec<(u64, &[u8])> =
                    data_only.iter().map(|(a, p)| (*a, p.as_slice())).collect();
                first_seq = self.log_data(array, &refs)?;
            }
            self.set_tail(array, pos)?;
            lock(&self.st).tail = pos;
        } else {
            let mut st = lock(&self.st);
            st.tail = pos;
            st.head = self.add(pos, PAGE_SECTORS);
            st.seq = next_seq + 1;
        }
        if !data_only.is_empty() {
            // In the write-back cache until written to the members (at the end of assembly
            // under write-through; by a read-only array never, but its reads see them).
            array
                .write_back
                .load(array.write_back_shape(), data_only, first_seq);
            self.set_floor(first_seq);
        }
        let log_writes = units
            .iter()
            .filter(|(mb, _)| !mb.payloads.is_empty())
            .count();
        events.push(if log_writes == 0 {
            ArrayEvent::JournalClean { member: name }
        } else {
            ArrayEvent::JournalReplayed {
                member: name,
                log_writes,
                rows_replayed: replayed,
                data_only_rows,
            }
        });
        Ok(replayed)
    }

    /// Writes replayed rows to the members of their slots and to the slots' replacements.
    pub(super) fn write_rows(&self, array: &Array, rows: Vec<RowWrites>) {
        let (states, members) = array.snapshot();
        let replacements: Vec<Option<Arc<Member>>> = {
            let st = lock(&array.state);
            st.roster
                .replacement
                .iter()
                .map(|r| r.and_then(|i| st.members[i].clone()))
                .collect()
        };
        for writes in rows {
            for (slot, ms, page) in writes {
                let targets = [
                    members[slot]
                        .clone()
                        .filter(|_| states[slot] != MemberState::Missing),
                    replacements.get(slot).cloned().flatten(),
                ];
                for m in targets.into_iter().flatten() {
                    let at = m.data_offset_bytes + ms * SECTOR as u64;
                    if let Err(e) = m.disk.write_at(&page, at) {
                        array.member_failed(Slot(slot), &format!("journal replay: {e}"));
                    }
                }
            }
        }
    }
}

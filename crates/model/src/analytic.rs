//! The analytic method: closed forms per level over the drive's service curves.
//!
//! Sequential loads stream: the drives read ahead and write behind, so a member is busy for
//! the surface it passes (parity and other copies included) at its zone's rate, and the
//! array runs at the rate of its busiest resource (a member, the controller or host link in
//! each direction, the host's parity CPU).
//!
//! Random loads queue: each request is split into member operations in phases (a RAID 5
//! read-modify-write reads data and parity, then writes both), and approximate mean value
//! analysis (Schweitzer's) of the closed network of the queue depth's requests gives the
//! throughput and mean latency, with each drive's service time depending on how many
//! requests wait at it (it picks the one it reaches soonest).

use crate::drive::{DriveModel, OpKind, Service};
use crate::level::{Level, Placement};
use crate::system::{Load, RaidIn, System};
use raidkit_disk::emu::catalog::link_mbps;
use serde::Serialize;

/// One predicted figure.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    /// What the figure is (`sequential read, outer 5%`).
    pub what: String,
    /// The load behind it.
    pub load: String,
    pub mb_s: f64,
    pub iops: f64,
    /// Mean latency of a request.
    pub latency_ms: f64,
    /// The resource that sets the figure, and how busy it is.
    pub limit: String,
    /// Each member's MB/s read and written (the `iostat -x` view), in member order; a
    /// missing member is 0.
    pub members_mb_s: Vec<f64>,
}

/// A station: something requests queue at, with its busy time per array request.
struct Station {
    name: String,
    busy: f64,
    /// The member this station is.
    member: Option<usize>,
}

/// Member operations that run side by side: expected operations per member, by kind.
#[derive(Clone, Debug)]
struct Phase {
    kind: OpKind,
    visits: Vec<f64>,
}

impl Phase {
    fn ops(&self) -> f64 {
        self.visits.iter().sum()
    }
}

/// The array's structure as the formulas need it.
struct Shape {
    n: usize,
    /// Member 0 is missing when set.
    missing: bool,
    level: Level,
}

impl Shape {
    fn live(&self, i: usize) -> bool {
        !(self.missing && i == 0)
    }

    /// `total` operations spread evenly over the live members of `members`.
    fn spread(&self, members: impl Iterator<Item = usize> + Clone, total: f64) -> Vec<f64> {
        let live = members.clone().filter(|&i| self.live(i)).count().max(1) as f64;
        let mut v = vec![0.0; self.n];
        for i in members.filter(|&i| self.live(i)) {
            v[i] += total / live;
        }
        v
    }

    /// Parity levels: (parity per group, group width).
    fn group(&self) -> Option<(usize, usize)> {
        self.level.parity_group(self.n)
    }
}

/// The member operations of one random request of `pieces` chunks.
fn random_phases(sh: &Shape, pieces: f64, write: bool) -> Vec<Phase> {
    let n = sh.n;
    let all = 0..n;
    let one = |kind, visits| vec![Phase { kind, visits }];
    let kind = if write { OpKind::Write } else { OpKind::Read };
    match sh.level {
        Level::Raid0 => one(kind, sh.spread(all, pieces)),
        Level::Raid1 | Level::Raid1E | Level::Raid10 { .. } => {
            let copies = if write {
                sh.level.copies(n) as f64
            } else {
                1.0
            };
            // A lost member's copies are not written; its reads go to the others.
            let mut v = vec![0.0; n];
            for (i, x) in v.iter_mut().enumerate() {
                if sh.live(i) {
                    *x = pieces * copies / n as f64;
                }
            }
            if !write {
                v = sh.spread(all, pieces);
            }
            one(kind, v)
        }
        Level::Raid4
        | Level::Raid5
        | Level::Raid6
        | Level::Raid50 { .. }
        | Level::Raid60 { .. } => {
            let (p, g) = sh.group().expect("a parity level");
            let raid4 = sh.level == Level::Raid4;
            let data_members = move || (0..n).filter(move |&i| !raid4 || i != n - 1);
            if !write {
                let mut v = sh.spread(data_members(), pieces);
                if sh.missing {
                    // Reads that hit the lost member read g - p others of its group instead.
                    let lost = pieces / data_members().count() as f64;
                    let extra = sh.spread(0..g, lost * (g - p) as f64);
                    for (x, e) in v.iter_mut().zip(extra) {
                        *x += e;
                    }
                }
                return one(OpKind::Read, v);
            }
            let d = pieces.min((g - p) as f64);
            let full = d >= (g - p) as f64;
            let rmw = d + p as f64;
            let rcw = (g - p) as f64 - d;
            // md reads for a read-modify-write only when it reads less than reconstructing.
            let by_rmw = !full && rmw < rcw;
            let reads = if full {
                0.0
            } else if by_rmw {
                rmw
            } else {
                rcw
            };
            let place = |ops_data: f64, ops_parity: f64| -> Vec<f64> {
                if raid4 {
                    let mut v = sh.spread(data_members(), ops_data);
                    if sh.live(n - 1) {
                        v[n - 1] += ops_parity;
                    }
                    v
                } else {
                    sh.spread(0..n, ops_data + ops_parity)
                }
            };
            let mut phases = Vec::new();
            if reads > 0.0 {
                let (rd, rp) = if by_rmw { (d, p as f64) } else { (rcw, 0.0) };
                phases.push(Phase {
                    kind: OpKind::Read,
                    visits: place(rd, rp),
                });
            }
            phases.push(Phase {
                kind: if by_rmw {
                    OpKind::Rewrite
                } else {
                    OpKind::Write
                },
                visits: place(d, p as f64),
            });
            phases
        }
    }
}

/// Seconds each member is busy per byte of a sequential array stream, and the fraction
/// range of the member's surface it passes, for reads or writes.
struct Streaming {
    per_byte: Vec<f64>,
    /// Extra busy time per request (seeks between copies).
    per_request: Vec<f64>,
}

fn streaming(sys: &System, drive: &DriveModel, sh: &Shape, load: &Load, write: bool) -> Streaming {
    let n = sh.n;
    let (lo, hi) = (load.region.start, load.region.end);
    let rate = |lo: f64, hi: f64| drive.seq_rate(lo, hi, write);
    let mut per_byte = vec![0.0; n];
    let mut per_request = vec![0.0; n];
    let data = sys.level.data_members(n);
    let even = |per_byte: &mut Vec<f64>, share: f64, r: f64| {
        for (i, x) in per_byte.iter_mut().enumerate() {
            if sh.live(i) {
                *x = share / r;
            }
        }
    };
    match sys.level {
        Level::Raid0 => even(&mut per_byte, 1.0 / n as f64, rate(lo, hi)),
        Level::Raid1 => {
            if write {
                even(&mut per_byte, 1.0, rate(lo, hi));
            } else {
                // A stream reads from one member; streams spread over the members.
                let live = n - usize::from(sh.missing);
                let used = load.streams.clamp(1, live);
                let first = usize::from(sh.missing);
                for x in per_byte.iter_mut().skip(first).take(used) {
                    *x = 1.0 / used as f64 / rate(lo, hi);
                }
            }
        }
        Level::Raid4 if !write => {
            for x in per_byte.iter_mut().take(n - 1) {
                *x = 1.0 / (n - 1) as f64 / rate(lo, hi);
            }
        }
        Level::Raid4
        | Level::Raid5
        | Level::Raid6
        | Level::Raid50 { .. }
        | Level::Raid60 { .. } => {
            // Each member passes its whole share of the stripes, parity chunks included.
            even(&mut per_byte, 1.0 / data, rate(lo, hi))
        }
        Level::Raid1E | Level::Raid10 { .. } => {
            let c = sys.level.copies(n) as f64;
            let far = matches!(
                sys.level,
                Level::Raid10 {
                    placement: Placement::Far,
                    ..
                }
            );
            if far && !write {
                // Reads come from the near copies, laid over the first half of each member.
                even(&mut per_byte, 1.0 / n as f64, rate(lo / c, hi / c));
            } else if far {
                // Each member writes near copies in its first part and far copies beyond,
                // seeking between them; the drive's queue gathers pieces of one kind.
                let near = rate(lo / c, hi / c);
                let far_rate = rate(1.0 / c + lo / c * (c - 1.0), 1.0 / c + hi / c * (c - 1.0));
                let t = (1.0 / near + (c - 1.0) / far_rate) / n as f64;
                even(&mut per_byte, t, 1.0);
                let piece = load.request_bytes as f64 / n as f64;
                let batch = drive.write_batch(piece);
                let seek = drive.half_stroke_positioning();
                for (i, x) in per_request.iter_mut().enumerate() {
                    if sh.live(i) {
                        *x = c * seek / batch;
                    }
                }
            } else {
                // Near and offset: each member passes its c/n share (other copies included).
                even(&mut per_byte, c / n as f64, rate(lo, hi));
            }
            if sh.missing {
                // The lost member's partner serves its reads too.
                let partner = 1 % n;
                if !write {
                    per_byte[partner] *= 2.0;
                }
            }
        }
    }
    Streaming {
        per_byte,
        per_request,
    }
}

/// Member bytes (read, written) per array byte of reads or writes, and member requests per
/// array request.
fn member_traffic(sys: &System, write: bool) -> (f64, f64) {
    let n = sys.drives;
    let lv = sys.level;
    if !write {
        let recon = match lv.parity_group(n) {
            // One member in g is missing: its share is rebuilt from g - p others.
            Some((p, g)) if sys.missing > 0 => 1.0 + ((g - p) as f64 - 1.0) / g as f64,
            _ => 1.0,
        };
        return (recon, 0.0);
    }
    let w = match lv {
        Level::Raid0 => 1.0,
        _ => match lv.parity_group(n) {
            Some((p, g)) => g as f64 / (g - p) as f64,
            None => lv.copies(n) as f64,
        },
    };
    (0.0, w)
}

/// Host CPU seconds per array byte for parity (RAID in the host only).
fn cpu_per_byte(sys: &System, write: bool, random_rmw: bool) -> f64 {
    if sys.raid_in == RaidIn::Controller {
        return 0.0;
    }
    let Some((p, _)) = sys.level.parity_group(sys.drives) else {
        return 0.0;
    };
    let rate = if p == 2 { sys.pq_gbps } else { sys.xor_gbps } * 1e9;
    let passes = if !write && sys.missing == 0 {
        0.0
    } else if random_rmw {
        // Old data, old parity and new data folded in.
        3.0
    } else {
        1.0
    };
    passes / rate
}

/// A ceiling between the drives and the host.
struct Ceiling {
    name: String,
    read: f64,
    write: f64,
    per_request: f64,
    /// Carries every member's bytes (a controller's back end, or any link when the RAID
    /// runs in the host); else only the array's (the host link of a RAID controller).
    members: bool,
}

/// A host link by name: the same rate both ways.
fn host_link(name: &str, members: bool) -> Ceiling {
    let rate = link_mbps(name).unwrap_or(f64::INFINITY) * 1e6;
    Ceiling {
        name: format!("host link {name}"),
        read: rate,
        write: rate,
        per_request: 0.0,
        members,
    }
}

/// The ceilings between drives and host. A controller's ceilings bound the bytes it moves
/// to and from the drives (measured on RAID 0, where they equal the array's); its host link
/// carries the array's bytes when it computes the RAID, the members' when the host does.
fn ceilings(sys: &System) -> Vec<Ceiling> {
    let host_raid = sys.raid_in == RaidIn::Host;
    let mut v = Vec::new();
    if let Some(c) = &sys.controller {
        v.push(Ceiling {
            name: format!("controller {}", c.name),
            read: c.read_mbps * 1e6,
            write: c.write_mbps * 1e6,
            per_request: c.per_request_us * 1e-6,
            members: true,
        });
        v.push(host_link(&c.host_link, host_raid));
    }
    if sys.host_link != "none" {
        v.push(host_link(&sys.host_link, host_raid));
    }
    v
}

/// Predicts `load` on `sys`.
pub fn predict(sys: &System, load: &Load) -> Result<Figure, String> {
    sys.check()?;
    if load.request_bytes == 0 || !load.request_bytes.is_multiple_of(512) {
        return Err(format!(
            "request size {}: a multiple of 512 bytes",
            load.request_bytes
        ));
    }
    let mut drive = DriveModel::new(&sys.drive, sys.write_cache);
    if sys.policy.write_back {
        // The controller's cache, shared by its drives.
        let share = sys.policy.cache_mib * f64::from(1u32 << 20) / sys.drives as f64;
        drive = drive.behind_write_back(share);
    }
    let sh = Shape {
        n: sys.drives,
        missing: sys.missing > 0,
        level: sys.level,
    };
    let r = f64::from(load.read_pct.min(100)) / 100.0;
    let p = f64::from(load.random_pct.min(100)) / 100.0;
    let b = load.request_bytes as f64;
    if p == 0.0 && !writes_in_pieces(sys, load, r) {
        Ok(sequential(sys, &drive, &sh, load, r, b))
    } else {
        Ok(random(sys, &drive, &sh, load, r, p, b))
    }
}

/// Sequential writes that the host's parity code sees in pieces of stripes: all the
/// requests in flight together cover less than a stripe, so none can be gathered whole and
/// each reads before it writes, as a random write does (next to where the drive just was).
fn writes_in_pieces(sys: &System, load: &Load, r: f64) -> bool {
    let Some((p, g)) = sys.level.parity_group(sys.drives) else {
        return false;
    };
    let width = sys.chunk_bytes as f64 * (g - p) as f64;
    let in_flight = load.queue_depth.max(1) as f64 * load.request_bytes as f64;
    sys.raid_in == RaidIn::Host && r < 1.0 && load.queue_depth > load.streams && in_flight < width
}

/// Builds the figure from stations' busy time per request and the throughput found.
fn figure(
    load: &Load,
    b: f64,
    x: f64,
    stations: &[Station],
    member_bytes: &[f64],
    latency: f64,
    bound_by_queue: bool,
) -> Figure {
    let top = stations.iter().fold(None::<&Station>, |a, s| match a {
        Some(a) if a.busy >= s.busy => Some(a),
        _ => Some(s),
    });
    let busy = top.map_or(0.0, |s| s.busy);
    let mut name = top.map_or(String::new(), |s| s.name.clone());
    if let Some(i) = top.and_then(|s| s.member) {
        // One member busier than the rest is named; members alike are named together.
        let others = stations
            .iter()
            .filter(|s| s.member.is_some_and(|j| j != i))
            .map(|s| s.busy)
            .fold(0.0, f64::max);
        if others == 0.0 {
            name = format!("member {i} of {name}, alone");
        } else if others < busy * 0.9 {
            name = format!(
                "member {i} of {name} (the others at most {:.0}% as busy)",
                others / busy * 100.0
            );
        }
    }
    let util = (busy * x * 100.0).min(100.0);
    let limit = if bound_by_queue && util < 95.0 {
        format!(
            "requests in flight (QD {}): {name} {util:.0}% busy",
            load.queue_depth
        )
    } else {
        format!("{name} ({util:.0}% busy)")
    };
    Figure {
        what: load.name.clone(),
        load: load.describe(),
        mb_s: x * b / 1e6,
        iops: x,
        latency_ms: latency * 1e3,
        limit,
        members_mb_s: member_bytes.iter().map(|m| m * x / 1e6).collect(),
    }
}

fn members_name(sys: &System) -> String {
    format!("the drives ({})", sys.drive.name)
}

fn sequential(sys: &System, drive: &DriveModel, sh: &Shape, load: &Load, r: f64, b: f64) -> Figure {
    let n = sh.n;
    let mut busy = vec![0.0; n];
    let mut member_bytes = vec![0.0; n];
    let mut ctrl = Vec::new();
    let mut cpu = 0.0;
    for (share, write) in [(r, false), (1.0 - r, true)] {
        if share == 0.0 {
            continue;
        }
        let st = streaming(sys, drive, sh, load, write);
        let (mr, mw) = member_traffic(sys, write);
        let edges = if write {
            partial_stripe_cost(sys, drive, load)
        } else {
            0.0
        };
        for i in 0..n {
            busy[i] += share * (b * st.per_byte[i] + st.per_request[i]);
            if sh.live(i) {
                busy[i] += share * edges;
            }
            // A drive without a write cache misses a revolution between requests that come
            // one at a time.
            if write && !drive.write_cache && drive.is_hdd() && load.queue_depth <= load.streams {
                busy[i] += share * drive.revolution() * 0.5;
            }
            if sh.live(i) {
                let total = st.per_byte.iter().filter(|t| **t > 0.0).count() as f64;
                let mine = if st.per_byte[i] > 0.0 {
                    1.0 / total
                } else {
                    0.0
                };
                member_bytes[i] += share * b * (mr + mw) * mine;
            }
        }
        let member_reqs = (b / sys.chunk_bytes as f64).max(1.0) * (mr + mw);
        for (k, c) in ceilings(sys).into_iter().enumerate() {
            let (cross_r, cross_w, reqs) = if c.members {
                (b * mr, b * mw, member_reqs)
            } else if write {
                (0.0, b, 1.0)
            } else {
                (b, 0.0, 1.0)
            };
            if ctrl.len() <= k {
                ctrl.push((c.name.clone(), 0.0, 0.0));
            }
            let t = reqs * c.per_request;
            if write {
                ctrl[k].2 += share * (cross_w / c.write + t);
                ctrl[k].1 += share * cross_r / c.read;
            } else {
                ctrl[k].1 += share * (cross_r / c.read + t);
            }
        }
        cpu += share * b * cpu_per_byte(sys, write, false);
    }
    let mut stations: Vec<Station> = busy
        .iter()
        .enumerate()
        .map(|(i, &t)| Station {
            name: members_name(sys),
            busy: t,
            member: Some(i),
        })
        .collect();
    for (name, rd, wr) in ctrl {
        stations.push(Station {
            name: format!("{name} reads"),
            busy: rd,
            member: None,
        });
        stations.push(Station {
            name: format!("{name} writes"),
            busy: wr,
            member: None,
        });
    }
    stations.push(Station {
        name: "the host's parity CPU (one core)".into(),
        busy: cpu,
        member: None,
    });
    let top = stations.iter().map(|s| s.busy).fold(0.0, f64::max);
    let mut x = if top > 0.0 { 1.0 / top } else { 0.0 };
    let mut serial_limit = None;
    if load.queue_depth <= load.streams && !(sys.policy.read_ahead && r > 0.0) {
        // One request at a time per stream: a read's stages run in series (the drives send
        // their pieces over their links, then the request crosses to the host), while a
        // write is acknowledged once a write-back cache holds it.
        let t = r * serial_time(sys, drive, sh, load, false)
            + (1.0 - r) * serial_time(sys, drive, sh, load, true);
        let xs = load.streams as f64 / t;
        if xs < x {
            x = xs;
            serial_limit = Some(format!(
                "one request at a time (QD {}): its stages in series, {:.2} ms each",
                load.queue_depth,
                t * 1e3
            ));
        }
    }
    let latency = load.queue_depth as f64 / x.max(1e-12);
    let mut f = figure(load, b, x, &stations, &member_bytes, latency, false);
    if let Some(l) = serial_limit {
        f.limit = l;
    }
    f
}

/// Busy time per member and request (s) of the partial stripes at a sequential write's
/// edges, when the host computes parity and nothing gathers them into whole stripes (one
/// request at a time, no controller cache): each partial stripe reads what it does not
/// write, next to where the member just wrote, so the platter comes round once first.
fn partial_stripe_cost(sys: &System, drive: &DriveModel, load: &Load) -> f64 {
    let Some((p, g)) = sys.level.parity_group(sys.drives) else {
        return 0.0;
    };
    if sys.raid_in != RaidIn::Host || load.queue_depth > load.streams {
        return 0.0;
    }
    let width = sys.chunk_bytes as f64 * (g - p) as f64;
    let b = load.request_bytes as f64;
    if (b % width).abs() < 1.0 {
        return 0.0;
    }
    let partials = ((b / width).ceil() + 1.0).min(2.0);
    // A partial stripe lands in one group of g of the n members.
    let involved = g as f64 / sys.drives as f64;
    let piece = (sys.chunk_bytes as f64).min(b);
    partials * involved * (drive.revolution() + piece / drive.seq_rate(0.0, 0.1, false))
}

/// The time of one sequential request alone (s): the drive's command time, its piece over
/// the drive's link (reads), and the request over the host path.
fn serial_time(sys: &System, drive: &DriveModel, sh: &Shape, load: &Load, write: bool) -> f64 {
    let b = load.request_bytes as f64;
    let st = streaming(sys, drive, sh, load, write);
    let mut readers = st.per_byte.iter().filter(|t| **t > 0.0).count().max(1) as f64;
    if !write {
        if let Level::Raid1E
        | Level::Raid10 {
            placement: Placement::Near,
            ..
        } = sys.level
        {
            // A lone stream reads one copy of each chunk, staying on it (md's rule).
            readers = (readers / sys.level.copies(sh.n) as f64).max(1.0);
        }
    }
    let touched = readers.min((b / sys.chunk_bytes as f64).ceil().max(1.0));
    let command = match &sys.drive.mechanics {
        raidkit_disk::emu::catalog::Mechanics::Hdd(h) => h.command_overhead_us * 1e-6,
        raidkit_disk::emu::catalog::Mechanics::Ssd(s) if !write => s.read_latency_us * 1e-6,
        raidkit_disk::emu::catalog::Mechanics::Ssd(s) => s.write_latency_us * 1e-6,
    };
    let host: f64 = ceilings(sys)
        .iter()
        .map(|c| b / if write { c.write } else { c.read } + c.per_request)
        .fold(0.0, f64::max);
    // A write crosses the drives' links before it is acknowledged unless a controller's
    // write-back cache takes it first.
    let cached_in_controller =
        write && (sys.raid_in == RaidIn::Controller || sys.policy.write_back);
    let piece = if cached_in_controller {
        0.0
    } else {
        b / touched / drive.link
    };
    // The host sends a request's chunks on one member as one command (raidkit merges them,
    // as the block layer does beneath md): one command time per request.
    command + piece + host
}

fn random(
    sys: &System,
    drive: &DriveModel,
    sh: &Shape,
    load: &Load,
    r: f64,
    p: f64,
    b: f64,
) -> Figure {
    let n = sh.n;
    let chunk = sys.chunk_bytes as f64;
    let pieces = (b / chunk).ceil().max(1.0);
    let piece = b.min(chunk) as u64;
    let (lo, hi) = (load.region.start, load.region.end);
    let rand = Service::new(drive, piece, lo, hi, true);
    let seq = Service::new(drive, piece, lo, hi, false);
    let classes: Vec<(f64, bool, Vec<Phase>)> = [(r, false), (1.0 - r, true)]
        .into_iter()
        .filter(|c| c.0 > 0.0)
        .map(|(share, write)| (share, write, random_phases(sh, pieces, write)))
        .collect();
    // Controller stations: busy per request, by direction.
    let mut ctrl: Vec<Station> = Vec::new();
    let mut cpu = 0.0;
    let mut member_bytes = vec![0.0; n];
    for (share, write, phases) in &classes {
        for ph in phases {
            for (i, v) in ph.visits.iter().enumerate() {
                member_bytes[i] += share * v * piece as f64;
            }
        }
        let rmw = *write && phases.len() > 1;
        cpu += share * b * cpu_per_byte(sys, *write, rmw);
        let member_ops: f64 = phases.iter().map(Phase::ops).sum();
        let rd_ops: f64 = phases
            .iter()
            .filter(|ph| ph.kind == OpKind::Read)
            .map(Phase::ops)
            .sum();
        let wr_ops = member_ops - rd_ops;
        for (k, c) in ceilings(sys).into_iter().enumerate() {
            let (cross_r, cross_w, reqs_r, reqs_w) = if c.members {
                (rd_ops * piece as f64, wr_ops * piece as f64, rd_ops, wr_ops)
            } else if *write {
                (0.0, b, 0.0, 1.0)
            } else {
                (b, 0.0, 1.0, 0.0)
            };
            if ctrl.len() < 2 * (k + 1) {
                ctrl.push(Station {
                    name: format!("{} reads", c.name),
                    busy: 0.0,
                    member: None,
                });
                ctrl.push(Station {
                    name: format!("{} writes", c.name),
                    busy: 0.0,
                    member: None,
                });
            }
            ctrl[2 * k].busy += share * (cross_r / c.read + reqs_r * c.per_request);
            ctrl[2 * k + 1].busy += share * (cross_w / c.write + reqs_w * c.per_request);
        }
    }
    let q = load.queue_depth.max(1) as f64;
    // Per member and kind: visits per array request.
    let kinds = [OpKind::Read, OpKind::Write, OpKind::Rewrite];
    let mut visits = vec![[0.0f64; 3]; n];
    for (share, _, phases) in &classes {
        for ph in phases {
            let k = kinds.iter().position(|k| *k == ph.kind).unwrap_or(0);
            for (i, v) in ph.visits.iter().enumerate() {
                visits[i][k] += share * v;
            }
        }
    }
    let busy_of = |kind: OpKind, k: f64| p * rand.busy(kind, k) + (1.0 - p) * seq.busy(kind, k);
    let ack_of = |kind: OpKind| rand.acknowledged(kind);
    // Schweitzer's approximate MVA.
    let mut qm = vec![q / (n as f64 + ctrl.len() as f64 + 1.0); n];
    let mut qc = vec![0.0; ctrl.len()];
    let mut x = 0.0;
    let mut resid = vec![[0.0f64; 3]; n];
    for _ in 0..400 {
        for i in 0..n {
            let a = qm[i] * (q - 1.0) / q;
            for (k, kind) in kinds.iter().enumerate() {
                let s = busy_of(*kind, 1.0 + a);
                resid[i][k] = match ack_of(*kind) {
                    Some(t) => t,
                    None => s * (1.0 + a),
                };
            }
        }
        let mut rt = 0.0;
        for (share, _, phases) in &classes {
            for ph in phases {
                let k = kinds.iter().position(|k| *k == ph.kind).unwrap_or(0);
                let ops = ph.ops().max(1e-12);
                let mean: f64 = ph
                    .visits
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v * resid[i][k])
                    .sum::<f64>()
                    / ops;
                rt += share * mean;
            }
        }
        let rc: Vec<f64> = ctrl
            .iter()
            .zip(&qc)
            .map(|(c, qq)| c.busy * (1.0 + qq * (q - 1.0) / q))
            .collect();
        rt += rc.iter().sum::<f64>() + cpu;
        let nx = q / rt.max(1e-12);
        x = if x == 0.0 { nx } else { 0.5 * x + 0.5 * nx };
        for i in 0..n {
            let want: f64 = (0..3).map(|k| x * visits[i][k] * resid[i][k]).sum();
            qm[i] = 0.5 * qm[i] + 0.5 * want;
        }
        for (j, r) in rc.iter().enumerate() {
            qc[j] = 0.5 * qc[j] + 0.5 * x * r;
        }
    }
    // Throughput bounds: each member's busy time (cached writes included) and each ceiling.
    let mut stations: Vec<Station> = (0..n)
        .map(|i| {
            let a = (qm[i] * (q - 1.0) / q).max(0.0);
            let busy: f64 = kinds
                .iter()
                .enumerate()
                .map(|(k, kind)| visits[i][k] * busy_of(*kind, 1.0 + a))
                .sum();
            Station {
                name: members_name(sys),
                busy,
                member: Some(i),
            }
        })
        .collect();
    stations.extend(ctrl);
    stations.push(Station {
        name: "the host's parity CPU (one core)".into(),
        busy: cpu,
        member: None,
    });
    let bound = 1.0
        / stations
            .iter()
            .map(|s| s.busy)
            .fold(0.0, f64::max)
            .max(1e-12);
    let by_queue = x < bound;
    let x = x.min(bound);
    figure(load, b, x, &stations, &member_bytes, q / x, by_queue)
}

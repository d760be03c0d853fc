//! Emulated drives: a member that keeps its bytes in memory or a sparse image file and
//! delays each request in real time by a drive model from the catalog, so that arrays are
//! measured at the speeds hard disks and SSDs allow, on a machine that has none.
//!
//! Spelling, wherever a member is accepted: `emu:NAME[,OPTION...][:SIZE][:PATH]`
//! - `NAME`: a drive of the catalog (`hds72101`, `sf2281`, ... ; [`catalog`]);
//! - `SIZE`: the member's size (`1G`, `512M`); the drive's whole surface is laid over it, so
//!   a small member still has the drive's outer and inner zones and full-stroke seeks;
//! - `PATH`: an image file holding the bytes (created sparse when missing, its size when
//!   `SIZE` is left out); without it the bytes live in memory for as long as the process;
//! - options: `wce=on|off` (the drive's write cache), `link=NAME` (the drive's own link,
//!   e.g. `sata1`), `behind=NAME[#N]` (a controller of the catalog or a host link such as
//!   `pci32` or `pcie2x4`, whose ceiling every drive naming the same `NAME#N` shares in this
//!   process), `smart=FILE` (the drive's SMART report is what the file says, in
//!   `smartctl --json`'s format, read again at each look: see [`crate::health`]).
//!
//! Timing lives in [`drive`], sans-IO; here one thread per drive sleeps until the model's
//! next completion and wakes the requests it completes. Data is read and written at once
//! (the order of concurrent requests on overlapping bytes is undefined on a disk too); what
//! the emulation delays is the answer.

pub mod catalog;
pub mod drive;

use crate::{mono_ns, Disk, DiskError, DiskErrorKind, FileDisk, MemDisk};
use catalog::{link_mbps, Catalog, ControllerSpec, DriveSpec, Mechanics};
use drive::{Drive, Op, Request};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// The prefix of an emulated member.
pub const PREFIX: &str = "emu:";

/// True when `s` spells an emulated drive.
pub fn is_emu(s: &str) -> bool {
    s.starts_with(PREFIX)
}

/// An emulated member as spelled.
#[derive(Clone, Debug, PartialEq)]
pub struct EmuSpec {
    /// The spelling, used as the member's name.
    pub text: String,
    pub drive: String,
    pub size: Option<u64>,
    pub path: Option<PathBuf>,
    pub write_cache: Option<bool>,
    pub link: Option<String>,
    pub behind: Option<String>,
    /// A file in `smartctl --json`'s format the drive reports its health from.
    pub smart: Option<PathBuf>,
}

fn bad(text: &str, why: impl Into<String>) -> DiskError {
    DiskError::new(text, "open", 0, DiskErrorKind::BadSpec(why.into()))
}

impl EmuSpec {
    /// Parses `emu:NAME[,OPTION...][:SIZE][:PATH]`.
    pub fn parse(text: &str) -> Result<EmuSpec, DiskError> {
        let rest = text
            .strip_prefix(PREFIX)
            .ok_or_else(|| bad(text, "an emulated drive is spelled emu:NAME[:SIZE][:PATH]"))?;
        let mut fields = rest.splitn(3, ':');
        let head = fields.next().unwrap_or("");
        let mut parts = head.split(',');
        let drive = parts.next().unwrap_or("").to_string();
        if drive.is_empty() {
            return Err(bad(
                text,
                "no drive named after emu: (e.g. emu:hds72101:1G)",
            ));
        }
        let mut spec = EmuSpec {
            text: text.to_string(),
            drive,
            size: None,
            path: None,
            write_cache: None,
            link: None,
            behind: None,
            smart: None,
        };
        for opt in parts {
            let (k, v) = opt
                .split_once('=')
                .ok_or_else(|| bad(text, format!("option {opt:?} is not KEY=VALUE")))?;
            match k {
                "wce" => {
                    spec.write_cache = Some(match v {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad(text, format!("wce={v}: on or off"))),
                    })
                }
                "link" => {
                    link_mbps(v).map_err(|e| bad(text, e))?;
                    spec.link = Some(v.to_string());
                }
                "behind" => spec.behind = Some(v.to_string()),
                "smart" if !v.is_empty() => spec.smart = Some(PathBuf::from(v)),
                _ => {
                    return Err(bad(
                        text,
                        format!(
                        "unknown option {k:?}: wce=on|off, link=NAME, behind=NAME[#N], smart=FILE"
                    ),
                    ))
                }
            }
        }
        let rest: Vec<&str> = fields.collect();
        match rest.as_slice() {
            [] => {}
            [one] => match crate::parse_size(one) {
                Ok(n) => spec.size = Some(n),
                Err(_) if !one.is_empty() => spec.path = Some(PathBuf::from(one)),
                Err(_) => {}
            },
            [size, path] => {
                if !size.is_empty() {
                    spec.size = Some(crate::parse_size(size).map_err(|e| bad(text, e))?);
                }
                spec.path = Some(PathBuf::from(path));
            }
            _ => unreachable!("splitn(3) gives at most two more fields"),
        }
        if spec.size == Some(0) {
            return Err(bad(text, "a size of 0"));
        }
        Ok(spec)
    }
}

/// The ceiling of a controller or host link, shared by the drives behind it.
#[derive(Debug)]
struct Ceiling {
    /// Bytes per ns for reads and writes.
    read: f64,
    write: f64,
    per_request_ns: f64,
    /// The ceiling is busy until then (ns of [`mono_ns`]).
    free: Mutex<f64>,
}

impl Ceiling {
    fn of_controller(c: &ControllerSpec) -> Result<Ceiling, String> {
        let host = link_mbps(&c.host_link)?;
        Ok(Ceiling {
            read: c.read_mbps.min(host) * 1e-3,
            write: c.write_mbps.min(host) * 1e-3,
            per_request_ns: c.per_request_us * 1e3,
            free: Mutex::new(0.0),
        })
    }

    fn of_link(mbps: f64) -> Ceiling {
        Ceiling {
            read: mbps * 1e-3,
            write: mbps * 1e-3,
            per_request_ns: 0.0,
            free: Mutex::new(0.0),
        }
    }

    /// A transfer of `len` bytes that the drive finished at `done`: when it is through.
    fn pass(&self, op: Op, len: u64, done: u64) -> u64 {
        let rate = if op == Op::Read {
            self.read
        } else {
            self.write
        };
        let took = len as f64 / rate + self.per_request_ns;
        let mut free = lock(&self.free);
        let end = (done as f64 - took).max(*free) + took;
        *free = end;
        end.ceil() as u64
    }
}

/// Ceilings by `NAME#N`, shared while any drive behind them is open.
fn ceilings() -> &'static Mutex<HashMap<String, Weak<Ceiling>>> {
    static C: std::sync::OnceLock<Mutex<HashMap<String, Weak<Ceiling>>>> =
        std::sync::OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

fn ceiling_for(name: &str, catalog: &Catalog) -> Result<Arc<Ceiling>, String> {
    let key = if name.contains('#') {
        name.to_ascii_lowercase()
    } else {
        format!("{}#0", name.to_ascii_lowercase())
    };
    let base = key.split('#').next().unwrap_or("");
    let mut map = lock(ceilings());
    if let Some(c) = map.get(&key).and_then(Weak::upgrade) {
        return Ok(c);
    }
    let c = match catalog.controller(base) {
        Some(spec) => Ceiling::of_controller(spec)?,
        None => Ceiling::of_link(link_mbps(base).map_err(|_| {
            format!(
                "behind={name}: neither a controller of the catalog ({}) nor a link",
                catalog
                    .controller
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?),
    };
    let c = Arc::new(c);
    map.insert(key, Arc::downgrade(&c));
    Ok(c)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

struct Sched {
    drive: Drive,
    next_id: u64,
    done: HashSet<u64>,
    stop: bool,
}

struct Shared {
    sched: Mutex<Sched>,
    /// Wakes the drive's thread: a request came, or the drive is dropped.
    work: Condvar,
    /// Wakes requesters: some completed.
    done: Condvar,
}

/// Watches an emulated drive's state from outside (see [`EmuDisk::probe`]).
#[derive(Clone)]
pub struct EmuProbe(Arc<Shared>);

impl EmuProbe {
    /// Bytes its write cache holds and the cache's size (None: no write cache).
    pub fn write_cache_fill(&self) -> Option<(u64, u64)> {
        lock(&self.0.sched).drive.write_cache_fill()
    }
}

/// An emulated drive (see the module comment).
pub struct EmuDisk {
    inner: Box<dyn Disk>,
    name: String,
    spec: DriveSpec,
    shared: Arc<Shared>,
    ceiling: Option<Arc<Ceiling>>,
    thread: Option<JoinHandle<()>>,
    /// Where the drive's SMART report comes from (`smart=FILE`); healthy without one.
    smart: Option<PathBuf>,
}

impl std::fmt::Debug for EmuDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmuDisk")
            .field("name", &self.name)
            .field("drive", &self.spec.name)
            .finish()
    }
}

impl EmuDisk {
    /// Opens the member `text` spells, with drives and controllers from `catalog`.
    pub fn open(text: &str, catalog: &Catalog) -> Result<EmuDisk, DiskError> {
        EmuDisk::open_with(text, catalog, false)
    }

    /// As [`EmuDisk::open`]; `read_only` opens an existing image file read-only (and never
    /// creates one).
    pub fn open_with(text: &str, catalog: &Catalog, read_only: bool) -> Result<EmuDisk, DiskError> {
        let spec = EmuSpec::parse(text)?;
        let mut drive = catalog.drive(&spec.drive).cloned().ok_or_else(|| {
            bad(
                text,
                format!(
                    "no drive {:?} in the catalog; known: {}",
                    spec.drive,
                    catalog
                        .drive
                        .iter()
                        .map(|d| d.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        if let (Some(wce), Mechanics::Hdd(h)) = (spec.write_cache, &mut drive.mechanics) {
            h.write_cache = wce;
        }
        if let Some(link) = &spec.link {
            drive.interface = link.clone();
        }
        let ceiling = spec
            .behind
            .as_deref()
            .map(|b| ceiling_for(b, catalog))
            .transpose()
            .map_err(|e| bad(text, e))?;
        let inner: Box<dyn Disk> = match (&spec.path, spec.size) {
            (Some(p), Some(size)) if !read_only || !p.exists() => {
                if read_only {
                    // Nothing is created for a look: the drive is empty.
                    Box::new(MemDisk::new(text, size))
                } else {
                    Box::new(FileDisk::create(p, size)?)
                }
            }
            (Some(p), _) => {
                if !p.exists() {
                    return Err(bad(
                        text,
                        format!(
                            "{} does not exist; give a size to create it (emu:{}:SIZE:{})",
                            p.display(),
                            spec.drive,
                            p.display()
                        ),
                    ));
                }
                Box::new(FileDisk::open(
                    p,
                    crate::OpenOptions {
                        read_only,
                        ..Default::default()
                    },
                )?)
            }
            (None, Some(size)) => Box::new(MemDisk::new(text, size)),
            (None, None) => {
                return Err(bad(
                    text,
                    "give a size (emu:NAME:SIZE) or an image file (emu:NAME:SIZE:PATH)",
                ))
            }
        };
        let mut disk = EmuDisk::over(inner, text, drive, ceiling);
        disk.smart = spec.smart;
        Ok(disk)
    }

    /// An emulated `drive` holding its bytes in `inner` (memory, say), named `name`, behind
    /// `behind` (a controller or link of `catalog`, shared as for the spelling's `behind=`).
    pub fn wrap(
        inner: Box<dyn Disk>,
        drive: &DriveSpec,
        name: &str,
        behind: Option<&str>,
        catalog: &Catalog,
    ) -> Result<EmuDisk, DiskError> {
        let ceiling = behind
            .map(|b| ceiling_for(b, catalog))
            .transpose()
            .map_err(|e| bad(name, e))?;
        Ok(EmuDisk::over(inner, name, drive.clone(), ceiling))
    }

    /// An emulated `drive` whose bytes are `inner`'s.
    fn over(
        inner: Box<dyn Disk>,
        name: &str,
        drive: DriveSpec,
        ceiling: Option<Arc<Ceiling>>,
    ) -> EmuDisk {
        let shared = Arc::new(Shared {
            sched: Mutex::new(Sched {
                drive: Drive::new(&drive, inner.size_bytes()),
                next_id: 0,
                done: HashSet::new(),
                stop: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("emu-{}", drive.name))
            .spawn(move || run_drive(&s))
            .expect("a thread for the emulated drive");
        EmuDisk {
            inner,
            name: name.to_string(),
            spec: drive,
            shared,
            ceiling,
            thread: Some(thread),
            smart: None,
        }
    }

    /// A handle that watches this drive's write cache after the drive was handed on (to an
    /// array, say).
    pub fn probe(&self) -> EmuProbe {
        EmuProbe(self.shared.clone())
    }

    /// The catalog entry this drive emulates.
    pub fn drive(&self) -> &DriveSpec {
        &self.spec
    }

    /// True for a hard disk (seeks cost; reads should go where the head is cheapest).
    pub fn is_rotational(&self) -> bool {
        matches!(self.spec.mechanics, Mechanics::Hdd(_))
    }

    /// Waits, in real time, until the drive (and the ceiling in front of it) has served
    /// `op` of `len` bytes at `offset`.
    fn take_time(&self, op: Op, offset: u64, len: u64) {
        let id = {
            let mut g = lock(&self.shared.sched);
            let id = g.next_id;
            g.next_id += 1;
            // Stamped under the lock, so the drive never decides at a time before a request
            // it has not seen.
            g.drive.submit(Request {
                id,
                op,
                offset,
                len,
                arrival: mono_ns(),
            });
            id
        };
        self.shared.work.notify_one();
        let mut g = lock(&self.shared.sched);
        while !g.done.remove(&id) {
            g = match self.shared.done.wait(g) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        drop(g);
        if let (Some(c), true) = (&self.ceiling, len > 0) {
            sleep_until(c.pass(op, len, mono_ns()));
        }
    }
}

impl Drop for EmuDisk {
    fn drop(&mut self) {
        lock(&self.shared.sched).stop = true;
        self.shared.work.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn sleep_until(t: u64) {
    let now = mono_ns();
    if t > now {
        std::thread::sleep(Duration::from_nanos(t - now));
    }
}

/// The drive's thread: sleeps until the model's next event, hands out completions.
fn run_drive(s: &Shared) {
    // Wake-ups as close to the model's times as the kernel allows (the default slack is
    // 50 us, a tenth of an SSD's service time).
    // SAFETY: prctl with integer arguments changes only this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
    let mut g = lock(&s.sched);
    loop {
        if g.stop {
            return;
        }
        let Some(t) = g.drive.next_event() else {
            g = match s.work.wait(g) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            continue;
        };
        let now = mono_ns();
        if t > now {
            // A request that comes meanwhile may make an earlier event: look again then.
            g = match s.work.wait_timeout(g, Duration::from_nanos(t - now)) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
            continue;
        }
        let ids = g.drive.fire(now);
        if !ids.is_empty() {
            g.done.extend(ids);
            s.done.notify_all();
        }
    }
}

impl crate::DiskWrapper for EmuDisk {
    type Inner = dyn Disk;

    fn inner(&self) -> &(dyn Disk + 'static) {
        self.inner.as_ref()
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DiskError> {
        Disk::read_at(&*self.inner, buf, offset_bytes)?;
        self.take_time(Op::Read, offset_bytes, buf.len() as u64);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        Disk::write_at(&*self.inner, buf, offset_bytes)?;
        self.take_time(Op::Write, offset_bytes, buf.len() as u64);
        Ok(())
    }

    fn flush(&self) -> Result<(), DiskError> {
        Disk::flush(&*self.inner)?;
        self.take_time(Op::Flush, 0, 0);
        Ok(())
    }

    fn write_fua(&self, buf: &[u8], offset_bytes: u64) -> Result<(), DiskError> {
        Disk::write_fua(&*self.inner, buf, offset_bytes)?;
        self.take_time(Op::WriteFua, offset_bytes, buf.len() as u64);
        Ok(())
    }

    /// One command for all the pieces: the drive sees one request of their length.
    fn read_vectored_at(
        &self,
        bufs: &mut [std::io::IoSliceMut<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        let len = crate::pieces_len(bufs);
        Disk::read_vectored_at(&*self.inner, bufs, offset_bytes)?;
        self.take_time(Op::Read, offset_bytes, len);
        Ok(())
    }

    fn write_vectored_at(
        &self,
        bufs: &mut [std::io::IoSlice<'_>],
        offset_bytes: u64,
    ) -> Result<(), DiskError> {
        let len = crate::pieces_len(bufs);
        Disk::write_vectored_at(&*self.inner, bufs, offset_bytes)?;
        self.take_time(Op::Write, offset_bytes, len);
        Ok(())
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DiskError> {
        // A drive writes the zeroes (no unmapping on a hard disk).
        Disk::write_zeroes(&*self.inner, offset_bytes, len_bytes)?;
        self.take_time(Op::Write, offset_bytes, len_bytes);
        Ok(())
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn is_rotational(&self) -> bool {
        EmuDisk::is_rotational(self)
    }

    fn zeroes_cheaply(&self) -> bool {
        // The emulated drive writes the zeroes (see `write_zeroes`).
        false
    }

    fn health(&self) -> crate::Health {
        crate::health::emulated(&self.spec.name, self.smart.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings() {
        let s = EmuSpec::parse("emu:hds72101:1G").unwrap();
        assert_eq!(
            (s.drive.as_str(), s.size, s.path),
            ("hds72101", Some(1 << 30), None)
        );
        let s = EmuSpec::parse("emu:sf2281,wce=off,behind=pegasus-r6#2:64M:/tmp/x.img").unwrap();
        assert_eq!(s.write_cache, Some(false));
        assert_eq!(s.behind.as_deref(), Some("pegasus-r6#2"));
        assert_eq!(s.size, Some(64 << 20));
        assert_eq!(s.path, Some(PathBuf::from("/tmp/x.img")));
        let s = EmuSpec::parse("emu:fireball:/tmp/y.img").unwrap();
        assert_eq!((s.size, s.path), (None, Some(PathBuf::from("/tmp/y.img"))));
        for bad in [
            "hds72101:1G",
            "emu::1G",
            "emu:x,wce=maybe:1G",
            "emu:x,speed=9:1G",
            "emu:x:0",
        ] {
            assert!(EmuSpec::parse(bad).is_err(), "{bad}");
        }
    }

    /// A controller's ceiling spaces transfers by its rate, whatever the drives behind it
    /// could do: the 3ware 5400 of seed 003 takes writes at the 41 MB/s its study measured,
    /// reads at 55; a link alone (PCI, 133 MB/s) at its own rate.
    #[test]
    fn a_ceiling_spaces_transfers_by_its_rate() {
        let c = Catalog::built_in();
        let card = Ceiling::of_controller(c.controller("3ware-5400").unwrap()).unwrap();
        let mib = 1u64 << 20;
        // 64 one-MiB writes that drives finished all at once, at t = 1 ms.
        let end = (0..64)
            .map(|_| card.pass(Op::Write, mib, 1_000_000))
            .max()
            .unwrap();
        let mbps = (64 * mib) as f64 / (end - 1_000_000) as f64 * 1e3;
        let spec = c.controller("3ware-5400").unwrap();
        assert!((mbps / spec.write_mbps - 1.0).abs() < 0.02, "{mbps} MB/s");
        // Transfers that come slower than the ceiling are not delayed.
        let pci = Ceiling::of_link(link_mbps("pci32").unwrap());
        let t = 10_000_000_000u64;
        assert_eq!(pci.pass(Op::Read, 4096, t), t);
        assert_eq!(pci.pass(Op::Read, 4096, t + 1_000_000), t + 1_000_000);
        let end = (0..10)
            .map(|_| pci.pass(Op::Read, mib, t + 2_000_000))
            .max()
            .unwrap();
        let mbps = (10 * mib) as f64 / (end - (t + 2_000_000)) as f64 * 1e3;
        assert!((mbps / 133.3 - 1.0).abs() < 0.1, "{mbps} MB/s");
    }

    #[test]
    fn open_refuses_what_it_cannot_emulate_and_keeps_bytes() {
        let c = Catalog::built_in();
        let e = EmuDisk::open("emu:nosuch:1G", &c).unwrap_err();
        assert!(e.to_string().contains("no drive \"nosuch\""), "{e}");
        assert!(EmuDisk::open("emu:hds72101", &c).is_err());
        assert!(EmuDisk::open("emu:hds72101,behind=usb9:1G", &c).is_err());
        let d = EmuDisk::open("emu:sf2281,behind=pegasus-r6:8M", &c).unwrap();
        assert!(!d.is_rotational());
        d.write_at(&[7u8; 4096], 8192).unwrap();
        let mut back = [0u8; 4096];
        d.read_at(&mut back, 8192).unwrap();
        assert_eq!(back, [7u8; 4096]);
        d.flush().unwrap();
        assert_eq!(d.size_bytes(), 8 << 20);
        assert_eq!(d.name(), "emu:sf2281,behind=pegasus-r6:8M");
    }
}

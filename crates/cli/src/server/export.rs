//! An array as an NBD export ([`ArrayExport`]), the gate that keeps writes apart from a
//! membership change ([`WriteGate`]), and what the control server and the spare pool know of a
//! served array ([`ServedArray`]).
//!
//! Owns the NBD server's view of an array: it only moves bytes and declares capabilities; the
//! NBD server validates every request before it gets here.
//!
//! Multi-connection clients: `ArrayExport` advertises `NBD_FLAG_CAN_MULTI_CONN`, which promises
//! that a flush on any connection makes durable every write any connection has seen a reply
//! for. That holds because the engine replies to a write only after every member write of it
//! has completed (returned from the member's `pwrite`), and `Array::flush` fdatasyncs every
//! member that receives writes, whichever connection the writes came from; the test
//! `flush_on_one_connection_covers_writes_from_another` checks it on simulated members that
//! keep volatile and durable bytes apart.

use std::io;
use std::sync::Arc;

use raidkit_engine::{Array, EngineError, OnlineReshape};
use raidkit_nbd::{BlockSize, Export};

/// Holds NBD writes back while a member is attached to a served array.
///
/// `Array::add_spare` only attaches the new member and wakes the background rebuild, which
/// then runs alongside requests (writes reach a member being rebuilt, and the rebuild takes
/// the stripe locks requests take). The gate keeps the attach itself apart from writes in
/// flight: the control server and the global spare pool hold it exclusively for the duration
/// of `add_spare` (milliseconds), and every data-changing export call holds it shared.
#[derive(Default)]
pub struct WriteGate(std::sync::RwLock<()>);

impl WriteGate {
    /// Shared: one data-changing request.
    pub fn write(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        // The guarded value is `()`: a panic elsewhere cannot leave it inconsistent.
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Exclusive: membership change with a rebuild; waits for writes in flight to finish.
    pub fn hold_writes(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// What serves a served array's requests: the array, or an online reshape of it (see the
/// engine's `array/online.rs`), which becomes the reshaped array when it is done.
#[derive(Clone)]
pub enum Backend {
    Array(Arc<Array>),
    Reshaping(Arc<OnlineReshape>),
}

/// A served array's backend, swapped when an online reshape starts or ends. Requests hold it
/// shared for their duration; a swap (and each reshape step) holds it exclusively, so no
/// request ever reaches a backend that was replaced.
pub struct ArraySlot {
    backend: std::sync::RwLock<Backend>,
    /// Requests served so far (the reshape paces itself against them).
    pub requests: std::sync::atomic::AtomicU64,
    /// Set at shutdown: an online reshape stops between steps.
    pub stopping: std::sync::atomic::AtomicBool,
    /// An online reshape's steps run (the server waits for them to stop at shutdown).
    pub driving: std::sync::atomic::AtomicBool,
    /// The task rates set for this array: given to the array serving now and to the one an
    /// online reshape leaves behind; the reshape paces itself by its share.
    rates: std::sync::Mutex<raidkit_engine::TaskRates>,
    /// The read policy set for this array, kept the same way.
    read_ahead: std::sync::Mutex<raidkit_engine::ReadAhead>,
    /// The write policy set for this array, kept the same way.
    write_policy: std::sync::Mutex<raidkit_engine::WritePolicy>,
}

impl ArraySlot {
    pub fn new(backend: Backend) -> Arc<ArraySlot> {
        let (rates, read_ahead, write_policy) = match &backend {
            Backend::Array(a) => (a.task_rates(), a.read_ahead_policy(), a.write_policy()),
            Backend::Reshaping(_) => Default::default(),
        };
        Arc::new(ArraySlot {
            backend: std::sync::RwLock::new(backend),
            requests: Default::default(),
            stopping: Default::default(),
            driving: Default::default(),
            rates: std::sync::Mutex::new(rates),
            read_ahead: std::sync::Mutex::new(read_ahead),
            write_policy: std::sync::Mutex::new(write_policy),
        })
    }

    /// Gives an array assembled for this slot (after an online reshape) what was set for
    /// the slot: task rates, read policy.
    pub fn configure(&self, array: &Arc<raidkit_engine::Array>) {
        array.set_task_rates(self.rates());
        array.set_read_ahead(self.read_ahead());
        if self.write_policy() == raidkit_engine::WritePolicy::Back
            && array
                .set_write_policy(raidkit_engine::WritePolicy::Back)
                .is_ok()
        {
            array.start_destaging();
        }
    }

    /// The write policy set for this array.
    pub fn write_policy(&self) -> raidkit_engine::WritePolicy {
        *self.write_policy.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the write policy, on the array serving now (refused while it reshapes: the
    /// reshape writes through).
    pub fn set_write_policy(
        &self,
        policy: raidkit_engine::WritePolicy,
    ) -> Result<(), raidkit_engine::EngineError> {
        let Backend::Array(a) = self.get() else {
            return Err(raidkit_engine::EngineError::Busy(
                "the array is being reshaped; set the write policy when the reshape is done".into(),
            ));
        };
        a.set_write_policy(policy)?;
        if policy == raidkit_engine::WritePolicy::Back {
            a.start_destaging();
        }
        *self.write_policy.lock().unwrap_or_else(|e| e.into_inner()) = policy;
        Ok(())
    }

    /// The read policy set for this array.
    pub fn read_ahead(&self) -> raidkit_engine::ReadAhead {
        *self.read_ahead.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the read policy, on the array serving now too.
    pub fn set_read_ahead(&self, policy: raidkit_engine::ReadAhead) {
        *self.read_ahead.lock().unwrap_or_else(|e| e.into_inner()) = policy;
        if let Backend::Array(a) = self.get() {
            a.set_read_ahead(policy);
        }
    }

    /// The task rates set for this array.
    pub fn rates(&self) -> raidkit_engine::TaskRates {
        *self.rates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the task rates, on the array serving now too.
    pub fn set_rates(&self, rates: raidkit_engine::TaskRates) {
        *self.rates.lock().unwrap_or_else(|e| e.into_inner()) = rates;
        if let Backend::Array(a) = self.get() {
            a.set_task_rates(rates);
        }
    }

    /// Shared, for one request.
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, Backend> {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A `Backend` is replaced whole: a panic elsewhere cannot leave it half-changed.
        self.backend.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Exclusive: a reshape step or a swap.
    pub fn write(&self) -> std::sync::RwLockWriteGuard<'_, Backend> {
        self.backend.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Shared, without counting as a client request (the reshape's pacing counts those):
    /// what the server asks of the array for itself.
    pub fn peek(&self) -> std::sync::RwLockReadGuard<'_, Backend> {
        self.backend.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self) -> Backend {
        self.peek().clone()
    }
}

/// An array as an NBD export.
pub struct ArrayExport {
    slot: Arc<ArraySlot>,
    read_only: bool,
    gate: Arc<WriteGate>,
}

impl ArrayExport {
    pub fn new(slot: Arc<ArraySlot>, read_only: bool, gate: Arc<WriteGate>) -> Self {
        ArrayExport {
            slot,
            read_only,
            gate,
        }
    }
}

impl Export for ArrayExport {
    fn size_bytes(&self) -> u64 {
        match &*self.slot.peek() {
            Backend::Array(a) => a.size_bytes(),
            Backend::Reshaping(r) => r.size_bytes(),
        }
    }

    fn block_size(&self) -> BlockSize {
        BlockSize {
            minimum_bytes: 512,
            preferred_bytes: 4096,
            maximum_payload_bytes: 32 << 20,
        }
    }

    fn description(&self) -> Option<String> {
        match self.slot.get() {
            Backend::Array(a) => {
                let status = a.status();
                Some(format!(
                    "raidkit RAID {} over {} members",
                    status.level, status.raid_disks
                ))
            }
            Backend::Reshaping(_) => Some("raidkit array being reshaped".into()),
        }
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn can_fua(&self) -> bool {
        true
    }

    fn can_trim(&self) -> bool {
        true
    }

    fn can_zero(&self) -> bool {
        true
    }

    /// A flush flushes every member of the array, so it covers writes completed on any
    /// connection: multi-connection clients may rely on it.
    fn can_multi_conn(&self) -> bool {
        true
    }

    /// Parity levels: a full stripe, written without reading anything back (and, with a
    /// partial parity log, with no partial parity to log).
    fn write_gather_bytes(&self) -> u64 {
        match &*self.slot.peek() {
            Backend::Array(a) => a.full_stripe_bytes().unwrap_or(0),
            Backend::Reshaping(_) => 0,
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match &*self.slot.read() {
            Backend::Array(a) => a.read_at(buf, offset),
            Backend::Reshaping(r) => r.read_at(buf, offset),
        }
        .map_err(io_error)
    }

    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        let _gate = self.gate.write();
        match &*self.slot.read() {
            Backend::Array(a) => a.write_at(data, offset, fua),
            Backend::Reshaping(r) => r.write_at(data, offset, fua),
        }
        .map_err(io_error)
    }

    fn flush(&self) -> io::Result<()> {
        match &*self.slot.read() {
            Backend::Array(a) => a.flush(),
            Backend::Reshaping(r) => r.flush(),
        }
        .map_err(io_error)
    }

    fn trim(&self, offset: u64, len_bytes: u64, fua: bool) -> io::Result<()> {
        self.write_zeroes(offset, len_bytes, fua, true)
    }

    fn write_zeroes(
        &self,
        offset: u64,
        len_bytes: u64,
        fua: bool,
        _may_trim: bool,
    ) -> io::Result<()> {
        let _gate = self.gate.write();
        let backend = self.slot.read();
        let zeroed = match &*backend {
            Backend::Array(a) => {
                a.write_zeroes(offset, len_bytes)
                    .and_then(|()| if fua { a.flush() } else { Ok(()) })
            }
            Backend::Reshaping(r) => {
                r.write_zeroes(offset, len_bytes)
                    .and_then(|()| if fua { r.flush() } else { Ok(()) })
            }
        };
        zeroed.map_err(io_error)
    }
}

/// An engine error as the NBD server's export reports it: a member without room keeps its
/// errno (the client gets NBD_ENOSPC and may retry once there is space); anything else is an
/// I/O error (NBD_EIO).
fn io_error(err: EngineError) -> io::Error {
    match err {
        EngineError::Disk(d) if d.is_no_space() => io::Error::from(d),
        other => io::Error::other(other.to_string()),
    }
}

/// An array as the control server sees it.
#[derive(Clone)]
pub struct ServedArray {
    pub name: String,
    pub slot: Arc<ArraySlot>,
    pub read_only: bool,
    /// Shared with the array's NBD export; held while a spare is added (see [`WriteGate`]).
    pub gate: Arc<WriteGate>,
    /// Where NBD clients reach it: the socket path or the TCP address.
    pub nbd_address: String,
    /// Its spare group (the configuration's `spare-group=`): arrays of one group lend each
    /// other their spares (see `spares.rs`).
    pub spare_group: Option<String>,
}

impl ServedArray {
    /// The array, unless an online reshape runs on it (refused then: wait for it).
    pub fn array(&self) -> Result<Arc<Array>, crate::error::CliError> {
        match self.slot.get() {
            Backend::Array(a) => Ok(a),
            Backend::Reshaping(r) => {
                let (pos, end) = r.progress();
                Err(crate::error::CliError::new(
                    crate::error::ExitCode::Refused,
                    format!(
                        "{}: an online reshape runs ({:.1}% done); wait for it (`raidkit detail --control` shows it)",
                        self.name,
                        pos as f64 * 100.0 / end.max(1) as f64
                    ),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidkit_engine::AssembleOptions;
    use raidkit_nbd::{Listener, Server};

    /// A minimal NBD client over a unix socket: fixed newstyle, NBD_OPT_GO, simple replies.
    struct Client(std::os::unix::net::UnixStream);

    impl Client {
        fn connect(socket: &std::path::Path, export: &str) -> (Client, u16) {
            use std::io::{Read, Write};
            let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            let mut greeting = [0u8; 18];
            s.read_exact(&mut greeting).unwrap();
            assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
            s.write_all(&3u32.to_be_bytes()).unwrap(); // FIXED_NEWSTYLE | NO_ZEROES
            let mut data = (export.len() as u32).to_be_bytes().to_vec();
            data.extend_from_slice(export.as_bytes());
            // One information request: NBD_INFO_BLOCK_SIZE (the server requires it).
            data.extend_from_slice(&1u16.to_be_bytes());
            data.extend_from_slice(&3u16.to_be_bytes());
            let mut opt = b"IHAVEOPT".to_vec();
            opt.extend_from_slice(&7u32.to_be_bytes()); // NBD_OPT_GO
            opt.extend_from_slice(&(data.len() as u32).to_be_bytes());
            opt.extend_from_slice(&data);
            s.write_all(&opt).unwrap();
            let mut flags = None;
            loop {
                let mut h = [0u8; 20];
                s.read_exact(&mut h).unwrap();
                let typ = u32::from_be_bytes(h[12..16].try_into().unwrap());
                let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
                let mut d = vec![0u8; len];
                s.read_exact(&mut d).unwrap();
                match typ {
                    1 => break, // NBD_REP_ACK
                    3 if d[..2] == [0, 0] => flags = Some(u16::from_be_bytes([d[10], d[11]])),
                    3 => {}
                    other => panic!("NBD_OPT_GO refused: reply type {other:#x}"),
                }
            }
            (Client(s), flags.expect("NBD_INFO_EXPORT"))
        }

        /// Sends one request (with `payload` for a write) and waits for its simple reply;
        /// returns the error value.
        fn call(
            &mut self,
            command: u16,
            cookie: u64,
            offset: u64,
            len: u32,
            payload: &[u8],
        ) -> u32 {
            use std::io::{Read, Write};
            let mut v = 0x2560_9513u32.to_be_bytes().to_vec();
            v.extend_from_slice(&0u16.to_be_bytes());
            v.extend_from_slice(&command.to_be_bytes());
            v.extend_from_slice(&cookie.to_be_bytes());
            v.extend_from_slice(&offset.to_be_bytes());
            v.extend_from_slice(&len.to_be_bytes());
            v.extend_from_slice(payload);
            self.0.write_all(&v).unwrap();
            let mut h = [0u8; 16];
            self.0.read_exact(&mut h).unwrap();
            assert_eq!(u32::from_be_bytes(h[..4].try_into().unwrap()), 0x6744_6698);
            assert_eq!(u64::from_be_bytes(h[8..].try_into().unwrap()), cookie);
            u32::from_be_bytes(h[4..8].try_into().unwrap())
        }
    }

    /// What an array assembled from the members' durable bytes (what a power loss would
    /// leave) holds at `offset`.
    fn durable_contents(disks: &[raidkit_sim::SimDisk], offset: u64, len: usize) -> Vec<u8> {
        let members: Vec<Box<dyn raidkit_disk::Disk>> = disks
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let image = d.durable_image();
                let m = raidkit_disk::MemDisk::new(&format!("durable{i}"), image.len() as u64);
                raidkit_disk::Disk::write_at(&m, &image, 0).unwrap();
                Box::new(m) as Box<dyn raidkit_disk::Disk>
            })
            .collect();
        let (array, _) = Array::assemble(
            members,
            AssembleOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut out = vec![0u8; len];
        array.read_at(&mut out, offset).unwrap();
        out
    }

    /// NBD_FLAG_CAN_MULTI_CONN promises that a flush on one connection covers writes another
    /// connection has seen replies for. Members are simulated disks whose completed writes sit
    /// in a volatile cache until flushed, so the test sees exactly what a flush made durable.
    #[test]
    fn flush_on_one_connection_covers_writes_from_another() {
        const WRITE: u16 = 1;
        const FLUSH: u16 = 3;
        const CAN_MULTI_CONN: u16 = 1 << 8;
        const SEND_FLUSH: u16 = 1 << 2;
        let disks: Vec<raidkit_sim::SimDisk> = (0..4)
            .map(|i| raidkit_sim::SimDisk::new(&format!("sim{i}"), 8 << 20, i))
            .collect();
        let array = Array::create(
            disks
                .iter()
                .map(|d| Box::new(d.clone()) as Box<dyn raidkit_disk::Disk>)
                .collect(),
            raidkit_engine::CreateOptions {
                level: 5,
                layout: None,
                chunk_sectors: 128,
                raid_devices: 4,
                metadata: raidkit_metadata::SuperblockVersion::V1_2,
                size_sectors: None,
                name: "multi-conn".into(),
                set_uuid: [7; 16],
                device_uuids: (0..4u8).map(|i| [i + 1; 16]).collect(),
                ctime_seconds: 0,
                init: raidkit_engine::Init::Zeroed,
                consistency: raidkit_engine::ConsistencyPolicy::Resync,
                config: Default::default(),
            },
        )
        .unwrap();
        let array = Arc::new(array);
        let dir = std::env::temp_dir().join(format!("raidkit-multi-conn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("nbd.sock");
        let listener = Listener::bind_unix(&socket).unwrap();
        let server = Server::builder()
            .export(
                "md",
                Arc::new(ArrayExport::new(
                    ArraySlot::new(Backend::Array(array.clone())),
                    false,
                    Default::default(),
                )) as Arc<dyn Export>,
            )
            .build()
            .unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        /// Stops the server however the test ends, so a failed assertion cannot hang it.
        struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        std::thread::scope(|scope| {
            let served = scope.spawn(|| server.serve(&listener, &stop).unwrap());
            let stopper = StopOnDrop(&stop);
            let (mut a, flags) = Client::connect(&socket, "md");
            let (mut b, _) = Client::connect(&socket, "md");
            assert_ne!(flags & CAN_MULTI_CONN, 0, "arrays advertise CAN_MULTI_CONN");
            assert_ne!(flags & SEND_FLUSH, 0);

            // Three chunks' worth from a chunk boundary minus a bit: data and parity of two
            // stripes change.
            let offset = 3 * 65536 - 4096;
            let data: Vec<u8> = (0..3 * 65536u32).map(|i| (i % 251) as u8 ^ 0x5a).collect();
            assert_eq!(a.call(WRITE, 1, offset, data.len() as u32, &data), 0);
            // Completed but not yet flushed: a power loss now could lose it.
            assert!(
                durable_contents(&disks, offset, data.len()) != data,
                "the write is already durable without a flush; the test would prove nothing"
            );

            assert_eq!(b.call(FLUSH, 2, 0, 0, &[]), 0);
            assert!(
                durable_contents(&disks, offset, data.len()) == data,
                "a flush on connection B did not make connection A's completed write durable"
            );
            for d in &disks {
                assert!(
                    d.durable_image() == d.peek_live(0, 8 << 20),
                    "{}: writes left in the volatile cache after the flush",
                    raidkit_disk::Disk::name(d)
                );
            }
            drop((a, b, stopper));
            let report = served.join().unwrap();
            assert!(report.all_flushed());
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Global hot spares: a pool of blank disks shared by every array one `raidkit serve` process
//! serves (the PERC6's "global hot spare").
//!
//! An array's own spares (members with md's spare role) are taken by the engine the moment a
//! member fails. A global spare belongs to no array until one needs it: [`GlobalSpares::tend`]
//! runs every fraction of a second, and an array that is degraded, not failed, has a slot no
//! member is being rebuilt into, and no spare of its own gets the first disk of the pool as a
//! new spare (`Array::add_spare`), which the engine then rebuilds in the background. Arrays are
//! served in the order given, so with one spare left and two arrays in need the first one named
//! gets it.
//!
//! A disk offered as a global spare must carry no md superblock: the pool never overwrites
//! something that might be someone's data.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use raidkit_disk::Disk;
use raidkit_engine::Status;

use super::export::ServedArray;
use crate::common::random_uuid;
use crate::error::{CliError, ExitCode};

/// One disk waiting in the pool.
struct Spare {
    path: PathBuf,
    disk: Box<dyn Disk>,
}

/// The pool, and what it did.
#[derive(Default)]
pub struct GlobalSpares {
    pool: Mutex<Vec<Spare>>,
    log: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain lists: a panic elsewhere leaves them consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `status` describes an array that should get a spare now.
pub fn needs_spare(status: &Status) -> bool {
    if status.failed || status.read_only || !status.degraded {
        return false;
    }
    let filling = status
        .members
        .iter()
        .filter(|m| m.role == "rebuilding")
        .count();
    let own_spares = status.members.iter().any(|m| m.role == "spare");
    status.missing_slots.len() > filling && !own_spares
}

impl GlobalSpares {
    /// Adds a disk to the pool after checking it carries no md superblock.
    pub fn offer(&self, path: &Path, disk: Box<dyn Disk>) -> Result<(), CliError> {
        match raidkit_engine::read_superblock(disk.as_ref()) {
            Err(raidkit_engine::EngineError::NoSuperblock { .. }) => {}
            Ok(found) => {
                return Err(CliError::new(
                    ExitCode::Refused,
                    format!(
                        "{}: carries an md superblock (array {}); a global spare must be \
                         blank, so nothing on it is overwritten",
                        path.display(),
                        found.sb.set_uuid.to_mdadm_string()
                    ),
                ))
            }
            Err(e) => {
                return Err(CliError::new(
                    ExitCode::Refused,
                    format!("{}: not usable as a global spare: {e}", path.display()),
                ))
            }
        }
        lock(&self.pool).push(Spare {
            path: path.to_path_buf(),
            disk,
        });
        Ok(())
    }

    /// Paths still waiting in the pool.
    pub fn waiting(&self) -> Vec<String> {
        lock(&self.pool)
            .iter()
            .map(|s| s.path.display().to_string())
            .collect()
    }

    /// What the pool did, oldest first.
    pub fn log(&self) -> Vec<String> {
        lock(&self.log).clone()
    }

    /// Whether `path` names a disk in the pool.
    pub fn holds(&self, path: &Path) -> bool {
        let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        lock(&self.pool)
            .iter()
            .any(|s| std::fs::canonicalize(&s.path).unwrap_or_else(|_| s.path.clone()) == canon)
    }

    /// Gives a spare to every array that needs one, while the pool lasts: for a RAID 50/60
    /// stack, to each span that needs one (the stack's RAID 0 has the spans as members, so
    /// the spare goes to a span, as `raidkit add` adds a member). Returns the lines it logged.
    pub fn tend(&self, arrays: &[ServedArray]) -> Vec<String> {
        let mut said = Vec::new();
        'arrays: for served in arrays {
            let Ok(array) = served.array() else { continue };
            if served.read_only {
                continue;
            }
            let targets: Vec<(String, std::sync::Arc<raidkit_engine::Array>)> =
                if array.spans().is_empty() {
                    vec![(served.name.clone(), array.clone())]
                } else {
                    array
                        .spans()
                        .iter()
                        .enumerate()
                        .map(|(i, span)| (format!("{}/span{i}", served.name), span.clone()))
                        .collect()
                };
            for (name, target) in targets {
                if !needs_spare(&target.status()) {
                    continue;
                }
                let Some(spare) = ({
                    let mut pool = lock(&self.pool);
                    (!pool.is_empty()).then(|| pool.remove(0))
                }) else {
                    break 'arrays;
                };
                let path = spare.path.display().to_string();
                let uuid = match random_uuid() {
                    Ok(u) => u,
                    Err(e) => {
                        said.push(format!("{name}: cannot make a device uuid: {e}"));
                        lock(&self.pool).insert(0, spare);
                        break 'arrays;
                    }
                };
                let line = {
                    let _writes_held = served.gate.hold_writes();
                    match target.add_spare(spare.disk, uuid) {
                        Ok(()) => format!(
                            "{name}: global spare {path} taken; it is rebuilt in the background"
                        ),
                        // The disk is not put back: the failure may have been the disk's own.
                        Err(e) => format!("{name}: global spare {path} could not be added: {e}"),
                    }
                };
                said.push(line);
            }
        }
        said.extend(move_spares(arrays));
        lock(&self.log).extend(said.iter().cloned());
        said
    }
}

/// mdadm's spare groups: an array that needs a spare (see [`needs_spare`]) gets one of
/// another array of its group (mdadm's MoveSpare): removed there, added here (a superblock of
/// this array written on it, so it stays here across restarts), rebuilt in the background.
/// Returns the lines to log.
pub fn move_spares(arrays: &[ServedArray]) -> Vec<String> {
    let mut said = Vec::new();
    for to in arrays {
        let Some(group) = &to.spare_group else {
            continue;
        };
        let Ok(to_array) = to.array() else { continue };
        if to.read_only || !needs_spare(&to_array.status()) {
            continue;
        }
        let lender = arrays.iter().find_map(|from| {
            let peer =
                from.name != to.name && !from.read_only && from.spare_group.as_ref() == Some(group);
            let from_array = from.array().ok()?;
            let status = from_array.status();
            let spare = status.members.iter().find(|m| m.role == "spare")?;
            peer.then(|| {
                (
                    from,
                    from_array.clone(),
                    spare.index,
                    PathBuf::from(&spare.name),
                )
            })
        });
        let Some((from, from_array, index, path)) = lender else {
            continue;
        };
        if let Err(e) = from_array.remove_member(index) {
            said.push(format!(
                "{}: spare {} could not leave for {} (spare group {group}): {e}",
                from.name,
                path.display(),
                to.name
            ));
            continue;
        }
        let disk = match crate::common::open_members(std::slice::from_ref(&path), false) {
            Ok(mut d) if d.len() == 1 => d.remove(0),
            Ok(_) => continue,
            Err(e) => {
                said.push(format!(
                    "{}: spare {} left {} but cannot be opened: {}",
                    to.name,
                    path.display(),
                    from.name,
                    e.message
                ));
                continue;
            }
        };
        let uuid = match random_uuid() {
            Ok(u) => u,
            Err(e) => {
                said.push(format!("{}: cannot make a device uuid: {e}", to.name));
                continue;
            }
        };
        let _writes_held = to.gate.hold_writes();
        said.push(match to_array.add_spare(disk, uuid) {
            Ok(()) => {
                to_array.record_event(raidkit_engine::ArrayEvent::SpareMoved {
                    member: path.display().to_string(),
                    from: from.name.clone(),
                });
                format!(
                "{}: spare {} moved here from {} (spare group {group}); it is rebuilt in the background",
                    to.name,
                    path.display(),
                    from.name
                )
            }
            Err(e) => format!(
                "{}: spare {} from {} could not be added: {e}",
                to.name,
                path.display(),
                from.name
            ),
        });
    }
    said
}

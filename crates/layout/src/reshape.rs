//! A reshape in progress, as md keeps it: the old geometry, the new geometry and a cursor
//! (`reshape_position`, array sectors), plus the direction. Which geometry holds a sector is the
//! one decision here, copied from raid10.c `raid10_find_phys` (raid5.c makes the same choice):
//! a sector on the already-reshaped side of the cursor uses the new geometry.
//!
//! Forward reshapes (growing) move the cursor up from 0: sectors below it are new. Backward
//! reshapes (shrinking, md's RESHAPE_BACKWARDS) move it down from the end: sectors at or above
//! it are new.

use crate::{Geometry, GeometryError, Mapping};
use serde::Serialize;

/// Which side of a reshape a sector is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReshapeSide {
    /// Not reshaped yet: md's `previous` geometry.
    Old,
    New,
}

/// Old and new geometry with md's reshape cursor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reshape {
    pub old: Geometry,
    pub new: Geometry,
    /// md's `reshape_position`: the next array sector to reshape.
    pub reshape_position: u64,
    /// md's MD_FEATURE_RESHAPE_BACKWARDS.
    pub backwards: bool,
}

impl Reshape {
    /// md's test `(sector >= reshape_progress) != reshape_backwards` selects the old geometry.
    pub fn side_of(&self, array_sector: u64) -> ReshapeSide {
        if (array_sector >= self.reshape_position) != self.backwards {
            ReshapeSide::Old
        } else {
            ReshapeSide::New
        }
    }

    pub fn geometry_for(&self, array_sector: u64) -> &Geometry {
        match self.side_of(array_sector) {
            ReshapeSide::Old => &self.old,
            ReshapeSide::New => &self.new,
        }
    }

    /// Map a sector with whichever geometry currently holds it.
    pub fn map(&self, array_sector: u64) -> Result<(ReshapeSide, Mapping), GeometryError> {
        let side = self.side_of(array_sector);
        Ok((side, self.geometry_for(array_sector).map(array_sector)?))
    }
}

//! `AlignedBuf`: a heap buffer whose start and length are multiples of an alignment, as
//! `O_DIRECT` requires. Invariant: `ptr` is a live allocation of `len` bytes with `align`
//! alignment, zero-initialised at creation, owned uniquely by this value.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};

pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf uniquely owns its allocation, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (rounded up to `align`) aligned to `align` (a power of two).
    /// Returns `None` when `align` is not a power of two or the size overflows.
    pub fn new(len: usize, align: usize) -> Option<Self> {
        let align = align.max(1);
        if !align.is_power_of_two() {
            return None;
        }
        let rounded = len.checked_add(align - 1)? & !(align - 1);
        let alloc_len = rounded.max(align);
        let layout = Layout::from_size_align(alloc_len, align).ok()?;
        // SAFETY: layout has a non-zero size (at least `align` >= 1).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(raw)?;
        Some(AlignedBuf {
            ptr,
            len: rounded,
            layout,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn align(&self) -> usize {
        self.layout.align()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (struct invariant) and initialised (zeroed).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self gives unique access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("align", &self.layout.align())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_rounded() {
        let mut b = AlignedBuf::new(1000, 4096).unwrap();
        assert_eq!(b.len(), 4096);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[4095] = 7;
        assert_eq!(b[4095], 7);
        assert!(AlignedBuf::new(10, 3).is_none());
    }
}

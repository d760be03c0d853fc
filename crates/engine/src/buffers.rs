//! Large buffers a thread keeps for its next requests.
//!
//! A write phase needs buffers of about its own size every time: the pieces' scratch (old data
//! and parity read back, parity computed), the partial parity log's and the write journal's
//! log writes. Allocated afresh, buffers of these sizes are mapped anew by the allocator each
//! time, and their pages are faulted in and charged on every phase, which cost more than the
//! copies into them: the journal's 1 MiB sequential writes ran at 0.13x of resync that way
//! (0.35x with its log buffers kept), and page faults were a quarter of the time of full-stripe
//! writes under the partial parity log until piece scratch was kept too.
//!
//! Memory stays bounded: each thread keeps at most [`KEPT_BUFFERS`] buffers and
//! [`KEPT_BYTES`] bytes between them, and none larger than [`KEPT_BUFFER_BYTES`].

use std::cell::RefCell;

/// Buffers one thread keeps at most.
pub const KEPT_BUFFERS: usize = 16;
/// Bytes of capacity one thread keeps at most, over all its buffers.
pub const KEPT_BYTES: usize = 24 << 20;
/// The largest buffer kept.
pub const KEPT_BUFFER_BYTES: usize = 16 << 20;

thread_local! {
    static KEPT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for `bytes`: the smallest this thread kept that is large enough,
/// else the largest it kept (grown), else a new one.
pub fn take_buffer(bytes: usize) -> Vec<u8> {
    let mut b = KEPT
        .with(|k| {
            let mut k = k.borrow_mut();
            let fit = k
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= bytes)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            let pick = fit.or_else(|| {
                k.iter()
                    .enumerate()
                    .max_by_key(|(_, b)| b.capacity())
                    .map(|(i, _)| i)
            });
            pick.map(|i| k.swap_remove(i))
        })
        .unwrap_or_default();
    b.clear();
    b.reserve(bytes);
    b
}

/// A buffer of `bytes` zeroes, reusing one this thread kept.
pub fn take_zeroed(bytes: usize) -> Vec<u8> {
    let mut b = take_buffer(bytes);
    b.resize(bytes, 0);
    b
}

/// Keeps a buffer for this thread's next [`take_buffer`], within the bounds above.
pub fn keep_buffer(b: Vec<u8>) {
    if b.capacity() == 0 || b.capacity() > KEPT_BUFFER_BYTES {
        return;
    }
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        let held: usize = k.iter().map(Vec::capacity).sum();
        if k.len() < KEPT_BUFFERS && held + b.capacity() <= KEPT_BYTES {
            k.push(b);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_buffer_is_reused_best_fit_and_bounded() {
        let small = take_buffer(4096);
        let big = take_buffer(1 << 20);
        let (small_ptr, big_ptr) = (small.as_ptr(), big.as_ptr());
        keep_buffer(big);
        keep_buffer(small);
        // The smallest kept buffer that fits is taken, not the last one kept.
        let b = take_buffer(1000);
        assert_eq!(b.as_ptr(), small_ptr);
        let c = take_zeroed(512 << 10);
        assert_eq!(c.as_ptr(), big_ptr);
        assert!(c.iter().all(|&x| x == 0) && c.len() == 512 << 10);
        keep_buffer(b);
        keep_buffer(c);
        // Never more than the byte bound.
        for _ in 0..KEPT_BUFFERS {
            keep_buffer(Vec::with_capacity(KEPT_BUFFER_BYTES));
        }
        let held: usize = KEPT.with(|k| k.borrow().iter().map(Vec::capacity).sum());
        assert!(held <= KEPT_BYTES, "{held}");
        let count = KEPT.with(|k| k.borrow().len());
        assert!(count <= KEPT_BUFFERS);
    }
}

//! Intel ISA-L, loaded at run time with `dlopen` so that raidkit never links it: the library
//! is only a yardstick for the parity benchmark, and the binary must run without it.
//!
//! Invariant: an [`Isal`] holds function pointers resolved from a library handle that is
//! never closed, so the pointers stay valid for the life of the process.

use std::ffi::{c_int, c_void, CStr, CString};
use std::fmt;

/// The sonames tried, in order (Debian's libisal2, then the development symlink).
pub const SONAMES: [&str; 2] = ["libisal.so.2", "libisal.so"];

type XorGenFn = unsafe extern "C" fn(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
type EcInitTablesFn = unsafe extern "C" fn(k: c_int, rows: c_int, a: *mut u8, gftbls: *mut u8);
type EcEncodeDataFn = unsafe extern "C" fn(
    len: c_int,
    k: c_int,
    rows: c_int,
    gftbls: *mut u8,
    data: *mut *mut u8,
    coding: *mut *mut u8,
);

/// Why ISA-L could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IsalError {
    /// No soname could be opened; carries `dlerror()` of the last attempt.
    NotFound { detail: String },
    /// The library opened but lacks a symbol this benchmark calls.
    MissingSymbol { soname: String, symbol: String },
}

impl fmt::Display for IsalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IsalError::NotFound { detail } => write!(
                f,
                "ISA-L not found (apt-get install libisal2): tried {} ({detail})",
                SONAMES.join(", ")
            ),
            IsalError::MissingSymbol { soname, symbol } => {
                write!(f, "ISA-L at {soname} has no symbol {symbol}")
            }
        }
    }
}

impl std::error::Error for IsalError {}

/// The ISA-L functions the parity benchmark compares against.
#[derive(Clone, Copy, Debug)]
pub struct Isal {
    soname: &'static str,
    xor_gen: XorGenFn,
    pq_gen: XorGenFn,
    ec_init_tables: EcInitTablesFn,
    ec_encode_data: EcEncodeDataFn,
}

fn dlerror_string() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        "no detail".to_owned()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    }
}

impl Isal {
    /// Open ISA-L and resolve its symbols.
    pub fn load() -> Result<Isal, IsalError> {
        let mut detail = String::new();
        for soname in SONAMES {
            let c_name = CString::new(soname).map_err(|_| IsalError::NotFound {
                detail: "soname contains NUL".to_owned(),
            })?;
            // SAFETY: a valid C string; the handle is intentionally never closed.
            let handle =
                unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if handle.is_null() {
                detail = dlerror_string();
                continue;
            }
            let sym = |name: &str| -> Result<*mut c_void, IsalError> {
                let missing = || IsalError::MissingSymbol {
                    soname: soname.to_owned(),
                    symbol: name.to_owned(),
                };
                let c_sym = CString::new(name).map_err(|_| missing())?;
                // SAFETY: handle is a live dlopen handle, c_sym a valid C string.
                let ptr = unsafe { libc::dlsym(handle, c_sym.as_ptr()) };
                if ptr.is_null() {
                    Err(missing())
                } else {
                    Ok(ptr)
                }
            };
            // SAFETY: each symbol is transmuted to the C prototype declared in ISA-L's
            // raid.h / erasure_code.h; the library stays loaded for the process lifetime.
            return unsafe {
                Ok(Isal {
                    soname,
                    xor_gen: std::mem::transmute::<*mut c_void, XorGenFn>(sym("xor_gen")?),
                    pq_gen: std::mem::transmute::<*mut c_void, XorGenFn>(sym("pq_gen")?),
                    ec_init_tables: std::mem::transmute::<*mut c_void, EcInitTablesFn>(sym(
                        "ec_init_tables",
                    )?),
                    ec_encode_data: std::mem::transmute::<*mut c_void, EcEncodeDataFn>(sym(
                        "ec_encode_data",
                    )?),
                })
            };
        }
        Err(IsalError::NotFound { detail })
    }

    /// The soname that was opened.
    pub fn soname(&self) -> &'static str {
        self.soname
    }

    /// `xor_gen(vects, len, array)`: the last pointer receives the XOR of the others.
    ///
    /// # Safety
    /// Every pointer must address `len` bytes (the last one writable), 32-byte aligned, and
    /// `len` a multiple of 32.
    pub unsafe fn xor_gen(&self, array: &mut [*mut u8], len: usize) -> i32 {
        (self.xor_gen)(
            array.len() as c_int,
            len as c_int,
            array.as_mut_ptr() as *mut *mut c_void,
        )
    }

    /// `pq_gen(vects, len, array)`: sources, then P, then Q (the last two are written).
    ///
    /// # Safety
    /// As [`Isal::xor_gen`].
    pub unsafe fn pq_gen(&self, array: &mut [*mut u8], len: usize) -> i32 {
        (self.pq_gen)(
            array.len() as c_int,
            len as c_int,
            array.as_mut_ptr() as *mut *mut c_void,
        )
    }

    /// `ec_init_tables(k, rows, a, gftbls)` for a `R × K` coefficient matrix.
    pub fn ec_init_tables<const K: usize, const R: usize>(&self, matrix: &[[u8; K]; R]) -> Vec<u8> {
        let mut a: Vec<u8> = matrix.iter().flatten().copied().collect();
        let mut tables = vec![0u8; 32 * K * R];
        // SAFETY: `a` has K·R coefficients and `tables` the 32·K·R bytes ISA-L fills.
        unsafe {
            (self.ec_init_tables)(K as c_int, R as c_int, a.as_mut_ptr(), tables.as_mut_ptr())
        };
        tables
    }

    /// `ec_encode_data(len, k, rows, gftbls, data, coding)`.
    ///
    /// # Safety
    /// `tables` from [`Isal::ec_init_tables`] with the same k and rows; `data` has k readable
    /// and `coding` rows writable pointers of `len` bytes each.
    pub unsafe fn ec_encode_data(
        &self,
        len: usize,
        tables: &mut [u8],
        data: &mut [*mut u8],
        coding: &mut [*mut u8],
    ) {
        (self.ec_encode_data)(
            len as c_int,
            data.len() as c_int,
            coding.len() as c_int,
            tables.as_mut_ptr(),
            data.as_mut_ptr(),
            coding.as_mut_ptr(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_message_says_how_to_install_it() {
        let msg = IsalError::NotFound {
            detail: "libisal.so.2: cannot open shared object file".into(),
        }
        .to_string();
        assert!(
            msg.starts_with("ISA-L not found (apt-get install libisal2)"),
            "{msg}"
        );
        assert!(msg.contains("libisal.so.2, libisal.so"), "{msg}");
    }

    #[test]
    fn loads_when_installed_and_reports_its_soname() {
        match Isal::load() {
            Ok(lib) => assert!(SONAMES.contains(&lib.soname())),
            Err(e) => assert!(matches!(e, IsalError::NotFound { .. }), "{e}"),
        }
    }
}

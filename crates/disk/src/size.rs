//! Sizes as people write them.

/// `4k`, `4KiB`, `1M`, `1MiB`, `512`, `2G`: binary units.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mul) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size"))?;
    n.checked_mul(mul)
        .ok_or_else(|| format!("{s:?} is too large"))
}

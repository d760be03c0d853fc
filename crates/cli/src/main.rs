//! The `raidkit` binary: parse, then act.

fn main() {
    println!("raidkit");
}

//! Random-read timer for figure 4: `pread FILE COUNT SIZE SEED [VERIFY_FILE]`.
//!
//! Opens FILE, issues COUNT pread(2)s of SIZE bytes at SIZE-aligned offsets drawn uniformly (xorshift64*
//! seeded with SEED) from [0, len - SIZE], and prints the seconds from open to the last pread.
//! With VERIFY_FILE, afterwards re-reads the same offsets from it and exits 1 on any difference
//! (untimed): the mount must return the bytes of the plain copy.
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

fn offsets(len: u64, count: usize, size: u64, seed: u64) -> Vec<u64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let slots = (len.saturating_sub(size)) / size + 1;
    (0..count)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) % slots) * size
        })
        .collect()
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        eprintln!("usage: pread FILE COUNT SIZE SEED [VERIFY_FILE]");
        std::process::exit(2);
    }
    let (count, size, seed): (usize, u64, u64) = (a[2].parse().unwrap(), a[3].parse().unwrap(), a[4].parse().unwrap());
    let len = std::fs::metadata(&a[1]).expect("stat").len();
    let offs = offsets(len, count, size, seed);
    let mut buf = vec![0u8; size as usize];
    let mut total = 0usize;
    let t = Instant::now();
    let f = File::open(&a[1]).expect("open");
    for &o in &offs {
        total += f.read_at(&mut buf, o).expect("pread");
    }
    let secs = t.elapsed().as_secs_f64();
    drop(f);
    if let Some(v) = a.get(5) {
        let (f, g) = (File::open(&a[1]).unwrap(), File::open(v).unwrap());
        let mut b2 = vec![0u8; size as usize];
        for &o in &offs {
            let n1 = f.read_at(&mut buf, o).unwrap();
            let n2 = g.read_at(&mut b2, o).unwrap();
            if buf[..n1] != b2[..n2] {
                eprintln!("pread: bytes at offset {o} differ from {v}");
                std::process::exit(1);
            }
        }
    }
    assert!(total > 0);
    println!("{secs:.6}");
}

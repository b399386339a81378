// cfi-vs-perf workload (issue 14): Rust built with `cargo build --release` (no frame
// pointers), 4 threads. Usage: rust_work SECONDS
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

#[inline(never)]
fn tree(n: u64, seed: u64) -> usize {
    let mut m = BTreeMap::new();
    for i in 0..n {
        *m.entry((i * 2654435761 + seed) % 100000).or_insert(0u64) += i;
    }
    m.len()
}

#[inline(never)]
fn words(n: u64, seed: u64) -> usize {
    let mut h: HashMap<String, u32> = HashMap::new();
    for i in 0..n {
        *h.entry(format!("w{}", (i * 7919 + seed) % 5000)).or_insert(0) += 1;
    }
    h.len()
}

#[inline(never)]
fn sorter(n: u64, seed: u64) -> f64 {
    let mut v: Vec<u64> = (0..n).map(|i| (i * 48271 + seed) % 1000003).collect();
    v.sort_unstable();
    v.iter().map(|&x| x as f64 / ((x % 13) as f64 + 1.0)).sum()
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let hs: Vec<_> = (0..4u64)
        .map(|id| {
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let mut s = 0.0;
                while t0.elapsed().as_secs_f64() < secs {
                    s += tree(20000, id) as f64 + words(20000, id) as f64 + sorter(50000, id);
                }
                s
            })
        })
        .collect();
    let t: f64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    println!("{}", t);
}

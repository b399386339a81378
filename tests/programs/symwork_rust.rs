// Test program: CPU in Rust functions, built twice by tests/symbols.cmake (legacy and v0 symbol
// mangling) for tests/test-symbols.c. Usage: symwork_rust SECONDS
use std::time::Instant;

pub mod rshot {
    pub struct Cruncher<T> {
        pub seed: T,
    }
    impl<T: Copy + Into<f64>> Cruncher<T> {
        #[inline(never)]
        pub fn crunch(&self, n: u32) -> f64 {
            let mut x = 0.0f64;
            for i in 1..n {
                x += ((i % 7) as f64 + self.seed.into()) / (i as f64);
            }
            x
        }
    }
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let c = rshot::Cruncher { seed: 1u32 };
    let t0 = Instant::now();
    let mut sink = 0.0;
    while t0.elapsed().as_secs_f64() < secs {
        sink += std::hint::black_box(&c).crunch(std::hint::black_box(400000));
    }
    println!("{}", sink);
}

// Hostile case: a cgo Go program under the agent (Go requires SA_ONSTACK of every handler it
// did not install: its runtime switches to its own signal stack and scans goroutine stacks).
// Goroutines allocate (GC, stack growth and scans), call into C that burns CPU, and C threads
// call back into Go. Prints a checksum that does not depend on scheduling. It runs for at
// least 1 s: Go exits with exit_group, not exit(3), so the agent's destructor (the last chunk)
// never runs; the interval chunks are what the runner finds.
package main

/*
#include <pthread.h>
#include <stdint.h>

extern void goCallback(int);

static uint64_t burn(uint64_t n) {
	volatile uint64_t x = 0;
	for (uint64_t i = 0; i < n; i++)
		x += i;
	return x;
}

static void *cthread(void *arg) {
	for (int i = 0; i < 200; i++) {
		burn(20000);
		goCallback((int)(intptr_t)arg);
	}
	return 0;
}

static void run_cthreads(int n) {
	pthread_t t[8];
	for (int i = 0; i < n && i < 8; i++)
		pthread_create(&t[i], 0, cthread, (void *)(intptr_t)i);
	for (int i = 0; i < n && i < 8; i++)
		pthread_join(t[i], 0);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

var callbacks atomic.Int64

//export goCallback
func goCallback(i C.int) {
	s := make([]byte, 1024+int(i)*64) // allocation on a C thread
	s[0] = byte(i)
	callbacks.Add(1)
}

func deep(n int) int {
	var pad [64]byte
	pad[n%64] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + int(pad[n%64]) // grows goroutine stacks: copies and scans
}

// round runs the workload once and returns its checksum.
func round() (int64, int64) {
	var wg sync.WaitGroup
	var sum atomic.Int64
	callbacks.Store(0)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 900; i++ {
				buf := make([][]byte, 64)
				for k := range buf {
					buf[k] = make([]byte, 512+k)
				}
				sum.Add(int64(deep(200+g*10) + len(buf[63])))
				C.burn(C.uint64_t(20000))
				if i%150 == 0 {
					runtime.GC()
				}
			}
		}(g)
	}
	C.run_cthreads(4)
	wg.Wait()
	return sum.Load(), callbacks.Load()
}

// Rounds repeat for at least 1 s of wall time, so that the agent's interval chunks (there is
// no exit chunk: see the top of the file) come out even when a loaded machine delays its
// start; the output does not depend on how many rounds ran.
func main() {
	start := time.Now()
	sum, cb := round()
	same := true
	for time.Since(start) < time.Second {
		s, c := round()
		same = same && s == sum && c == cb
	}
	fmt.Printf("sum=%d callbacks=%d rounds_agree=%v\n", sum, cb, same)
}
